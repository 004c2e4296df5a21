#!/usr/bin/env bash
# A/B of two revisions on this machine, in one sitting: builds OLD and NEW (git worktrees
# under target/ab/, one shared target dir so dependencies build once), then runs them
# alternately — ABBA, BAAB, … — R rounds, and prints every figure as NEW/OLD per round
# with the median and the spread, plus the absolute figures. Each run is a fresh pair
# (leader + follower, mTLS on loopback; or one standalone node) and a fresh data dir.
#
# Figures (issue 12):
#   closed1k   closed loop, 1,000 connections: acked/s, p50, p99
#   one_repl   one connection, replicated pair: p50 (µs)
#   one_solo   one connection, standalone node: p50 (µs)
#   open2k     open loop 2,000 appends/s over 100 connections: server CPU µs per acked
#              append (leader + follower utime + stime from /proc over the run)
#   idle       idle pair for the same time: server CPU % of one core
#   closed36k  (only with BIG=1) closed loop, 36,000 connections over 4 load generators,
#              each node as 2 processes (one per shard: the open-file limit)
#   mem36k     (only with BIG=1) leader memory per client connection: RSS (both leader
#              processes) at 36,000
#              connections (4 load generators, open loop 500/s each) less RSS before
#              they connected, over 36,000 (bytes)
# The disk's floor is measured first, in the same sitting: fio, 4 KiB O_DIRECT write +
# fdatasync at queue depth 1 in this data directory's filesystem (p50 latency and IOPS),
# into a fresh file and then overwriting it; the one-connection p50s are also printed as
# a multiple of the overwrite floor (the issue's target: ≤ 1.25 standalone, ≤ 1.4
# replicated). The overwrite is measured a second time pinned to CPU 0, where the
# one-connection runs are served (the load generator pins its executor to CPU 0, and
# a connection lands on the shard of the CPU that handled its SYN): on a disk whose
# interrupts all land on one CPU the floor differs by CPU, and an unpinned fio moves to
# the interrupt's CPU (benches/floor_by_cpu.sh measures every CPU).
# With open2k, the CPU floor of a replicated append at that load is measured too, before
# the rounds: benches/pair_floor.sh (a leader and follower without corelog — plain TCP,
# blocking calls, the write through io_uring as corelog's, no TLS), 3 rounds; open2k's
# server CPU per append is also printed as a multiple of it. With one_repl, the same pair's
# one-connection latency is measured too (PAIRS=1 CONNS=1 RATE=0: one pair and its client
# on CPU 0, closed loop, as one_repl places corelog), and one_repl's p50 is printed over it.
#
# Usage: benches/ab.sh OLD_REV NEW_REV [SECONDS=10] [ROUNDS=3]
#   env BIG=1 adds closed36k; FIGS="closed1k one_repl" picks figures; LOADGEN=new (or old)
#   drives both sides with NEW's (OLD's) load generator (default: each side its own tree's;
#   a load generator speaks its own tree's newest protocol, which an older server may refuse).
#   OLD_LEADER_EXTRA / NEW_LEADER_EXTRA: more flags for that side's leader (pair and pair2
#   modes), e.g. NEW_LEADER_EXTRA="--authz policy.toml" (benches/authz-policy.sh writes one).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OLD="${1:?usage: benches/ab.sh OLD_REV NEW_REV [SECONDS] [ROUNDS]}"; NEW="${2:?NEW_REV}"
D="${3:-10}"; R="${4:-3}"
# Resolved once: a commit made while this runs must not change what OLD and NEW name.
OLD=$(git rev-parse --short "$OLD^{commit}"); NEW=$(git rev-parse --short "$NEW^{commit}")
FIGS="${FIGS:-closed1k one_repl one_solo open2k idle}"
if [ "${BIG:-0}" = 1 ]; then # adds each once (FIGS="closed36k" BIG=1 ran and printed it twice)
  for f in closed36k mem36k; do [[ " $FIGS " == *" $f "* ]] || FIGS="$FIGS $f"; done
fi
AB="$PWD/target/ab"; mkdir -p "$AB"
export CARGO_TARGET_DIR="$AB/target"

