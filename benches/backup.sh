#!/usr/bin/env bash
# A backup under load (issue 33): what `corelog admin backup` costs the pair it copies,
# and whether what it copied is sound.
#
# A static pair (mTLS, 2 shards) starts on a log of RECORDS records written by
# corelog-biglog (the leader's directory copied to the follower's: both hold the same
# log). Then ROUNDS rounds of two closed-loop windows of SECONDS s at CONNS connections
# (corelog-loadgen): one without a backup and one while `admin backup` of the leader runs
# into a fresh directory, in the order A B B A, B A A B, … (drift cancels). After each
# backup: `corelog inspect` of the copy; after the last, with the pair stopped,
# `inspect --compare` of the leader's directory against the last copy (record for record,
# payloads included, below the copy's end). Prints and writes OUT/results.md: acked/s and
# p99 per window, the ratio with/without, each backup's records, seconds and MB/s, and
# how much of its window the backup overlapped.
#
# Usage: benches/backup.sh [ROUNDS] [SECONDS]      (default 2 10)
# Env: OUT (target/backup-bench), BIN (target/release), CONNS=1000, RECORDS=20000000,
# MAX_MB=0 (the backup's --max-mb-per-s; 0: no limit), KEEP=0 (1: keep the data
# directories).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=benches/lib.sh
. benches/lib.sh

ROUNDS=${1:-2}; SECONDS_W=${2:-10}
OUT=${OUT:-target/backup-bench}; BIN=${BIN:-target/release}; CONNS=${CONNS:-1000}
RECORDS=${RECORDS:-20000000}; MAX_MB=${MAX_MB:-0}; KEEP=${KEEP:-0}
cl_need_bins backup.sh "$BIN" corelog corelog-loadgen corelog-biglog
rm -rf "$OUT"; mkdir -p "$OUT"
D=$OUT/pair; BK=$OUT/copy
LOADGEN=""; BACKUP=""
cleanup() {
  [ -z "$LOADGEN" ] || kill -9 "$LOADGEN" 2>/dev/null || true
  [ -z "$BACKUP" ] || kill -9 "$BACKUP" 2>/dev/null || true
  cl_stop
  [ "$KEEP" = 1 ] || rm -rf "$D/l" "$D/f" "$BK".*
}
trap cleanup EXIT

"$BIN/corelog" certs --out "$OUT/certs" >/dev/null
read -ra cli_tls <<<"$(cl_client_tls "$OUT/certs")"
mkdir -p "$D"
echo "writing $RECORDS records (corelog-biglog) …" >&2
"$BIN/corelog-biglog" --data-dir "$D/l" --shards 2 --records "$RECORDS" --stream-every 100 --streams 100000 \
  --producer-every 1000 2>"$OUT/biglog.log" | tail -n 1 >&2
cp -a "$D/l" "$D/f"
cl_start "$BIN" "$D" "$OUT/certs" pair

