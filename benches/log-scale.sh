#!/usr/bin/env bash
# Costs against the log's length (issue 32): how long a standalone node takes to start,
# and how much memory it holds, on logs of 1 M, 10 M, 100 M and 1 B records.
#
# One data directory grows through the sizes (corelog-biglog --append: the server's own
# shard code writes it at disk speed; 2 shards, 256 MiB segments, a stream event every
# STREAM_EVERY records over STREAMS streams, a producer's record every PRODUCER_EVERY).
# At each size, with the page cache dropped before every start:
#   - start after a clean stop: `corelog serve` started, time from the spawn to /health
#     200, VmRSS then, SIGTERM, wait for the exit; REPS times;
#   - start after kill -9: appends from corelog-loadgen for a moment, kill -9 the node
#     while they run (the tail holds fresh writes), start, time to /health, VmRSS; REPS
#     times;
#   and each start's own log lines (what it read: sealed segments from their index files,
#   the checkpoint, bytes scanned). Floors: a start on an empty directory, and an O_DIRECT
#   read of one segment with dd (the device's read rate). With the largest log: READS
#   reads of one event at a random version of a random stream (benches/src/bin/
#   stream_reads.rs), page cache dropped first.
# A size whose log would leave less than FREE_GB_MIN GB free on the disk is skipped (said
# in the output). Writes OUT/results.{json,md,svg} and the nodes' logs. Stops every
# process it started, by pid; removes the data directory unless KEEP=1.
#
# Usage: benches/log-scale.sh [SIZES...]     (default: 1000000 10000000 100000000 1000000000)
# Env: OUT (target/log-scale), DATA (target/log-scale-data), BIN (target/release, built
# with `cargo build --release`), COMMIT (the label of BIN's tree), REPS=3, READS=200, SHARDS=2, STREAMS=100000,
# STREAM_EVERY=100, PRODUCER_EVERY=1000, SEGMENT_BYTES=268435456, FREE_GB_MIN=15,
# SECONDS_MAX=7200 (no new size is started past it), KEEP=0; REPORT_ONLY=1 writes the
# results again from OUT/runs.jsonl and measures nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=benches/lib.sh
. benches/lib.sh

read -r -a SIZES <<<"${*:-1000000 10000000 100000000 1000000000}"
OUT=${OUT:-target/log-scale}; DATA=${DATA:-target/log-scale-data}; BIN=${BIN:-target/release}
REPS=${REPS:-3}; READS=${READS:-200}; SHARDS=${SHARDS:-2}; STREAMS=${STREAMS:-100000}
STREAM_EVERY=${STREAM_EVERY:-100}; PRODUCER_EVERY=${PRODUCER_EVERY:-1000}
SEGMENT_BYTES=${SEGMENT_BYTES:-268435456}; FREE_GB_MIN=${FREE_GB_MIN:-15}
SECONDS_MAX=${SECONDS_MAX:-7200}; KEEP=${KEEP:-0}
PORT=28400; MPORT=28600   # client (direct ports PORT+1..), metrics
START_MAX_S=600           # a start slower than this fails the run

