#!/usr/bin/env bash
# End-to-end sweep on this machine, and the peers, written up in docs/results/<date>.md.
#
#   benches/sweep.sh            full run: closed loop 1k,4k,9k,18k,36k (+ open loop,
#                               PostgreSQL sync standby at 100 and 1000 clients, ABBA,
#                               NATS JetStream R3 at 100 if built, flamegraphs from a separate
#                               profiled run at 36k)
#   benches/sweep.sh --quick    a few minutes: small steps, 1 repetition, no peers/profile
#
# What it does: builds release; generates certs; starts a leader and a follower, each as
# two processes (--shards 0 / --shards 1 of --shard-count 2) sharing one SO_REUSEPORT
# client port (the open-file limit is 20,000 per process; 36k connections need two);
# runs `corelog-loadgen sweep` (which spawns ≤ 9,000 connections per load-generator
# process and cross-checks acks against the leader's and follower's counters after each
# step); compares with the peers; stops the nodes and verifies both data directories
# with `corelog inspect` (same record count and digest per shard, equal to the acks).
#
# Knobs (environment): STEPS, WARMUP, DURATION, COOLDOWN, SWEEP_REPS (runs per sweep step),
# REPS (runs per system in the peer comparison, ABBA order), OPEN_RATE / OPEN_STEPS (open
# loop; OPEN_RATE= to skip), PEERS (e.g. "pg nats", or none), PEER_CLIENTS ("100 1000"),
# NATS_CLIENTS ("100"), PEER_SECS, PROFILE_AT (connections to profile at; empty: none),
# PROFILE_SECS, PROFILE_CALLGRAPH (perf --call-graph; default dwarf: Rust release builds
# have no frame pointers, so fp stacks stop at the first Rust frame), WORK (scratch dir), OUT (results dir), MAX_PER_PROC, LOADGEN_ARGS (extra
# flags for every `corelog-loadgen sweep`, e.g. "--ring-depth 128").
# Placement (a machine with more cores, e.g. benches/device_sweep.sh): SHARDS (processes
# per node, one shard each; default 2), LEADER_CPUS / FOLLOWER_CPUS / LOADGEN_CPUS (taskset
# CPU lists: each node's shards are pinned inside its list, the load generators run in
# theirs; default unpinned lists, i.e. shard s of both nodes on CPU s), BIN_DIR (prebuilt
# corelog and corelog-loadgen: no cargo build), REV (the commit named in the write-up).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

QUICK=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --reps) REPS=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --peers) PEERS=$2; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ $QUICK = 1 ]; then
  : "${STEPS:=100,1k}" "${WARMUP:=1s}" "${DURATION:=3s}" "${COOLDOWN:=1s}" "${REPS:=1}"
  : "${OPEN_STEPS:=1k}" "${OPEN_RATE:=5000}" "${PEERS:=none}" "${PROFILE_AT:=}" "${PEER_SECS:=5}"
fi
: "${STEPS:=1k,4k,9k,18k,36k}" "${WARMUP:=5s}" "${DURATION:=20s}" "${COOLDOWN:=5s}"
: "${SWEEP_REPS:=1}" "${REPS:=3}" "${OPEN_RATE=20000}" "${OPEN_STEPS:=1k,9k,36k}"
: "${PEERS=pg nats}" "${PEER_CLIENTS:=100 1000}" "${NATS_CLIENTS:=100}" "${PEER_SECS:=15}"
: "${PROFILE_AT-36000}" "${PROFILE_SECS:=10}" "${MAX_PER_PROC:=9000}"
PROFILE_AT=${PROFILE_AT-36000}
: "${WORK:=/tmp/corelog-sweep}" "${OUT:=$ROOT/docs/results}"
DATE=$(date -u +%Y-%m-%d)
[ $QUICK = 1 ] && DATE="$DATE-quick"

log() { echo "sweep.sh: $*" >&2; }

: "${SHARDS:=2}" "${LEADER_CPUS:=}" "${FOLLOWER_CPUS:=}" "${LOADGEN_CPUS:=}" "${BIN_DIR:=}"
[ "$SHARDS" -ge 1 ] && [ "$SHARDS" -le 50 ] || { log "SHARDS must be 1..50 (ports: see below)"; exit 2; }
: "${REV:=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
if [ -z "$BIN_DIR" ]; then
  log "building release"
  cargo build --release -p corelog-loadgen -p corelog-server >&2
  BIN_DIR=$ROOT/target/release
