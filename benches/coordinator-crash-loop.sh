#!/usr/bin/env bash
# The replicated crash loop in coordinator mode (server/tests/coordinator_crash_loop.rs)
# with N faults (default 200): under one recorded 100-connection workload, the leader,
# the follower or both SIGKILLed at random moments and restarted (at once, after the
# take-over, after degrading, in a random order); at the end every acknowledged append
# read back from the leader, epoch order, Porcupine, and both logs equal. The suite runs
# the same test with N = 10.
# Usage: benches/coordinator-crash-loop.sh [N] [SEED]    (output also in target/coordinator-crash-loop.log)
# Env: CORELOG_CRASH_LAYOUT=L/E runs L shards (≤ 8) on E executors per node (default 2/2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CORELOG_COORD_KILLS="${1:-200}"
[ -n "${2:-}" ] && export CORELOG_SEED="$2"
command -v etcd >/dev/null || { echo "etcd not installed: apt-get install etcd-server" >&2; exit 2; }
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), $(nproc) CPUs, $(date -u +%FT%TZ)"
mkdir -p target
cargo test --release -p corelog-server --test coordinator_crash_loop -- --nocapture 2>&1 |
  tee target/coordinator-crash-loop.log | grep -E "^(coordinator crash loop|porcupine|sealed segments|test result)|panicked|FAILED|SPLIT BRAIN"
