#!/usr/bin/env bash
# Consumer groups (issue 36): can a group of M members keep up with an open-loop stream
# load, and how far behind is it? A static leader + follower (mTLS, loopback, 2 shards)
# takes stream appends (loadgen --streams S --rate R, open loop) for D seconds:
#  1. without a group: acked/s, append p99 (what the pair does at that rate alone);
#  2. with M `corelog tail --group` members over the streams' prefix (each printing its
#     events to /dev/null and committing after every batch): acked/s, append p99, records
#     delivered to members per second, and the group's committed lag sampled every 100 ms
#     from the leader's `corelog_group_lag_records` (summed over shards; published by the
#     server at most once a second), p50/p99/max in records and in seconds at the rate.
# The disk's floor (fio) is printed first when fio is installed. Members, load generator
# and both nodes share this machine's CPUs: the CPU seconds of each are printed.
# Usage: benches/groups.sh [RATE=50000] [SECONDS=20] [MEMBERS=4] [STREAMS=64] [CONNECTIONS=200]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
R="${1:-50000}"; D="${2:-20}"; M="${3:-4}"; S="${4:-64}"; C="${5:-200}"
# shellcheck source=benches/lib.sh
. benches/lib.sh
cl_bench_begin groups KILL "rate $R/s, ${D}s, $M members, $S streams, $C connections"
cl_floor_iops
$B certs --out "$W/certs" >/dev/null
ctls=(--ca "$W/certs/ca.pem" --cert "$W/certs/client.pem" --key "$W/certs/client.key")
metric() { curl -s http://127.0.0.1:24600/metrics | awk -v m="$1" '$1 ~ "^"m"(\\{|$)" {s+=$2} END {printf "%.0f", s+0}'; }
cpu_s() { local t=0 p; for p in "$@"; do t=$((t + $(cl_ticks "$p"))); done; python3 -c "print('%.1f' % ($t / $(getconf CLK_TCK)))"; }
run() { # $1 = nogroup|group
  local d="$W/$1" t0 members=() m sampler
  cl_start target/release "$d" "$W/certs" pair
  t0=$(cl_server_ticks)
  if [ "$1" = group ]; then
    for m in $(seq 1 "$M"); do
      $B tail --group bench --member "m$m" --prefix s --addr 127.0.0.1:24400 "${ctls[@]}" >/dev/null 2>"$d.m$m.log" &
      members+=("$!"); PIDS+=("$!")
    done
    ( while :; do metric corelog_group_lag_records; echo; sleep 0.1; done ) >"$d.lag" & sampler=$!; PIDS+=("$sampler")
  fi
  local delivered0; delivered0=$(metric corelog_group_delivered_total)
  $L run --target 127.0.0.1:24400 --connections "$C" --rate "$R" --streams "$S" --duration "${D}s" --quiet \
    --json "$d.json" "${ctls[@]}" >/dev/null 2>"$d.loadgen.log"
  local delivered; delivered=$(( $(metric corelog_group_delivered_total) - delivered0 ))
  local server_cpu; server_cpu=$(python3 -c "print('%.1f' % (($(cl_server_ticks) - $t0) / $(getconf CLK_TCK)))")
  python3 - "$d.json" "$1" "$delivered" "$server_cpu" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("%-8s acked %7.0f/s  append p50 %6d us  p99 %7d us  errors %d  delivered to members %7.0f/s  server CPU %ss" % (
    sys.argv[2], r["acked"] / r["window_s"], r["p50_us"], r["p99_us"], r["errors"],
    int(sys.argv[3]) / r["window_s"], sys.argv[4]))
EOF
  if [ "$1" = group ]; then
    kill "$sampler" 2>/dev/null || true
    echo "         members' CPU $(cpu_s "${members[@]}")s over the run"
    python3 - "$d.lag" "$R" <<'EOF'
import sys
lag = sorted(int(x) for x in open(sys.argv[1]).read().split() if x.strip().isdigit())
rate = float(sys.argv[2])
if not lag:
    sys.exit("no lag samples")
q = lambda p: lag[min(len(lag) - 1, int(p * len(lag)))]
print("         committed lag over %d samples: p50 %d, p99 %d, max %d records = p99 %.2f s at %d/s" % (
    len(lag), q(0.5), q(0.99), lag[-1], q(0.99) / rate, rate))
EOF
    kill -9 "${members[@]}" 2>/dev/null || true
  fi
  cl_stop
}
run nogroup
run group
