#!/usr/bin/env bash
# The sweep at a realistic core count: run on a machine with many cores and no cargo (the
# `device` machine, 16 cores, lent to some sessions), with binaries built elsewhere.
#
#   BIN_DIR=dir benches/device_sweep.sh OUT_DIR [PLAN]
#
# BIN_DIR holds corelog and corelog-loadgen (x86-64, glibc ≥ the build machine's), and
# optionally tls_roundtrip (benches/cpu_speed.sh). It
#   1. prints the machine: CPUs, kernel, memory, limits, io_uring switch, tools, and how
#      fast its CPUs run a fixed user-space load (with tls_roundtrip);
#   2. raises the open-file limit (36,000 connections need it) and memlock;
#   3. picks a data directory on a filesystem that honours O_DIRECT (not tmpfs or
#      overlayfs: corelog refuses those) — DATA_ROOT, else the first that works of the
#      checkout, /var/tmp, /root, /tmp; else an ext4 image on a loop device;
#   4. measures the disk's floor there: 4 KiB O_DIRECT overwrite + fdatasync at queue
#      depth 1 (python: no fio on that machine), unpinned and pinned to CPU 0;
#   5. runs benches/sweep.sh once per plan line, each node's shards pinned inside its own
#      CPU list (corelog pins shard k to the k-th CPU of its affinity mask), and copies the
#      write-ups to OUT_DIR/<name>.md, with each CPU group's busy share over every
#      measured window (benches/cpu_busy.py: /proc/stat per CPU) in OUT_DIR/<name>-busy.txt.
#   6. with AB_OLD=dir (an older tree's corelog): an A/B of the servers, see below.
# PLAN (default below): lines "name shards leader-cpus follower-cpus loadgen-cpus steps
# max-conns-per-process"; every plan's open loop is 2,000 appends/s over 100 connections.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
OUT_DIR=${1:?usage: BIN_DIR=dir benches/device_sweep.sh OUT_DIR [PLAN]}
: "${BIN_DIR:?BIN_DIR: the directory with corelog and corelog-loadgen}"
BIN_DIR=$(cd "$BIN_DIR" && pwd)
NCPU=$(nproc)
# Five shards a node and six CPUs of load generator on 16 CPUs; one shard a node (a
# 2-vCPU pair's share) for the per-core comparison.
DEFAULT_PLAN="s5 5 0-4 5-9 10-15 1,1k,9k,36k 6000
s1 1 0 1 2-5 1,1k,9k 9000"
if [ "$NCPU" -lt 16 ]; then DEFAULT_PLAN="s1 1 0 1 0-$((NCPU - 1)) 1,1k 9000"; fi
PLAN=${2:-$DEFAULT_PLAN}
mkdir -p "$OUT_DIR"
log() { echo "device_sweep.sh: $*" >&2; }
# shellcheck source=benches/lib.sh
. benches/lib.sh   # cl_health_once

# ---- 1. the machine
{
  echo "date $(date -u +%FT%TZ)"
  echo "cpus $NCPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "kernel $(uname -r)"
  echo "memory $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "io_uring_disabled $(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo n/a)"
  for t in taskset curl findmnt fio python3 mkfs.ext4 perf; do
    printf 'tool %s: %s\n' "$t" "$(command -v "$t" || echo missing)"
  done
  ulimit -n 1048576 2>/dev/null || ulimit -n 65536 2>/dev/null
  ulimit -l unlimited 2>/dev/null
  echo "limits: open files $(ulimit -n), memlock $(ulimit -l)"
  "$BIN_DIR/corelog" --version 2>&1 | head -1
} | tee "$OUT_DIR/machine.txt" >&2
# How fast these CPUs run a fixed user-space load (benches/cpu_speed.sh): CPU-per-append
# figures of two machine kinds compare only through it.
if [ -x "$BIN_DIR/tls_roundtrip" ]; then
  BIN=$BIN_DIR bash benches/cpu_speed.sh | tee -a "$OUT_DIR/machine.txt" >&2
