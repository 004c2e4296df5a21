#!/usr/bin/env bash
# Where the CPU goes, per load level: for each level a fresh mTLS pair (leader +
# follower on loopback) and the load generator run for SECS seconds while perf samples
# the leader, the follower and the load generator (cpu-clock, DWARF call graphs; this
# machine kind has no hardware counters). Each level gives one flamegraph
# ($OUT/flame-<level>.svg, three roots: leader, follower, loadgen) and a line of figures (acked/s, p50, CPU per append of each process, context
# switches per append, the kernel's share of each process's samples).
#
# Levels: one (1 connection, closed loop), open2k (open loop 2,000/s over 100
# connections), closed1k (closed loop, 1,000 connections), closed9k (closed loop,
# 9,000 connections: the largest one load generator holds on one source address).
#
# Usage: benches/profile.sh OUT_DIR [SECS=8] [LEVELS="one open2k closed1k closed9k"]
#   env BIN=dir with corelog and corelog-loadgen (default target/release, built here).
# Needs perf and inferno (cargo install inferno).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${1:?usage: benches/profile.sh OUT_DIR [SECS] [LEVELS]}"; SECS="${2:-8}"
LEVELS="${3:-one open2k closed1k closed9k}"
for t in perf inferno-collapse-perf inferno-flamegraph; do
  command -v "$t" >/dev/null || { echo "profile.sh: $t not found (perf: apt-get install linux-perf; inferno: cargo install inferno)" >&2; exit 1; }
done
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p corelog-server -p corelog-loadgen
  BIN=target/release
fi
mkdir -p "$OUT"
W="$(mktemp -d -p "$PWD/target" profile.XXXX)"
cleanup() { pkill -9 -f -- "--data-dir $W/" 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$W"; }
trap cleanup EXIT
"$BIN/corelog" certs --out "$W/certs" >/dev/null
# shellcheck source=benches/lib.sh
. benches/lib.sh
read -ra cli_tls <<<"$(cl_client_tls "$W/certs")"

for level in $LEVELS; do
  d="$W/$level"; mkdir -p "$d"
  case "$level" in
    one) lg=(--connections 1) ;;
    open2k) lg=(--connections 100 --rate 2000) ;;
    closed1k) lg=(--connections 1000) ;;
    closed9k) lg=(--connections 9000) ;;
    *) echo "unknown level $level" >&2; exit 2 ;;
  esac
  cl_start "$BIN" "$d" "$W/certs" pair
  L=${CL_LEADERS[0]}; F=${CL_FOLLOWERS[0]}
  "$BIN/corelog-loadgen" run --target 127.0.0.1:24400 "${lg[@]}" --duration "$((SECS + 6))s" --quiet \
    --json "$d/lg.json" "${cli_tls[@]}" >/dev/null 2>"$d/lg.err" &
  G=$!
  sleep 4 # connected and warmed up (the load generator's own warm-up is 1 s)
  c0=("$(cl_ticks "$L")" "$(cl_ticks "$F")" "$(cl_ticks "$G")" "$(cl_switches "$L")" "$(cl_switches "$F")")
  a0=$(cl_appends_total)
  t0=$(date +%s.%N)
  pp=()
  for who in leader follower loadgen; do
    case $who in leader) p=$L ;; follower) p=$F ;; loadgen) p=$G ;; esac
    perf record -q -e cpu-clock -F "${PROFILE_HZ:-199}" --call-graph dwarf,16384 -p "$p" -o "$d/$who.data" \
      >"$d/$who.perf.log" 2>&1 &
    pp+=($!)
  done
  sleep "$SECS"
  kill -INT "${pp[@]}"
  wait "${pp[@]}" || true
  t1=$(date +%s.%N)
  c1=("$(cl_ticks "$L")" "$(cl_ticks "$F")" "$(cl_ticks "$G")" "$(cl_switches "$L")" "$(cl_switches "$F")")
  a1=$(cl_appends_total)
  wait "$G" || true
  cl_stop
  for who in leader follower loadgen; do
    perf script -i "$d/$who.data" 2>/dev/null | inferno-collapse-perf | sed "s/^/$who;/"
  done >"$d/flame.folded"
  # Frames under 0.3 px are left out (keeps each SVG to a few hundred KiB).
  inferno-flamegraph --minwidth 0.3 --title "$level: leader, follower, load generator (cpu-clock, $SECS s)" \
    <"$d/flame.folded" >"$OUT/flame-$level.svg"
  python3 benches/stack_shares.py "$d/flame.folded" >"$d/shares.txt"
  kshare() { perf report -i "$d/$1.data" --no-children --sort dso --stdio 2>/dev/null | awk '/kernel.kallsyms/{print $1; exit}'; }
  python3 - "$level" "$d/lg.json" "$t0" "$t1" "$a0" "$a1" "${c0[@]}" "${c1[@]}" "$(kshare leader)" "$(kshare follower)" "$(kshare loadgen)" <<'EOF' | tee -a "$OUT/figures.txt"
import json, os, sys
level, lgf, t0, t1, a0, a1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
c0 = [int(x) for x in sys.argv[7:12]]; c1 = [int(x) for x in sys.argv[12:17]]; ks = sys.argv[17:20]
r = json.load(open(lgf)); hz = os.sysconf("SC_CLK_TCK"); n = max(1, a1 - a0); dt = t1 - t0
us = [(c1[i] - c0[i]) / hz * 1e6 / n for i in range(3)]
print(f"{level}: {n / dt:,.0f} appends/s in the window, p50 {r['p50_us']} µs, p99 {r['p99_us']} µs, errors {r['errors']}; "
      f"CPU µs/append leader {us[0]:.1f} follower {us[1]:.1f} loadgen {us[2]:.1f}; "
      f"context switches/append leader {(c1[3] - c0[3]) / n:.2f} follower {(c1[4] - c0[4]) / n:.2f}; "
      f"kernel share of samples leader {ks[0]} follower {ks[1]} loadgen {ks[2]}")
EOF
  tee -a "$OUT/figures.txt" <"$d/shares.txt"
done
echo "flamegraphs: $OUT/flame-*.svg; figures: $OUT/figures.txt"
