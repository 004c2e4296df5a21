"""Client-side history tests (docs/protocol.md §6): the blocking and the asyncio client
under kill -9 of the leader, the follower, both, coordinator failover and cancellation
storms; every reported outcome checked against the log read back (history.py).

CI runs a few faults per test; benches/client-history.sh runs >= 200 per client
(``CORELOG_HISTORY_FAULTS``, bounded by ``CORELOG_HISTORY_SECONDS``)."""

from __future__ import annotations

import os
import random
import sys

import pytest

from conftest import Pair
from history import AioWorkload, History, SyncWorkload, run_history

FAULTS = int(os.environ.get("CORELOG_HISTORY_FAULTS", "8"))
SECONDS = float(os.environ.get("CORELOG_HISTORY_SECONDS", "25"))


@pytest.mark.parametrize("mode", ["static", "coordinator"])
@pytest.mark.parametrize("api", ["aio", "sync"])
def test_history_under_faults(api: str, mode: str, make_pair, make_coord) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("CORELOG_HISTORY_SEED") or random.randrange(1 << 32))
    if mode == "static":
        cluster = make_pair(leader_extra=("--ack-timeout-ms", "1000"))
    else:
        cluster = make_coord()
    h = History()
    make = AioWorkload if api == "aio" else SyncWorkload
    summary = run_history(cluster, make(cluster.addrs, str(cluster.certs), h), FAULTS, SECONDS, seed)
    print(f"history {api}/{mode}: {summary}", file=sys.stderr)