else
  echo "cpu speed: not measured (no tls_roundtrip in BIN_DIR)" | tee -a "$OUT_DIR/machine.txt" >&2
fi
ulimit -n 1048576 2>/dev/null || ulimit -n 65536 2>/dev/null
ulimit -l unlimited 2>/dev/null || true

# ---- 3. a data directory that takes O_DIRECT
direct_ok() { # dir → 0 if a 4 KiB O_DIRECT write + fdatasync works there, on a fs corelog accepts
  local fs; fs=$(findmnt -n -o FSTYPE -T "$1" 2>/dev/null)
  case "$fs" in tmpfs|ramfs|overlay|"") return 1 ;; esac
  python3 - "$1" <<'EOF'
import mmap, os, sys
p = os.path.join(sys.argv[1], ".direct-probe")
buf = mmap.mmap(-1, 4096)
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
try:
    os.pwrite(fd, buf, 0); os.fdatasync(fd)
finally:
    os.close(fd); os.unlink(p)
EOF
}
DATA=""
for d in ${DATA_ROOT:-} "$ROOT/.devwork" /var/tmp/corelog-dev /root/corelog-dev /tmp/corelog-dev; do
  mkdir -p "$d" 2>/dev/null || continue
  if direct_ok "$d"; then DATA=$d; break; fi
  log "not usable for O_DIRECT: $d ($(findmnt -n -o FSTYPE,SOURCE -T "$d" 2>/dev/null))"
done
if [ -z "$DATA" ] && command -v mkfs.ext4 >/dev/null; then
  base=/var/tmp; mkdir -p "$base/corelog-img"
  truncate -s 16G "$base/corelog-img/fs.img" && mkfs.ext4 -q -F "$base/corelog-img/fs.img" &&
    mkdir -p /mnt/corelog && mount -o loop "$base/corelog-img/fs.img" /mnt/corelog &&
    direct_ok /mnt/corelog && DATA=/mnt/corelog && log "data on an ext4 image on a loop device (its floor is the image's file's)"
fi
[ -n "$DATA" ] || { log "no directory here takes O_DIRECT writes; stopping"; exit 1; }
echo "data dir $DATA: $(findmnt -n -o FSTYPE,SOURCE,OPTIONS -T "$DATA")" | tee -a "$OUT_DIR/machine.txt" >&2

# A node must start here at all (io_uring, O_DIRECT, memlock): 10 s, else stop now. It
# runs under `taskset` on the last CPU and must pin its shard there: the plans' layouts
# rely on it (a binary without cde77b8 pins shard 0 to CPU 0 whatever its mask).
last=$((NCPU - 1))
taskset -c $last "$BIN_DIR/corelog" serve --role standalone --insecure --data-dir "$DATA/probe" --shard-count 1 \
  --listen 127.0.0.1:19390 --metrics-listen 127.0.0.1:19398 >"$OUT_DIR/probe.log" 2>&1 &
probe=$!
up=0
for _ in $(seq 50); do
  cl_health_once 19398 && { up=1; break; }
  kill -0 $probe 2>/dev/null || break
  sleep 0.2
done
if [ $up = 1 ]; then
  placed=$(for t in "/proc/$probe/task/"*; do
    case $(cat "$t/comm") in shard-*) awk '/^Cpus_allowed_list/ {print $2}' "$t/status" ;; esac
  done | sort -u | paste -sd' ')
  kill $probe; wait $probe 2>/dev/null; rm -rf "$DATA/probe"
  [ "$placed" = "$last" ] || { log "the probe node under taskset -c $last pinned its shard to CPU(s) '$placed': this corelog does not pin inside its mask; stopping"; exit 1; }
  echo "placement ok: a node under taskset -c $last runs its shard on CPU $placed" | tee -a "$OUT_DIR/machine.txt" >&2
else
  kill -9 $probe 2>/dev/null; log "a standalone node does not start here; its log:"; tail -20 "$OUT_DIR/probe.log" >&2; exit 1