# Tables and plot from OUT/runs.jsonl: results.json, results.md, results.svg.
report() {
python3 - "$RUNS" "$OUT" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
out = sys.argv[2]
meta = next(r for r in runs if r["kind"] == "meta")
med = lambda xs: statistics.median(xs) if xs else None
sizes = sorted({r["size"] for r in runs if r["kind"] == "clean"})
rows = []
for s in sizes:
    c = [r for r in runs if r["kind"] == "clean" and r["size"] == s]
    k = [r for r in runs if r["kind"] == "kill9" and r["size"] == s]
    rows.append({
        "size": s, "records": c[0]["records"], "bytes": c[0]["bytes"], "segments": c[0]["segments"],
        "write_s": c[0]["write_s"],
        "clean_s": med([r["start_s"] for r in c]), "clean_all": [r["start_s"] for r in c],
        "kill9_s": med([r["start_s"] for r in k]), "kill9_all": [r["start_s"] for r in k],
        "rss_mib": med([r["rss_kb"] for r in c + k]) / 1024,
        "log_bytes": c[0]["log_bytes"],
        "last_shard_s": med([max(r["times"]["shards"]) for r in c]),
        "stream_index_mib": c[0]["stream_index_bytes"] / 2**20,
        "clean_lines": c[-1]["lines"], "kill9_lines": k[-1]["lines"] if k else [],
    })
empty = [r for r in runs if r["kind"] == "empty"]
reads = [r for r in runs if r["kind"] == "reads"]
dd = next((r["line"] for r in runs if r["kind"] == "dd"), "")
res = {"meta": meta, "rows": rows, "empty_start_s": med([r["start_s"] for r in empty]),
       "empty_rss_mib": med([r["rss_kb"] for r in empty]) / 1024 if empty else None,
       "dd": dd, "reads": reads, "floor_reads": [r for r in runs if r["kind"] == "floor_read"], "skipped": [r for r in runs if r["kind"] == "skipped"]}
json.dump(res, open(f"{out}/results.json", "w"), indent=1)
h = lambda n: f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"
md = ["| size | records | record bytes | segments | start after clean stop (s) | start after kill -9 (s) | last shard recovered (s) | RSS (MiB) | stream index (MiB) |",
      "|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    rng = lambda xs: f"{min(xs):.2f}–{max(xs):.2f}"
    md.append(f"| {r['size']:,} | {r['records']:,} | {h(r['log_bytes'])} | {r['segments']} | {r['clean_s']:.2f} ({rng(r['clean_all'])}) "
              f"| {r['kill9_s']:.2f} ({rng(r['kill9_all'])}) | {r['last_shard_s']:.2f} | {r['rss_mib']:.0f} | {r['stream_index_mib']:.0f} |")
if res["empty_start_s"] is not None:
    md.append(f"| empty dir | 0 | 0 | 0 | {res['empty_start_s']:.2f} | – | – | {res['empty_rss_mib']:.0f} | 0 |")
md.append("")
for r in reads:
    md.append(f"Stream reads (log of {r['size']:,} records, page cache dropped, seed {r['seed']}): {r['n']} reads, "
              f"p50 {r['p50_ms']:.2f} ms, p90 {r['p90_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, max {r['max_ms']:.2f} ms")
md.append(f"dd O_DIRECT read of one segment: {dd}")
for r in runs:
    if r["kind"] == "floor_read":
        md.append(f"Random O_DIRECT reads of {r['bytes']} bytes (page cache dropped): {r['n']}, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms")
open(f"{out}/results.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))

# Plot: start times and RSS against records (log scale), two panels.
import math
W, H, T, B = 800, 320, 34, 56
def nice(v):
    e = 10 ** math.floor(math.log10(v))
    return next(m * e for m in (1, 2, 2.5, 5, 10) if m * e >= v)
def panel(x0, y0, w, h, series, floor, ylabel, title):
    xs = [p[0] for s in series for p in s[2]]
    ys = [p[1] for s in series for p in s[2]] + ([floor[1]] if floor else [])
    if not xs:
        return []
    lx0, lx1 = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    lx1 = max(lx1, lx0 + 1)
    step = nice(max(ys) / 4 or 1)
    ymax = step * math.ceil(max(ys) * 1.05 / step)
    X = lambda v: x0 + (math.log10(v) - lx0) / (lx1 - lx0) * w
    Y = lambda v: y0 + h - v / ymax * h
    e = [f'<text x="{x0 + w / 2}" y="{y0 - 12}" text-anchor="middle" font-size="13">{title}</text>',
         f'<text x="{x0 - 46}" y="{y0 + h / 2}" font-size="11" transform="rotate(-90 {x0 - 46} {y0 + h / 2})" text-anchor="middle">{ylabel}</text>']
    v = 0.0
    while v <= ymax + step / 2:
        e.append(f'<line x1="{x0}" y1="{Y(v):.1f}" x2="{x0 + w}" y2="{Y(v):.1f}" stroke="#eee"/>')
        e.append(f'<text x="{x0 - 5}" y="{Y(v) + 3:.1f}" text-anchor="end" font-size="10">{v:g}</text>')
        v += step
    e.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
    for d in range(lx0, lx1 + 1):
        e.append(f'<line x1="{X(10**d):.1f}" y1="{y0 + h}" x2="{X(10**d):.1f}" y2="{y0 + h + 4}" stroke="#999"/>')
        label = {6: "1 M", 7: "10 M", 8: "100 M", 9: "1 B", 10: "10 B"}.get(d, f"1e{d}")
        e.append(f'<text x="{X(10**d):.1f}" y="{y0 + h + 16}" text-anchor="middle" font-size="10">{label}</text>')
    if floor:
        e.append(f'<line x1="{x0}" y1="{Y(floor[1]):.1f}" x2="{x0 + w}" y2="{Y(floor[1]):.1f}" stroke="#777" stroke-dasharray="4 3"/>')
        e.append(f'<text x="{x0 + w - 4}" y="{Y(floor[1]) - 4:.1f}" text-anchor="end" font-size="10" fill="#555">{floor[0]}</text>')
    for j, (name, color, pts) in enumerate(series):
        pts = sorted(pts)
        e.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(f"{X(a):.1f},{Y(b):.1f}" for a, b in pts)}"/>')
        e += [f'<circle cx="{X(a):.1f}" cy="{Y(b):.1f}" r="3" fill="{color}"/>' for a, b in pts]
        e.append(f'<text x="{x0 + 8}" y="{y0 + 15 + 13 * j}" font-size="11" fill="{color}">{name}</text>')
    e.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 34}" text-anchor="middle" font-size="11">records in the log (2 shards)</text>')
    return e
pw = 300
fl = lambda v, what: (what, v) if v is not None else None
els = panel(70, T, pw, H - T - B, [("after clean stop", "#1f77b4", [(r["records"], r["clean_s"]) for r in rows]),
                                   ("after kill -9", "#d62728", [(r["records"], r["kill9_s"]) for r in rows if r["kill9_s"] is not None])],
            fl(res["empty_start_s"], "empty dir"), "seconds from spawn to /health 200", "start time (median of reps)")
els += panel(70 + pw + 110, T, pw, H - T - B, [("VmRSS when ready", "#2ca02c", [(r["records"], r["rss_mib"]) for r in rows]),
                                               ("stream index (metric)", "#9467bd", [(r["records"], r["stream_index_mib"]) for r in rows])],
             fl(res["empty_rss_mib"], "empty dir"), "MiB", "memory once ready")
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">',
       f'<rect width="{W}" height="{H}" fill="white"/>'] + els + [
       f'<text x="{W / 2}" y="{H - 6}" text-anchor="middle" font-size="10" fill="#555">benches/log-scale.sh, commit {meta["commit"]}, {meta["date"][:10]}, {meta["cpus"]} CPUs</text>', "</svg>"]