build() { # $1 = rev → prints the bin dir
  local rev sha dir
  rev=$1; sha=$(git rev-parse --short "$rev^{commit}")
  dir="$AB/$sha"
  if [ ! -x "$dir/bin/corelog" ]; then
    rm -rf "$dir/src"; git worktree prune
    git worktree add -f --detach "$dir/src" "$sha" >/dev/null 2>&1
    (cd "$dir/src" && cargo build --release -q -p corelog-server -p corelog-loadgen) >&2
    mkdir -p "$dir/bin"; cp "$CARGO_TARGET_DIR/release/corelog" "$CARGO_TARGET_DIR/release/corelog-loadgen" "$dir/bin/"
    git worktree remove --force "$dir/src"
  fi
  echo "$dir/bin"
}
for rev in "$OLD" "$NEW"; do # build() runs in $(…), where a failing rev-parse would not stop the script
  git rev-parse -q --verify "$rev^{commit}" >/dev/null || { echo "ab.sh: no such revision: $rev" >&2; exit 2; }
done
echo "building $OLD and $NEW (target/ab) ..."
BIN_OLD=$(build "$OLD"); BIN_NEW=$(build "$NEW")
W="$(mktemp -d -p "$AB" run.XXXX)"
# A load generator that outlives its window by this much has hung: the run fails (exit 124)
# instead of the A/B waiting forever (a runtime bug once made one sleep with timers due).
LG_LIMIT=$((3 * D + 300))
# Nodes are started inside $(run …) subshells: find them by their data dir under $W.
cleanup() { pkill -9 -f -- "--data-dir $W/" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
echo "OLD $OLD NEW $NEW, $(nproc) CPUs, $(date -u +%FT%TZ), ${D}s per run, $R rounds, figures: $FIGS, load generator: ${LOADGEN:-own}"

# shellcheck source=benches/lib.sh
. benches/lib.sh

# ---- the disk's floor
if ! command -v fio >/dev/null && [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q fio >/dev/null 2>&1 || true
fi
if command -v fio >/dev/null; then
  # Three times on the same 64 MiB file: first into fresh (fallocated, unwritten) blocks,
  # then overwriting written ones — the lower, stricter floor, used for the one-connection
  # ratios (corelog writes into blocks it zeroed ahead of time) — and that overwrite again
  # pinned to CPU 0 (see the header).
  for pass in fresh overwrite cpu0; do
    cpu=""; out="$W/floor_us"; what="overwrite"
    case "$pass" in fresh) what="fresh file" ;; cpu0) cpu=0; out="$W/floor_cpu0_us"; what="overwrite pinned to CPU 0" ;; esac
    read -r fw fs iops < <(cl_fio "$cpu" "$W" 5 --ioengine=psync --fdatasync=1)
    [ -n "${fs:-}" ] || { echo "disk floor: fio failed (pass $pass)" >&2; exit 1; }
    awk -v w="$fw" -v s="$fs" -v i="$iops" -v what="$what" 'BEGIN {
      printf "disk floor, %s (fio 4 KiB O_DIRECT write + fdatasync, QD1): %d IOPS, write p50 %.0f µs, fdatasync p50 %.0f µs, together ≈ %.0f µs\n", what, i, w, s, w + s }'
    awk -v w="$fw" -v s="$fs" 'BEGIN { printf "%.1f", w + s }' >"$out"
  done
else
  echo "disk floor: fio not installed (apt-get install fio) — no floor this run"
fi

if [[ " $FIGS " == *" open2k "* || " $FIGS " == *" one_repl "* ]]; then
  # Built from this checkout (the floor is not a revision's code); its own rounds alternate
  # nothing, so it runs once, before the A/B.
  (unset CARGO_TARGET_DIR; cargo build --release -q -p corelog-benches --bin pair_floor) >&2
fi
if [[ " $FIGS " == *" open2k "* ]]; then
  MODES=uring BIN="$PWD/target/release" bash benches/pair_floor.sh 3 | tee "$W/pair_floor.txt" | grep -v '^FLOOR\|^P50'
  awk '/^FLOOR/ {print $2}' "$W/pair_floor.txt" >"$W/pair_floor_us"
