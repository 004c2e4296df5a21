"""The asyncio consumer-group member against fake nodes speaking the real codec
(plaintext): what it commits and when, a commit of an old generation skipped, events of
an assignment that is over dropped, joining again after a lost connection and a session
the server ended, a follower's NotLeader followed, heartbeats, and the refusals that end it."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import pytest

import corelog.aio
from corelog import codec, errors
from corelog._group import Consumer
from corelog.codec import (
    ErrorCode, GroupAssigned, GroupCommit, GroupCommitted, GroupHeartbeat, GroupJoin, GroupRecords, Role, StreamPos,
)
from corelog.types import ClientConfig

from conftest import free_base, requests_of

SHARDS = 2


class Member:
    """One connection a fake node accepted on a shard's direct port, after its Hello: the
    requests it sent, and what the test pushes back."""

    def __init__(self, shard: int, writer: asyncio.StreamWriter) -> None:
        self.shard = shard
        self.writer = writer
        self.requests: "asyncio.Queue[Tuple[int, codec.Request]]" = asyncio.Queue()

    async def request(self, kind: type = object) -> Tuple[int, Any]:
        """The next request of ``kind`` (heartbeats are skipped unless asked for)."""
        while True:
            req_id, req = await self.requests.get()
            if isinstance(req, kind) and (kind is GroupHeartbeat or not isinstance(req, GroupHeartbeat)):
                return req_id, req

    def push(self, *resps: Any, req_id: int = 1) -> None:
        """Writes the frames in one piece (the client reads them in one go)."""
        self.writer.write(b"".join(r.encode(req_id) for r in resps))

    def error(self, req_id: int, code: int, message: str = "") -> None:
        self.writer.write(codec.encode_error(req_id, code, message))

    def close(self) -> None:
        self.writer.close()


class FakeNode:
    """A node of ``SHARDS`` shards on ports base (client port) and base + 1 + shard.
    ``role`` goes into every HelloOk; a follower refuses joins with NotLeader naming
    ``leader``; ``refuse`` answers every join with that error code and closes."""

    def __init__(self, role: Role = Role.LEADER, leader: str = "", refuse: Optional[int] = None) -> None:
        self.role, self.leader, self.refuse = role, leader, refuse
        self.base = free_base(list(range(SHARDS + 1)))
        self.addr = f"127.0.0.1:{self.base}"
        self.joins: "asyncio.Queue[Tuple[Member, GroupJoin]]" = asyncio.Queue()
        self.hellos: List[int] = []
        self._servers: List[asyncio.base_events.Server] = []

    async def start(self) -> "FakeNode":
        for port in range(self.base, self.base + 1 + SHARDS):
            shard = max(port - self.base - 1, 0)
            self._servers.append(await asyncio.start_server(
                lambda r, w, s=shard: self._serve(s, r, w), "127.0.0.1", port))
        return self

    def close(self) -> None:
        for s in self._servers:
            s.close()

    async def joined(self, shard: Optional[int] = None) -> Tuple[Member, GroupJoin]:
        m, join = await self.joins.get()
        assert shard is None or m.shard == shard
        return m, join

    async def _serve(self, shard: int, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        member: Optional[Member] = None
        try:
            async for f, req in requests_of(r):
                if isinstance(req, codec.Hello):
                    self.hellos.append(req.version)
                    w.write(codec.HelloOk(req.version, shard, SHARDS, self.role, 1).encode(f.req_id))
                elif isinstance(req, GroupJoin) and self.role != Role.LEADER:
                    w.write(codec.encode_error(f.req_id, ErrorCode.NOT_LEADER, self.leader))
                elif isinstance(req, GroupJoin) and self.refuse is not None:
                    w.write(codec.encode_error(f.req_id, self.refuse, "prefix differs from the group's"))
                    w.close()
                    return
                elif isinstance(req, GroupJoin):
                    member = Member(shard, w)
                    self.joins.put_nowait((member, req))
                else:
                    assert member is not None
                    member.requests.put_nowait((f.req_id, req))
        except (ConnectionError, OSError):
            return


def rec(offset: int, stream: str, version: int, payload: bytes = b"e") -> bytes:
    return codec.encode_record(offset, 1, payload, stream=StreamPos(stream, version))


def config(**kw: Any) -> ClientConfig:
    return ClientConfig(insecure=True, **{"failover_timeout": 5.0, **kw})


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 30))


async def started(node: FakeNode, c: Consumer, gens: Dict[int, int], addrs: Optional[str] = None) -> List[Member]:
    """Starts ``c``; each shard's join is answered with an assignment of ``gens[shard]``
    (bucket 0 on shard 0, nothing on the others)."""
    start = asyncio.ensure_future(c.start())
    members = []
    for shard in range(SHARDS):
        m, join = await node.joined(shard)
        assert join == GroupJoin(c.group, c.member, c.prefix, c.k)
        buckets = ((0, codec.NO_COMMIT),) if shard == 0 else ()
        m.push(GroupAssigned(gens[shard], SHARDS, 4, buckets))
        members.append(m)
    await start
    return members


async def until(cond: Callable[[], bool], what: str) -> None:
    """Yields to the loop until ``cond()`` (a state the consumer's pumps reach)."""
    for _ in range(2000):
        if cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never reached: {what}")


async def commit(c: Consumer, m: Member, want: GroupCommit, answer: Optional[int] = None) -> Dict[int, int]:
    """``c.commit()``, checking that ``m`` gets ``want``; answered GroupCommitted, or the
    error ``answer``."""
    task = asyncio.ensure_future(c.commit())
    req_id, req = await m.request()
    assert req == want
    if answer is None:
        m.push(GroupCommitted(want.gen, want.next, 1000), req_id=req_id)
    else:
        m.error(req_id, answer, "generation is not the group's")
    return await task


def test_commit_sends_the_generation_and_next_of_what_was_handed_out() -> None:
    async def go() -> None:
        node = await FakeNode().start()
        c = Consumer(node.addr, config(), "billing", "w1", "order-", 4)
        m0 = (await started(node, c, {0: 3, 1: 7}))[0]
        assert node.hellos[1:] == [codec.GROUPS_VERSION] * SHARDS  # the first: the shard count probe
        assert await c.commit() == {}  # nothing handed out yet
        m0.push(GroupRecords(3, 12, 2, rec(10, "order-1", 0, b"a") + rec(11, "order-2", 5, b"b")))
        e = await c.next()
        assert e is not None and (e.shard, e.gen, e.offset, e.stream, e.version, e.payload) == (
            0, 3, 10, "order-1", 0, b"a")
        # One of two handed out: next is the offset after it.
        assert await commit(c, m0, GroupCommit(3, 11)) == {0: 11}
        # The frame's last one: next is the frame's next_offset (past records of others' buckets).
        assert (await c.next()).offset == 11  # type: ignore[union-attr]
        assert await commit(c, m0, GroupCommit(3, 12)) == {0: 12}
        assert await c.commit() == {}  # committed already
        # A commit refused StaleGeneration is skipped, not raised; the connection stays.
        m0.push(GroupRecords(3, 20, 1, rec(15, "order-1", 1)))
        assert (await c.next()).offset == 15  # type: ignore[union-attr]
        assert await commit(c, m0, GroupCommit(3, 20), ErrorCode.STALE_GENERATION) == {}
        # A new generation: what the old one delivered and was not handed out is dropped.
        m0.push(GroupRecords(3, 30, 1, rec(25, "order-1", 2)), GroupAssigned(4, SHARDS, 4, ((0, 20),)))
        await until(lambda: c.generations[0] == 4, "generation 4")
        m0.push(GroupRecords(4, 26, 1, rec(25, "order-1", 2)))
        e = await c.next()
        assert e is not None and (e.gen, e.offset) == (4, 25)
        assert await commit(c, m0, GroupCommit(4, 26)) == {0: 26}
        await c.close()
        assert await c.next() is None
        node.close()

    run(go)


def test_joins_again_after_a_lost_connection_and_an_ended_session_following_the_leader() -> None:
    async def go() -> None:
        leader = await FakeNode().start()
        follower = await FakeNode(Role.FOLLOWER, leader=leader.addr).start()
        # Only the follower is given: the leader is reached through its NotLeader.
        c = Consumer(follower.addr, config(), "g", "w1")
        m0 = (await started(leader, c, {0: 1, 1: 1}))[0]
        assert follower.hellos.count(codec.GROUPS_VERSION) == SHARDS
        m0.push(GroupRecords(1, 6, 1, rec(5, "s", 0)))
        assert (await c.next()).offset == 5  # type: ignore[union-attr]
        # Delivered, not handed out, then the connection is lost: the member joins again.
        m0.push(GroupRecords(1, 7, 1, rec(6, "s", 1)))
        m0.close()
        m0, join = await leader.joined(0)
        assert join == GroupJoin("g", "w1", "", 0)
        m0.push(GroupAssigned(2, SHARDS, 4, ((0, 5),)))
        await until(lambda: c.generations[0] == 2, "generation 2")
        # What was handed out before is not committed on the new connection, and the
        # event the old one delivered is dropped: the bucket restarts from its commit.
        assert await c.commit() == {}
        m0.push(GroupRecords(2, 6, 1, rec(5, "s", 0)))
        e = await c.next()
        assert e is not None and (e.gen, e.offset) == (2, 5)
        assert await commit(c, m0, GroupCommit(2, 6)) == {0: 6}
        # The server ends the session (a frozen member): joining again too.
        m0.error(1, ErrorCode.STALE_GENERATION, "session ended")
        m0.close()
        m0, _ = await leader.joined(0)
        m0.push(GroupAssigned(3, SHARDS, 4, ((0, 6),)), GroupRecords(3, 8, 1, rec(7, "s", 2)))
        e = await c.next()
        assert e is not None and (e.gen, e.offset, e.version) == (3, 7, 2)
        await c.close()
        leader.close()
        follower.close()

    run(go)


def test_a_lost_leader_ends_the_consumer_after_the_rejoin_timeout() -> None:
    async def go() -> None:
        node = await FakeNode().start()
        c = Consumer(node.addr, config(connect_timeout=0.2), "g", "w1", rejoin_timeout=0.3)
        m0 = (await started(node, c, {0: 1, 1: 1}))[0]
        node.close()
        m0.close()
        with pytest.raises(errors.Unreachable, match="no leader of shard 0 took the join within 0.3 s"):
            await c.next()
        with pytest.raises(errors.Unreachable):  # and again: the consumer is over
            await c.next()

    run(go)


def test_refusals_no_retry_cures_end_the_start() -> None:
    async def go() -> None:
        for code, cls, match in [(ErrorCode.BAD_REQUEST, errors.BadRequest, "prefix differs"),
                                 (ErrorCode.FORBIDDEN, errors.Forbidden, "prefix differs"),
                                 (ErrorCode.BAD_VERSION, errors.BadVersion, "does not serve consumer groups")]:
            node = await FakeNode(refuse=code).start()
            c = Consumer(node.addr, config(), "g", "w1", "p-", 8)
            with pytest.raises(cls, match=match):
                await c.start()
            with pytest.raises(cls):
                await c.next()
            node.close()
    run(go)
    for bad in [dict(group=""), dict(group="g" * 129), dict(member=""), dict(member="é" * 65),
                dict(prefix="p" * 256), dict(k=65), dict(k=-1)]:
        args: Dict[str, Any] = {"group": "g", "member": "m", **bad}
        with pytest.raises(errors.InvalidArgument):
            Consumer("127.0.0.1:1", config(), **args)


def test_heartbeats_and_auto_commit_before_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("corelog._group.HEARTBEAT", 0.05)

    async def go() -> None:
        node = await FakeNode().start()
        c = Consumer(node.addr, config(), "g", "w1", auto_commit=True)
        m0, m1 = await started(node, c, {0: 3, 1: 9})
        assert (await m0.request(GroupHeartbeat))[1] == GroupHeartbeat(3)
        assert (await m1.request(GroupHeartbeat))[1] == GroupHeartbeat(9)
        m0.push(GroupRecords(3, 12, 2, rec(10, "a", 0) + rec(11, "b", 0)))
        assert [(await c.next()).offset for _ in range(2)] == [10, 11]  # type: ignore[union-attr]
        # Nothing is ready: what was handed out is committed before waiting for more.
        third = asyncio.ensure_future(c.next())
        req_id, req = await m0.request()
        assert req == GroupCommit(3, 12) and not third.done()
        m0.push(GroupCommitted(3, 12, 50), req_id=req_id)
        m0.push(GroupRecords(3, 14, 1, rec(13, "a", 1)))
        assert (await third).offset == 13  # type: ignore[union-attr]
        await c.close()
        node.close()

    run(go)


def test_a_commit_is_answered_behind_events_a_full_queue_left_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("corelog._group._QUEUE", 2)

    async def go() -> None:
        node = await FakeNode().start()
        c = Consumer(node.addr, config(), "g", "w1")
        m0 = (await started(node, c, {0: 1, 1: 1}))[0]
        m0.push(*(GroupRecords(1, i + 1, 1, rec(i, "s", i)) for i in range(8)))
        assert (await c.next()).offset == 0  # type: ignore[union-attr]
        await until(lambda: c._queue is not None and c._queue.qsize() >= 2, "a full queue")
        # The answer comes after frames the member stopped reading at the queue's bound.
        assert await commit(c, m0, GroupCommit(1, 1)) == {0: 1}
        assert [(await c.next()).offset for _ in range(7)] == list(range(1, 8))  # type: ignore[union-attr]
        await c.close()
        node.close()

    run(go)


def test_the_client_makes_consumers_and_greets_with_version_3_elsewhere() -> None:
    async def go() -> None:
        node = await FakeNode().start()
        async with corelog.aio.Client(node.addr, config=config()) as client:
            c = client.consumer("g", "w1", "p-", 2, auto_commit=True)
            assert (c.group, c.member, c.prefix, c.k, c.auto_commit) == ("g", "w1", "p-", 2, True)
            assert (await client.info()).version == codec.CLIENT_VERSION
        assert node.hellos == [codec.CLIENT_VERSION]
        with pytest.raises(errors.ClientClosed):
            client.consumer("g", "w1")
        node.close()

    run(go)
