#!/usr/bin/env bash
# Automatic failover, measured: the leader-SIGKILL test of server/tests/failover.rs with
# TRIALS trials (default 20), release build. Each trial: etcd + two coordinator-mode
# nodes (mTLS, loopback, 2 shards), 100 closed-loop connections, kill -9 of the leader
# after ~2 s, ~3 s more load, the old leader restarted (rejoins as follower, catches up);
# then every operation is checked against the new leader's log (and with Porcupine when
# `go` is on PATH). Prints each trial's write-unavailability window (from the old
# leader's last acknowledgement to the new leader's first, epochs from the read-back;
# the largest gap between any two acks of the trial beside it) and p50/max over trials.
# Usage: benches/failover.sh [TRIALS]    (full output in target/failover-bench.log)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TRIALS="${1:-20}"
case "$TRIALS" in '' | *[!0-9]* | 0) echo "usage: $0 [TRIALS>0]" >&2; exit 2 ;; esac
command -v etcd >/dev/null || { echo "etcd not installed: apt-get install etcd-server" >&2; exit 2; }
command -v go >/dev/null || echo "note: go not on PATH: the Porcupine check is skipped" >&2
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), $(nproc) CPUs, $(date -u +%FT%TZ), $TRIALS trials"
cargo build --release -q -p corelog-server
mkdir -p target
set +e
CORELOG_FAILOVER_TRIALS="$TRIALS" cargo test --release -q -p corelog-server --test failover -- \
  --exact leader_sigkill_under_load_fails_over_and_loses_nothing --nocapture >target/failover-bench.log 2>&1
rc=$?
set -e
grep -E "^(trial [0-9]+:|failover over|porcupine: NOT)|cross-check FAILED|SPLIT BRAIN|panicked" target/failover-bench.log || true
if [ "$rc" -ne 0 ]; then
  echo "FAILED (exit $rc): see target/failover-bench.log" >&2
  exit "$rc"
fi
