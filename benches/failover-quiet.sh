#!/usr/bin/env bash
# No take-over without a fault: a coordinator-mode pair (etcd on the same machine, the
# default --lease-ttl-ms and --isr-timeout-ms, mTLS, 2 shards, one process per node) under
# a closed-loop load of CONNS connections for SECONDS, both nodes' /health sampled every
# 100 ms. Counts what must stay zero: epoch changes, take-overs, lease lapses, and drops of
# the follower from the in-sync set (degraded), with the load's throughput and latency.
# A coordinator-mode node is one process (node.rs), so it holds at most the open-file
# limit's connections (about 19,000 here): for the 36,000-connection step, CO_SWEEP=36k
# runs the sweep's static pair (benches/sweep.sh, two processes per node, 4 load
# generators) under that load on the same machine at the same time, so that the
# coordinator pair, its etcd and its load compete with it for the CPUs and the disk.
#
# Usage: benches/failover-quiet.sh [CONNS=1000] [SECONDS=600]
#   env CO_SWEEP=36k (the concurrent static step; its own write-up under $WORK/sweep),
#   WORK (scratch, default /tmp/corelog-quiet), EXTRA (more `serve` flags, e.g. a lease),
#   BIN_DIR (prebuilt corelog and corelog-loadgen: no cargo build), ETCD (its binary).
# Exit status: 0 nothing changed, 1 an epoch change, take-over, lapse or degrade.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
CONNS="${1:-1000}"; SECS="${2:-600}"
case "$CONNS$SECS" in *[!0-9]*) echo "usage: $0 [CONNS] [SECONDS]" >&2; exit 2 ;; esac
: "${WORK:=/tmp/corelog-quiet}" "${CO_SWEEP:=}" "${EXTRA:=}" "${BIN_DIR:=}" "${ETCD:=etcd}"
command -v "$ETCD" >/dev/null || { echo "etcd not installed: apt-get install etcd-server" >&2; exit 2; }
if [ -z "$BIN_DIR" ]; then
  cargo build --release -q -p corelog-server -p corelog-loadgen
  BIN_DIR="$ROOT/target/release"
fi
rm -rf "$WORK"; mkdir -p "$WORK/bin"
# Private copies: a rebuild during the run must not swap the binaries under it.
cp "$BIN_DIR/corelog" "$BIN_DIR/corelog-loadgen" "$WORK/bin/"
BIN="$WORK/bin"
"$BIN/corelog" certs --out "$WORK/certs" >/dev/null
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), $(nproc) CPUs, $(date -u +%FT%TZ), $CONNS connections, $SECS s${CO_SWEEP:+, with a concurrent static $CO_SWEEP step}"

PIDS=()
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

ulimit -n "$(ulimit -Hn)"
"$ETCD" --name q --data-dir "$WORK/etcd" --listen-client-urls http://127.0.0.1:23890 \
  --advertise-client-urls http://127.0.0.1:23890 --listen-peer-urls http://127.0.0.1:23891 \
  --initial-advertise-peer-urls http://127.0.0.1:23891 --initial-cluster q=http://127.0.0.1:23891 \
  --heartbeat-interval 50 --election-timeout 250 >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)

# Node i: client 26400 + 1000 i, replication + 100, metrics + 200.
node() {
  local i=$1 id peer cert base pbase
  if [ "$i" = 0 ]; then id=a peer=b cert=server; else id=b peer=a cert=follower; fi
  base=$((26400 + 1000 * i)); pbase=$((26400 + 1000 * (1 - i)))
  # shellcheck disable=SC2086  # EXTRA is a list of flags
  "$BIN/corelog" serve --data-dir "$WORK/$id" --listen "127.0.0.1:$base" --repl-listen "127.0.0.1:$((base + 100))" \
    --coordinator http://127.0.0.1:23890 --cluster quiet --node-id "$id" --peer-id "$peer" \
    --peer-repl "127.0.0.1:$((pbase + 100))" --peer-client "127.0.0.1:$pbase" --metrics-listen "127.0.0.1:$((base + 200))" \
    --shard-count 2 --cert "$WORK/certs/$cert.pem" --key "$WORK/certs/$cert.key" --client-ca "$WORK/certs/ca.pem" \
    $EXTRA >"$WORK/$id.log" 2>&1 &
  PIDS+=($!)
}
health() {
  local url="http://127.0.0.1:$((26600 + 1000 * $1))/health"
  if command -v curl >/dev/null; then curl -s -m 1 "$url" | tail -1
  else python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1], timeout=1).read().decode().splitlines()[-1])" "$url" 2>/dev/null; fi
}
node 0; node 1
leader=""
for _ in $(seq 1 600); do
  h0=$(health 0 || true); h1=$(health 1 || true)
  if [[ "$h0" == *role=leader*insync=2* && "$h1" == *role=follower* ]]; then leader=0; break; fi
  if [[ "$h1" == *role=leader*insync=2* && "$h0" == *role=follower* ]]; then leader=1; break; fi
  sleep 0.1
