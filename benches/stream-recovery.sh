#!/usr/bin/env bash
# Streams at scale (issue 11): recovery time and index memory with a large log, and the
# time to read one long stream.
#  1. A standalone node (one shard per CPU) takes closed-loop idempotent stream appends
#     (loadgen --idempotent --streams S, random pick) at C connections until its logs hold
#     N events; it is killed (-9) and restarted R times: prints the events recovered, the
#     time from the restart to /health = 200 (the boot scan verifies every record and
#     rebuilds the producers' table and the stream index in the same pass), the process's
#     RSS and the index size the node reports (corelog_stream_index_bytes). Whether the
#     page cache was dropped before each restart is printed (it needs root).
#  2. A fresh one-shard node takes appends to one stream until it holds M events; prints
#     the time `corelog read --stream` takes to read all of them (10,000 per request).
# Usage: benches/stream-recovery.sh [N=50000000] [M=1000000] [STREAMS=100000] [C=1000] [R=2]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N="${1:-50000000}"; M="${2:-1000000}"; S="${3:-100000}"; C="${4:-1000}"; R="${5:-2}"
# shellcheck source=benches/lib.sh
. benches/lib.sh
cl_bench_begin stream-recovery KILL "N=$N M=$M streams=$S C=$C"
healthy() { cl_healthy_within "$1" 600; }
metric() { curl -s http://127.0.0.1:26600/metrics | awk -v m="$1" '$1 ~ "^"m"\\{" {s+=$2} END {printf "%.0f", s+0}'; }
serve() { # $1 = data dir, rest: extra flags
  local d=$1; shift
  $B serve --role standalone --data-dir "$d" --listen 127.0.0.1:26400 --metrics-listen 127.0.0.1:26600 --insecure "$@" >>"$d.log" 2>&1 &
}
fill() { # $1 = target events; rest: loadgen flags
  local want=$1 t0 have; shift; t0=$(date +%s)
  while :; do
    have=$(metric corelog_log_end_offset)
    [ "$have" -ge "$want" ] && break
    $L run --target 127.0.0.1:26400 --connections "$C" --duration 30s --warmup 0s --insecure --quiet "$@" >/dev/null 2>>"$W/loadgen.log"
    echo "  $(metric corelog_log_end_offset) events after $(( $(date +%s) - t0 ))s" >&2
  done
}
# 1. Recovery of N events.
d="$W/big"; serve "$d"; pid=$!; PIDS+=("$pid"); healthy 26600
fill "$N" --idempotent --streams "$S" --stream-pick random
echo "filled: $(metric corelog_log_end_offset) events, $(metric corelog_streams) streams, $(du -sh "$d" | cut -f1) on disk"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
for r in $(seq 1 "$R"); do
  cache=warm
  if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then cache=cold; fi
  t0=$(date +%s.%N); serve "$d"; pid=$!; PIDS+=("$pid"); healthy 26600; t1=$(date +%s.%N)
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  echo "restart $r ($cache page cache): $(metric corelog_log_end_offset) events, $(metric corelog_streams) streams in $(python3 -c "print('%.2f' % ($t1 - $t0))")s; RSS $((rss / 1024)) MiB; stream index $(( $(metric corelog_stream_index_bytes) / 1048576 )) MiB, producers' table $(( $(metric corelog_producer_state_bytes) / 1024 )) KiB"
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
done
rm -rf "$d"
# 2. Reading one stream of M events.
d="$W/one"; serve "$d" --shard-count 1; pid=$!; PIDS+=("$pid"); healthy 26600
fill "$M" --streams 1
n=$(metric corelog_log_end_offset)
t0=$(date +%s.%N)
lines=$($B read --insecure --addr 127.0.0.1:26400 --stream s0 | wc -l)
t1=$(date +%s.%N)
echo "read --stream s0: $lines of $n events in $(python3 -c "print('%.2f' % ($t1 - $t0))")s ($(python3 -c "print('%.0f' % ($lines / ($t1 - $t0)))") events/s, CLI to stdout)"
[ "$lines" -eq "$n" ] || { echo "read $lines events, the stream holds $n" >&2; exit 1; }
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
