#!/usr/bin/env bash
# How fast a leader rebuilds an empty follower (issue 33), against the disk's floor.
#
# corelog-biglog writes a log of RECORDS records (2 shards) as the leader's data dir; a
# static pair (mTLS) starts on it with the follower's data dir empty, so the leader sends
# it everything from its segments. Timed from the pair's start to the leader's last
# `follower caught up from the segments` line (one per shard); then `inspect --compare`
# of the two data dirs (identical). Once with no limit and once per rate in LIMITS
# (--catch-up-mb-per-s). In the same script, two floors on the same file system: fio
# sequential 1 MiB O_DIRECT writes (queue depth 4, one fsync at the end), and fio in the
# catch-up's own pattern (per shard one durable 1 MiB write at a time beside the leader's
# 1 MiB reads: the log's format allows one batch write in flight per shard). Writes
# OUT/results.md.
#
# Usage: benches/rebuild.sh          Env: OUT (target/rebuild-bench), BIN (target/release),
# RECORDS=20000000, PAYLOAD=16 (bytes per record), LIMITS="25", KEEP=0, BATCH_BYTES (record
# bytes per batch; default: batches of 1 MiB, as biglog writes; a pair under load writes
# smaller ones).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=benches/lib.sh
. benches/lib.sh

OUT=${OUT:-target/rebuild-bench}; BIN=${BIN:-target/release}; RECORDS=${RECORDS:-20000000}
PAYLOAD=${PAYLOAD:-16}; LIMITS=${LIMITS:-25}; KEEP=${KEEP:-0}
cl_need_bins rebuild.sh "$BIN" corelog corelog-biglog
command -v fio >/dev/null || { echo "rebuild.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT"
SEED=$OUT/seed
cleanup() { cl_stop; [ "$KEEP" = 1 ] || rm -rf "$SEED" "$OUT"/run.*/l "$OUT"/run.*/f "$OUT"/fio "$OUT"/fio.[rw].*; }
trap cleanup EXIT

"$BIN/corelog" certs --out "$OUT/certs" >/dev/null
echo "writing $RECORDS records (corelog-biglog) …" >&2
"$BIN/corelog-biglog" --data-dir "$SEED" --shards 2 --records "$RECORDS" --payload-bytes "$PAYLOAD" --stream-every 100 --streams 100000 \
  --producer-every 1000 ${BATCH_BYTES:+--batch-bytes "$BATCH_BYTES"} 2>"$OUT/biglog.log" | tail -n 1 >&2
records_mb=$(du -sm --apparent-size "$SEED" | awk '{print $1}')

fio --name=seq --filename="$OUT/fio" --rw=write --bs=1m --size=2g --direct=1 --ioengine=libaio --iodepth=4 \
  --end_fsync=1 --output-format=json >"$OUT/fio.json" 2>/dev/null
fio_mb=$(python3 -c "import json; j = json.load(open('$OUT/fio.json'))['jobs'][0]; print('%.0f' % (j['write']['bw_bytes'] / 1e6))")
rm -f "$OUT/fio"
echo "fio sequential write: $fio_mb MB/s" >&2
# The floor of the work as the log's format shapes it: per shard one 1 MiB write at a time,
# durable when it returns (O_DIRECT | O_DSYNC into a fallocated file, as the follower
# writes), while the leader reads 1 MiB O_DIRECT blocks one at a time from the same disk
# (both nodes share it here). fio runs 2 such writers and 2 such readers at once; the
# floor is the writers' sum.
fio --name=pre --rw=write --bs=1m --size=512m --direct=1 --numjobs=2 --filename_format="$OUT/fio.r.\$jobnum" \
  --ioengine=libaio --iodepth=4 --end_fsync=1 >/dev/null 2>&1
fio --output-format=json \
  --name=w --rw=write --bs=1m --size=512m --direct=1 --sync=dsync --ioengine=io_uring --iodepth=1 --numjobs=2 \
  --fallocate=native --filename_format="$OUT/fio.w.\$jobnum" \
  --name=r --rw=read --bs=1m --size=512m --direct=1 --ioengine=io_uring --iodepth=1 --numjobs=2 \
  --filename_format="$OUT/fio.r.\$jobnum" >"$OUT/fio-pattern.json" 2>/dev/null
pattern_mb=$(python3 -c "import json; j = json.load(open('$OUT/fio-pattern.json'))['jobs']; print('%.0f' % (sum(x['write']['bw_bytes'] for x in j) / 1e6))")
rm -f "$OUT"/fio.r.* "$OUT"/fio.w.*
echo "fio, the catch-up's pattern (2 × 1 MiB O_DSYNC writes at queue depth 1 beside 2 × 1 MiB reads): $pattern_mb MB/s" >&2

# $1: the limit (0: none) → "seconds MB" of the catch-up
rebuild() {
  local limit=$1 d="$OUT/run.$1" t0 t1 i
  mkdir -p "$d"; cp -a "$SEED" "$d/l"
  t0=$(date +%s.%N)
  CL_LEADER_EXTRA="--catch-up-mb-per-s $limit" cl_start "$BIN" "$d" "$OUT/certs" pair
  # CPU ticks of both nodes once they answer (their start-up excluded from the ceiling).
  local c0; c0=$(( $(cl_ticks "${CL_LEADERS[0]}") + $(cl_ticks "${CL_FOLLOWERS[0]}") ))
  for i in $(seq 1 36000); do
    [ "$(grep -c 'follower caught up from the segments' "$d.l0.log")" -ge 2 ] && break
    kill -0 "${CL_LEADERS[0]}" "${CL_FOLLOWERS[0]}" 2>/dev/null || { echo "a node exited: $(tail -n 3 "$d".*.log)" >&2; exit 1; }
    sleep 0.1
  done
  [ "$i" -lt 36000 ] || { echo "no catch-up within an hour" >&2; exit 1; }
  t1=$(date +%s.%N)
  local hz lcpu fcpu; hz=$(getconf CLK_TCK)
  lcpu=$(awk -v t="$(cl_ticks "${CL_LEADERS[0]}")" -v h="$hz" 'BEGIN {printf "%.1f", t / h}')
  fcpu=$(awk -v t="$(cl_ticks "${CL_FOLLOWERS[0]}")" -v h="$hz" 'BEGIN {printf "%.1f", t / h}')
  local ccpu; ccpu=$(awk -v t="$(( $(cl_ticks "${CL_LEADERS[0]}") + $(cl_ticks "${CL_FOLLOWERS[0]}") - c0 ))" -v h="$hz" 'BEGIN {printf "%.2f", t / h}')
  cl_stop
  "$BIN/corelog" inspect --compare "$d/l" "$d/f" >"$d.compare" || { echo "logs differ: $(cat "$d.compare")" >&2; exit 1; }
  local mb; mb=$(sed -n 's/.*caught up from the segments: offsets [0-9.]*, \([0-9.]*\) MB in.*/\1/p' "$d.l0.log" | awk '{s += $1} END {print s}')
  awk -v a="$t0" -v b="$t1" -v m="$mb" -v l="$lcpu" -v f="$fcpu" -v c="$ccpu" 'BEGIN {printf "%.2f %.0f %s %s %s\n", b - a, m, l, f, c}'
  [ "$KEEP" = 1 ] || rm -rf "$d/l" "$d/f"
}

{
  echo "| catch-up limit | records MB sent | seconds (start of the pair → both shards caught up) | MB/s | of fio's sequential write | of fio in the catch-up's pattern | CPU s leader / follower (whole run) | CPU s of both during the catch-up | CPU ceiling: $(nproc) CPUs × MB ÷ that |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for limit in 0 $LIMITS; do
    read -r secs mb lcpu fcpu ccpu < <(rebuild "$limit")
    awk -v l="$limit" -v s="$secs" -v m="$mb" -v f="$fio_mb" -v p="$pattern_mb" -v lc="$lcpu" -v fc="$fcpu" -v cc="$ccpu" -v n="$(nproc)" \
      'BEGIN {printf "| %s | %d | %.1f | %.0f | %.0f %% | %.0f %% | %s / %s | %s | %.0f MB/s (%.0f %% of fio) |\n", (l == 0 ? "none" : l " MB/s per shard"), m, s, m / s, 100 * m / s / f, 100 * m / s / p, lc, fc, cc, n * m / cc, 100 * n * m / cc / f}'
  done
  echo
  echo "A log of $RECORDS records of $PAYLOAD payload bytes ($records_mb MB of segment data, 2 shards); fio: $fio_mb MB/s (1 MiB O_DIRECT writes, queue depth 4); fio in the catch-up's pattern: $pattern_mb MB/s."
} | tee "$OUT/results.md"