open(f"{out}/results.svg", "w").write("\n".join(svg) + "\n")
PY
}
if [ "${REPORT_ONLY:-0}" = 1 ]; then RUNS="$OUT/runs.jsonl"; report; exit 0; fi

cl_need_bins log-scale.sh "$BIN" corelog corelog-biglog corelog-loadgen stream_reads
[ -e "$DATA" ] && { echo "log-scale.sh: $DATA exists (remove it or set DATA)" >&2; exit 2; }
mkdir -p "$OUT" "$DATA"
RUNS="$OUT/runs.jsonl"; : >"$RUNS"
NODE=""; LOADGEN=""

cleanup() {
  local p
  for p in $NODE $LOADGEN; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [ "$KEEP" = 1 ]; then echo "data kept in $DATA"; else rm -rf "$DATA"; fi
}
trap cleanup EXIT
trap "exit 143" TERM INT   # through the EXIT trap: what was started is stopped

now_ns() { date +%s%N; }
free_bytes() { df -B1 --output=avail "$DATA" | tail -n 1 | tr -d ' '; }
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
metric() { curl -s "http://127.0.0.1:$MPORT/metrics" | awk -v m="$1" '$1 ~ "^"m"\\{" {s += $2} END {printf "%.0f", s + 0}'; }
# One JSON line into runs.jsonl: $1 kind, then key=value pairs (values numbers or JSON).
record() {
  local kind=$1 kv line; shift
  line="{\"kind\": \"$kind\""
  for kv in "$@"; do line+=", \"${kv%%=*}\": ${kv#*=}"; done
  echo "$line}" >>"$RUNS"
}

