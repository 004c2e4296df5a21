#!/usr/bin/env bash
# A/B of two revisions on this machine, in one sitting: ABBA rounds of fresh pairs, the
# disk's floor measured first, NEW/OLD ratios with their spread. The orchestration is
# benches/corebench/ab.py (its docstring lists the figures and the environment).
# Usage: benches/ab.sh OLD_REV NEW_REV [SECONDS=10] [ROUNDS=3]
#   env BIG=1 adds closed36k and mem36k; FIGS="closed1k one_repl" picks figures;
#   LOADGEN=new|old; OLD_LEADER_EXTRA / NEW_LEADER_EXTRA: more flags for a side's leader;
#   OLD_SHARDS / NEW_SHARDS: logical shards per node on the same executors.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHONPATH=benches exec python3 -m corebench.ab "$@"