fi
if [[ " $FIGS " == *" one_repl "* ]]; then
  PAIRS=1 CONNS=1 RATE=0 MODES=uring BIN="$PWD/target/release" bash benches/pair_floor.sh 3 |
    tee "$W/pair_one.txt" | grep -v '^FLOOR\|^P50'
  awk '/^P50/ {print $2}' "$W/pair_one.txt" >"$W/pair_one_p50"
fi

"$BIN_NEW/corelog" certs --out "$W/certs" >/dev/null
read -ra cli_tls <<<"$(cl_client_tls "$W/certs")"
leader_rss_kib() { local t=0 p; for p in "${CL_LEADERS[@]}"; do t=$((t + $(awk '/VmRSS/{print $2}' "/proc/$p/status"))); done; echo "$t"; }
# $1 bin, $2 the run's directory, $3 pair|pair2|solo (benches/lib.sh's cl_start). It runs
# inside $(run …), where bash turns errexit off: a failed start must exit by itself.
start_nodes() { cl_start "$1" "$2" "$W/certs" "$3" || exit 1; }
# $1: the run's directory; its data directories go (each node preallocates its segments:
# 84 runs of BIG=1 kept until the end filled a 62 GB disk), its logs and JSON stay.
stop_nodes() { cl_stop; rm -rf "$1/l" "$1/f"; }
json() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

run() { # $1 = OLD|NEW, $2 = figure, $3 = round → prints "value [extra]"
  local side=$1 fig=$2 b d t0 t1 c0 c1 hz
  b=$([ "$side" = OLD ] && echo "$BIN_OLD" || echo "$BIN_NEW")
  # OLD_LEADER_EXTRA / NEW_LEADER_EXTRA: flags for one side's leader only (run is a subshell).
  if [ "$side" = OLD ]; then CL_LEADER_EXTRA="${CL_LEADER_EXTRA:-} ${OLD_LEADER_EXTRA:-}"; else
    CL_LEADER_EXTRA="${CL_LEADER_EXTRA:-} ${NEW_LEADER_EXTRA:-}"; fi
  # LOADGEN=new / old: both sides measured by one load generator (the servers alone compared).
  local lg="$b/corelog-loadgen"
  case "${LOADGEN:-own}" in new) lg="$BIN_NEW/corelog-loadgen" ;; old) lg="$BIN_OLD/corelog-loadgen" ;; esac
  d=$(mktemp -d -p "$W" "$side-$fig-$3.XXXX")
  hz=$(getconf CLK_TCK)
  case "$fig" in
    closed1k|one_repl|one_solo|open2k|closed36k)
      local mode=pair conns=1000 extra=()
      case "$fig" in
        one_repl) conns=1 ;;
        one_solo) conns=1; mode=solo ;;
        open2k) conns=100; extra=(--rate 2000) ;;
        closed36k) conns=9000; mode=pair2 ;;
      esac
      start_nodes "$b" "$d" "$mode"
      c0=$(cl_server_ticks)
      if [ "$fig" = closed36k ]; then
        # One shared start: each load generator connects, says READY on its stdout and
        # reads the start time from its stdin (fifos), so the four windows (and warm-ups)
        # are the same wall-clock interval — no process still handshaking 9,000 TLS
        # connections, or closing them, inside another's window.
        local lp=() ins=() i fd line at
        for i in 0 1 2 3; do
          mkfifo "$d.$i.in" "$d.$i.out"
          exec {fd}<>"$d.$i.in"; ins+=("$fd")
          timeout "$LG_LIMIT" "$lg" run --target 127.0.0.1:24400 --connections "$conns" --duration "${D}s" --warmup 3s \
            --quiet --start-at stdin --json "$d.$i.json" --source-ip-base $((1 + 8 * i)) --cores 1 --first-cpu "$i" \
            "${cli_tls[@]}" <"$d.$i.in" >"$d.$i.out" 2>"$d.$i.lg" & lp+=($!)
        done
        for i in 0 1 2 3; do
          exec {fd}<"$d.$i.out"
          read -r -t 300 line <&"$fd" || { echo "load generator $i never became ready: $(tail -n 3 "$d.$i.lg")" >&2; exit 1; }
          [[ $line == READY* ]] || { echo "load generator $i: $line" >&2; exit 1; }
        done
        at=$(python3 -c 'import time; print(f"{time.time() + 0.5:.3f}")')
        for fd in "${ins[@]}"; do echo "$at" >&"$fd"; exec {fd}>&-; done
        wait "${lp[@]}"
      else
        timeout "$LG_LIMIT" "$lg" run --target 127.0.0.1:24400 --connections "$conns" --duration "${D}s" --quiet \
          --json "$d.json" "${extra[@]}" "${cli_tls[@]}" >/dev/null 2>"$d.lg"
      fi
      c1=$(cl_server_ticks)
      stop_nodes "$d"
      case "$fig" in
        closed1k) json "$d.json" "'%.0f %d %d %d' % (r['acked']/r['window_s'], r['p50_us'], r['p99_us'], r['errors'])" ;;
        one_repl|one_solo) json "$d.json" "'%d %.0f %d' % (r['p50_us'], r['acked']/r['window_s'], r['errors'])" ;;
        open2k)
          # The CPU ticks cover the whole run (connecting, warm-up, window): so does acked_total.
          json "$d.json" "'%.1f %d %d' % ((($c1-$c0)/$hz*1e6)/max(1,r['acked_total']), r['acked'], r['errors'])" ;;
        closed36k)
          python3 - "$d" <<'EOF'
