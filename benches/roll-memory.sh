#!/usr/bin/env bash
# Memory of the stream index before and after a segment roll, on a log of many streams
# (issue 32): a standalone node on a corelog-biglog data dir (RECORDS records over STREAMS
# streams, 2 shards), its `corelog_stream_index_bytes` and VmRSS once ready; then plain
# appends until every shard has rolled (the node runs with small segments, so the first
# roll comes after SEGMENT_BYTES of appends) and the same figures again. One line per
# binary dir given (default target/release), each on a fresh copy of the data dir that
# target/release/corelog-biglog writes.
# Usage: benches/roll-memory.sh [BIN_DIR...]
# Env: RECORDS=100000000, STREAMS=1000000, SEGMENT_BYTES=8388608, DATA=target/roll-memory-data
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=benches/lib.sh
. benches/lib.sh
RECORDS=${RECORDS:-100000000}; STREAMS=${STREAMS:-1000000}; SEGMENT_BYTES=${SEGMENT_BYTES:-8388608}
DATA=${DATA:-target/roll-memory-data}; PORT=28700; MPORT=28750
read -r -a BINS <<<"${*:-target/release}"
for b in "${BINS[@]}"; do cl_need_bins roll-memory.sh "$b" corelog corelog-loadgen; done
cl_need_bins roll-memory.sh target/release corelog-biglog
[ -e "$DATA" ] && { echo "roll-memory.sh: $DATA exists (remove it or set DATA)" >&2; exit 2; }
NODE=""; LOADGEN=""
cleanup() {
  local p
  for p in $NODE $LOADGEN; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$DATA" "$DATA.run"
}
trap cleanup EXIT
trap "exit 143" TERM INT

metric() { curl -s "http://127.0.0.1:$MPORT/metrics" | awk -v m="$1" '$1 ~ "^"m"(\\{|$)" {s += $2} END {printf "%.0f", s + 0}'; }
rss_mib() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$NODE/status"; }

target/release/corelog-biglog --data-dir "$DATA" --shards 2 --records "$RECORDS" --stream-every 100 \
  --streams "$STREAMS" --producer-every 1000 --segment-bytes 268435456 >/dev/null 2>&1
echo "log: $RECORDS records over $STREAMS streams, 2 shards; node segments $SEGMENT_BYTES bytes"
for b in "${BINS[@]}"; do
  rm -rf "$DATA.run"; cp -a "$DATA" "$DATA.run"
  "$b/corelog" serve --role standalone --insecure --data-dir "$DATA.run" --shard-count 2 \
    --segment-bytes "$SEGMENT_BYTES" --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$MPORT" \
    >"$DATA.log" 2>&1 &
  NODE=$!
  cl_healthy_within "$MPORT" 120 || { tail -n 5 "$DATA.log" >&2; exit 1; }
  before="index $(( $(metric corelog_stream_index_bytes) / 1048576 )) MiB, RSS $(rss_mib) MiB"
  rolls0=$(metric corelog_checkpoints_total)
  for _ in $(seq 1 30); do
    "$b/corelog-loadgen" run --insecure --target "127.0.0.1:$PORT" --connections 64 --cores 1 --unpinned \
      --duration 2s --warmup 0s --quiet >/dev/null 2>&1
    [ "$(metric corelog_checkpoints_total)" -ge $((rolls0 + 2)) ] && break
  done
  rolls=$(( $(metric corelog_checkpoints_total) - rolls0 ))
  echo "$b: once ready: $before; after $rolls roll(s): index $(( $(metric corelog_stream_index_bytes) / 1048576 )) MiB, RSS $(rss_mib) MiB, $(metric corelog_streams) streams"
  kill -TERM "$NODE"; wait "$NODE" 2>/dev/null || true; NODE=""
done