done
[ -n "$leader" ] || { echo "no leader with both in sync within 60 s" >&2; tail -5 "$WORK"/a.log "$WORK"/b.log >&2; exit 2; }
start_health=$(health "$leader")
echo "pair: node $leader leads: $start_health"

# /health of both nodes every 100 ms: a line per change.
(
  prev=""
  while :; do
    cur="$(health 0 || true) | $(health 1 || true)"
    [ "$cur" != "$prev" ] && echo "$(date +%s.%N) $cur"
    prev=$cur
    sleep 0.1
  done
) >"$WORK/health.txt" 2>/dev/null &
PIDS+=($!)

if [ -n "$CO_SWEEP" ]; then
  # The static pair's step, started first: it connects for a while before its window.
  sweep_work="$WORK/sweep"
  STEPS="$CO_SWEEP" WARMUP=5s DURATION="$((SECS > 30 ? SECS - 25 : 20))s" COOLDOWN=1s PEERS=none PROFILE_AT='' OPEN_RATE='' \
    WORK="$sweep_work" OUT="$sweep_work-out" BIN_DIR="$BIN" bash benches/sweep.sh --quick >"$WORK/sweep.log" 2>&1 &
  PIDS+=($!)
  sweep_pid=$!
fi

# The load: one process per 9,000 connections, on the leader's client port.
per=9000; n=$(((CONNS + per - 1) / per)); lg=()
for k in $(seq 0 $((n - 1))); do
  c=$((k == n - 1 ? CONNS - per * (n - 1) : per))
  "$BIN/corelog-loadgen" run --target "127.0.0.1:$((26400 + 1000 * leader))" --connections "$c" \
    --duration "${SECS}s" --warmup 5s --source-ip-base $((20 + 10 * k)) --unpinned --quiet \
    --ca "$WORK/certs/ca.pem" --cert "$WORK/certs/client.pem" --key "$WORK/certs/client.key" \
    --json "$WORK/load$k.json" >"$WORK/load$k.log" 2>&1 &
  lg+=($!); PIDS+=($!)
done
for p in "${lg[@]}"; do wait "$p" || echo "load generator $p exited $?" >&2; done
[ -z "$CO_SWEEP" ] || { wait "$sweep_pid" || echo "concurrent sweep exited $?" >&2; }
end_health=$(health "$leader")
echo "after: $end_health"

python3 - "$WORK" "$n" <<'PY'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
acked = errors = timeouts = connected = 0
p50 = p99 = mx = window = 0.0
for k in range(n):
    r = json.load(open(f"{work}/load{k}.json"))
    acked += r["acked"]; errors += r["errors"]; timeouts += r["timeouts"]; connected += r["connected"]
    window = max(window, r["window_s"])
    p50 = max(p50, r["p50_us"] / 1000); p99 = max(p99, r["p99_us"] / 1000); mx = max(mx, r["max_us"] / 1000)
rate = acked / window if window else 0
print(f"load: {connected} connected, {acked} acked in {window:.0f} s ({rate:,.0f}/s), p50 {p50:.1f} ms, "
      f"p99 {p99:.1f} ms, max {mx:.1f} ms (worst process), {errors} errors, {timeouts} timeouts")
PY
epochs=$(awk '{for (i = 1; i <= NF; i++) if ($i ~ /^epoch=/) print $i}' "$WORK/health.txt" | sort -u | tr '\n' ' ')
count() { cat "$WORK/a.log" "$WORK/b.log" | grep -c "$1" || true; }
takeovers=$(count "took over"); degraded=$(count "DEGRADED"); lapses=$(count "cannot renew the lease")
reexecs=$(count "re-executing")
changes=$(($(wc -l <"$WORK/health.txt") - 1))
echo "epochs seen on /health: $epochs; health changes: $changes; take-overs: $takeovers; re-executions: $reexecs; lease lapses: $lapses; degraded: $degraded"
if [ -n "$CO_SWEEP" ]; then grep -E "^\|.*$CO_SWEEP|acked|error" "$WORK/sweep.log" | tail -5 || true; fi
[ "$(echo "$epochs" | wc -w)" -le 1 ] && [ "$takeovers" = 0 ] && [ "$reexecs" = 0 ] && [ "$lapses" = 0 ] && [ "$degraded" = 0 ] \
  && { echo "no take-over, no lapse, no degrade: ok"; exit 0; }
echo "CHANGED: see $WORK/health.txt, $WORK/a.log, $WORK/b.log" >&2
exit 1
