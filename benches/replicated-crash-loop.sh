#!/usr/bin/env bash
# The long replicated crash loop (docs/results/2026-11-22-replicated-crash-loop.md):
# N leader kills (default 1000) under pipelined load with the follower also killed,
# restarted late or frozen, then promotion of the follower, read-back of every
# acknowledged append, `inspect --compare` of both data dirs and a rejoin of the old
# leader. The suite runs the same test with N = 30.
# Usage: benches/replicated-crash-loop.sh [N] [SEED]    (output also in target/replicated-crash-loop.log)
# Env: CORELOG_CRASH_LAYOUT=L/E runs L shards (≤ 8) on E executors per node (default 2/2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CORELOG_REPL_KILLS="${1:-1000}"
[ -n "${2:-}" ] && export CORELOG_SEED="$2"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty'), $(nproc) CPUs, $(date -u +%FT%TZ)"
cargo test --release -p corelog-server --test replicated_crash_loop -- --nocapture 2>&1 |
  tee target/replicated-crash-loop.log | grep -E "^(replicated crash loop|history|sealed segments|test result)|panicked|DIFFER|DIVERGED"
