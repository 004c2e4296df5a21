#!/usr/bin/env bash
# The CPU floor of a replicated append at moderate load on this machine, without corelog
# (benches/src/bin/pair_floor.rs): leader and follower processes that do only what the
# durability contract needs — plain TCP on loopback, blocking system calls, one 4 KiB
# O_DIRECT|O_DSYNC write per batch on each — no TLS, checksums, metrics or runtime.
# The write is made three ways: through an io_uring, the thread sleeping in io_uring_enter
# ("uring": corelog's path — O_DSYNC's cache flush then runs in a kernel worker, not
# charged to the process), with a blocking pwrite ("pwrite": the writer issues the flush
# itself), and not at all ("none": the network and wake-up share). A fourth way,
# "glommio" (not in the default MODES), runs the same leader and follower on corelog's
# runtime instead (benches/src/bin/pair_floor_glommio.rs: one glommio executor each,
# glommio's sockets and DmaFile, still no TLS or corelog code): the runtime's own share.
# Placed as corelog's open-loop figure places itself: two pairs, pair s (leader, follower
# and its load) pinned to CPU s, as corelog pins shard s to CPU s in both processes; each
# pair takes half of the rate over half of the connections (ab.sh's open2k: 2,000/s over
# 100). Prints, per round, server CPU µs per acknowledged append (leader + follower, from
# /proc, over the window) and the client's p50 latency for each way, then medians; the
# last two lines are "P50 <median µs> …" and "FLOOR <median CPU µs> …", one per way in
# MODES' order.
# PAIRS=1 CONNS=1 RATE=0 is ab.sh's one-connection replicated figure without corelog: one
# pair and its client on CPU 0 (where corelog's shard 0, which serves the connection, and
# the load generator's one executor run), closed loop (RATE=0: the next request goes as
# soon as the answer came).
#
# Usage: benches/pair_floor.sh [ROUNDS=3]
#   env RATE=2000 (0: closed loop) CONNS=100 PAIRS=2 SECS=8 (window; 4 s of warm-up before it)
#   env FIRST_CPU=0 (pair s on CPU (FIRST_CPU + s) mod ncpu)
#   env MODES="uring pwrite none" (uring|pwrite|none|glommio; FLOOR has one median each)
#   env BIN=dir with pair_floor and pair_floor_glommio (default target/release, built here)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS="${1:-3}"; RATE="${RATE:-2000}"; CONNS="${CONNS:-100}"; SECS="${SECS:-8}"
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p corelog-benches --bin pair_floor --bin pair_floor_glommio
  BIN=target/release
fi
PAIRS="${PAIRS:-2}"; FIRST_CPU="${FIRST_CPU:-0}"
if [ "$PAIRS" -lt 1 ] || [ "$CONNS" -lt "$PAIRS" ]; then echo "pair_floor.sh: PAIRS=$PAIRS, CONNS=$CONNS?" >&2; exit 1; fi
[ "$(nproc)" -ge "$PAIRS" ] || { echo "pair_floor.sh: $PAIRS pairs need $PAIRS CPUs (found $(nproc))" >&2; exit 1; }
# shellcheck source=benches/lib.sh
. benches/lib.sh
mkdir -p target
W="$(mktemp -d -p "$PWD/target" pair_floor.XXXX)"
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT

# $1 = uring|pwrite|none|glommio → prints "server_us_per_append switches_leader switches_follower p50_us"
one() {
  local s cpu cl=()
  PIDS=()
  for ((s = 0; s < PAIRS; s++)); do
    cpu=$(((FIRST_CPU + s) % $(nproc)))
    cl_pair_floor_start "$BIN" "$1" "$cpu" $((24710 + 10 * s)) "$W/p$s-"
    local f=$PF_FOLLOWER l=$PF_LEADER
    PIDS+=("$f" "$l")
    taskset -c "$cpu" timeout 120 "$BIN/pair_floor" client --target "127.0.0.1:$((24710 + 10 * s))" \
      --connections $((CONNS / PAIRS)) --rate $((RATE / PAIRS)) --warmup 4 --duration "$SECS" \
      --leader-pid "$l" --follower-pid "$f" >"$W/c$s.out" 2>&1 &
    cl+=($!)
  done
  local rc=0
  wait "${cl[@]}" || rc=$?
  kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true; PIDS=()
  rm -f "$W"/*.dat
  [ "$rc" = 0 ] || { echo "pair_floor.sh: a client failed: $(cat "$W"/c*.out)" >&2; exit 1; }
  python3 - "$W"/c*.out <<'PY'
import sys
t = {}
for f in sys.argv[1:]:
    line = next(l for l in open(f) if l.startswith("totals "))
    w = line.split()[1:]
    for k, v in zip(w[::2], w[1::2]):
        t.setdefault(k, []).append(float(v))
n = sum(t["acked"])
print("%.1f %.2f %.2f %.0f" % ((sum(t["leader_cpu_us"]) + sum(t["follower_cpu_us"])) / n,
      sum(t["leader_switches"]) / n, sum(t["follower_switches"]) / n, max(t["p50_us"])))
PY
}

load="$RATE appends/s"; [ "$RATE" = 0 ] && load="closed loop"
echo "bare pair floor: $load over $CONNS connections, $PAIRS pairs (pair s on CPU $FIRST_CPU + s), ${SECS}s windows, $ROUNDS rounds, $(date -u +%FT%TZ)"
declare -A V P
for ((r = 1; r <= ROUNDS; r++)); do
  for mode in ${MODES:-uring pwrite none}; do
    read -r us ls fs p50 < <(one "$mode")
    echo "round $r $mode: server CPU $us µs/append; context switches/append leader $ls follower $fs; p50 $p50 µs"
    V[$mode]="${V[$mode]:-} $us"; P[$mode]="${P[$mode]:-} $p50"
  done
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
line="median server CPU µs/append:"; floor=FLOOR; lat=P50
for mode in ${MODES:-uring pwrite none}; do
  # shellcheck disable=SC2086 # word splitting of the value list is intended
  m=$(med ${V[$mode]}); line="$line $mode $m"; floor="$floor $m"
  # shellcheck disable=SC2086
  lat="$lat $(med ${P[$mode]})"
done
echo "$line"
echo "$lat"
echo "$floor"