# Starts a standalone node on $1 (log appended to $2), from a cold page cache; waits for
# /health 200. Sets NODE (pid), T0 (its spawn, ns), START_S (spawn to health, s), RSS_KB
# (VmRSS then).
start_node() {
  local dir=$1 log=$2
  cold
  echo "---- start $(date -u +%FT%TZ) ----" >>"$log"
  T0=$(now_ns)
  "$BIN/corelog" serve --role standalone --insecure --data-dir "$dir" --shard-count "$SHARDS" \
    --segment-bytes "$SEGMENT_BYTES" --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$MPORT" >>"$log" 2>&1 &
  NODE=$!
  until cl_health_once "$MPORT"; do
    kill -0 "$NODE" 2>/dev/null || { echo "the node exited during its start:" >&2; tail -n 5 "$log" >&2; exit 1; }
    (( ($(now_ns) - T0) / 1000000000 < START_MAX_S )) || { echo "no /health within $START_MAX_S s" >&2; exit 1; }
  done
  START_S=$(awk -v a="$T0" -v b="$(now_ns)" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
  RSS_KB=$(awk '/^VmRSS/ {print $2}' "/proc/$NODE/status")
}
# SIGTERM and wait for the exit (bounded: the node's own shutdown timeout is 15 s).
stop_node() {
  kill -TERM "$NODE"
  local i
  for i in $(seq 1 300); do kill -0 "$NODE" 2>/dev/null || break; sleep 0.1; done
  [ "$i" -lt 300 ] || kill -9 "$NODE" 2>/dev/null || true
  wait "$NODE" 2>/dev/null || true; NODE=""
}
# Appends from corelog-loadgen for a moment, then kill -9 of the node while they run.
kill_while_appending() {
  "$BIN/corelog-loadgen" run --insecure --target "127.0.0.1:$PORT" --connections 16 --cores 1 --unpinned \
    --duration 3s --warmup 0s --quiet >/dev/null 2>&1 &
  LOADGEN=$!
  sleep 1.5
  kill -9 "$NODE"; wait "$NODE" 2>/dev/null || true; NODE=""
  local i
  for i in $(seq 1 150); do kill -0 "$LOADGEN" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$LOADGEN" 2>/dev/null || true; wait "$LOADGEN" 2>/dev/null || true; LOADGEN=""
}
# The last start's "recovered" lines of $1 as a JSON list of strings.
recovered_lines() {
  awk '/^---- start/ {n = 0} /recovered [0-9]+ records/ {sub(/^[^ ]+ INFO +/, ""); l[n++] = $0} END {
    printf "["; for (i = 0; i < n; i++) { gsub(/"/, "\\\"", l[i]); printf "%s\"%s\"", (i ? ", " : ""), l[i] } printf "]" }' "$1"
}
# Records the last start found (sum of its "recovered N records" lines in log $1).
recovered_records() {
  awk '/^---- start/ {s = 0} /recovered [0-9]+ records/ {for (i = 1; i < NF; i++) if ($i == "recovered") s += $(i + 1)} END {print s + 0}' "$1"
}
# When the last start in log $1 logged what, in seconds from its spawn at $2 (ns): a JSON
# object {"first": its first line, "shards": each shard's "recovered" line, "ready": …}.
log_times() {
  python3 - "$1" "$2" <<'PY'
import datetime, json, sys
lines = open(sys.argv[1]).read().split("---- start")[-1].splitlines()[1:]
t0 = int(sys.argv[2]) / 1e9
at = lambda l: round(datetime.datetime.fromisoformat(l.split()[0].replace("Z", "+00:00")).timestamp() - t0, 3)
first = next(l for l in lines if l[:2] == "20")
ready = next(l for l in lines if " ready: " in l)
print(json.dumps({"first": at(first), "shards": [at(l) for l in lines if " recovered " in l], "ready": at(ready)}))
PY
}