fi
rm -rf "$WORK"; mkdir -p "$WORK/out" "$WORK/bin" "$OUT"
# Private copies: a rebuild of target/ during the run must not swap the binaries under
# the measurement (or under perf's symbol lookup).
cp "$BIN_DIR/corelog" "$BIN_DIR/corelog-loadgen" "$WORK/bin/"
# The command prefix that pins to a CPU list (taskset, or benches/pin.py where there is
# none), nothing for none.
pin() {
  [ -n "$1" ] || return 0
  if command -v taskset >/dev/null; then echo "taskset -c $1"; else echo "python3 $ROOT/benches/pin.py $1"; fi
}
# shellcheck source=benches/lib.sh
. benches/lib.sh   # cl_health_once
CORELOG=$WORK/bin/corelog
LOADGEN=$WORK/bin/corelog-loadgen
log "binaries: $(sha256sum "$CORELOG" | cut -c1-12) corelog, $(sha256sum "$LOADGEN" | cut -c1-12) corelog-loadgen; tree $REV$(git diff --quiet HEAD -- server client loadgen 2>/dev/null || echo ' (or uncommitted changes / no git)')"
$CORELOG certs --out "$WORK/certs" >/dev/null
C=$WORK/certs

# Ports: client 19400 (leader) / 19500 (follower), shard s also on port+1+s;
# replication base 19600 / 19700 (+s); metrics leader 19800+2s, follower 19801+2s.
SHARD_IDS=$(seq 0 $((SHARDS - 1)))
LEADER_METRICS=$(for s in $SHARD_IDS; do echo "127.0.0.1:$((19800 + 2 * s))"; done | paste -sd,)
FOLLOWER_METRICS=$(for s in $SHARD_IDS; do echo "127.0.0.1:$((19801 + 2 * s))"; done | paste -sd,)
PIDS_LEADER=(); PIDS_FOLLOWER=()
stop_nodes() {
  for p in "${PIDS_LEADER[@]}" "${PIDS_FOLLOWER[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS_LEADER[@]}" "${PIDS_FOLLOWER[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  PIDS_LEADER=(); PIDS_FOLLOWER=()
}
# While a peer runs, the corelog nodes are frozen (SIGSTOP) so that they take no CPU
# from it (an idle node is not free: see the results), and thawed for corelog's turn.
freeze_nodes() { for p in "${PIDS_LEADER[@]}" "${PIDS_FOLLOWER[@]}"; do kill -STOP "$p" 2>/dev/null || true; done; }
thaw_nodes() { for p in "${PIDS_LEADER[@]}" "${PIDS_FOLLOWER[@]}"; do kill -CONT "$p" 2>/dev/null || true; done; }
trap 'thaw_nodes; stop_nodes' EXIT

# Starts shard $2's process of node $1 (leader|follower) in the background ($! is its pid).
serve_shard() {
  local role=$1 s=$2 cpus=$LEADER_CPUS cert=server metrics=$((19800 + 2 * $2))
  local ports=(--listen 127.0.0.1:19400 --repl-listen 127.0.0.1:19600 --follower-addr 127.0.0.1:19700)
  if [ "$role" = follower ]; then
    cpus=$FOLLOWER_CPUS cert=follower metrics=$((19801 + 2 * s))
    ports=(--listen 127.0.0.1:19500 --repl-listen 127.0.0.1:19700 --leader-addr 127.0.0.1:19400)
  fi
  # shellcheck disable=SC2046 # pin's prefix is meant to split
  $(pin "$cpus") "$CORELOG" serve --role "$role" --shard-count "$SHARDS" --shards "$s" --data-dir "$WORK/$role" \
    "${ports[@]}" --cert "$C/$cert.pem" --key "$C/$cert.key" --client-ca "$C/ca.pem" \
    --metrics-listen "127.0.0.1:$metrics" --segment-bytes 67108864 >"$WORK/$role-$s.log" 2>&1 &
}

