#!/usr/bin/env bash
# benches/client-history.sh — the client-side history tests (docs/protocol.md §6) at
# bench size: each client (Python blocking, Python asyncio, Rust) runs its history test
# until FAULTS kill -9 faults (and, for Python, cancellation storms) were made or SECONDS
# passed, per cluster kind, and checks every reported outcome against the log.
#   FAULTS=200 SECONDS=900 bash benches/client-history.sh
# Env: CORELOG_BIN (default target/release/corelog), FAULTS (default 200 per test),
# SECONDS_MAX (default 900 per test). Exit status non-zero on any contradiction.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export CORELOG_BIN="${CORELOG_BIN:-$REPO/target/release/corelog}"
export CORELOG_HISTORY_FAULTS="${FAULTS:-200}"
export CORELOG_HISTORY_SECONDS="${SECONDS_MAX:-900}"
echo "=== Rust client: $CORELOG_HISTORY_FAULTS faults (at most $CORELOG_HISTORY_SECONDS s)"
cargo test --release -p corelog-client --test history outcomes_hold -- --nocapture 2>&1 | grep -E "rust history|test result|contradict|reported"
echo "=== Python clients (blocking and asyncio; static pair and coordinator mode)"
PYTEST_ARGS="-k test_history_under_faults -s" bash client/python/tests/run.sh 2>&1 | grep -E "^history|passed|failed|contradict"
