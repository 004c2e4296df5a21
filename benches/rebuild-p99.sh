#!/usr/bin/env bash
# What a paced rebuild costs the leader's clients (issue 33): the leader's latency at CONNS
# closed-loop connections while it rebuilds an empty follower with `--catch-up-mb-per-s
# LIMIT`, against the same load without a rebuild, in one sitting.
#
# etcd and two coordinator-mode nodes (mTLS, 2 shards, `--min-insync 1`) on loopback, both
# started on a copy of one log of RECORDS records (corelog-biglog), so that the rebuild
# has that much to send. Then ROUNDS times, each phase a `corelog-loadgen run` of D
# seconds against the leader:
#   pair     both nodes in sync (every ack on two disks)
#   alone    the follower stopped (SIGTERM): the leader acknowledges alone (degraded)
#   rebuild  the follower's data dir wiped and the follower started empty: the leader
#            acknowledges alone and rebuilds it, paced, during the whole window (checked:
#            the leader's log has no "caught up from the segments" line before the
#            window's end; else the round says so)
# After each rebuild round the script waits for the catch-up to end and for insync=2, and
# at the end stops both nodes and runs `corelog inspect --compare` (identical).
# The target compares rebuild with alone (both acknowledge on one disk; pair pays for the
# follower's fsync and the round trip): p99 within 1.5x.
#
# Usage: benches/rebuild-p99.sh    Env: OUT (target/rebuild-p99), BIN (target/release),
#   RECORDS=2000000, PAYLOAD=256, LIMIT=10 (MB/s per shard), CONNS=1000, D=10, ROUNDS=2
# Loopback only; stops every process it started, by pid. Writes OUT/results.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=benches/lib.sh
. benches/lib.sh

