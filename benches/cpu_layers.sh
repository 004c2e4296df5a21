#!/usr/bin/env bash
# Where a replicated append's CPU goes at 2,000 appends/s over 100 connections (ab.sh's
# open2k), layer by layer, alternating in one sitting:
#   bare     benches/pair_floor.sh's leader and follower (plain TCP, blocking calls, the
#            write through io_uring; no runtime, TLS or corelog code)
#   glommio  the same leader and follower on corelog's runtime (pair_floor_glommio)
#   plain    corelog, a local leader + follower, `--insecure` (no TLS)
#   corelog  corelog as shipped (mTLS on both links)
# Each: server CPU µs per acknowledged append (leader + follower utime + stime from
# /proc), placed as open2k places corelog (both pair_floor pairs and corelog's shards
# pinned shard s → CPU s). Prints each round, then the medians and each layer's share.
#
# Usage: benches/cpu_layers.sh [ROUNDS=3]   (env SECS=6 per run; BIN=target/release)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
R="${1:-3}"; SECS="${SECS:-6}"; BIN="${BIN:-target/release}"
# shellcheck source=benches/lib.sh
. benches/lib.sh
cl_need_bins cpu_layers "$BIN" corelog corelog-loadgen pair_floor pair_floor_glommio
mkdir -p target
W=$(mktemp -d -p "$PWD/target" layers.XXXX)
cleanup() { cl_stop; rm -rf "$W"; }
trap cleanup EXIT
"$BIN/corelog" certs --out "$W/certs" >/dev/null
hz=$(getconf CLK_TCK)

corelog_run() { # $1 = 1 for --insecure → prints server CPU µs per acked append
  local d="$W/run" t0 t1 cli
  CL_INSECURE=$1 cl_start "$BIN" "$d" "$W/certs" pair || exit 1
  read -ra cli <<<"$(CL_INSECURE=$1 cl_client_tls "$W/certs")"
  t0=$(cl_server_ticks)
  timeout 120 "$BIN/corelog-loadgen" run --target 127.0.0.1:24400 --connections 100 --rate 2000 --duration "${SECS}s" \
    --quiet --json "$d.json" "${cli[@]}" >/dev/null 2>"$d.lg" || { echo "load generator failed: $(tail -n 3 "$d.lg")" >&2; exit 1; }
  t1=$(cl_server_ticks)
  cl_stop
  # The ticks cover the whole run (connecting, warm-up, window): so does acked_total.
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['errors'] == 0, r
print('%.1f' % (($t1 - $t0) / $hz * 1e6 / max(1, r['acked_total'])))" "$d.json"
  rm -rf "$d" "$d".*
}

echo "CPU per append by layer, 2,000 appends/s over 100 connections, ${SECS}-s runs, $R rounds, $(date -u +%FT%TZ)"
: >"$W/rows"
for ((r = 1; r <= R; r++)); do
  order=(bare glommio plain corelog); [ $((r % 2)) = 0 ] && order=(corelog plain glommio bare)
  for l in "${order[@]}"; do
    case $l in
      bare | glommio)
        m=uring; [ "$l" = glommio ] && m=glommio
        v=$(MODES=$m SECS="$SECS" BIN="$BIN" bash benches/pair_floor.sh 1 | awk '/^FLOOR/ {print $2}') ;;
      plain) v=$(corelog_run 1) ;;
      corelog) v=$(corelog_run 0) ;;
    esac
    [ -n "$v" ] || { echo "cpu_layers: no figure for $l" >&2; exit 1; }
    echo "round $r $l: $v µs/append"
    echo "$l $v" >>"$W/rows"
  done
done
python3 - "$W/rows" <<'PY'
import statistics as st, sys
v = {}
for line in open(sys.argv[1]):
    k, x = line.split(); v.setdefault(k, []).append(float(x))
m = {k: st.median(x) for k, x in v.items()}
print("\nmedian server CPU µs/append (and what each layer adds):")
prev = None
for k, what in (("bare", "the work itself"), ("glommio", "the runtime"), ("plain", "corelog's code"), ("corelog", "TLS")):
    add = "" if prev is None else f"   +{m[k] - m[prev]:.1f} µs ({what})"
    print(f"  {k:8s} {m[k]:6.1f}  = {m[k] / m['bare']:.2f}× bare  [{min(v[k]):.1f}, {max(v[k]):.1f}]{add}")
    prev = k
PY
