#!/usr/bin/env bash
# System calls and context switches per append at ab.sh's open-loop load (1,000 appends/s
# per shard), counted by the kernel, for each rung of cpu_layers.sh's ladder:
#   bare     benches/pair_floor.rs (plain TCP, blocking calls, the write through io_uring)
#   glommio  the same leader and follower on corelog's runtime (pair_floor_glommio)
#   plain    corelog `--insecure` (a local leader + follower, 2 shards each)
#   corelog  corelog as shipped (mTLS)
# The pairs run as one pair on CPU 0 at 1,000/s over 50 connections (one shard's share of
# open2k); corelog at 2,000/s over 100 connections (1,000/s on each of its 2 shards).
# `perf trace -s` on the leader and the follower (every thread) for SECS seconds after
# 4 s of load; appends in that window from the leader's metrics (corelog) or the fixed
# open-loop rate (the pairs); context switches from /proc over the same window (so under
# tracing: higher than pair_floor.sh's). That window also spans perf's start and stop, so
# every rung's calls per append read a few per cent low alike.
# Prints, per rung and process, each system call's count per append and their sum.
#
# Usage: benches/syscall_counts.sh [SECS=3]   (env BIN=target/release; needs perf)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SECS="${1:-3}"; BIN="${BIN:-target/release}"
command -v perf >/dev/null || { echo "syscall_counts: perf not found (apt-get install linux-perf)" >&2; exit 2; }
# shellcheck source=benches/lib.sh
. benches/lib.sh
cl_need_bins syscall_counts "$BIN" corelog corelog-loadgen pair_floor pair_floor_glommio
mkdir -p target
W=$(mktemp -d -p "$PWD/target" syscalls.XXXX)
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; cl_stop; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
"$BIN/corelog" certs --out "$W/certs" >/dev/null

# $1 rung, $2 leader pid, $3 follower pid, $4 "rate" (appends = rate × window) or "metrics"
measure() {
  local t0 t1 a0 a1 s0l s0f n
  sleep 4
  s0l=$(cl_switches "$2"); s0f=$(cl_switches "$3")
  [ "$4" = metrics ] && a0=$(cl_appends_total)
  t0=$(date +%s.%N)
  timeout -s INT "$SECS" perf trace -s -p "$2" -o "$W/$1.leader" >/dev/null 2>&1 &
  local tl=$!
  timeout -s INT "$SECS" perf trace -s -p "$3" -o "$W/$1.follower" >/dev/null 2>&1 || true
  wait "$tl" || true
  t1=$(date +%s.%N)
  [ "$4" = metrics ] && a1=$(cl_appends_total)
  if [ "$4" = metrics ]; then n=$((a1 - a0)); else n=$(python3 -c "print(round(1000 * ($t1 - $t0)))"); fi
  echo "$1 $n $(($(cl_switches "$2") - s0l)) $(($(cl_switches "$3") - s0f))" >>"$W/rows"
}

pair() { # $1 = bare|glommio
  local way=uring; [ "$1" = glommio ] && way=glommio
  cl_pair_floor_start "$BIN" "$way" 0 24810 "$W/"
  local f=$PF_FOLLOWER l=$PF_LEADER
  PIDS=("$f" "$l")
  taskset -c 0 timeout 120 "$BIN/pair_floor" client --target 127.0.0.1:24810 --connections 50 --rate 1000 \
    --warmup 3 --duration $((SECS + 3)) --leader-pid "$l" --follower-pid "$f" >"$W/$1.client" 2>&1 &
  local c=$!
  measure "$1" "$l" "$f" rate
  wait "$c" || { echo "syscall_counts: the $1 client failed: $(tail -n 3 "$W/$1.client")" >&2; exit 1; }
  kill "$f" "$l" 2>/dev/null || true; wait "$f" "$l" 2>/dev/null || true; PIDS=()
  rm -f "$W"/*.dat
}

corelog_rung() { # $1 = plain|corelog
  local ins=0 cli; [ "$1" = plain ] && ins=1
  CL_INSECURE=$ins cl_start "$BIN" "$W/d" "$W/certs" pair || exit 1
  read -ra cli <<<"$(CL_INSECURE=$ins cl_client_tls "$W/certs")"
  timeout 120 "$BIN/corelog-loadgen" run --target 127.0.0.1:24400 --connections 100 --rate 2000 \
    --duration "$((SECS + 6))s" --quiet --json "$W/$1.json" "${cli[@]}" >/dev/null 2>"$W/$1.lg" &
  local g=$!
  measure "$1" "${CL_LEADERS[0]}" "${CL_FOLLOWERS[0]}" metrics
  wait "$g" || { echo "syscall_counts: load generator failed: $(tail -n 3 "$W/$1.lg")" >&2; exit 1; }
  cl_stop
  rm -rf "$W/d" "$W"/d.*
}

echo "system calls per append at 1,000 appends/s per shard, ${SECS}-s windows, $(date -u +%FT%TZ)"
for r in bare glommio plain corelog; do
  case $r in bare | glommio) pair "$r" ;; *) corelog_rung "$r" ;; esac
done
python3 - "$W" <<'PY'
import re, sys, os
w = sys.argv[1]
for line in open(os.path.join(w, "rows")):
    rung, n, sl, sf = line.split(); n = int(n)
    for who, sw in (("leader", int(sl)), ("follower", int(sf))):
        calls = {}
        for l in open(os.path.join(w, f"{rung}.{who}")):
            m = re.match(r"\s+([a-z_0-9]+)\s+(\d+)\s+\d+\s", l)
            if m:
                calls[m.group(1)] = calls.get(m.group(1), 0) + int(m.group(2))
        # Housekeeping threads (the certificate reload check, 10 a second) count too:
        # they are the process's cost as much as the shards'.
        tot = sum(calls.values())
        per = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v / n >= 0.01)
        print(f"{rung:8s} {who:8s} {n:6d} appends: {tot / n:5.2f} calls/append ({per}); context switches/append {sw / n:.2f}")
PY
