"""What the client reports about an append is true (docs/protocol.md §6): outcomes over
all attempts, cancellation, stream appends across failover, configuration and argument
errors, tail positions, logging and docstrings (issue 39, items 1-6)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, List

import pytest

import corelog
import corelog.aio

from conftest import PKG, Pair, uniq

# Strings and looked-up names, so that the module also loads and runs against older
# clients (to show what they got wrong): a name they lack matches no exception.
WRITTEN, NOT_WRITTEN, UNKNOWN = "written", "not_written", "unknown"
Absent = type("Absent", (Exception,), {})
ConfigError = getattr(corelog, "ConfigError", Absent)
ClientClosed = getattr(corelog, "ClientClosed", Absent)
Cancelled = getattr(corelog, "Cancelled", Absent)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


def stored(p: Pair, payloads: List[bytes]) -> set:
    """Which of ``payloads`` are in the log (after a barrier append per shard)."""
    want = set(payloads)

    async def go() -> set:
        async with corelog.aio.Client(p.addrs, certs=str(p.certs), failover_timeout=30) as c:
            found = set()
            for s in range(await c.shard_count()):
                await (await c.for_shard(s)).append(b"barrier")
                found |= {r.payload for r in await c.read_all(s) if r.payload in want}
            return found

    return run(go())


# ----------------------------------------------------------------------------- item 1


def test_producer_append_lost_in_flight_then_unreachable_is_unknown(make_pair) -> None:  # type: ignore[no-untyped-def]
    """Follower killed, a producer append waits on the leader (durable there only), the
    leader is killed: every re-send finds no node. The error must say ``unknown`` — the
    record is in the log once both nodes are back — never ``not_written``."""
    p: Pair = make_pair()
    victim = uniq("victim-").encode()

    async def go() -> BaseException:
        async with corelog.aio.Client(p.addrs, certs=str(p.certs), failover_timeout=1.0) as c:
            prod = await c.producer(0)
            await prod.append(b"first")
            p.follower.kill()
            t = asyncio.ensure_future(prod.append(victim))
            conn = prod._client._conn
            assert conn is not None
            while not conn._pending:  # the request is on its way to the leader
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.2)  # written on the leader, waiting for the follower
            p.leader.kill()
            with pytest.raises(corelog.CorelogError) as e:
                await t
            await prod.close()
            return e.value

    err = run(go())
    assert err.outcome == UNKNOWN, f"{type(err).__name__} says {err.outcome}: {err}"
    assert getattr(err, "attempts", 0) >= 1
    p.follower.start()
    p.leader.start()
    p.follower.wait_ready()
    p.leader.wait_ready()
    assert stored(p, [victim]) == {victim}, "the append reported unknown is in the log (it was written)"


# ----------------------------------------------------------------------------- item 2


def test_stream_appends_follow_leadership_like_plain_appends(make_coord) -> None:  # type: ignore[no-untyped-def]
    """Both coordinator-mode nodes are down when a fresh client appends to a stream and
    plainly; they come back 0.5 s later: both calls wait within the failover budget and
    succeed (the stream's shard is found inside the retry loop)."""
    c = make_coord()
    for n in c.nodes:
        n.kill()
    restart = threading.Timer(0.5, lambda: [n.start() for n in c.nodes])
    restart.start()

    async def go() -> tuple:
        cfg = corelog.ClientConfig(certs=str(c.certs), failover_timeout=20.0)
        a, b = corelog.aio.Client(c.addrs, cfg), corelog.aio.Client(c.addrs, cfg)  # not connected yet
        try:
            return await asyncio.gather(a.append_to(uniq("failover-"), b"event"), b.append(b"plain"))
        finally:
            await a.close()
            await b.close()

    try:
        streamed, plain = run(go())
    finally:
        restart.join()
    assert streamed.version == 0 and plain.offset >= 0


# ----------------------------------------------------------------------------- item 3


def test_a_cancelled_append_raises_cancelled_with_its_outcome(pair: Pair) -> None:
    """The task awaiting an append is cancelled the moment its answer arrives (the
    window where Python 3.11's ``wait_for`` returned the result instead): when
    ``cancel()`` succeeded the task must end in ``Cancelled`` carrying the outcome (here
    ``written`` with the position), never return a position as if not cancelled."""

    async def go() -> None:
        async with corelog.aio.Client(pair.leader.addr, certs=str(pair.certs)) as c:
            await c.append(b"warm")
            for i in range(20):
                t = asyncio.ensure_future(c.append(b"cancel me %d" % i))
                conn = c._conn
                assert conn is not None
                while not conn._pending:
                    await asyncio.sleep(0)
                answer = next(iter(conn._pending.values()))
                took: List[bool] = []
                answer.add_done_callback(lambda _f, t=t: took.append(t.cancel()))
                try:
                    got: Any = await t
                except asyncio.CancelledError as e:
                    got = e
                assert took, "the answer never arrived"
                if took[0]:
                    assert isinstance(got, Cancelled), f"cancel() succeeded but the task gave {got!r}"
                    assert got.outcome == WRITTEN and got.position is not None, got
                else:
                    assert isinstance(got, corelog.Position), got

    run(go())


def test_cancellation_storm_outcomes_hold(pair: Pair) -> None:
    """500 appends in flight, every task cancelled: each ends in a result or in
    ``Cancelled`` with an outcome, and no append said ``not_written`` is in the log."""
    tag = uniq("storm-")

    async def go() -> List[tuple]:
        async with corelog.aio.Client(pair.leader.addr, certs=str(pair.certs)) as c:
            await c.append(b"warm")
            payloads = [f"{tag}-{i}".encode() for i in range(500)]
            tasks = [asyncio.ensure_future(c.append(x)) for x in payloads]
            await asyncio.sleep(0)  # every request handed to the connection
            for t in tasks:
                t.cancel()
            out = []
            for x, t in zip(payloads, tasks):
                try:
                    out.append((x, WRITTEN, await t))
                except asyncio.CancelledError as e:
                    assert isinstance(e, Cancelled), f"a CancelledError without an outcome: {e!r}"
                    out.append((x, e.outcome, e.position))
            return out

    got = run(go())
    found = stored(pair, [x for x, _, _ in got])
    outcomes = {o for _, o, _ in got}
    assert UNKNOWN in outcomes, f"no request was cancelled in flight: {outcomes}"
    for x, o, _ in got:
        if o == NOT_WRITTEN:
            assert x not in found, f"{x!r} reported not_written is in the log"
        if o == WRITTEN:
            assert x in found


def test_blocking_future_cancel_true_means_not_written(pair: Pair) -> None:
    """``Future.cancel()`` returns True only for appends never sent: none of those is in
    the log; the others deliver their real result."""
    tag = uniq("nowait-")
    payloads = [f"{tag}-{i}".encode() for i in range(400)]
    with corelog.Client(pair.leader.addr, certs=str(pair.certs)) as c:
        c.append(b"warm")
        futs = [c.append_nowait(x) for x in payloads]
        time.sleep(0.002)
        withdrawn = [f.cancel() for f in futs]
        results = {x: f.result(60) for x, f, w in zip(payloads, futs, withdrawn) if not w}
    assert 0 < sum(withdrawn) < len(payloads), f"{sum(withdrawn)} withdrawn: the race was not exercised"
    found = stored(pair, payloads)
    lies = [x for x, w in zip(payloads, withdrawn) if w and x in found]
    assert not lies, f"{len(lies)} appends whose cancel() returned True are in the log"
    assert set(results) <= found


def test_closing_after_cancelling_prints_nothing(pair: Pair, tmp_path: Path) -> None:
    """No "Task exception was never retrieved" (or any other) noise on stderr."""
    script = tmp_path / "cancel_close.py"
    script.write_text(
        "import sys, corelog\n"
        "c = corelog.Client(sys.argv[1], certs=sys.argv[2])\n"
        "futs = [c.append_nowait(b'x%d' % i) for i in range(2000)]\n"
        "for f in futs[::2]:\n"
        "    f.cancel()\n"
        "c.close()\n"
        "n = sum(1 for f in futs if f.done())\n"
        "print('done', n)\n")
    r = subprocess.run([sys.executable, str(script), pair.leader.addr, str(pair.certs)], capture_output=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert b"done 2000" in r.stdout, r.stdout
    assert r.stderr.strip() == b"", r.stderr.decode()[-3000:]


# ----------------------------------------------------------------------------- item 4


def test_configuration_mistakes_fail_at_once_naming_the_value(pair: Pair, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="no-such-dir"):
        corelog.Client(pair.addrs, certs=str(tmp_path / "no-such-dir"))
    with pytest.raises(ConfigError, match="'127.0.0.1'"):
        corelog.Client("127.0.0.1", certs=str(pair.certs))
    with pytest.raises(ConfigError, match="ca="):
        corelog.ClientConfig(ca=str(tmp_path / "missing.pem"), cert=str(pair.certs / "client.pem"),
                             key=str(pair.certs / "client.key"))
    assert time.monotonic() - t0 < 1.0
    t0 = time.monotonic()
    c = corelog.Client(pair.addrs, certs=str(pair.certs), server_name="wrong.example")
    try:
        with pytest.raises(ConfigError, match="server_name='wrong.example'") as e:
            c.append(b"x")
    finally:
        c.close()
    assert e.value.outcome == NOT_WRITTEN
    assert time.monotonic() - t0 < 2.0, "retried like an outage"


def test_invalid_arguments_raise_typed_errors(pair: Pair) -> None:
    c = corelog.Client(pair.addrs, certs=str(pair.certs))
    try:
        t0 = time.monotonic()
        with pytest.raises(corelog.InvalidArgument, match="shard 7 does not exist"):
            c.read(7, 0)
        with pytest.raises(corelog.InvalidArgument, match="shard 7 does not exist"):
            c.producer(7)
        assert time.monotonic() - t0 < 1.0
        with pytest.raises(corelog.InvalidArgument, match="offset -1"):
            c.read(0, -1)
        with pytest.raises(corelog.InvalidArgument, match="payload"):
            c.append("not bytes")  # type: ignore[arg-type]
        with pytest.raises(corelog.InvalidArgument):
            c.append_to("s", b"x", expect="sometimes")
    finally:
        c.close()
    with pytest.raises(ClientClosed):
        c.append(b"after close")
    with pytest.raises(ClientClosed):
        c.read(0, 0)


# ----------------------------------------------------------------------------- item 5


def test_tail_next_offset_counts_records_handed_out(pair: Pair) -> None:
    with corelog.Client(pair.leader.addr, certs=str(pair.certs)) as c:
        first = c.append(b"tail start")
        c.append_many([b"tail %d" % i for i in range(500)])
        with c.tail(first.shard, first.offset) as t:
            got = [next(iter(t)) for _ in range(3)]
            assert [r.offset for r in got] == [first.offset, first.offset + 1, first.offset + 2]
            assert t.next_offset == first.offset + 3


# ----------------------------------------------------------------------------- item 6


def test_failover_is_logged_on_the_corelog_logger(pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="corelog")
    # The follower first: NotLeader names the leader, which the client follows.
    with corelog.Client(f"{pair.follower.addr},{pair.leader.addr}", certs=str(pair.certs)) as c:
        c.append(b"logged")
    msgs = [r.getMessage() for r in caplog.records if r.name == "corelog"]
    assert any("connected to" in m and pair.follower.addr in m for m in msgs), msgs
    assert any("retrying" in m and "NOT_LEADER" in m for m in msgs), msgs
    assert any("connected to" in m and pair.leader.addr in m for m in msgs), msgs


def test_every_public_method_has_a_docstring() -> None:
    classes = [corelog.Client, corelog.Producer, corelog.Tail, corelog.Subscription, corelog.aio.Client,
               corelog.aio.Producer, corelog.aio.Tail, corelog.aio.Subscription, corelog.aio.Connection,
               corelog.ClientConfig]
    missing = []
    for cls in classes:
        for name, member in inspect.getmembers(cls):
            if name.startswith("_"):
                continue
            f = member.fget if isinstance(member, property) else member
            if callable(f) or isinstance(member, property):
                if not inspect.getdoc(member) or inspect.getdoc(member) == inspect.getdoc(object):
                    missing.append(f"{cls.__module__}.{cls.__name__}.{name}")
    assert not missing, missing


def test_readme_states_the_payload_limit_and_the_current_version() -> None:
    readme = (PKG / "README.md").read_text()
    assert "65,536" in readme, "the payload limit is not in the README"
    assert "None: the stream has no event" not in readme, "e.current there is the stream's version, not None"
