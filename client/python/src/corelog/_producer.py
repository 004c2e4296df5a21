"""The idempotent :class:`Producer` of the asyncio client (part of :mod:`corelog.aio`)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Set, Tuple, Union

from . import codec
from .codec import Append2, ExpectLike, Frame, ProducerSeq, StreamReq
from .errors import (
    ConnectionClosed, CorelogError, Fenced, InvalidArgument, NotLeader, NotSent, OutcomeUnknown, Overloaded,
    ProducerStopped, ProtocolError, ReplicationTimeout, RequestTimeout, SequenceGap, ShuttingDown,
    Unavailable, UnknownProducer, Unreachable,
)
from .types import Appended, ClientConfig
from ._connection import (
    _BACKOFF_MAX, _BACKOFF_START, WINDOW, Addrs, Connection, _check_name, _check_payload, _response,
)

if TYPE_CHECKING:
    from ._client import Client

__all__ = ["Producer"]


def _retried(e: CorelogError) -> bool:
    """Whether an idempotent append is sent again after this error."""
    if isinstance(e, (ConnectionClosed, NotSent, RequestTimeout, Unreachable)):
        return True
    return isinstance(e, (NotLeader, Unavailable, Fenced, OutcomeUnknown, ReplicationTimeout, SequenceGap,
                          UnknownProducer, ShuttingDown, Overloaded))


class Producer:
    """An idempotent producer bound to one shard (``client/src/producer.rs``).

    It has a random 64-bit id and numbers its appends 0, 1, 2, ... (``Append2``). The
    shard answers a re-sent sequence with its original position, so the producer re-sends
    what a plain append gives up on — a connection lost after sending, a timeout,
    ``OutcomeUnknown``, ``ReplicationTimeout``, ``NotLeader``, ``Unavailable``,
    ``Fenced``, no node reachable — for ``failover_timeout`` from the first failure,
    never storing an event twice. Re-sends go out in sequence order; a new sequence is
    sent only within :data:`WINDOW` of the lowest unsettled one. An append that fails for
    good stops the producer (:class:`ProducerStopped` for every later call).
    Conditional stream appends (``expect`` not ``any``) go alone, so that a
    :class:`WrongExpectedVersion` hands its sequence back and the producer goes on.
    """

    def __init__(self, client: Client, id: int, shard: int, next_seq: int, shard_count: int) -> None:
        self._client = client
        self.id = id
        self.shard = shard
        self.shard_count = shard_count
        self._next = next_seq
        self._pending: Set[int] = set()
        self._failed: Set[int] = set()
        self._exclusive = False
        self._want_exclusive = 0
        self._stopped = False
        self._waiters: List["asyncio.Future[None]"] = []
        self.retries = 0

    @classmethod
    async def connect(cls, addrs: Addrs, shard: int = 0, config: Optional[ClientConfig] = None, *,
                      id: Optional[int] = None, next_seq: int = 0, **settings: Any) -> "Producer":
        """A producer (new random id unless ``id``; first sequence ``next_seq``) for
        ``shard`` of the nodes ``addrs``."""
        cfg = ClientConfig.of(config, **settings)
        from ._client import Client  # the client module imports this one

        client = Client(addrs, cfg, _shard=shard)
        await client.connect()
        pid = id if id is not None else int.from_bytes(os.urandom(8), "little")
        return cls(client, pid, shard, next_seq, await client.shard_count())

    @property
    def next_seq(self) -> int:
        """The sequence the next new append gets."""
        return self._next

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> "Producer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def append(self, payload: bytes) -> Appended:
        """Appends ``payload`` exactly once; its position when durable on every replica."""
        return await self._append(None, payload)

    async def append_many(self, payloads: Iterable[bytes]) -> List[Appended]:
        """Appends every payload (up to :data:`WINDOW` in flight), in order."""
        return list(await asyncio.gather(*(self.append(p) for p in payloads)))

    async def append_to(self, stream: str, payload: bytes, expect: ExpectLike = None) -> Appended:
        """Appends once to ``stream`` (which must live on this producer's shard) if the
        stream meets ``expect``. :class:`WrongExpectedVersion` leaves the producer usable."""
        _check_name(stream)
        home = codec.stream_shard(stream, self.shard_count)
        if home != self.shard:
            raise InvalidArgument(f"stream {stream!r} lives on shard {home}; this producer appends to shard "
                                  f"{self.shard}")
        return await self._append(StreamReq.new(stream, expect), payload)

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def _wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for a settle notification; False on timeout."""
        w: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._waiters.append(w)
        try:
            await asyncio.wait_for(w, timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def _stopped_error(self) -> ProducerStopped:
        return ProducerStopped(f"producer {self.id:#018x} stopped after an append failed for good; later sequences "
                               "cannot follow it: start a new producer")

    async def _append(self, stream: Optional[StreamReq], payload: bytes) -> Appended:
        _check_payload(payload)
        exclusive = stream is not None and stream.expect_kind != codec.EXPECT_ANY
        waiting = False
        while True:
            if self._stopped:
                if waiting:
                    self._want_exclusive -= 1
                raise self._stopped_error()
            busy = self._exclusive or (bool(self._pending) if exclusive else self._want_exclusive > 0)
            full = bool(self._pending) and self._next - min(self._pending) >= WINDOW
            if busy or self._failed or full:
                if exclusive and not waiting:
                    waiting = True
                    self._want_exclusive += 1
                await self._wait()
                continue
            break
        if waiting:
            self._want_exclusive -= 1
        seq = self._next
        self._next += 1
        self._pending.add(seq)
        self._exclusive = exclusive
        frame = Append2(ProducerSeq(self.id, seq), stream, bytes(payload)).encode(0)
        # No await between taking the sequence and writing it: sends leave in sequence order.
        first = self._send_now(frame)
        resent = [False]
        err: Optional[BaseException] = None
        try:
            return await self._complete(seq, frame, first, resent)
        except BaseException as e:
            err = e
            raise
        finally:
            from .errors import WrongExpectedVersion

            if isinstance(err, WrongExpectedVersion) and exclusive and not resent[0] and self._next == seq + 1:
                self._next = seq  # refused at its only send: the sequence is free again
            elif err is not None:
                self._stopped = True
            self._pending.discard(seq)
            self._failed.discard(seq)
            if exclusive:
                self._exclusive = False
            self._notify()

    def _send_now(self, frame: bytes) -> Union[Tuple[Connection, "asyncio.Future[Frame]"], CorelogError, None]:
        """Writes ``frame`` on the current connection if there is one (no await); ``None``
        when a connection must be opened first."""
        c = self._client._conn
        if c is None or c.closed:
            return None
        try:
            return c, c.send(frame)
        except CorelogError as e:
            return e

    async def _send(self, frame: bytes) -> Union[Tuple[Connection, "asyncio.Future[Frame]"], CorelogError]:
        try:
            conn = await self._client._connection()
            return conn, conn.send(frame)
        except CorelogError as e:
            return e

    async def _complete(self, seq: int, frame: bytes, first: Any, resent: List[bool]) -> Appended:
        cfg = self._client.config
        give_up: Optional[float] = None
        backoff = _BACKOFF_START
        sent = first
        if sent is None:
            # No connection yet: open one, in sequence order (the lowest pending goes first).
            await self._wait_turn(seq, time.monotonic() + cfg.failover_timeout + cfg.connect_timeout)
            sent = await self._send(frame)
        while True:
            conn: Optional[Connection] = None
            if isinstance(sent, CorelogError):
                err: CorelogError = sent
            else:
                conn, fut = sent
                try:
                    await conn.drain()
                    r = _response(await conn.wait(fut, cfg.request_timeout))
                    if not isinstance(r, codec.Appended2):
                        raise ProtocolError("expected Appended2")
                    return Appended(r.shard, r.offset, seq, r.duplicate, r.version)
                except CorelogError as e:
                    err = e
            if not _retried(err):
                raise err
            self._failed.add(seq)
            gap = isinstance(err, (SequenceGap, UnknownProducer))
            if conn is not None and not gap:
                self._client._move_on(conn, err.leader or None if isinstance(err, NotLeader) else None)
            if give_up is None:
                give_up = time.monotonic() + cfg.failover_timeout
            waited = await self._wait_turn(seq, give_up, err)
            if not waited:
                if time.monotonic() + backoff >= give_up:
                    raise err
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
            self.retries += 1
            resent[0] = True
            sent = await self._send(frame)

    async def _wait_turn(self, seq: int, end: float, err: Optional[CorelogError] = None) -> bool:
        """Waits until ``seq`` is the lowest pending sequence; True if it had to wait."""
        waited = False
        while True:
            if self._stopped:
                raise self._stopped_error()
            if min(self._pending) == seq:
                return waited
            left = end - time.monotonic()
            if left <= 0 or not await self._wait(left):
                raise err if err is not None else Unreachable("failover budget spent waiting for earlier sequences")
            waited = True