# COMMIT names the tree BIN was built from when it is not this checkout's.
COMMIT=${COMMIT:-$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- server client benches || echo '+dirty')}
echo "log-scale.sh: binaries $BIN (commit $COMMIT), $(date -u +%FT%TZ)"
echo "machine: $(nproc) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM, kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "disk: $(df -h --output=source,size,avail "$DATA" | tail -n 1) (free before: $(( $(free_bytes) / 1000000000 )) GB, keep >= $FREE_GB_MIN GB free)"
record meta "commit=\"$COMMIT\"" "date=\"$(date -u +%FT%TZ)\"" "cpus=$(nproc)" \
  "load=\"$(cut -d' ' -f1-3 /proc/loadavg)\"" "free_gb=$(( $(free_bytes) / 1000000000 ))" "shards=$SHARDS" \
  "streams=$STREAMS" "stream_every=$STREAM_EVERY" "producer_every=$PRODUCER_EVERY" "segment_bytes=$SEGMENT_BYTES" \
  "reps=$REPS" "kernel=\"$(uname -r)\""

# Floor: a start on an empty directory.
for r in $(seq 1 "$REPS"); do
  rm -rf "$DATA/empty"; mkdir -p "$DATA/empty"
  start_node "$DATA/empty" "$OUT/empty.log"
  echo "empty dir: start $START_S s, RSS $((RSS_KB / 1024)) MiB"
  record empty "rep=$r" "start_s=$START_S" "rss_kb=$RSS_KB" "times=$(log_times "$OUT/empty.log" "$T0")"
  stop_node
done
rm -rf "$DATA/empty"

