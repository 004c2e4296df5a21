#!/usr/bin/env bash
# Start-up (recovery) time with and without idempotent records: a standalone node takes
# closed-loop load at C connections for D seconds (plain appends, then, on a fresh data
# dir, idempotent ones: one producer per connection), is killed (-9), and is restarted;
# prints the records recovered and the time from the restart to /health = 200, for both.
# The boot scan rebuilds the producers' table in the same pass that verifies the log
# (docs/operations.md §11), so the difference is the table's CPU cost.
# Usage: benches/idempotent-recovery.sh [CONNECTIONS=1000] [SECONDS=30] [ROUNDS=2]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
C="${1:-1000}"; D="${2:-30}"; R="${3:-2}"
# shellcheck source=benches/lib.sh
. benches/lib.sh
cl_bench_begin idempotent-recovery KILL "$C connections, ${D}s of load"
healthy() { cl_healthy_within "$1" 60; }
serve() { $B serve --role standalone --data-dir "$1" --listen 127.0.0.1:26400 --metrics-listen 127.0.0.1:26600 --insecure >>"$1.log" 2>&1 & }
fill() { # $1 = plain|idempotent
  local d="$W/$1" extra=() pid
  [ "$1" = idempotent ] && extra=(--idempotent)
  serve "$d"; pid=$!; PIDS+=("$pid"); healthy 26600
  $L run --target 127.0.0.1:26400 --connections "$C" --duration "${D}s" --insecure --quiet "${extra[@]}" >/dev/null 2>"$d.loadgen.log"
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
}
restart() { # $1 = plain|idempotent → "records seconds"
  local d="$W/$1" pid t0 t1
  t0=$(date +%s.%N); serve "$d"; pid=$!; PIDS+=("$pid"); healthy 26600; t1=$(date +%s.%N)
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
  local n
  n=$(grep -o 'recovered [0-9]* records' "$d.log" | tail -n "$(nproc)" | awk '{s+=$2} END {print s}')
  python3 -c "import sys; print(sys.argv[1], '%.3f' % (float(sys.argv[3]) - float(sys.argv[2])))" "$n" "$t0" "$t1"
}
fill plain; fill idempotent
for r in $(seq 1 "$R"); do
  read -r pn ps < <(restart plain)
  read -r in is < <(restart idempotent)
  echo "round $r: plain $pn records recovered in ${ps}s; idempotent $in records ($C producers) in ${is}s"
done