import json, glob, sys
rs = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + ".*.json"))]
acked = sum(r["acked"] / r["window_s"] for r in rs)
p50 = max(r["p50_us"] for r in rs); p99 = max(r["p99_us"] for r in rs)
print("%.0f %d %d %d" % (acked, p50, p99, sum(r["errors"] for r in rs)))
EOF
          ;;
      esac ;;
    mem36k)
      start_nodes "$b" "$d" pair2
      local rss0 rss=0 lp=() i r
      rss0=$(leader_rss_kib)
      for i in 0 1 2 3; do
        timeout "$LG_LIMIT" "$lg" run --target 127.0.0.1:24400 --connections 9000 --rate 500 --duration "${D}s" --quiet \
          --json "$d.$i.json" --source-ip-base $((1 + 8 * i)) --cores 1 --first-cpu "$i" "${cli_tls[@]}" \
          >/dev/null 2>"$d.$i.lg" & lp+=($!)
      done
      # The largest RSS seen while the load generators run (all connected by mid-run).
      while kill -0 "${lp[0]}" 2>/dev/null; do
        r=$(leader_rss_kib); [ "$r" -gt "$rss" ] && rss=$r
        sleep 0.5
      done
      wait "${lp[@]}"
      stop_nodes "$d"
      python3 - "$d" "$rss0" "$rss" <<'EOF'
import json, glob, sys
rs = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + ".*.json"))]
conns = sum(r["connected"] for r in rs)
print("%.0f %d %d" % ((int(sys.argv[3]) - int(sys.argv[2])) * 1024 / max(1, conns), conns, sum(r["errors"] for r in rs)))
EOF
      ;;
    idle)
      start_nodes "$b" "$d" pair
      t0=$(date +%s.%N); c0=$(cl_server_ticks)
      sleep "$D"
      t1=$(date +%s.%N); c1=$(cl_server_ticks)
      stop_nodes "$d"
      python3 -c "print('%.2f' % (($c1-$c0)/$hz/($t1-$t0)*100))" ;;
  esac
}

declare -A VALS
for r in $(seq 1 "$R"); do
  order=(OLD NEW NEW OLD); [ $((r % 2)) -eq 0 ] && order=(NEW OLD OLD NEW)
  for fig in $FIGS; do
    for side in "${order[@]}"; do
      v=$(run "$side" "$fig" "$r")
      VALS["$fig,$side,$r"]="${VALS["$fig,$side,$r"]:-} $v|"
      echo "round $r $fig $side: $v"
    done
  done
done

echo
echo "=== NEW/OLD ratios (median over rounds, [min, max]); lower is better for latency and CPU ==="
for fig in $FIGS; do
  args=()
  for r in $(seq 1 "$R"); do args+=("${VALS["$fig,OLD,$r"]}" "${VALS["$fig,NEW,$r"]}"); done
  FLOOR_FILE="$W/floor_us" FLOOR_CPU0_FILE="$W/floor_cpu0_us" PAIR_FLOOR_FILE="$W/pair_floor_us" PAIR_ONE_FILE="$W/pair_one_p50" python3 - "$fig" "${args[@]}" <<'EOF'
