"""Retention (docs/operations.md §13): ``trim`` on the leader and on the follower, then
reads, tails, stream reads and subscriptions below what is left raise ``OutOfRange``
carrying the first offset (or stream version) still held — through the blocking and the
asyncio clients, cross-checked with the Rust CLI. The ``trimmed`` fixture (conftest.py)
fills shard 0 of a pair of its own past a few 4 MiB segments and trims both nodes."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any, Awaitable, Callable, List

import pytest

import corelog
import corelog.aio
from corelog import codec

from conftest import BIN, Node, Trimmed
from conftest import uniq as corelog_uniq


def run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(coro_fn(), 120))


def nodes(t: Trimmed) -> List[Node]:
    return [t.pair.leader, t.pair.follower]


def filler(t: Trimmed, offset: int) -> bytes:
    i = t.fill_offsets.index(offset)
    return bytes([48 + i % 10]) * Trimmed.PAYLOAD


def test_trim_deleted_whole_segments_on_both_nodes(trimmed: Trimmed) -> None:
    t = trimmed
    for node in nodes(t):
        first = t.first[node.addr]
        # Something went (the early events and whole segments of filler), nothing at or
        # above `before` did: at least ~8 MiB of the ~12 MiB filled.
        assert t.fill_offsets[len(t.fill_offsets) // 2] < first <= t.before, (node.name, first, t.before)
        with corelog.Client(node.addr, certs=str(t.pair.certs)) as c:
            # Trimming again (the same bound, or a lower one) deletes nothing more.
            assert c.trim(0, t.before) == first
            assert c.trim(0, 0) == first
            # The other shard is untouched.
            assert c.trim(1, 0) == 0


def test_reads_below_the_first_offset_raise_out_of_range(trimmed: Trimmed) -> None:
    t = trimmed
    for node in nodes(t):
        first = t.first[node.addr]
        with corelog.Client(node.addr, certs=str(t.pair.certs)) as c:
            for below in (0, 1, first - 1):
                with pytest.raises(corelog.OutOfRange) as e:
                    c.read(0, below)
                assert e.value.first == first, (node.name, below)
                assert e.value.code == codec.ErrorCode.OUT_OF_RANGE and e.value.outcome == corelog.errors.NOT_WRITTEN
                assert f"offset {below}" in e.value.message
            with pytest.raises(corelog.OutOfRange):
                c.read_all(0)
            # The connection stayed usable: the first offset still held reads.
            recs = c.read(0, first)
            assert recs and recs[0].offset == first
            if first in t.fill_offsets:
                assert recs[0].payload == filler(t, first)
            rest = c.read_all(0, first)
            assert [r.offset for r in rest[-t.late:]] == t.late_offsets
            assert [r.offset for r in rest] == list(range(first, t.late_offsets[-1] + 1))


def test_tail_from_below_the_first_offset_raises_out_of_range(trimmed: Trimmed) -> None:
    t = trimmed
    for node in nodes(t):
        first = t.first[node.addr]
        with corelog.Client(node.addr, certs=str(t.pair.certs)) as c:
            for at in (0, first - 1):
                with c.tail(0, at) as tail:
                    with pytest.raises(corelog.OutOfRange) as e:
                        tail.next(timeout=20)  # raised, not a hang (RequestTimeout) or a gap
                    assert e.value.first == first
                    assert tail.next_offset == at
                    # The tail is over: later calls raise the same error, without waiting.
                    with pytest.raises(corelog.OutOfRange) as again:
                        tail.next(timeout=20)
                    assert again.value is e.value
            with c.tail(0, first) as tail:
                rec = tail.next(timeout=20)
                assert rec is not None and rec.offset == first


def test_stream_read_below_its_first_version_raises_out_of_range(trimmed: Trimmed) -> None:
    t = trimmed
    for node in nodes(t):
        with corelog.Client(node.addr, certs=str(t.pair.certs)) as c:
            for v in range(t.stream_first):
                with pytest.raises(corelog.OutOfRange) as e:
                    c.read_stream(t.stream, v)
                assert e.value.first == t.stream_first, (node.name, v)
            with pytest.raises(corelog.OutOfRange) as e:
                c.read_stream_all(t.stream)
            assert e.value.first == t.stream_first
            got = c.read_stream(t.stream, t.stream_first)
            assert [(e.stream.version, e.offset) for e in got.events] == [
                (t.stream_first + i, o) for i, o in enumerate(t.late_offsets)]
            assert [e.payload for e in got.events] == [b"late %d" % (t.stream_first + i) for i in range(t.late)]
            assert got.end_version == t.stream_first + t.late


def test_subscriptions_below_the_first_version_or_offset_raise_out_of_range(trimmed: Trimmed) -> None:
    t = trimmed
    lfirst = t.first[t.pair.leader.addr]
    with corelog.Client(t.pair.addrs, certs=str(t.pair.certs)) as c:
        with c.subscribe(t.stream, 0) as sub:
            with pytest.raises(corelog.OutOfRange) as e:
                sub.next(timeout=20)
            assert e.value.first == t.stream_first
            with pytest.raises(corelog.OutOfRange) as again:
                sub.next(timeout=20)
            assert again.value is e.value
        with c.subscribe(t.stream, t.stream_first) as sub:
            got = [sub.next(timeout=20) for _ in range(t.late)]
            assert [(ev.shard, ev.record.stream.version) for ev in got] == [
                (0, t.stream_first + i) for i in range(t.late)]
        # A prefix subscription: shard 0 from below its first offset fails the whole
        # subscription; from the first offset it reads on.
        with c.subscribe_prefix(t.stream, {0: 0, 1: 0}) as sub:
            with pytest.raises(corelog.OutOfRange) as e:
                sub.next(timeout=20)
            assert e.value.first == lfirst
        with c.subscribe_prefix(t.stream, {0: lfirst}) as sub:
            got = [sub.next(timeout=20) for _ in range(t.late)]
            assert [ev.record.offset for ev in got] == t.late_offsets


def test_asyncio_client_trim_and_out_of_range(trimmed: Trimmed) -> None:
    t = trimmed

    async def go() -> None:
        for node in nodes(t):
            first = t.first[node.addr]
            async with corelog.aio.Client(node.addr, certs=str(t.pair.certs)) as c:
                assert await c.trim(0, t.before) == first
                with pytest.raises(corelog.OutOfRange) as e:
                    await c.read(0, 0)
                assert e.value.first == first
                assert (await c.read(0, first))[0].offset == first
                with pytest.raises(corelog.OutOfRange) as e:
                    await c.read_stream(t.stream, 0)
                assert e.value.first == t.stream_first
                with pytest.raises(corelog.OutOfRange) as e:
                    async with c.tail(0, 0) as tail:
                        async for _ in tail:
                            raise AssertionError("a record below the first offset")
                assert e.value.first == first
        async with corelog.aio.Client(t.pair.addrs, certs=str(t.pair.certs)) as c:
            with pytest.raises(corelog.OutOfRange) as e:
                async with c.subscribe(t.stream) as sub:
                    async for _ in sub:
                        raise AssertionError("an event below the first version")
            assert e.value.first == t.stream_first

    run(go)


def test_rust_cli_reports_the_same_first_offset(trimmed: Trimmed) -> None:
    t = trimmed
    for node in nodes(t):
        first = t.first[node.addr]
        r = t.pair.cli("read", "--shard", "0", "--from", "0", addr=node.addr, check=False)
        err = r.stderr.decode()
        assert r.returncode != 0 and "OutOfRange" in err and f"first still held is {first}" in err, err
        r = t.pair.cli("read", "--shard", "0", "--from", str(first), "--limit", "1", addr=node.addr)
        assert r.stdout.decode().split("\t")[0] == str(first)
        r = t.pair.cli("read", "--stream", t.stream, "--from-version", "0", addr=node.addr, check=False)
        assert r.returncode != 0 and "OutOfRange" in r.stderr.decode(), r.stderr.decode()
    # `corelog admin trim` (both nodes, the same bound): the same first offsets.
    certs = t.pair.certs
    r = subprocess.run([str(BIN), "admin", "trim", "--addr", t.pair.addrs, "--ca", str(certs / "ca.pem"),
                        "--cert", str(certs / "client.pem"), "--key", str(certs / "client.key"), "--shard", "0",
                        "--before", str(t.before)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert lines == [f"{n.addr} shard 0 first offset {t.first[n.addr]}" for n in nodes(t)], lines


def test_live_tail_and_subscriptions_that_fall_behind_a_trim_end_with_out_of_range(make_pair) -> None:  # type: ignore[no-untyped-def]
    """A tail, a stream subscription and a prefix subscription read one record each and
    then stop reading (the server's pushes wait on them: up to ~40 MiB in buffers and a
    subscription's queue), while ~75 MiB is trimmed under them. Reading on, each gets the records that were
    already on their way, gap-free, then ``OutOfRange`` with the first offset / version
    still held — not a hang, not a gap."""
    p = make_pair()
    n = 20000
    while True:
        s = corelog_uniq("behind-")
        if codec.stream_shard(s, 2) == 0:
            break

    async def go() -> None:
        async with corelog.aio.Client(p.leader.addr, certs=str(p.certs)) as c:
            body = b"b" * Trimmed.PAYLOAD
            offsets: List[int] = []
            for k in range(0, n, 1000):
                got = await asyncio.gather(*(c.append_to(s, body) for _ in range(1000)))
                offsets += [a.offset for a in got]
            assert offsets == list(range(n))  # the only records of shard 0: version == offset
            tail = await c.tail(0, 0).start()
            sub = await c.subscribe(s, 0).start()
            pre = await c.subscribe_prefix(s, {0: 0}).start()
            try:
                assert (await tail.next(20)).offset == 0  # type: ignore[union-attr]
                assert (await sub.next(20)).record.stream.version == 0  # type: ignore[union-attr]
                assert (await pre.next(20)).record.offset == 0
                await asyncio.sleep(0.5)  # the pushes fill every buffer on the way and wait
                first = await c.trim(0, n)
                assert first > n // 2, first
                for what, nxt in (("tail", lambda: tail.next(20)), ("stream subscription", lambda: sub.next(20)),
                                  ("prefix subscription", lambda: pre.next(20))):
                    got_n = 1
                    with pytest.raises(corelog.OutOfRange) as e:
                        while True:
                            await nxt()
                            got_n += 1
                    assert e.value.first == first, what
                    assert 1 < got_n < first, (what, got_n, first)
                assert tail.next_offset < first and sub.next_version < first and pre.positions[0] < first
            finally:
                await tail.close()
                await sub.close()
                await pre.close()

    run(go)
