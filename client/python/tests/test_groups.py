"""Consumer groups against a real leader + follower pair (2 shards): two members share a
prefix's streams and every event is delivered; after one leaves, the other resumes its
buckets from that member's last commit; the blocking consumer commits and a later member
starts after the commit."""

from __future__ import annotations

import asyncio
from typing import Dict, List, Set, Tuple

import corelog
import corelog.aio
from corelog.types import GroupEvent

from conftest import Pair, uniq

Key = Tuple[str, int]  # (stream, version)


async def take(c: corelog.aio.Consumer, until: Set[Key], into: List[GroupEvent]) -> None:
    """Events of ``c`` into ``into`` until every key of ``until`` was among them."""
    seen: Set[Key] = set()
    while not until <= seen:
        e = await c.next(timeout=30)
        assert e is not None
        into.append(e)
        seen.add((e.stream, e.version))


async def take_both(a: corelog.aio.Consumer, b: corelog.aio.Consumer, want: Set[Key],
                    got: Dict[str, List[GroupEvent]]) -> None:
    """Events of both members until, between them, every key of ``want`` came."""
    seen: Set[Key] = set()
    done = asyncio.Event()

    async def pump(c: corelog.aio.Consumer, into: List[GroupEvent]) -> None:
        while not done.is_set():
            nxt = asyncio.ensure_future(c.next())
            stop = asyncio.ensure_future(done.wait())
            finished, _ = await asyncio.wait({nxt, stop}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            assert finished, "no event within 30 s"
            if nxt not in finished:
                nxt.cancel()
                await asyncio.gather(nxt, return_exceptions=True)
                return
            e = nxt.result()
            assert e is not None
            into.append(e)
            seen.add((e.stream, e.version))
            if want <= seen:
                done.set()

    await asyncio.gather(pump(a, got["a"]), pump(b, got["b"]))


def in_order(events: List[GroupEvent]) -> bool:
    """Within each generation of each shard, every stream's versions rise."""
    last: Dict[Tuple[int, int, str], int] = {}
    for e in events:
        k = (e.shard, e.gen, e.stream)
        if last.get(k, -1) >= e.version:
            return False
        last[k] = e.version
    return True


def test_two_members_share_a_prefix_and_one_resumes_the_others_buckets_from_its_commit(pair: Pair) -> None:
    group, prefix = uniq("grp-"), uniq("gs-") + "/"
    streams = [f"{prefix}{i}" for i in range(40)]  # over both shards and every bucket

    async def go() -> None:
        async with corelog.aio.Client(pair.addrs, certs=str(pair.certs)) as client:
            async def append(version: int) -> Set[Key]:
                await asyncio.gather(*(client.append_to(s, b"%s v%d" % (s.encode(), version)) for s in streams))
                return {(s, version) for s in streams}

            a = await client.consumer(group, "a", prefix, k=4).start()
            b = await client.consumer(group, "b", prefix, k=4).start()
            await client.append_to(uniq("other-"), b"not under the prefix")
            # Batch 1: every event delivered, to one member or the other, in stream order.
            got: Dict[str, List[GroupEvent]] = {"a": [], "b": []}
            first = await append(0)
            await take_both(a, b, first, got)
            assert got["a"] and got["b"], "the buckets are shared"
            assert all(e.stream.startswith(prefix) for e in got["a"] + got["b"])
            assert all(e.payload == b"%s v%d" % (e.stream.encode(), e.version) for e in got["a"] + got["b"])
            assert in_order(got["a"]) and in_order(got["b"])
            assert set(await a.commit()) | set(await b.commit()) == {0, 1}
            # Batch 2: handed out again; only a commits it.
            got = {"a": [], "b": []}
            second = await append(1)
            await take_both(a, b, second, got)
            assert set(await a.commit()) == {e.shard for e in got["a"]}
            b_streams = {e.stream for e in got["b"]}
            await b.close()
            # a takes b's buckets from b's commit: b's batch 2 again, nothing of batch 1
            # (committed by both), nothing of a's batch 2 (committed by a).
            after: List[GroupEvent] = []
            third = await append(2)
            await take(a, third, after)
            again = {(e.stream, e.version) for e in after} - third
            assert again == {(s, 1) for s in b_streams}, "b's uncommitted batch, exactly"
            assert in_order(after)
            await a.close()

    asyncio.run(asyncio.wait_for(go(), 120))


def test_blocking_consumer_commits_and_a_later_member_starts_after_it(pair: Pair) -> None:
    group, prefix = uniq("grp-"), uniq("gb-") + "/"
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as client:
        with client.consumer(group, "w1", prefix) as c:
            for i in range(6):
                client.append_to(f"{prefix}{i % 3}", b"%d" % i)
            events = [c.next(timeout=30) for _ in range(6)]
            assert sorted(e.payload for e in events if e is not None) == [b"%d" % i for i in range(6)]
            assert set(c.commit()) == {e.shard for e in events if e is not None}
        client.append_to(f"{prefix}0", b"after")
        with client.consumer(group, "w2", prefix, auto_commit=True) as c:
            e = c.next(timeout=30)
            assert e is not None and (e.stream, e.version, e.payload) == (f"{prefix}0", 2, b"after")
        # The clean exit committed it: a third member gets only what follows.
        client.append_to(f"{prefix}1", b"last")
        with client.consumer(group, "w3", prefix) as c:
            e = next(iter(c))
            assert (e.stream, e.version, e.payload) == (f"{prefix}1", 2, b"last")


def test_a_member_whose_connection_drops_joins_again_and_resumes_from_its_commit(pair: Pair) -> None:
    group, stream = uniq("grp-"), uniq("gd-") + "/s"

    async def go() -> None:
        async with corelog.aio.Client(pair.addrs, certs=str(pair.certs)) as client:
            async with client.consumer(group, "m", stream) as c:
                for i in range(3):
                    await client.append_to(stream, b"%d" % i)
                assert [(await c.next(timeout=30)).version for _ in range(3)] == [0, 1, 2]  # type: ignore[union-attr]
                assert await c.commit()
                await client.append_to(stream, b"3")
                e = await c.next(timeout=30)  # handed out, not committed
                assert e is not None and e.version == 3
                gen = c.generations[e.shard]
                c._members[e.shard].writer.close()  # type: ignore[union-attr]  # as if the network dropped it
                again = await c.next(timeout=30)
                assert again is not None and (again.version, again.payload) == (3, b"3") and again.gen > gen

    asyncio.run(asyncio.wait_for(go(), 120))
