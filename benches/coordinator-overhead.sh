#!/usr/bin/env bash
# Coordinator mode versus static roles, same build, same run, alternating: a leader and
# a follower (mTLS, loopback) under the closed-loop load generator at C connections for
# D seconds, R rounds of (static, coordinator), the order alternating (ABBA). Prints acked writes/s per run and the
# coordinator/static ratio per round and its median (acceptance: ≥ 0.95 at 1,000).
# The disk's own floor (fio, 4 KiB O_DIRECT write + fdatasync, queue depth 1) is
# measured in the same run when fio is installed.
# Usage: benches/coordinator-overhead.sh [CONNECTIONS=1000] [SECONDS=10] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
C="${1:-1000}"; D="${2:-10}"; R="${3:-3}"
command -v etcd >/dev/null || { echo "etcd not installed: apt-get install etcd-server" >&2; exit 2; }
# shellcheck source=benches/lib.sh
. benches/lib.sh
cl_bench_begin coordinator-overhead TERM "$C connections, ${D}s, $R rounds"
cl_floor_iops
$B certs --out "$W/certs" >/dev/null
tls() { cl_tls "$W/certs" "$1"; }
etcd --name t --data-dir "$W/etcd" --listen-client-urls http://127.0.0.1:24790 \
  --advertise-client-urls http://127.0.0.1:24790 --listen-peer-urls http://127.0.0.1:24800 \
  --initial-advertise-peer-urls http://127.0.0.1:24800 --initial-cluster t=http://127.0.0.1:24800 \
  --heartbeat-interval 50 --election-timeout 250 >"$W/etcd.log" 2>&1 &
PIDS+=($!)
healthy() { for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$1/health" | grep -q "$2" && return 0; sleep 0.1; done; echo "no '$2' on :$1" >&2; return 1; }
run_pair() { # $1 = static|coordinator, $2 = round
  local mode=$1 d="$W/$1-$2" a b
  if [ "$mode" = static ]; then
    # shellcheck disable=SC2046
    $B serve --role follower --data-dir "$d/b" --listen 127.0.0.1:25400 --repl-listen 127.0.0.1:25500 \
      --metrics-listen 127.0.0.1:25600 --leader-addr 127.0.0.1:24400 $(tls follower) >"$d.b.log" 2>&1 & b=$!
    # shellcheck disable=SC2046
    $B serve --role leader --data-dir "$d/a" --listen 127.0.0.1:24400 --repl-listen 127.0.0.1:24500 \
      --metrics-listen 127.0.0.1:24600 --follower-addr 127.0.0.1:25500 $(tls server) >"$d.a.log" 2>&1 & a=$!
    PIDS+=("$a" "$b"); healthy 24600 ok; healthy 25600 ok
  else
    local co=(--coordinator http://127.0.0.1:24790 --cluster "ovh$2")
    # shellcheck disable=SC2046
    $B serve "${co[@]}" --node-id a --peer-id b --peer-repl 127.0.0.1:25500 --peer-client 127.0.0.1:25400 \
      --data-dir "$d/a" --listen 127.0.0.1:24400 --repl-listen 127.0.0.1:24500 --metrics-listen 127.0.0.1:24600 \
      $(tls server) >"$d.a.log" 2>&1 & a=$!
    PIDS+=("$a"); healthy 24600 role=leader
    # shellcheck disable=SC2046
    $B serve "${co[@]}" --node-id b --peer-id a --peer-repl 127.0.0.1:24500 --peer-client 127.0.0.1:24400 \
      --data-dir "$d/b" --listen 127.0.0.1:25400 --repl-listen 127.0.0.1:25500 --metrics-listen 127.0.0.1:25600 \
      $(tls follower) >"$d.b.log" 2>&1 & b=$!
    PIDS+=("$b"); healthy 24600 insync=2
  fi
  $L run --target 127.0.0.1:24400 --connections "$C" --duration "${D}s" --quiet --json "$d.json" \
    --ca "$W/certs/ca.pem" --cert "$W/certs/client.pem" --key "$W/certs/client.key" >/dev/null 2>"$d.loadgen.log"
  kill "$a" "$b"; wait "$a" "$b" 2>/dev/null || true
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('%.0f %d %d' % (r['acked']/r['window_s'], r['p99_us'], r['errors']))" "$d.json"
}
ratios=()
for r in $(seq 1 "$R"); do
  # ABBA: odd rounds run static first, even rounds coordinator first.
  if [ $((r % 2)) -eq 1 ]; then
    read -r s sp99 serr < <(run_pair static "$r")
    read -r c cp99 cerr < <(run_pair coordinator "$r")
  else
    read -r c cp99 cerr < <(run_pair coordinator "$r")
    read -r s sp99 serr < <(run_pair static "$r")
  fi
  ratio=$(python3 -c "print('%.3f' % ($c/$s))")
  ratios+=("$ratio")
  echo "round $r: static $s acked/s (p99 ${sp99} µs, $serr errors), coordinator $c acked/s (p99 ${cp99} µs, $cerr errors), ratio $ratio"
done
python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print('coordinator/static median ratio %.3f over %d rounds (min %.3f)' % (statistics.median(v), len(v), min(v)))" "${ratios[@]}"