have=0; per_record=0; d="$DATA/log"
for size in "${SIZES[@]}"; do
  (( SECONDS < SECONDS_MAX )) || { echo "SECONDS_MAX=$SECONDS_MAX reached: sizes from $size on skipped"; break; }
  add=$((size - have))
  if (( add <= 0 )); then echo "size $size: the log already holds $have records"; continue; fi
  if (( per_record > 0 )); then
    need=$((add * per_record + 2 * SHARDS * SEGMENT_BYTES)); free=$(free_bytes)
    if (( free - need < FREE_GB_MIN * 1000000000 )); then
      echo "size $size: needs ~$((need / 1000000000)) GB more, $((free / 1000000000)) GB free: skipped (FREE_GB_MIN=$FREE_GB_MIN)"
      record skipped "size=$size" "need_bytes=$need" "free_bytes=$free"
      break
    fi
  fi
  t0=$(now_ns)
  flag=(); [ "$have" -gt 0 ] && flag=(--append)
  "$BIN/corelog-biglog" --data-dir "$d" --shards "$SHARDS" --records "$add" --stream-every "$STREAM_EVERY" \
    --streams "$STREAMS" --producer-every "$PRODUCER_EVERY" --segment-bytes "$SEGMENT_BYTES" "${flag[@]}" \
    2>"$OUT/biglog-$size.log" | tee -a "$OUT/biglog.out"
  write_s=$(awk -v a="$t0" -v b="$(now_ns)" 'BEGIN {printf "%.1f", (b - a) / 1e9}')
  # "wrote N records (B record bytes, …": what one more record costs on disk, plus 1% for
  # batch padding and index files.
  read -r -a w <<<"$(tail -n 1 "$OUT/biglog.out")"
  rb=${w[3]//[^0-9]/}
  per_record=$((rb * 101 / 100 / w[1] + 1)); log_bytes=$((${log_bytes:-0} + rb))
  bytes=$(du -sB1 "$d" | cut -f1); segments=$(find "$d" -name '*.log' | wc -l)
  for r in $(seq 1 "$REPS"); do
    start_node "$d" "$OUT/node-$size.log"
    records=$(recovered_records "$OUT/node-$size.log")
    sib=$(metric corelog_stream_index_bytes); ev=$(metric corelog_streams)
    echo "size $size: start after clean stop $START_S s, RSS $((RSS_KB / 1024)) MiB, $records records, stream index $((sib / 1048576)) MiB ($ev streams)"
    record clean "size=$size" "rep=$r" "start_s=$START_S" "rss_kb=$RSS_KB" "records=$records" "bytes=$bytes" \
      "log_bytes=$log_bytes" "segments=$segments" "write_s=$write_s" "stream_index_bytes=$sib" "streams_held=$ev" \
      "times=$(log_times "$OUT/node-$size.log" "$T0")" "lines=$(recovered_lines "$OUT/node-$size.log")"
    [ "$r" -lt "$REPS" ] && stop_node
  done
  for r in $(seq 1 "$REPS"); do
    kill_while_appending
    start_node "$d" "$OUT/node-$size.log"
    records=$(recovered_records "$OUT/node-$size.log")
    echo "size $size: start after kill -9 $START_S s, RSS $((RSS_KB / 1024)) MiB, $records records"
    record kill9 "size=$size" "rep=$r" "start_s=$START_S" "rss_kb=$RSS_KB" "records=$records" \
      "times=$(log_times "$OUT/node-$size.log" "$T0")" "lines=$(recovered_lines "$OUT/node-$size.log")"
  done
  stop_node
  have=$(recovered_records "$OUT/node-$size.log")
  largest=$size
done

# Floor: the device's read rate (O_DIRECT, 1 MiB blocks, one sealed segment, cold).
seg="$d/shard-0/00000000000000000000.log"
cold
dd_line=$(dd if="$seg" of=/dev/null bs=1M iflag=direct 2>&1 | tail -n 1)
echo "dd read of $seg: $dd_line"
record dd "line=\"$dd_line\""
# Floor of a stream read, which reads the whole batch holding the event: READS random
# O_DIRECT reads of one batch (1 MiB) and, for comparison, of one 4 KiB block, at random
# places in the sealed segments (those with an index file), page cache dropped.
cold
python3 - "$RUNS" "$READS" "$d"/shard-*/*.log <<'PY' | tee -a "$OUT/floor-reads.txt"
import json, mmap, os, random, sys, time
runs, n = sys.argv[1], int(sys.argv[2])
files = [f for f in sys.argv[3:] if os.path.exists(f[:-4] + ".idx")] or sys.argv[3:]  # sealed: written whole
rng = random.Random(1)
for size in (1 << 20, 4096):
    buf, lat = mmap.mmap(-1, size), []
    for _ in range(n):
        f = rng.choice(files)
        fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
        at = rng.randrange(os.fstat(fd).st_size // size) * size
        t = time.perf_counter(); os.preadv(fd, [buf], at); lat.append((time.perf_counter() - t) * 1e3)
        os.close(fd)
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(len(lat) * p + 0.999999) - 1)]
    r = {"kind": "floor_read", "bytes": size, "n": n, "p50_ms": round(q(0.5), 3), "p99_ms": round(q(0.99), 3), "max_ms": round(lat[-1], 3)}
    open(runs, "a").write(json.dumps(r) + "\n")
    print(f"random O_DIRECT reads of {size} bytes: {n}, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms")
PY

# Stream reads at random versions, with the largest log.
start_node "$d" "$OUT/node-reads.log"
for seed in 1 2; do
  cold
  line=$("$BIN/stream_reads" --addr "127.0.0.1:$PORT" --streams "$STREAMS" --reads "$READS" --seed "$seed")
  echo "stream reads (size ${largest:-?}, seed $seed, page cache dropped): $line"
  read -r -a w <<<"$line"
  record reads "size=${largest:-0}" "seed=$seed" "n=${w[1]}" "p50_ms=${w[3]}" "p90_ms=${w[5]}" "p99_ms=${w[7]}" "max_ms=${w[9]}"
done
stop_node

report
echo "results: $OUT/results.md, $OUT/results.json, $OUT/results.svg"