OUT=${OUT:-target/rebuild-p99}; BIN=${BIN:-target/release}; RECORDS=${RECORDS:-2000000}
PAYLOAD=${PAYLOAD:-256}; LIMIT=${LIMIT:-10}; CONNS=${CONNS:-1000}; D=${D:-10}; ROUNDS=${ROUNDS:-2}
cl_need_bins rebuild-p99.sh "$BIN" corelog corelog-biglog corelog-loadgen
command -v etcd >/dev/null || { echo "rebuild-p99.sh: etcd is not installed (apt-get install etcd-server)" >&2; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT"
C=$OUT/certs
"$BIN/corelog" certs --out "$C" >/dev/null

declare -A PID=()
cleanup() {
  local p
  for p in "${PID[@]}"; do
    if [ -n "$p" ]; then kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; fi
  done
  rm -rf "$OUT/a" "$OUT/b" "$OUT/seed"
}
trap cleanup EXIT

# etcd: client 26379, peer 26380. Node a: client 26400 (its shards' direct ports 26401-2),
# replication 26410-11, metrics 26420; node b: the same + 5.
etcd --name r --data-dir "$OUT/etcd" --listen-client-urls http://127.0.0.1:26379 \
  --advertise-client-urls http://127.0.0.1:26379 --listen-peer-urls http://127.0.0.1:26380 \
  --initial-advertise-peer-urls http://127.0.0.1:26380 --initial-cluster r=http://127.0.0.1:26380 \
  --heartbeat-interval 50 --election-timeout 250 >"$OUT/etcd.log" 2>&1 &
PID[etcd]=$!

echo "writing $RECORDS records of $PAYLOAD bytes (corelog-biglog) …" >&2
"$BIN/corelog-biglog" --data-dir "$OUT/seed" --shards 2 --records "$RECORDS" --payload-bytes "$PAYLOAD" \
  2>"$OUT/biglog.log" | tail -n 1 >&2
cp -a "$OUT/seed" "$OUT/a"; cp -a "$OUT/seed" "$OUT/b"; sync

start() { # $1 a|b
  local id=$1 peer i cert
  if [ "$id" = a ]; then peer=b; i=0; cert=server; else peer=a; i=5; cert=follower; fi
  "$BIN/corelog" serve --data-dir "$OUT/$id" --listen "127.0.0.1:$((26400 + i))" \
    --repl-listen "127.0.0.1:$((26410 + i))" --metrics-listen "127.0.0.1:$((26420 + i))" \
    --coordinator http://127.0.0.1:26379 --cluster "rebuild-p99-$$" --node-id "$id" --peer-id "$peer" \
    --peer-repl "127.0.0.1:$((26415 - i))" --peer-client "127.0.0.1:$((26405 - i))" --min-insync 1 \
    --shard-count 2 --catch-up-mb-per-s "$LIMIT" --cert "$C/$cert.pem" --key "$C/$cert.key" --client-ca "$C/ca.pem" \
    >>"$OUT/$id.log" 2>&1 &
  PID[$id]=$!
}
health() { curl -s --max-time 2 "http://127.0.0.1:$((26420 + 5 * $1))/health" | tail -n 1; }
# Waits (≤ 120 s) until one node leads with insync=2; sets L and F (0 = a, 1 = b).
wait_pair() {
  local k h0 h1
  for k in $(seq 1 1200); do
    h0=$(health 0 || true); h1=$(health 1 || true)
    if [[ $h0 == *role=leader*insync=2* && $h1 == *role=follower* ]]; then L=0; F=1; return; fi
    if [[ $h1 == *role=leader*insync=2* && $h0 == *role=follower* ]]; then L=1; F=0; return; fi
    sleep 0.1
  done
  echo "no pair in sync within 120 s: a: $h0 / b: $h1" >&2; exit 1
}
stop() { # $1 a|b: SIGTERM, wait for the exit
  kill -TERM "${PID[$1]}"; wait "${PID[$1]}" || true; PID[$1]=""
}
ID=(a b)
caught_up() { grep -c 'follower caught up from the segments' "$OUT/${ID[$L]}.log" || true; }
catching_up() { grep -c 'catching the follower up from the segments' "$OUT/${ID[$L]}.log" || true; }
# $1 phase name → "acked/s p50_us p99_us p999_us errors"
load() {
  timeout $((D + 120)) "$BIN/corelog-loadgen" run --target "127.0.0.1:$((26400 + 5 * L))" --connections "$CONNS" \
    --duration "${D}s" --payload-bytes "$PAYLOAD" --quiet --json "$OUT/$1.json" \
    --ca "$C/ca.pem" --cert "$C/client.pem" --key "$C/client.key" >/dev/null 2>"$OUT/$1.lg"
  python3 -c "import json; r = json.load(open('$OUT/$1.json')); print('%.0f %d %d %d %d' % (r['acked'] / r['window_s'], r['p50_us'], r['p99_us'], r.get('p999_us', 0), r['errors']))"
}

start a; start b; wait_pair
echo "leader ${ID[$L]}, follower ${ID[$F]}; $(du -sm --apparent-size "$OUT/seed" | cut -f1) MB of log; limit $LIMIT MB/s per shard" >&2
rows=()
for r in $(seq 1 "$ROUNDS"); do
  wait_pair
  rows+=("pair $r $(load "pair.$r")")
  stop "${ID[$F]}"
  rows+=("alone $r $(load "alone.$r")")
  before=$(caught_up); began=$(catching_up)
  rm -rf "${OUT:?}/${ID[$F]}"
  start "${ID[$F]}"
  # The leader starts the catch-up once the empty follower has joined.
  for k in $(seq 1 300); do [ "$(catching_up)" -gt "$began" ] && break; sleep 0.1; done
  [ "$k" -lt 300 ] || { echo "round $r: no catch-up began within 30 s" >&2; exit 1; }
  row="rebuild $r $(load "rebuild.$r")"
  [ "$(caught_up)" -eq "$before" ] || row="$row (caught up inside the window)"
  rows+=("$row")
  for k in $(seq 1 3000); do [ "$(caught_up)" -ge $((before + 2)) ] && break; sleep 0.2; done
done
wait_pair
stop "${ID[$F]}"; stop "${ID[$L]}"
"$BIN/corelog" inspect --compare "$OUT/a" "$OUT/b" >"$OUT/compare.txt" || { echo "logs differ: $(cat "$OUT/compare.txt")" >&2; exit 1; }
kill "${PID[etcd]}"; wait "${PID[etcd]}" 2>/dev/null || true; PID[etcd]=""

{
  echo "| phase | round | acked/s | p50 µs | p99 µs | p99.9 µs | errors |"
  echo "|---|---|---|---|---|---|---|"
  for row in "${rows[@]}"; do
    read -r ph rd rest <<<"$row"
    read -r a p50 p99 p999 err note <<<"$rest"
    echo "| $ph | $rd | $a | $p50 | $p99 | $p999 | $err ${note:-} |"
  done
  echo
  python3 - "${rows[@]}" <<'EOF'
import sys, statistics
p = {}
for row in sys.argv[1:]:
    f = row.split()
    p.setdefault(f[0], []).append(int(f[4]))
m = {k: statistics.median(v) for k, v in p.items()}
print("median p99: pair %d µs, alone %d µs, rebuild %d µs; rebuild/alone %.2f, rebuild/pair %.2f" % (
    m["pair"], m["alone"], m["rebuild"], m["rebuild"] / m["alone"], m["rebuild"] / m["pair"]))
EOF
  echo "both logs identical after the last rebuild: $(grep -c identical "$OUT/compare.txt") shard(s)"
} | tee "$OUT/results.md"
