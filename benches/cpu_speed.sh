#!/usr/bin/env bash
# How fast this machine's CPUs run the same user-space work (tls_roundtrip: in-memory
# rustls round trips, no system calls), to compare machines' CPU-per-append figures and a
# machine's CPUs with each other: CPU 0 alone, then one copy on every CPU at once (per
# CPU, and the median), then CPU 0 alone again. Steal time is not visible to the program.
#
# Usage: benches/cpu_speed.sh   (env BIN=dir with tls_roundtrip; default target/release,
#        built here; ROUNDTRIPS=200000 per round)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p corelog-benches --bin tls_roundtrip
  BIN=target/release
fi
[ -x "$BIN/tls_roundtrip" ] || { echo "cpu_speed.sh: $BIN/tls_roundtrip is not built" >&2; exit 2; }
one() { python3 benches/pin.py "$1" "$BIN/tls_roundtrip" | awk '/^round 2/ {print $3}'; }
n=$(nproc)
echo "tls_roundtrip, ns per round trip: CPU 0 alone $(one 0)"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
pids=()
for ((c = 0; c < n; c++)); do one "$c" >"$W/$c" & pids+=($!); done
wait "${pids[@]}"
per=$(for ((c = 0; c < n; c++)); do printf '%s:%s ' "$c" "$(cat "$W/$c")"; done)
med=$(cat "$W"/* | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
echo "tls_roundtrip, ns per round trip: all $n CPUs at once, median $med; CPU:ns $per"
echo "tls_roundtrip, ns per round trip: CPU 0 alone again $(one 0)"