start_nodes() {
  for s in $SHARD_IDS; do serve_shard follower "$s"; PIDS_FOLLOWER+=($!); done
  for s in $SHARD_IDS; do serve_shard leader "$s"; PIDS_LEADER+=($!); done
  for port in ${LEADER_METRICS//,/ } ${FOLLOWER_METRICS//,/ }; do
    port=${port#127.0.0.1:}
    for i in $(seq 120); do
      cl_health_once "$port" && break
      [ "$i" = 120 ] && { log "node on metrics port $port not healthy"; tail -5 "$WORK"/*.log; exit 1; }
      sleep 0.5
    done
  done
  # The replication links come up a moment after health.
  sleep 2
  log "nodes up: leader pids ${PIDS_LEADER[*]}, follower pids ${PIDS_FOLLOWER[*]}"
}

start_nodes
ALL_PIDS=$(IFS=,; echo "${PIDS_LEADER[*]},${PIDS_FOLLOWER[*]}")
LEADER_PIDS=$(IFS=,; echo "${PIDS_LEADER[*]}"); FOLLOWER_PIDS=$(IFS=,; echo "${PIDS_FOLLOWER[*]}")
export LEADER_PIDS FOLLOWER_PIDS
export PROFILE_AT PROFILE_SECS PROFILE_DIR=$WORK/profile PROFILE_CALLGRAPH=${PROFILE_CALLGRAPH:-dwarf,16384}

sweep() { # name steps extra-args...
  local name=$1 steps=$2; shift 2
  $(pin "$LOADGEN_CPUS") $LOADGEN sweep --target 127.0.0.1:19400 --steps "$steps" --warmup "$WARMUP" --duration "$DURATION" \
    --cooldown "$COOLDOWN" --max-conns-per-process "$MAX_PER_PROC" --server-pids "$ALL_PIDS" \
    --leader-metrics "$LEADER_METRICS" --follower-metrics "$FOLLOWER_METRICS" \
    --ca $C/ca.pem --cert $C/client.pem --key $C/client.key --out "$WORK/out" --name "$name" ${LOADGEN_ARGS:-} "$@"
}

STATUS=0
HOOK=()
[ -n "$PROFILE_AT" ] && HOOK=(--hook-window "$ROOT/benches/perf_hook.sh")
log "closed-loop sweep: steps $STEPS, window $DURATION, $SWEEP_REPS run(s) per step"
sweep closed "$STEPS" --repeat "$SWEEP_REPS" | tee "$WORK/out/closed.txt" || STATUS=1
if [ -n "$PROFILE_AT" ]; then
  # A run of its own: perf with DWARF stacks takes CPU from a CPU-bound run, so inside a
  # measured window it would move that step's figures (until 2026-11-25 it sampled the
  # last closed step's window). Its figures are cross-checked but not reported.
  log "profiled run at $PROFILE_AT connections (not in the tables)"
  sweep profile "$PROFILE_AT" --repeat 1 "${HOOK[@]}" >"$WORK/out/profile.txt" || STATUS=1
fi
if [ -n "$OPEN_RATE" ]; then
  log "open-loop sweep at $OPEN_RATE appends/s: steps $OPEN_STEPS"
  sweep open "$OPEN_STEPS" --rate "$OPEN_RATE" --repeat "$SWEEP_REPS" | tee "$WORK/out/open.txt" || STATUS=1
fi

# Peers, ABBA: A = corelog, B = peer; 2*REPS runs per client count in the order
# A B B A A B ..., throughput the minimum and latency the maximum of each side.
abba() { local j=$1; [ $(( ((j + 1) / 2) % 2 )) = 0 ] && echo A || echo B; }
PEER_ROWS=$WORK/out/peers.tsv
: > "$PEER_ROWS"
run_peer() { # kind clients idx
  local kind=$1 n=$2 j=$3 f="$WORK/out/peer-$1-$2-$3.log"
  case $kind in
    pg) WORK=$WORK/peer bash /work/shared/peers/postgres_sync_standby.sh "$n" "${PEER_SECS%s}" >"$f" 2>&1 || true
        local tps lat
        tps=$(grep -oE 'tps = [0-9.]+' "$f" | head -1 | awk '{print $3}')
        lat=$(grep -oE 'latency average = [0-9.]+ ms' "$f" | head -1 | awk '{print $4}')
        printf 'pg\t%s\t%s\t%s\t%s\t-\t-\n' "$n" "$j" "${tps:-0}" "${lat:--}" >>"$PEER_ROWS" ;;
    nats) WORK=$WORK/peer bash /work/shared/peers/nats_jetstream_r3.sh "$n" "${PEER_SECS%s}" >"$f" 2>&1 || true
        local line; line=$(grep -E '^conns=' "$f" | tail -1)
        local rate p50 p99
        rate=$(echo "$line" | grep -oE 'rate=[0-9.]+' | cut -d= -f2)
        p50=$(echo "$line" | grep -oE 'p50=[^ ]+' | cut -d= -f2)
        p99=$(echo "$line" | grep -oE 'p99=[^ ]+' | cut -d= -f2)
        printf 'nats\t%s\t%s\t%s\t-\t%s\t%s\n' "$n" "$j" "${rate:-0}" "${p50:--}" "${p99:--}" >>"$PEER_ROWS" ;;
  esac
}
compare() { # kind clients
  local kind=$1 n=$2
  for j in $(seq 0 $((2 * REPS - 1))); do
    if [ "$(abba "$j")" = A ]; then
      log "compare $kind at $n: corelog (run $j)"
      WARMUP=2s DURATION=${PEER_SECS} COOLDOWN=2s sweep "cmp-$kind-$n-$j" "$n" >"$WORK/out/cmp-$kind-$n-$j.txt" || STATUS=1
    else
      log "compare $kind at $n: $kind (run $j)"
      freeze_nodes
      run_peer "$kind" "$n" "$j"
      thaw_nodes
    fi
  done
}
for p in $PEERS; do
  case $p in
    pg) command -v pgbench >/dev/null || [ -x /usr/lib/postgresql/15/bin/postgres ] || { log "no PostgreSQL; skipping"; continue; }
        for n in $PEER_CLIENTS; do compare pg "$n"; done ;;
    nats) PEERBIN=${PEERBIN:-/tmp/peers/bin}; export PEERBIN
          if [ ! -x "$PEERBIN/nats-server" ] && [ "${BUILD_NATS:-1}" = 1 ]; then
            log "building the NATS peer"; bash /work/shared/peers/build_nats.sh >"$WORK/out/build_nats.log" 2>&1 || true
          fi
          [ -x "$PEERBIN/nats-server" ] || { log "no nats-server; skipping NATS"; continue; }
          for n in $NATS_CLIENTS; do compare nats "$n"; done ;;
    none) ;;
  esac
done

thaw_nodes
log "stopping nodes; verifying both data directories"
stop_nodes
$CORELOG inspect "$WORK/leader" >"$WORK/out/inspect-leader.txt" || STATUS=1
$CORELOG inspect "$WORK/follower" >"$WORK/out/inspect-follower.txt" || STATUS=1

# Flamegraphs (inferno: cargo install inferno).
FLAMES=()
if [ -d "$WORK/profile" ] && ! command -v inferno-flamegraph >/dev/null; then
  log "no flamegraphs: inferno-flamegraph not found (cargo install inferno); perf data in $WORK/profile"
elif [ -d "$WORK/profile" ]; then
  for who in leader follower loadgen; do
    d=$WORK/profile/$who.perf.data
    [ -s "$d" ] || continue
    perf script -i "$d" 2>/dev/null | inferno-collapse-perf >"$WORK/profile/$who.folded" || continue
    inferno-flamegraph --title "$who at $PROFILE_AT connections (cpu-clock)" <"$WORK/profile/$who.folded" \
      >"$OUT/$DATE-flame-$who.svg" && FLAMES+=("$who")
  done
fi

LAYOUT="Leader ($SHARDS processes, one shard each${LEADER_CPUS:+, on CPUs $LEADER_CPUS}), follower ($SHARDS processes${FOLLOWER_CPUS:+, on CPUs $FOLLOWER_CPUS}) and load generators${LOADGEN_CPUS:+ (on CPUs $LOADGEN_CPUS)} all on this one machine"
DISK="$(findmnt -n -o FSTYPE -T "$WORK" 2>/dev/null || echo '?') on $(findmnt -n -o SOURCE -T "$WORK" 2>/dev/null || echo '?')"
python3 "$ROOT/benches/write_results.py" --work "$WORK" --out "$OUT" --date "$DATE" --rev "$REV" --layout "$LAYOUT" --disk "$DISK" \
  --flames "${FLAMES[*]:-}" --reps "$REPS" --config "SHARDS=$SHARDS LEADER_CPUS=$LEADER_CPUS FOLLOWER_CPUS=$FOLLOWER_CPUS LOADGEN_CPUS=$LOADGEN_CPUS STEPS=$STEPS WARMUP=$WARMUP DURATION=$DURATION COOLDOWN=$COOLDOWN SWEEP_REPS=$SWEEP_REPS REPS=$REPS OPEN_RATE=$OPEN_RATE OPEN_STEPS=$OPEN_STEPS PEERS='$PEERS' PEER_CLIENTS='$PEER_CLIENTS' PEER_SECS=$PEER_SECS MAX_PER_PROC=$MAX_PER_PROC" \
  || STATUS=1
log "results: $OUT/$DATE.md (status $STATUS)"
exit $STATUS