import os, statistics, sys
fig, rest = sys.argv[1], sys.argv[2:]
names = {"closed1k": ["acked/s", "p50 µs", "p99 µs", "errors"], "closed36k": ["acked/s", "p50 µs", "p99 µs", "errors"],
         "one_repl": ["p50 µs", "acked/s", "errors"], "one_solo": ["p50 µs", "acked/s", "errors"],
         "mem36k": ["bytes/connection", "connections", "errors"],
         "open2k": ["server CPU µs/append", "acked", "errors"], "idle": ["server CPU %"]}[fig]
def runs(s):  # "v1 v2|v1 v2|" -> [[v1, v2], ...] (two runs per side per round)
    return [[float(x) for x in part.split()] for part in s.split("|") if part.strip()]
for k, name in enumerate(names):
    if name in ("errors", "acked", "connections"):
        tot = [sum(r[k] for r in runs(s)) for s in rest]
        print(f"{fig:9s} {name:22s} OLD total {sum(tot[0::2]):.0f}  NEW total {sum(tot[1::2]):.0f}")
        continue
    ratios, olds, news = [], [], []
    for o, n in zip(rest[0::2], rest[1::2]):
        ov = statistics.mean(r[k] for r in runs(o)); nv = statistics.mean(r[k] for r in runs(n))
        olds.append(ov); news.append(nv); ratios.append(nv / ov if ov else float("nan"))
    print(f"{fig:9s} {name:22s} NEW/OLD {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]"
          f"   OLD median {statistics.median(olds):.1f}  NEW median {statistics.median(news):.1f}")
    if fig.startswith("closed") and name == "p99 µs":
        p50s = {side: statistics.median(statistics.mean(r[1] for r in runs(x)) for x in rest[i::2]) for i, side in enumerate(("OLD", "NEW"))}
        print(f"{fig:9s} {'p99 / p50':22s} OLD {statistics.median(olds) / p50s['OLD']:.2f}  NEW {statistics.median(news) / p50s['NEW']:.2f}"
              + ("   (36k: the highest p50 and p99 of the 4 load generators)" if fig == "closed36k" else ""))
    pair = os.environ.get("PAIR_FLOOR_FILE", "")
    if fig == "open2k" and name == "server CPU µs/append" and os.path.exists(pair) and open(pair).read().strip():
        pf = float(open(pair).read())
        print(f"{fig:9s} {'CPU / bare pair floor':22s} OLD {statistics.median(olds) / pf:.2f}  NEW {statistics.median(news) / pf:.2f}"
              f"   (floor {pf:.1f} µs: benches/pair_floor.sh, the same work without corelog)")
    one = os.environ.get("PAIR_ONE_FILE", "")
    if fig == "one_repl" and name == "p50 µs" and os.path.exists(one) and open(one).read().strip():
        po = float(open(one).read())
        print(f"{fig:9s} {'p50 / bare pair p50':22s} OLD {statistics.median(olds) / po:.2f}  NEW {statistics.median(news) / po:.2f}"
              f"   (bare pair {po:.0f} µs: benches/pair_floor.sh, one connection on CPU 0 without corelog)")
    floor = os.environ.get("FLOOR_FILE", "")
    if fig.startswith("one_") and name == "p50 µs" and os.path.exists(floor):
        fl = float(open(floor).read())
        print(f"{fig:9s} {'p50 / disk floor':22s} OLD {statistics.median(olds) / fl:.2f}  NEW {statistics.median(news) / fl:.2f}"
              f"   (floor {fl:.0f} µs: fio overwrite, write + fdatasync p50)")
        floor0 = os.environ.get("FLOOR_CPU0_FILE", "")
        if os.path.exists(floor0):
            f0 = float(open(floor0).read())
            print(f"{fig:9s} {'p50 / CPU 0 floor':22s} OLD {statistics.median(olds) / f0:.2f}  NEW {statistics.median(news) / f0:.2f}"
                  f"   (floor {f0:.0f} µs: the same fio pinned to CPU 0, where NEW serves the connection)")
EOF
done