now() { date +%s.%N; }
# One window: $1 plain|backup, $2 its number → a JSON line in OUT/windows.jsonl. The load
# generator connects, warms up for 1 s from AT and measures SECONDS_W s from AT + 1; a
# backup starts at AT + 1 (the window's start) into a fresh directory, and is verified.
LAST_BK=""
window() {
  local label=$1 n=$2 at t_end bk_records="" bk_s="" bk_mb="" overlap=""
  at=$(awk -v t="$(now)" 'BEGIN {printf "%.3f", t + 3}')
  timeout $((SECONDS_W + 120)) "$BIN/corelog-loadgen" run --target 127.0.0.1:24400 --connections "$CONNS" \
    --duration "${SECONDS_W}s" --warmup 1s --start-at "$at" --quiet --json "$OUT/$label.$n.json" "${cli_tls[@]}" \
    >/dev/null 2>"$OUT/$label.$n.lg" &
  LOADGEN=$!
  if [ "$label" = backup ]; then
    sleep "$(awk -v a="$at" -v t="$(now)" 'BEGIN {d = a + 1 - t; printf "%.3f", (d > 0 ? d : 0)}')"
    local t0; t0=$(now)
    "$BIN/corelog" admin backup --addr 127.0.0.1:24400 "${cli_tls[@]}" --max-mb-per-s "$MAX_MB" --to "$BK.$n" >"$OUT/backup.$n.out" \
      2>"$OUT/backup.$n.err" || { echo "backup $n failed: $(tail -n 3 "$OUT/backup.$n.err")" >&2; exit 1; }
    t_end=$(now)
    bk_s=$(awk -v a="$t0" -v b="$t_end" 'BEGIN {printf "%.2f", b - a}')
    overlap=$(awk -v a="$t0" -v b="$t_end" -v w="$SECONDS_W" 'BEGIN {printf "%.2f", (b - a < w ? b - a : w)}')
    # "backup of A in D: N records (M MB) copied in T s, R MB/s"
    read -r bk_records bk_mb < <(sed -n 's/.*: \([0-9]*\) records (\([0-9.]*\) MB) copied.*/\1 \2/p' "$OUT/backup.$n.out")
    "$BIN/corelog" inspect "$BK.$n" >"$OUT/inspect.$n.out" || { echo "inspect of backup $n failed" >&2; exit 1; }
    [ -z "$LAST_BK" ] || rm -rf "$LAST_BK"
    LAST_BK=$BK.$n
  fi
  wait "$LOADGEN"; LOADGEN=""
  python3 - "$OUT/$label.$n.json" "$label" "$n" "$bk_records" "$bk_s" "$bk_mb" "$overlap" >>"$OUT/windows.jsonl" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
lab, n, rec, s, mb, ov = sys.argv[2:8]
print(json.dumps({"label": lab, "n": int(n), "acked_s": r["acked"] / r["window_s"], "p99_us": r["p99_us"],
                  "errors": r["errors"], "backup_records": int(rec) if rec else None,
                  "backup_s": float(s) if s else None, "backup_mb": float(mb) if mb else None,
                  "overlap_s": float(ov) if ov else None}))
PY
  tail -n 1 "$OUT/windows.jsonl" >&2
}

n=0
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then order="plain backup backup plain"; else order="backup plain plain backup"; fi
  for label in $order; do
    n=$((n + 1))
    window "$label" "$n"
  done
done
cl_stop
"$BIN/corelog" inspect --compare "$D/l" "$LAST_BK" >"$OUT/compare.out" \
  || { echo "compare failed: $(cat "$OUT/compare.out")" >&2; exit 1; }
cat "$OUT/compare.out" >&2

python3 - "$OUT" "$CONNS" "$SECONDS_W" "$RECORDS" "$MAX_MB" <<'PY' | tee "$OUT/results.md"
import json, statistics, sys
out, conns, secs, records, max_mb = sys.argv[1:6]
w = [json.loads(l) for l in open(out + "/windows.jsonl")]
a = [x for x in w if x["label"] == "plain"]; b = [x for x in w if x["label"] == "backup"]
ma, mb = statistics.median(x["acked_s"] for x in a), statistics.median(x["acked_s"] for x in b)
print(f"| window | acked/s | p99 (ms) | errors | backup: records, s, record MB, MB/s, s inside the window |")
print("|---|---|---|---|---|")
for x in w:
    bk = "" if x["label"] == "plain" else (f"{x['backup_records']:,}, {x['backup_s']}, {x['backup_mb']:.0f}, "
                                            f"{x['backup_mb'] / x['backup_s']:.0f}, {x['overlap_s']}")
    print(f"| {x['label']} {x['n']} | {x['acked_s']:,.0f} | {x['p99_us'] / 1000:.1f} | {x['errors']} | {bk} |")
print()
print(f"{conns} connections, windows of {secs} s, a log of {int(records):,} records, --max-mb-per-s {max_mb}: "
      f"acked/s with a backup running "
      f"/ without = {mb / ma:.3f} (medians {mb:,.0f} / {ma:,.0f})")
PY
