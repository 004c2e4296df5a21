# shellcheck shell=bash
# Sourced by the bench scripts: starting a local pair or a standalone node, the disk's
# floor and a process's costs, written once. Starting nodes and the floor are the Python
# orchestration's (benches/corebench, which ab.sh runs whole); these are its shell doors.
#
# Ports: leader client 24400, replication 24500, metrics 24600 (+ s for process s);
# follower 25400, 25500, 25600 (+ s). Nodes log to <data dir>.{l,f}<s>.log.

CL_LEADERS=(); CL_FOLLOWERS=()
# The benches folder: the Python half of the orchestration (corebench) lives there.
CL_BENCHES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Server TLS flags of `corelog serve`: $1 certs dir (from `corelog certs`), $2 server|follower.
# CL_INSECURE=1: plaintext on every port instead (`--insecure`; TLS's share of a figure).
cl_tls() {
  if [ "${CL_INSECURE:-0}" = 1 ]; then echo "--insecure"; else echo "--cert $1/$2.pem --key $1/$2.key --client-ca $1/ca.pem"; fi
}
# Client TLS flags of corelog-loadgen: $1 certs dir (CL_INSECURE=1: `--insecure`).
cl_client_tls() {
  if [ "${CL_INSECURE:-0}" = 1 ]; then echo "--insecure"; else echo "--ca $1/ca.pem --cert $1/client.pem --key $1/client.key"; fi
}
# 0 when 127.0.0.1:$1/health answers 200 now (curl, or python where there is none).
cl_health_once() {
  if command -v curl >/dev/null; then curl -sf "http://127.0.0.1:$1/health" >/dev/null
  else python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=2)" 2>/dev/null; fi
}
# Waits up to 30 s for 127.0.0.1:$1/health to answer.
cl_healthy() { cl_healthy_within "$1" 30; }
# Exits the calling script (status 2) unless every binary named after $1 (the script's
# name, for the message) and $2 (the bin dir) is built there.
cl_need_bins() {
  local who=$1 dir=$2 b; shift 2
  for b in "$@"; do
    [ -x "$dir/$b" ] || { echo "$who: $dir/$b is not built (cargo build --release)" >&2; exit 2; }
  done
}
# Appends the leader (metrics port 24600, process 0 of cl_start) has counted.
cl_appends_total() { curl -s http://127.0.0.1:24600/metrics | awk '/^corelog_appends_total/{s += $2} END {print s + 0}'; }
# Starts one bare pair (benches/pair_floor.rs, or pair_floor_glommio.rs for way glommio):
# $1 bin dir, $2 way (uring|pwrite|none|glommio), $3 CPU both are pinned to, $4 the
# leader's port (the follower listens on the next), $5 prefix of their files (<prefix>l.dat,
# <prefix>f.dat). Sets PF_LEADER and PF_FOLLOWER (pids); call it directly, not in $(...).
cl_pair_floor_start() {
  local bin=$1 way=$2 cpu=$3 port=$4 pre=$5 node="$1/pair_floor"
  local fd=(--engine "$way" --file "${pre}f.dat") ld=(--engine "$way" --file "${pre}l.dat")
  [ "$way" = none ] && { fd=(--file none); ld=(--file none); }
  [ "$way" = glommio ] && { fd=(--file "${pre}f.dat"); ld=(--file "${pre}l.dat"); node="$bin/pair_floor_glommio"; }
  taskset -c "$cpu" "$node" follower --listen "127.0.0.1:$((port + 1))" "${fd[@]}" &
  # shellcheck disable=SC2034 # read by the caller
  PF_FOLLOWER=$!
  taskset -c "$cpu" "$node" leader --listen "127.0.0.1:$port" --follower "127.0.0.1:$((port + 1))" "${ld[@]}" &
  # shellcheck disable=SC2034 # read by the caller
  PF_LEADER=$!
}
# utime + stime of a process, in clock ticks.
cl_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# cl_ticks summed over the nodes cl_start started.
cl_server_ticks() { local t=0 p; for p in "${CL_LEADERS[@]}" "${CL_FOLLOWERS[@]}"; do t=$((t + $(cl_ticks "$p"))); done; echo "$t"; }
# Voluntary + involuntary context switches over all threads of a process.
cl_switches() { cat /proc/"$1"/task/*/status | awk '/ctxt_switches/{s += $2} END {print s}'; }

# fio, 4 KiB O_DIRECT writes at queue depth 1 into the 64 MiB file $2/fio for $3 seconds,
# pinned to CPU $1 ("" = unpinned); the remaining arguments pick the engine and the sync
# (default --ioengine=psync --fdatasync=1). Prints "write_p50_us sync_p50_us iops" (sync 0
# when there is no separate sync call): benches/corebench/floor.py.
cl_fio() { PYTHONPATH="$CL_BENCHES" python3 -m corebench.floor "$@" 2>/dev/null; }

# Starts nodes and waits until they answer: $1 bin dir, $2 data dir (the leader's is
# $2/l, the follower's $2/f), $3 certs dir, $4 mode: pair (leader + follower), pair2 (each
# node as 2 processes, one per shard: one process keeps at most open-file limit − 1,024
# ≈ 19,000 client connections), solo (one standalone node). Sets CL_LEADERS and
# CL_FOLLOWERS (pids). Fails if a node exited while another answered on its ports.
cl_start() {
  local out
  out=$(PYTHONPATH="$CL_BENCHES" python3 -m corebench.nodes start "$@") || return 1
  read -ra CL_LEADERS <<<"$(sed -n 's/^leaders: *//p' <<<"$out")"
  read -ra CL_FOLLOWERS <<<"$(sed -n 's/^followers: *//p' <<<"$out")"
}

# Stops what cl_start started (kill -9) and waits until every process has exited.
cl_stop() {
  [ $((${#CL_LEADERS[@]} + ${#CL_FOLLOWERS[@]})) -gt 0 ] || return 0
  PYTHONPATH="$CL_BENCHES" python3 -m corebench.nodes stop "${CL_LEADERS[@]}" "${CL_FOLLOWERS[@]}"
  CL_LEADERS=(); CL_FOLLOWERS=()
}

# The common start of a self-contained bench script: builds the server and the load
# generator (B and L name them), makes the work dir W under target/ ($1: its prefix), and
# at exit kills every pid in PIDS with signal $2 (TERM|KILL) and removes W. $3: what the
# run is, printed after the commit and machine line.
cl_bench_begin() {
  cargo build --release -q -p corelog-server -p corelog-loadgen
  # shellcheck disable=SC2034 # read by the calling script
  B=target/release/corelog
  # shellcheck disable=SC2034
  L=target/release/corelog-loadgen
  W="$(mktemp -d -p target "$1.XXXX")"
  PIDS=(); CL_END_SIGNAL=$2
  trap cl_bench_end EXIT
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), $(nproc) CPUs, $(date -u +%FT%TZ), $3"
}
cl_bench_end() {
  local p
  for p in "${PIDS[@]}"; do kill -"$CL_END_SIGNAL" "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true; rm -rf "$W"
}
# The disk's write + fdatasync IOPS (fio, 4 KiB, QD1, 5 s) into W, printed; nothing without fio.
cl_floor_iops() {
  command -v fio >/dev/null || return 0
  fio --name=floor --directory="$W" --rw=write --bs=4k --size=64m --direct=1 --fdatasync=1 \
    --ioengine=psync --runtime=5 --time_based --output-format=terse 2>/dev/null |
    awk -F';' '{printf "disk floor (fio 4 KiB write+fdatasync, QD1): %.0f IOPS\n", $49}'
}
# Waits up to $2 seconds (default 30) for 127.0.0.1:$1/health to answer 200, polling every 10 ms.
cl_healthy_within() {
  local i
  for ((i = 0; i < ${2:-30} * 100; i++)); do cl_health_once "$1" && return 0; sleep 0.01; done
  echo "no health on :$1" >&2; return 1
}
