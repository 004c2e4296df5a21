#!/usr/bin/env bash
# The long crash loop: N kill -9 at random moments under load (default 300), then every
# acknowledged append is read back and `corelog inspect` must report a sound log.
# Usage: server/tests/crash-loop.sh [N]     (the suite runs the same test with N = 20)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
CORELOG_CRASH_LOOPS="${1:-300}" cargo test --release -p corelog-server --test durability crash_loop_long -- --ignored --nocapture