fi

# ---- 4. the disk's floor
floor() { # label [taskset prefix...]
  local label=$1; shift
  "$@" python3 - "$DATA" "$label" <<'EOF' | tee -a "$OUT_DIR/floor.txt" >&2
import mmap, os, random, sys, time
path = os.path.join(sys.argv[1], "floor.dat")
size, n = 64 << 20, 2000
buf = mmap.mmap(-1, 4096); buf.write(os.urandom(4096))
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
if os.fstat(fd).st_size < size:  # written once: the floor is an overwrite of written blocks
    big = mmap.mmap(-1, 1 << 20)
    for off in range(0, size, 1 << 20):
        os.pwrite(fd, big, off)
    os.fsync(fd)
w, s = [], []
for _ in range(n):
    off = random.randrange(size // 4096) * 4096
    t0 = time.perf_counter_ns(); os.pwrite(fd, buf, off)
    t1 = time.perf_counter_ns(); os.fdatasync(fd)
    t2 = time.perf_counter_ns()
    w.append((t1 - t0) / 1000); s.append((t2 - t1) / 1000)
os.close(fd)
tot = sorted(a + b for a, b in zip(w, s)); w.sort(); s.sort()
q = lambda v, p: v[min(len(v) - 1, int(p * len(v)))]
print(f"floor {sys.argv[2]}: 4 KiB O_DIRECT overwrite + fdatasync, QD1, {n} ops: "
      f"write p50 {q(w, .5):.0f} µs, fdatasync p50 {q(s, .5):.0f} µs, "
      f"together p50 {q(tot, .5):.0f} µs p99 {q(tot, .99):.0f} µs, {n / (sum(tot) / 1e6):.0f} IOPS")
EOF
}
floor unpinned
floor cpu0 taskset -c 0

# ---- 5. the sweeps
STATUS=0
# Stopped from outside (timeout, ^C): stop the running sweep (its trap stops its nodes)
# and the sampler.
running=""; sampler=""
trap '[ -n "$running" ] && kill $running; [ -n "$sampler" ] && kill $sampler; exit 143' TERM INT
while read -r name shards lcpus fcpus gcpus steps perproc; do
  [ -n "$name" ] || continue
  [ -n "$perproc" ] || { log "plan line '$name $shards …' needs 7 fields; skipped"; STATUS=1; continue; }
  log "plan $name: $shards shard(s) a node; leader CPUs $lcpus, follower $fcpus, load generators $gcpus; steps $steps"
  python3 benches/cpu_busy.py sample "$OUT_DIR/$name-cpu.txt" &
  sampler=$!
  SHARDS=$shards LEADER_CPUS=$lcpus FOLLOWER_CPUS=$fcpus LOADGEN_CPUS=$gcpus BIN_DIR=$BIN_DIR \
    STEPS=$steps MAX_PER_PROC=$perproc WARMUP=${WARMUP:-3s} DURATION=${DURATION:-10s} COOLDOWN=${COOLDOWN:-2s} \
    SWEEP_REPS=1 OPEN_RATE=2000 OPEN_STEPS=100 PEERS=none PROFILE_AT="" \
    WORK="$DATA/sweep-$name" OUT="$OUT_DIR/$name" \
    bash benches/sweep.sh >"$OUT_DIR/$name.log" 2>&1 &
  running=$!
  wait $running || { STATUS=1; log "plan $name failed: tail of its log:"; tail -20 "$OUT_DIR/$name.log" >&2; }
  running=""
  kill $sampler; wait $sampler 2>/dev/null
  w=${WARMUP:-3s}; d=${DURATION:-10s}
  python3 benches/cpu_busy.py summarize "$OUT_DIR/$name-cpu.txt" "$OUT_DIR/$name.log" "${w%s}" "${d%s}" \
    "leader=$lcpus" "follower=$fcpus" "loadgen=$gcpus" | tee "$OUT_DIR/$name-busy.txt" >&2
  for f in "$OUT_DIR/$name"/*.md; do [ -e "$f" ] && cp "$f" "$OUT_DIR/$name.md"; done
  rm -rf "${OUT_DIR:?}/$name" "${DATA:?}/sweep-$name"
done <<<"$PLAN"

# ---- 6. optional A/B against an older tree's server (AB_OLD=dir with its corelog), ABBA,
# AB_ROUNDS rounds of AB_STEPS, both sides driven by BIN_DIR's load generator. The old
# tree pinned shard k to CPU k whatever the mask, so both sides run co-located: shard k of
# leader and follower on CPU k (k < AB_SHARDS), the load generators on the CPUs after.
if [ -n "${AB_OLD:-}" ]; then
  AB_SHARDS=${AB_SHARDS:-5}; AB_ROUNDS=${AB_ROUNDS:-2}; AB_STEPS=${AB_STEPS:-36k}
  mkdir -p "$DATA/ab-old-bin"
  cp "$AB_OLD/corelog" "$BIN_DIR/corelog-loadgen" "$DATA/ab-old-bin/"
  : >"$OUT_DIR/ab.tsv"
  for r in $(seq 1 "$AB_ROUNDS"); do
    order="new old"; [ $((r % 2)) = 0 ] && order="old new"
    for side in $order; do
      bin=$BIN_DIR; [ "$side" = old ] && bin=$DATA/ab-old-bin
      log "A/B round $r: $side ($AB_STEPS, $AB_SHARDS co-located shards, load generators on CPUs $AB_SHARDS-$((NCPU - 1)))"
      SHARDS=$AB_SHARDS LEADER_CPUS="" FOLLOWER_CPUS="" LOADGEN_CPUS=$AB_SHARDS-$((NCPU - 1)) BIN_DIR=$bin \
        STEPS=$AB_STEPS MAX_PER_PROC=6000 WARMUP=${WARMUP:-3s} DURATION=${DURATION:-10s} COOLDOWN=${COOLDOWN:-2s} \
        SWEEP_REPS=1 OPEN_RATE="" PEERS=none PROFILE_AT="" WORK="$DATA/ab" OUT="$DATA/ab-md" \
        bash benches/sweep.sh >"$OUT_DIR/ab-$r-$side.log" 2>&1 || STATUS=1
      python3 - "$DATA/ab/out/closed.json" "$r" "$side" >>"$OUT_DIR/ab.tsv" <<'EOF2' || STATUS=1
import json, sys
rep = json.load(open(sys.argv[1]))
for s in rep["steps"]:
    print(sys.argv[2], sys.argv[3], s["connections"], round(s["acked_per_s"]), s["p50_us"], s["p99_us"],
          s["errors"] + s["timeouts"], sep="\t")
EOF2
    done
  done
  python3 - "$OUT_DIR/ab.tsv" <<'EOF2' | tee "$OUT_DIR/ab.txt" >&2
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
by = {}
for r, side, n, tput, p50, p99, bad in rows:
    by.setdefault((int(n), int(r)), {})[side] = (float(tput), float(p50), float(p99), int(bad))
for n in sorted({k[0] for k in by}):
    ratios = [v["new"][0] / v["old"][0] for (m, _), v in sorted(by.items()) if m == n and "new" in v and "old" in v]
    for (m, r), v in sorted(by.items()):
        if m == n:
            print(f"A/B {n} conns round {r}: " + ", ".join(
                f"{s} {t:,.0f}/s p50 {p50/1000:.1f} ms p99 {p99/1000:.1f} ms (p99/p50 {p99/p50:.2f}) errors+timeouts {b}"
                for s, (t, p50, p99, b) in sorted(v.items())))
    if ratios:
        print(f"A/B {n} conns: acked/s NEW/OLD median {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] over {len(ratios)} round(s)")
EOF2
  rm -rf "$DATA/ab" "$DATA/ab-md" "$DATA/ab-old-bin"
fi
rm -f "$DATA/floor.dat"
exit $STATUS
