"""The idempotent :class:`Producer` of the asyncio client (part of :mod:`corelog.aio`)."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Iterable, List, Optional, Set, Tuple, Union

from . import codec
from .codec import Append2, ExpectLike, Frame, ProducerSeq, StreamReq
from .errors import (
    ClientClosed, CorelogError, InvalidArgument, NotSent, ProducerStopped, ProtocolError, Unreachable,
    WrongExpectedVersion,
)
from .types import Appended, ClientConfig
from ._connection import WINDOW, Addrs, Connection, _check_int, _check_name, _check_payload, _response
from ._retry import LOST, MOVE, STOP, WAIT, Attempts, Nodes, step

__all__ = ["Producer"]


def _retried(e: CorelogError) -> bool:
    """Whether an idempotent append is sent again after this error."""
    return step(e) != STOP


class Producer:
    """An idempotent producer bound to one shard (``client/src/producer.rs``).

    It has a random 64-bit id and numbers its appends 0, 1, 2, ... (``Append2``). The
    shard answers a re-sent sequence with its original position, so the producer re-sends
    what a plain append gives up on — a connection lost after sending, a timeout,
    ``OutcomeUnknown``, ``ReplicationTimeout``, ``NotLeader``, ``Unavailable``,
    ``Fenced``, no node reachable — for ``failover_timeout`` from the first failure,
    never storing an event twice. Re-sends go out in sequence order; a new sequence is
    sent only within :data:`WINDOW` of the lowest unsettled one. An append that fails for
    good stops the producer (:class:`ProducerStopped` for every later call); its error's
    ``outcome`` is over all its attempts: ``unknown`` if any of them may have landed and
    none got a definite answer before the budget ended. A cancelled append stops the
    producer too (:class:`~corelog.errors.Cancelled` with the outcome).
    Conditional stream appends (``expect`` not ``any``) go alone, so that a
    :class:`WrongExpectedVersion` hands its sequence back and the producer goes on.
    """

    def __init__(self, client: Nodes, id: int, shard: int, next_seq: int, shard_count: int) -> None:
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
        self._waiters: List["asyncio.Future[bool]"] = []
        self.retries = 0

    @classmethod
    async def connect(cls, addrs: Addrs, shard: int = 0, config: Optional[ClientConfig] = None, *,
                      id: Optional[int] = None, next_seq: int = 0, **settings: Any) -> "Producer":
        """A producer (new random id unless ``id``; first sequence ``next_seq``) for
        ``shard`` of the nodes ``addrs``."""
        cfg = ClientConfig.of(config, **settings)
        _check_int("shard", shard, 16)
        client = Nodes(addrs, cfg, _shard=shard)
        await client.connect()
        pid = id if id is not None else int.from_bytes(os.urandom(8), "little")
        return cls(client, pid, shard, next_seq, await client.shard_count())

    @property
    def next_seq(self) -> int:
        """The sequence the next new append gets."""
        return self._next

    async def close(self) -> None:
        """Closes the producer's connection; later appends raise :class:`ClientClosed`."""
        await self._client.close()

    async def __aenter__(self) -> "Producer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def append(self, payload: bytes) -> Appended:
        """Appends ``payload`` exactly once; its position when durable on every replica."""
        return await self._append(None, payload)

    @property
    def stopped(self) -> bool:
        """Whether an append failed for good (every later one raises :class:`ProducerStopped`)."""
        return self._stopped

    async def append_many(self, payloads: Iterable[bytes]) -> List[Appended]:
        """Appends every payload (up to :data:`WINDOW` in flight), in order."""
        return list(await asyncio.gather(*(self.append(p) for p in payloads)))

    async def append_to(self, stream: str, payload: bytes, expect: ExpectLike = None) -> Appended:
        """Appends once to ``stream`` (which must live on this producer's shard) if the
        stream meets ``expect``. :class:`WrongExpectedVersion` leaves the producer usable."""
        return await self._append_to(stream, payload, expect)

    async def _append_to(self, stream: str, payload: bytes, expect: ExpectLike = None,
                         gate: Optional[Callable[[], bool]] = None) -> Appended:
        _check_name(stream)
        home = codec.stream_shard(stream, self.shard_count)
        if home != self.shard:
            raise InvalidArgument(f"stream {stream!r} lives on shard {home}; this producer appends to shard "
                                  f"{self.shard}")
        try:
            req = StreamReq.new(stream, expect)
        except (ValueError, TypeError) as x:
            raise InvalidArgument(f"expect {expect!r}: {x}") from None
        return await self._append(req, payload, gate)

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(True)

    async def _wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for a settle notification; False on timeout. (No ``asyncio.wait_for``:
        before Python 3.12 it can turn a cancellation into a result.)"""
        loop = asyncio.get_running_loop()
        w: "asyncio.Future[bool]" = loop.create_future()
        self._waiters.append(w)
        timer = None if timeout is None else loop.call_later(timeout, lambda: w.done() or w.set_result(False))
        try:
            return await w
        finally:
            if timer is not None:
                timer.cancel()

    def _stopped_error(self) -> ProducerStopped:
        return ProducerStopped(f"producer {self.id:#018x} stopped after an append failed for good; later sequences "
                               "cannot follow it: start a new producer")

    async def _append(self, stream: Optional[StreamReq], payload: bytes,
                      gate: Optional[Callable[[], bool]] = None) -> Appended:
        _check_payload(payload)
        if self._client.closed:
            raise ClientClosed("the producer is closed")
        exclusive = stream is not None and stream.expect_kind != codec.EXPECT_ANY
        attempts = Attempts(self._client.config, f"producer {self.id:#018x} append", start=False)
        attempts.gate = gate
        waiting = False
        try:
            while True:
                if self._stopped:
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
        except asyncio.CancelledError:
            raise attempts.cancelled() from None
        finally:
            if waiting:
                self._want_exclusive -= 1
        seq = self._next
        self._next += 1
        self._pending.add(seq)
        self._exclusive = exclusive
        attempts.what = f"producer {self.id:#018x} sequence {seq}"
        frame = Append2(ProducerSeq(self.id, seq), stream, bytes(payload)).encode(0)
        err: Optional[BaseException] = None
        try:
            # No await between taking the sequence and writing it: sends leave in sequence order.
            first = self._send_now(frame, attempts)
            return await self._complete(seq, frame, first, attempts)
        except BaseException as e:
            err = e
            raise
        finally:
            if (isinstance(err, WrongExpectedVersion) and exclusive and attempts.sent == 1
                    and self._next == seq + 1):
                self._next = seq  # refused at its only send: the sequence is free again
            elif err is not None:
                self._stopped = True
            self._pending.discard(seq)
            self._failed.discard(seq)
            if exclusive:
                self._exclusive = False
            self._notify()

    def _send_now(self, frame: bytes, attempts: Attempts
                  ) -> Union[Tuple[Connection, "asyncio.Future[Frame]"], CorelogError, None]:
        """Writes ``frame`` on the current connection if there is one (no await); ``None``
        when a connection must be opened first."""
        c = self._client._conn
        if c is None or c.closed:
            return None
        return _send_on(c, frame, attempts)

    async def _send(self, frame: bytes, attempts: Attempts
                    ) -> Union[Tuple[Connection, "asyncio.Future[Frame]"], CorelogError]:
        try:
            conn = await self._client._connection(attempts.left())
        except ClientClosed:
            raise
        except CorelogError as e:
            return e
        return _send_on(conn, frame, attempts)

    async def _complete(self, seq: int, frame: bytes, first: Any, attempts: Attempts) -> Appended:
        cfg = self._client.config
        sent = first
        fut: "Optional[asyncio.Future[Frame]]" = None

        def parse(f: Frame) -> Appended:
            r = _response(f)
            if not isinstance(r, codec.Appended2):
                raise ProtocolError("expected Appended2")
            return Appended(r.shard, r.offset, seq, r.duplicate, r.version)

        try:
            if sent is None:
                # No connection yet: open one, in sequence order (the lowest pending goes first).
                await self._wait_turn(seq, attempts, None)
                sent = await self._send(frame, attempts)
            while True:
                conn: Optional[Connection] = None
                fut = None
                if isinstance(sent, CorelogError):
                    err: CorelogError = sent
                else:
                    conn, fut = sent
                    try:
                        await conn.drain()
                        return parse(await conn.wait(fut, cfg.request_timeout))
                    except CorelogError as e:
                        err = e
                if conn is not None:
                    what, err = attempts.answered_on(conn, err)
                else:
                    what = attempts.answered(err)
                if what == STOP:
                    raise attempts.fail(err)
                self._failed.add(seq)
                if conn is not None and what == MOVE:
                    self._client._after_refusal(conn, err)
                elif conn is not None and what == LOST:
                    self._client._move_on(conn)
                attempts.start()
                waited = await self._wait_turn(seq, attempts, err)
                if not waited:
                    await attempts.pause(err)
                self.retries += 1
                fut = None
                sent = await self._send(frame, attempts)
        except asyncio.CancelledError:
            raise attempts.cancelled(fut, parse) from None

    async def _wait_turn(self, seq: int, attempts: Attempts, err: Optional[CorelogError]) -> bool:
        """Waits until ``seq`` is the lowest pending sequence; True if it had to wait.
        Raises the stop (or ``err``, the budget spent) with the outcome so far."""
        waited = False
        while True:
            if self._stopped:
                raise attempts.fail(self._stopped_error())
            if min(self._pending) == seq:
                return waited
            left = attempts.left()
            if left <= 0 or not await self._wait(left):
                raise attempts.fail(err if err is not None else
                                    Unreachable("failover budget spent waiting for earlier sequences"))
            waited = True


def _send_on(conn: Connection, frame: bytes, attempts: Attempts
             ) -> Union[Tuple[Connection, "asyncio.Future[Frame]"], CorelogError]:
    """Hands ``frame`` to ``conn`` and counts the attempt: an attempt the connection
    refused (closed before it took the frame) is counted back as never sent."""
    attempts.sending()
    try:
        return conn, conn.send(frame, watch=True)
    except NotSent as e:
        attempts.unsent()
        return e
