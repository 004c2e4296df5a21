"""Consumer groups of the asyncio client (part of :mod:`corelog.aio`): :class:`Consumer`,
one member of a group, on a connection of its own to the leader's direct port of every
shard (protocol version 4, docs/protocol.md §4.9)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, List, NoReturn, Optional, Tuple, Union

from . import codec
from .codec import FrameDecoder, GroupAssigned, GroupCommit, GroupCommitted, GroupHeartbeat, GroupJoin, GroupRecords
from .errors import (
    BadVersion, ConnectionClosed, CorelogError, Fenced, InvalidArgument, NotLeader, ProtocolError, RequestTimeout,
    ShuttingDown, StaleGeneration, Unavailable, Unreachable,
)
from .types import ClientConfig, GroupEvent
from ._connection import (
    _BACKOFF_MAX, _BACKOFF_START, Addrs, _check_int, _close_writer, _greet, _read_frame, _records, _response, _why,
    _within, config_error, log,
)
from ._push import _Pushed, _timed
from ._retry import Nodes

__all__ = ["Consumer"]

#: How often a member says it is alive on each shard (the server's session is 10 s by
#: default: a member misses several before it is dropped).
HEARTBEAT = 1.0
#: Events received and not yet handed out above which a shard's connection is read no
#: more (until a commit needs the answer behind them).
_QUEUE = 4096
#: The join's ``req_id``: the server's pushes carry it; commits and heartbeats count on.
_JOIN_ID = 1

#: What ends a member's connection, or refuses its join, without anything being wrong with
#: the group or this client: it joins again (elsewhere, or after a pause).
_REJOIN = (OSError, asyncio.TimeoutError, ConnectionClosed, RequestTimeout, Unreachable, StaleGeneration, NotLeader,
           Unavailable, ShuttingDown, Fenced)


class _Member:
    """A consumer's membership on one shard: its connection and generation, and how far
    what was handed out and what was committed go."""

    def __init__(self, shard: int) -> None:
        self.shard = shard
        #: Joins so far: what an earlier connection delivered and was not handed out is
        #: dropped (the join restarts every bucket from its commit).
        self.session = 0
        self.gen: Optional[int] = None
        self.writer: Optional[asyncio.StreamWriter] = None
        #: The offset after the last event of this generation handed out (``None``:
        #: nothing yet), and the last ``next`` committed in this generation.
        self.next: Optional[int] = None
        self.committed: Optional[int] = None
        #: Commits waiting for their answer, by ``req_id``.
        self.commits: Dict[int, "asyncio.Future[Optional[GroupCommitted]]"] = {}
        self._ids = _JOIN_ID

    def new_gen(self, gen: int) -> None:
        self.gen, self.next, self.committed = gen, None, None

    def send(self, frame: Union[GroupCommit, GroupHeartbeat]) -> Optional[int]:
        """Writes ``frame`` with a ``req_id`` of its own; ``None`` if there is no connection."""
        if self.writer is None or self.writer.is_closing():
            return None
        self._ids += 1
        self.writer.write(frame.encode(self._ids))
        return self._ids

    def lost(self) -> None:
        """The connection ended: it is closed; commits waiting on it are skipped (the next
        join restarts from whatever was committed)."""
        if self.writer is not None:
            _close_writer(self.writer)
        self.writer = None
        commits, self.commits = self.commits, {}
        for fut in commits.values():
            if not fut.done():
                fut.set_result(None)


#: What the pumps hand to :meth:`Consumer.next`: the member, its session and generation,
#: the ``next`` the item moves the member to, and the event (``None``: a frame without
#: records, which moves ``next`` only).
_Item = Tuple[_Member, int, int, int, Optional[GroupEvent]]


class Consumer(_Pushed[GroupEvent]):
    """A member of consumer group ``group``, named ``member``, for the events of every
    stream whose name starts with ``prefix`` (``""``: every stream). The group spreads its
    streams over ``k`` buckets per shard (fixed by the group's first join; 0: the group's
    own, or 4 for a new group) and the buckets over its members.

    ``async with client.consumer("billing", "worker-1") as c: async for event in c: ...``,
    then :meth:`commit`. Each :class:`~corelog.types.GroupEvent` carries ``shard``,
    ``gen``, ``offset``, ``stream``, ``version``, ``payload``. Delivery is at least once
    and, within a stream, in version order: after a rebalance, a lost connection or a
    failover a bucket restarts at its last commit, so events handed out after the last
    commit may come again (here or to another member).

    :meth:`commit` commits, on every shard, everything handed out so far.
    ``auto_commit=True`` commits what was handed out whenever no event is ready (before
    waiting for more), and on a clean exit of ``async with``. A lost connection, a session
    the server ended, or a node that stopped leading: the member joins that shard again,
    following leadership, for up to ``rejoin_timeout`` seconds (default: the client's
    ``failover_timeout``); then, or on a refusal no retry cures (``BadRequest`` when the
    prefix or k differ from the group's, ``Forbidden``, a server without groups:
    ``BadVersion``), the consumer ends with that error, raised by every later call.
    """

    def __init__(self, addrs: Addrs, config: ClientConfig, group: str, member: str, prefix: str = "", k: int = 0,
                 auto_commit: bool = False, rejoin_timeout: Optional[float] = None) -> None:
        _check_text("group", group, 1, codec.MAX_GROUP_NAME)
        _check_text("member", member, 1, codec.MAX_MEMBER_ID)
        _check_text("prefix", prefix, 0, codec.MAX_GROUP_PREFIX)
        if _check_int("k", k, 8) > codec.MAX_GROUP_K:
            raise InvalidArgument(f"k {k} out of range (0 to {codec.MAX_GROUP_K})")
        self._addrs = codec.split_addrs(addrs)
        self._config = config
        self.group, self.member, self.prefix, self.k = group, member, prefix, k
        self.auto_commit = auto_commit
        self.rejoin_timeout = config.failover_timeout if rejoin_timeout is None else rejoin_timeout
        self._join_frame = GroupJoin(group, member, prefix, k).encode(_JOIN_ID)
        self._members: List[_Member] = []
        # Made by start(), on the loop that runs the consumer.
        self._queue: "Optional[asyncio.Queue[Union[_Item, BaseException, None]]]" = None
        #: Set while the pumps may read on (fewer than _QUEUE items wait).
        self._room: Optional[asyncio.Event] = None
        self._tasks: List["asyncio.Task[None]"] = []
        self._started = False
        self._closed = False
        self._error: Optional[BaseException] = None

    @property
    def generations(self) -> Dict[int, int]:
        """The generation of each shard's current assignment."""
        return {m.shard: m.gen for m in self._members if m.gen is not None}

    async def start(self) -> "Consumer":
        """Joins the group on every shard (the leader's direct port); raises what ended
        the attempts (see the class docs)."""
        if self._started:
            return self
        self._started = True
        self._queue, self._room = asyncio.Queue(), asyncio.Event()
        self._room.set()
        probe = Nodes(self._addrs, self._config)
        try:
            self._members = [_Member(s) for s in range(await probe.shard_count())]
            for m in self._members:
                reader, dec = await self._join(m)
                self._tasks.append(asyncio.ensure_future(self._serve(m, reader, dec)))
        except BaseException as e:
            if isinstance(e, Exception):
                self._error = e  # raised again by every later call
            await self.close()
            raise
        finally:
            await probe.close()
        self._tasks.append(asyncio.ensure_future(self._heartbeats()))
        return self

    async def _join(self, m: _Member) -> Tuple[asyncio.StreamReader, FrameDecoder]:
        """Joins on ``m``'s shard: the addresses in turn, a named leader first, with pauses
        between rounds, until one takes the join or ``rejoin_timeout`` runs out."""
        deadline = time.monotonic() + self.rejoin_timeout
        order, pause, errs = list(self._addrs), _BACKOFF_START, []
        while True:
            for a in order:
                direct = codec.shard_addr(a, m.shard)
                try:
                    reader, dec, assigned, writer = await self._join_at(direct)
                except _REJOIN as e:
                    bad = config_error(direct, self._config, e)
                    if bad is not None:
                        raise bad from None
                    errs.append(f"{direct}: {_why(e)}")
                    if isinstance(e, NotLeader) and e.leader:
                        order = [e.leader] + [x for x in self._addrs if x != e.leader]
                        break
                    continue
                except BadVersion as e:
                    raise BadVersion(f"{direct} does not serve consumer groups (protocol version "
                                     f"{codec.GROUPS_VERSION}): {e.message}") from None
                m.session += 1
                m.new_gen(assigned.gen)
                m.writer = writer
                log.info("group %r member %r joined shard %d at %s (generation %d, %d buckets)", self.group,
                         self.member, m.shard, direct, assigned.gen, len(assigned.buckets))
                return reader, dec
            if time.monotonic() + pause > deadline:
                raise Unreachable(f"group {self.group!r}: no leader of shard {m.shard} took the join within "
                                  f"{self.rejoin_timeout:g} s: " + "; ".join(errs[-len(self._addrs) - 1:]))
            await asyncio.sleep(pause)
            pause = min(pause * 2, _BACKOFF_MAX)

    async def _join_at(self, direct: str) -> Tuple[asyncio.StreamReader, FrameDecoder, GroupAssigned,
                                                   asyncio.StreamWriter]:
        """Greets ``direct`` (within the connect timeout) with the join, and waits for its
        first assignment: the server opens a generation for a join only once the joins
        and leaves around it settled, so that may take longer (the request timeout)."""
        greeted = _greet(direct, self._config, self._join_frame, codec.GROUPS_VERSION)
        reader, writer, _, dec = await _within(greeted, self._config.connect_timeout)
        try:
            f = await _within(_read_frame(reader, dec), self._config.request_timeout)
            if f is None:
                raise ConnectionClosed(f"{direct} closed the connection before answering the join")
            r = _response(f)
            if not isinstance(r, GroupAssigned):
                raise ProtocolError(f"expected GroupAssigned, got {type(r).__name__}")
        except BaseException:
            _close_writer(writer)
            raise
        return reader, dec, r, writer

    async def _serve(self, m: _Member, reader: asyncio.StreamReader, dec: FrameDecoder) -> None:
        """Pumps ``m``'s connection, joining again after it ends, until an error ends the
        consumer (queued for :meth:`next`)."""
        assert self._queue is not None
        while True:
            try:
                await self._pump(m, reader, dec)
            except asyncio.CancelledError:
                raise
            except _REJOIN as e:
                m.lost()
                log.info("group %r member %r: shard %d connection ended (%s); joining again", self.group,
                         self.member, m.shard, _why(e))
            except BaseException as e:  # noqa: BLE001 - handed to the caller of next()
                m.lost()
                await self._queue.put(_as_error(e))
                return
            try:
                reader, dec = await self._join(m)
            except asyncio.CancelledError:
                raise
            except BaseException as e:  # noqa: BLE001 - handed to the caller of next()
                await self._queue.put(_as_error(e))
                return

    async def _pump(self, m: _Member, reader: asyncio.StreamReader, dec: FrameDecoder) -> None:
        """Reads ``m``'s connection until it ends (raises why)."""
        assert self._queue is not None and self._room is not None
        while True:
            while self._queue.qsize() >= _QUEUE and not m.commits:
                self._room.clear()
                await self._room.wait()
            f = await _read_frame(reader, dec)
            if f is None:
                raise ConnectionClosed(f"the server closed shard {m.shard}'s group connection")
            waiting = m.commits.pop(f.req_id, None) if f.req_id != _JOIN_ID else None
            try:
                r = _response(f)
            except CorelogError as e:
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)
                if isinstance(e, StaleGeneration) and waiting is not None:
                    continue  # a commit of an earlier generation: the connection stays
                raise  # the session ended, or the node refuses the member
            if isinstance(r, GroupCommitted) and waiting is not None:
                if not waiting.done():
                    waiting.set_result(r)
            elif isinstance(r, GroupAssigned):
                m.new_gen(r.gen)
                log.info("group %r member %r: shard %d generation %d, %d buckets", self.group, self.member,
                         m.shard, r.gen, len(r.buckets))
            elif isinstance(r, GroupRecords) and m.gen is not None and r.gen <= m.gen:
                if r.gen == m.gen:  # else of an assignment that is over: dropped, as in _take
                    self._deliver(m, r)
            else:
                raise ProtocolError(f"unexpected {type(r).__name__} on shard {m.shard}'s group connection")

    def _deliver(self, m: _Member, r: GroupRecords) -> None:
        recs = _records(r.records)
        if len(recs) != r.count or any(rec.stream is None for rec in recs):
            raise ProtocolError(f"GroupRecords of {r.count} records holds {len(recs)}, or one without a stream")
        assert m.gen is not None and self._queue is not None
        for i, rec in enumerate(recs):
            nxt = r.next_offset if i == len(recs) - 1 else rec.offset + 1
            self._queue.put_nowait((m, m.session, m.gen, nxt, GroupEvent(m.shard, m.gen, rec)))
        if not recs:
            self._queue.put_nowait((m, m.session, m.gen, r.next_offset, None))

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT)
            for m in self._members:
                if m.gen is not None:
                    m.send(GroupHeartbeat(m.gen))

    async def next(self, timeout: Optional[float] = None) -> Optional[GroupEvent]:
        """The next event (``None`` once closed); :class:`RequestTimeout` if none within
        ``timeout`` seconds (the consumer goes on). Any other error ends the consumer."""
        if self._error is not None:
            raise self._error
        if not self._started:
            await self.start()
        return await _timed(self._take(), timeout, "event")

    async def _take(self) -> Optional[GroupEvent]:
        assert self._queue is not None and self._room is not None
        while True:
            if self._closed:
                return None
            if self.auto_commit and self._queue.empty():
                await self.commit()
            got = await self._queue.get()
            if self._queue.qsize() < _QUEUE:
                self._room.set()
            if got is None:
                return None
            if isinstance(got, BaseException):
                await self._fail(got)
            m, session, gen, nxt, event = got
            if (session, gen) != (m.session, m.gen):
                continue  # of an assignment that is over: its buckets restart from their commits
            m.next = nxt
            if event is not None:
                return event

    async def commit(self) -> Dict[int, int]:
        """Commits, on every shard, everything handed out so far, and waits until the
        commits are durable: ``{shard: next}`` of those confirmed. A shard whose
        generation changed meanwhile (``StaleGeneration``) or whose connection was lost is
        left out, not raised: its buckets restart from their last commit (events after it
        come again). :class:`RequestTimeout` if no answer comes within the request timeout."""
        if self._error is not None:
            raise self._error
        sent = []
        for m in self._members:
            if m.gen is None or m.next is None or m.next == m.committed:
                continue
            req_id = m.send(GroupCommit(m.gen, m.next))
            if req_id is not None:
                fut: "asyncio.Future[Optional[GroupCommitted]]" = asyncio.get_running_loop().create_future()
                m.commits[req_id] = fut
                sent.append((m, m.session, fut))
        if not sent:
            return {}
        assert self._room is not None
        self._room.set()  # the answers may wait behind events a full queue left unread
        answers = await _timed(asyncio.gather(*(fut for _, _, fut in sent)), self._config.request_timeout,
                               f"GroupCommitted of group {self.group!r}")
        done = {}
        for (m, session, _), r in zip(sent, answers):
            if r is None:
                continue
            done[m.shard] = r.next
            if (session, r.gen) == (m.session, m.gen) and (m.committed is None or r.next > m.committed):
                m.committed = r.next
        return done

    async def _fail(self, err: BaseException) -> NoReturn:
        """Ends the consumer (every shard's connection) with ``err``."""
        self._error = err
        await self.close()
        raise err

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            if exc_type is None and self.auto_commit and self._error is None and not self._closed:
                await self.commit()
        finally:
            await self.close()

    async def close(self) -> None:
        """Leaves the group (closes every shard's connection: the other members get the
        buckets at once); :meth:`next` then returns ``None``. Commits nothing."""
        self._closed = True
        for t in self._tasks:
            t.cancel()
        for m in self._members:
            m.lost()
        for t in self._tasks:
            try:
                await t
            except BaseException:  # noqa: BLE001 - cancelled or failed, either way it is over
                pass
        self._tasks.clear()
        if self._queue is not None:
            self._queue.put_nowait(None)  # wakes a next() waiting for an event


def _check_text(what: str, v: str, least: int, most: int) -> None:
    if not isinstance(v, str):
        raise InvalidArgument(f"{what} must be a str, not {type(v).__name__}")
    n = len(v.encode("utf-8"))
    if not least <= n <= most:
        raise InvalidArgument(f"{what} of {n} bytes out of range ({least} to {most} bytes of UTF-8)")


def _as_error(e: BaseException) -> BaseException:
    """The package's error for what ended a connection."""
    if isinstance(e, codec.CodecError):
        return ProtocolError(str(e))
    if isinstance(e, (OSError, EOFError)):
        return ConnectionClosed(f"group connection lost: {e}")
    return e
