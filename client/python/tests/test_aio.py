"""The asyncio API: pipelined appends, tails and subscriptions as async iterators, and the
idempotent producer re-sending appends whose outcome a lost connection made unknown."""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Awaitable, Callable

import pytest

import corelog
import corelog.aio
from corelog import codec

from conftest import Pair, uniq


def run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(coro_fn(), 120))


def test_async_pipelined_appends_tail_and_read(pair: Pair) -> None:
    async def go() -> None:
        async with corelog.aio.Client(pair.addrs, certs=str(pair.certs)) as c:
            first = await c.append(b"async first")
            tail = c.tail(first.shard, first.offset)
            async with tail:
                positions = await c.append_many([b"async %d" % i for i in range(1000)])
                assert len({p.shard for p in positions}) == 1
                # Futures: many appends in flight from separate tasks.
                more = await asyncio.gather(*(c.append(b"task %d" % i) for i in range(100)))
                want = {p.offset for p in positions + more if p.shard == first.shard} | {first.offset}
                got = set()
                async for rec in tail:
                    got.add(rec.offset)
                    if want <= got:
                        break
            recs = await c.read_all(positions[0].shard, positions[0].offset, positions[-1].offset + 1)
            assert [r.payload for r in recs] == [b"async %d" % i for i in range(1000)]

    run(go)


def test_async_producer_resends_after_lost_connections_without_duplicates(pair: Pair) -> None:
    """Connections are cut under a producer with appends in flight (outcome unknown):
    it reconnects and re-sends in sequence order; every payload is stored exactly once,
    and the answers of re-sent appends that had been written are duplicates."""

    async def go() -> None:
        async with corelog.aio.Client(pair.addrs, certs=str(pair.certs)) as c:
            p = await c.producer(0)
            tag = uniq("kill-").encode()
            n = 600

            async def cutter() -> None:
                for _ in range(4):
                    await asyncio.sleep(0)
                    for _ in range(50):
                        await asyncio.sleep(0.002)
                        conn = p._client._conn
                        if conn is not None and conn._pending:
                            conn.close()  # as if the network dropped it
                            break

            results, _ = await asyncio.gather(p.append_many([tag + b" %d" % i for i in range(n)]), cutter())
            assert [a.sequence for a in results] == list(range(n))
            assert p.retries > 0, "no append was re-sent: the cut came too late"
            offsets = [a.offset for a in results]
            assert offsets == sorted(offsets) and len(set(offsets)) == n
            recs = await c.read_all(0, min(offsets), max(offsets) + 1)
            ours = collections.Counter(r.payload for r in recs if r.payload.startswith(tag))
            assert len(ours) == n and set(ours.values()) == {1}, "stored exactly once"
            assert all(r.producer is not None and r.producer.id == p.id for r in recs if r.payload.startswith(tag))
            await p.close()

    run(go)


def test_async_producer_follows_the_leader_from_the_follower(pair: Pair) -> None:
    async def go() -> None:
        # Only the follower's address: NotLeader names the leader, the producer re-sends there
        # (on the leader's direct port of the shard).
        p = await corelog.aio.Producer.connect(pair.follower.addr, 1, certs=str(pair.certs))
        async with p:
            a = await p.append(b"via NotLeader")
            assert (a.shard, a.duplicate, a.sequence) == (1, False, 0)
            assert p._client._conn is not None
            assert p._client._conn.addr == codec.shard_addr(pair.leader.addr, 1)

    run(go)


def test_async_streams_and_subscriptions(pair: Pair) -> None:
    async def go() -> None:
        prefix = uniq("asub-") + "-"
        async with corelog.aio.Client(pair.addrs, certs=str(pair.certs)) as c:
            names = [f"{prefix}{i}" for i in range(4)]
            async with c.subscribe_prefix(prefix) as sub:
                done = await asyncio.gather(*(c.append_to(n, b"hello", "none") for n in names))
                assert all(d.version == 0 for d in done)
                seen = set()
                async for ev in sub:
                    seen.add(ev.record.stream)
                    if len(seen) == 4:
                        break
                assert seen == {codec.StreamPos(n, 0) for n in names}
            with pytest.raises(corelog.WrongExpectedVersion) as e:
                await c.append_to(names[0], b"again", "none")
            assert e.value.current == 0
            async with c.subscribe(names[0]) as one:
                ev = await one.next(timeout=10)
                assert (ev.record.stream, ev.record.payload) == (codec.StreamPos(names[0], 0), b"hello")
            got = await c.read_stream(names[1])
            assert [e.payload for e in got.events] == [b"hello"]

    run(go)


def test_async_unknown_outcome_is_not_resent_by_a_plain_append(pair: Pair) -> None:
    async def go() -> None:
        async with corelog.aio.Client(pair.addrs, certs=str(pair.certs)) as c:
            await c.append(b"warm up")
            conn = c._conn
            assert conn is not None
            task = asyncio.ensure_future(c.append(b"cut while in flight"))
            await asyncio.sleep(0)  # sent, not answered
            await asyncio.sleep(0)
            conn.close()
            try:
                await task
            except corelog.ConnectionClosed as e:
                assert e.outcome == corelog.errors.UNKNOWN
            # Either way, the next call reconnects.
            assert (await c.append(b"after the cut")).offset >= 0

    run(go)
