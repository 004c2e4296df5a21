#!/usr/bin/env bash
# One connection against the disk's floor, CPU by CPU.
#
#   bash benches/floor_by_cpu.sh [ROUNDS]      (BIN=target/release by default)
#
# A durable 4 KiB write costs a different time on each CPU when the disk's completion
# interrupts all land on one CPU (a single-queue virtio disk: this machine kind's
# `virtio1-req.0` is served by vCPU 1): a writer on another CPU is woken from there.
# An unpinned fio migrates to the interrupt's CPU; a corelog shard is pinned to its CPU
# and serves the connections whose SYN that CPU handled (SO_INCOMING_CPU: on loopback,
# the client's CPU). So the floor a one-connection figure is compared with must be
# measured on the CPU of the shard that served it. This script measures, alternating:
#
# - fio, 4 KiB O_DIRECT write + fdatasync (psync, QD1), and 4 KiB O_DIRECT|O_DSYNC
#   writes through io_uring (corelog's own path), pinned to each CPU and unpinned;
# - corelog, one connection, standalone and replicated (leader and follower, two shards
#   each), the load generator pinned to each CPU (so the connection lands on that
#   CPU's shard: checked against the shards' end offsets);
# - the same replicated connection without corelog (benches/pair_floor.sh, PAIRS=1
#   CONNS=1 RATE=0: a bare leader, follower and client on that CPU, plain TCP, the
#   writes through io_uring as corelog's, no TLS or runtime).
#
# It prints medians over the rounds, each one-connection p50 over the same CPU's fio
# floor (write + fdatasync p50s), and corelog's replicated p50 over the bare pair's.
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-3}
BIN=${BIN:-target/release}
command -v fio >/dev/null || { echo "floor_by_cpu: fio is not installed (apt-get install fio)" >&2; exit 2; }
# shellcheck source=benches/lib.sh
. benches/lib.sh
cl_need_bins floor_by_cpu "$BIN" corelog corelog-loadgen pair_floor
NCPU=$(nproc)
W=$(mktemp -d -p "$PWD/target" floor.XXXX)
cleanup() { cl_stop; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT

irq=$(awk '/virtio.*req|nvme/ { best = 0; cpu = -1; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) if ($i > best) { best = $i; cpu = i - 2 } print cpu, $NF }' /proc/interrupts | head -n 3 | tr '\n' ';')
echo "$(date -u +%FT%TZ), $NCPU CPUs, $R rounds; disk queue interrupts (busiest CPU, queue): ${irq:-none found}"

# $1 cpu ("" = unpinned), then fio engine args → prints the write + sync p50s in µs.
fio_p50() { cl_fio "$1" "$W" 4 "${@:2}" | awk '{ printf "%.1f\n", $1 + $2 }'; }

"$BIN/corelog" certs --out "$W/certs" >/dev/null
read -ra cli_tls <<<"$(cl_client_tls "$W/certs")"

one_conn() { # $1 solo|repl, $2 cpu → appends "MODE CPU p50_us shard" to the rows
  local mode=$1 cpu=$2 d="$W/run"
  local how=solo; [ "$mode" = repl ] && how=pair
  cl_start "$BIN" "$d" "$W/certs" "$how" || exit 1
  timeout 120 "$BIN/corelog-loadgen" run --target 127.0.0.1:24400 --connections 1 --duration 5s --warmup 1s --quiet \
    --cores 1 --first-cpu "$cpu" --json "$W/lg.json" "${cli_tls[@]}" >"$W/lg.out" 2>&1 || { echo "load generator failed: $(tail -n 3 "$W/lg.out")" >&2; exit 1; }
  local shard
  shard=$(curl -sf http://127.0.0.1:24600/metrics | awk -F'"' '/^corelog_log_end_offset\{/ { split($3, v, " "); if (v[2] > 0) printf "%s", $2 }')
  cl_stop
  rm -rf "$d" "$d".*.log
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['errors'] == 0, r; print(sys.argv[2], sys.argv[3], r['p50_us'], sys.argv[4])" \
    "$W/lg.json" "$mode" "$cpu" "${shard:-?}" >>"$W/rows"
}

: >"$W/rows"
for ((r = 1; r <= R; r++)); do
  for ((c = 0; c < NCPU; c++)); do
    echo "fio_pair $c $(fio_p50 "$c" --ioengine=psync --fdatasync=1)" >>"$W/rows"
    echo "fio_uring $c $(fio_p50 "$c" --ioengine=io_uring --sync=dsync)" >>"$W/rows"
    one_conn solo "$c"
    one_conn repl "$c"
    PAIRS=1 CONNS=1 RATE=0 SECS=5 FIRST_CPU="$c" MODES=uring BIN="$BIN" bash benches/pair_floor.sh 1 >"$W/bare.out" ||
      { echo "pair_floor failed: $(tail -n 3 "$W/bare.out")" >&2; exit 1; }
    echo "bare $c $(awk '/^P50/ {print $2}' "$W/bare.out")" >>"$W/rows"
  done
  echo "fio_pair any $(fio_p50 "" --ioengine=psync --fdatasync=1)" >>"$W/rows"
  echo "fio_uring any $(fio_p50 "" --ioengine=io_uring --sync=dsync)" >>"$W/rows"
  echo "round $r done" >&2
done

python3 - "$W/rows" <<'EOF'
import statistics as st, sys
rows = {}
shards = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault((f[0], f[1]), []).append(float(f[2]))
    if len(f) > 3:
        shards.setdefault((f[0], f[1]), set()).add(f[3])
med = {k: st.median(v) for k, v in rows.items()}
cpus = sorted({c for (_, c) in rows if c != "any"}, key=int) + ["any"]
print(f"\n{'CPU':>4} {'fio write+fdatasync':>20} {'fio io_uring O_DSYNC':>21} {'solo p50':>9} {'/floor':>7} {'repl p50':>9} {'/floor':>7}"
      f" {'bare p50':>9} {'/floor':>7} {'repl/bare':>9}  shard served")
for c in cpus:
    fl = med.get(("fio_pair", c))
    cells = [f"{c:>4}", f"{fl:>17.1f} µs", f"{med[('fio_uring', c)]:>18.1f} µs"]
    for m in ("solo", "repl", "bare"):
        if (m, c) in med:
            cells += [f"{med[(m, c)]:>6.0f} µs", f"{med[(m, c)] / fl:>6.2f}×"]
        else:
            cells += [f"{'-':>9}", f"{'-':>7}"]
    cells.append(f"{med[('repl', c)] / med[('bare', c)]:>8.2f}×" if ("bare", c) in med else f"{'-':>9}")
    sh = ",".join(sorted(shards.get(("solo", c), set()) | shards.get(("repl", c), set()))) or "-"
    print(" ".join(cells) + f"  {sh}")
print(f"\nmedians of {min(len(v) for v in rows.values())} runs each; /floor: over the same CPU's fio write+fdatasync; the 'any' row is fio unpinned (what benches/ab.sh measures);"
      "\nbare: a replicated connection without corelog on that CPU (benches/pair_floor.sh PAIRS=1 CONNS=1 RATE=0)")
EOF
