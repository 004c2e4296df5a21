"""The asyncio :class:`Client` (part of :mod:`corelog.aio`): appends, reads, trims and
streams on the shards' direct ports, over the connection its :class:`~._retry.Nodes` base
picks (one of several nodes, following leadership); tails, subscriptions, consumer-group
members and producers are made here and live in their own modules."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Dict, Iterable, List, Optional, TypeVar

from . import codec
from .codec import Append2, Expect, ExpectLike, Frame, Record, StreamReq
from .errors import ClientClosed, CorelogError, InvalidArgument, NotSent, ProtocolError, ServerError, Unreachable
from .types import ClientConfig, Position, StreamAppended, StreamRead
from ._connection import Addrs, _check_int, _check_name, _check_payload, _records, _response
from ._group import Consumer
from ._producer import Producer
from ._push import Subscription, Tail
from ._retry import LOST, MOVE, Attempts, Nodes

__all__ = ["Client", "connect"]

T = TypeVar("T")


class Client(Nodes):
    """A handle to a cluster's nodes (one connection at a time, shared by every task).

    ``addrs``: ``"host:port"`` or several, ``"A,B"`` (or a list), the nodes' client
    addresses. TLS settings as :class:`~corelog.types.ClientConfig` (``ca``, ``cert``,
    ``key`` or ``certs=DIR``; ``server_name``; ``insecure``) and its timeouts, or
    ``config=``. Use ``async with`` (or :meth:`connect` then :meth:`close`). A bad address
    or certificate path raises :class:`~corelog.errors.ConfigError` here.
    """

    async def _submit(self, frame: bytes, parse: Callable[[Frame], T], attempts: Attempts) -> T:
        """Sends an append and returns ``parse`` of its answer, following leadership while
        nothing was written; the one retry path of plain and stream appends (producers
        use the same :class:`Attempts` and :func:`step`). Raises the last error with the
        outcome over all attempts, or :class:`~corelog.errors.Cancelled`."""
        while True:
            fut = None
            try:
                try:
                    conn = await self._connection(attempts.left())
                except Unreachable as e:
                    err: CorelogError = e
                else:
                    attempts.sending()
                    try:
                        fut = conn.send(frame, watch=True)
                    except NotSent as e:
                        attempts.unsent()
                        self._move_on(conn)
                        err = e
                    else:
                        await conn.drain()
                        try:
                            return parse(await conn.wait(fut, self.config.request_timeout))
                        except CorelogError as e:
                            err = e
                        what, err = attempts.answered_on(conn, err)
                        if what == LOST:
                            if not isinstance(err, ServerError):
                                self._move_on(conn)  # the connection broke or hangs
                            raise attempts.fail(err)
                        if what != MOVE:
                            raise attempts.fail(err)
                        self._after_refusal(conn, err)
                await attempts.pause(err)
            except asyncio.CancelledError:
                raise attempts.cancelled(fut, parse) from None

    async def _request(self, frame: bytes) -> codec.Response:
        """A request that writes nothing (a read); a failure drops the connection."""
        conn = await self._connection()
        try:
            reply = await conn.call(frame, self.config.request_timeout)
        except CorelogError:
            self._move_on(conn)
            raise
        return _response(reply)

    async def for_shard(self, shard: int) -> "Client":
        """A client of ``shard``'s direct ports on the same nodes (made once, shared);
        :class:`InvalidArgument` if the cluster has no such shard."""
        _check_int("shard", shard, 16)
        if self._shard == shard:
            return self
        count = await self.shard_count()
        if shard >= count:
            raise InvalidArgument(f"shard {shard} does not exist: the cluster has {count} (0 to {count - 1})")
        return self._shard_client(shard)

    def _shard_client(self, shard: int) -> "Client":
        if self._shard == shard:
            return self
        if self._closed:
            raise ClientClosed("the client is closed")
        c = self._by_shard.get(shard)
        if c is None:
            c = Client(self._given, self.config, _shard=shard, _parent=self)
            self._by_shard[shard] = c
        return c

    async def shard_of(self, stream: str) -> int:
        """The shard that holds ``stream`` (FNV-1a-64 of the name mod the shard count)."""
        _check_name(stream)
        return codec.stream_shard(stream, await self.shard_count())

    async def for_stream(self, stream: str) -> "Client":
        """The client of the shard that holds ``stream`` (see :meth:`for_shard`)."""
        return await self.for_shard(await self.shard_of(stream))

    # ------------------------------------------------------------------ appends and reads

    async def append(self, payload: bytes) -> Position:
        """Appends one event; returns its position once it is durable on every replica.
        Follows leadership within ``failover_timeout``; a failure's ``outcome`` says
        whether it may be in the log, a cancellation raises
        :class:`~corelog.errors.Cancelled` with the outcome (docs/protocol.md §6)."""
        return await self._append(payload)

    async def _append(self, payload: bytes, gate: Optional[Callable[[], bool]] = None) -> Position:
        _check_payload(payload)
        attempts = Attempts(self.config, "append")
        attempts.gate = gate
        return await self._submit(codec.Append(bytes(payload)).encode(0), _position, attempts)

    async def append_many(self, payloads: Iterable[bytes]) -> List[Position]:
        """Appends every payload, all in flight at once on one connection (pipelined);
        positions in the order given. Raises the first error (the others may be written:
        see each error's ``outcome``)."""
        return list(await asyncio.gather(*(self.append(p) for p in payloads)))

    async def read(self, shard: int, offset: int = 0, max_bytes: int = codec.MAX_READ_BYTES) -> List[Record]:
        """Committed records of ``shard`` from ``offset``, about ``max_bytes`` (at least
        one if there is one); CRC-verified. ``[]`` at or past the end."""
        _check_int("offset", offset, 64)
        _check_int("max_bytes", max_bytes, 32)
        c = await self.for_shard(shard)
        r = await c._request(codec.Read(shard, offset, min(max_bytes, codec.MAX_READ_BYTES)).encode(0))
        if not isinstance(r, codec.Records):
            raise ProtocolError("expected Records")
        return _records(r.records)

    async def read_all(self, shard: int, offset: int = 0, end: Optional[int] = None) -> List[Record]:
        """Every committed record of ``shard`` from ``offset`` (up to ``end``, exclusive)."""
        if end is not None:
            _check_int("end", end, 64)
        out: List[Record] = []
        while end is None or offset < end:
            recs = await self.read(shard, offset)
            if not recs:
                break
            for r in recs:
                if end is not None and r.offset >= end:
                    return out
                out.append(r)
            offset = recs[-1].offset + 1
        return out

    async def trim(self, shard: int, before: int) -> int:
        """Asks a node to delete its whole segments of ``shard`` that hold only offsets
        below ``before``, within what its peer may still need (docs/operations.md §13);
        returns the node's first offset of the shard afterwards (it may delete less than
        asked, or nothing). Sent, like :meth:`read`, to the shard's direct port of the
        first node that answers — one node's copy only: trim each node with a client of
        its own address to trim both. Reads below the first offset then raise
        :class:`~corelog.errors.OutOfRange` (``.first``)."""
        _check_int("before", before, 64)
        c = await self.for_shard(shard)
        r = await c._request(codec.Trim(shard, before).encode(0))
        if not isinstance(r, codec.Trimmed):
            raise ProtocolError("expected Trimmed")
        return r.first_offset

    def tail(self, shard: int, offset: int = 0) -> "Tail":
        """The records of ``shard`` from ``offset`` on, live: ``async for r in c.tail(0)``."""
        _check_int("shard", shard, 16)
        _check_int("offset", offset, 64)
        if self._closed:
            raise ClientClosed("the client is closed")
        return Tail(self._given, shard, offset, self.config)

    # ------------------------------------------------------------------ streams

    async def append_to(self, stream: str, payload: bytes, expect: ExpectLike = None) -> StreamAppended:
        """Appends to ``stream`` if its version meets ``expect`` (``"any"``/``None``,
        ``"none"``: no event yet, or ``N``: its last event has version N). Returns
        ``(shard, offset, version)``. A mismatch raises :class:`WrongExpectedVersion`
        with ``.current`` (nothing written). Follows leadership as :meth:`append` does
        (finding the stream's shard included); for exactly-once use
        :meth:`producer_for_stream`."""
        return await self._append_to(stream, payload, expect)

    async def _append_to(self, stream: str, payload: bytes, expect: ExpectLike = None,
                         gate: Optional[Callable[[], bool]] = None) -> StreamAppended:
        _check_payload(payload)
        _check_name(stream)
        try:
            e = Expect.parse(expect)
        except (ValueError, TypeError) as x:
            raise InvalidArgument(f"expect {expect!r}: {x}") from None
        attempts = Attempts(self.config, f"append to stream {stream!r}")
        attempts.gate = gate
        try:
            shard = codec.stream_shard(stream, await self._shard_count(attempts))
        except asyncio.CancelledError:
            raise attempts.cancelled() from None
        frame = Append2(None, StreamReq.new(stream, e), bytes(payload)).encode(0)
        return await self._shard_client(shard)._submit(frame, _stream_appended, attempts)

    async def read_stream(self, stream: str, from_version: int = 0,
                          max_count: int = codec.MAX_READ_COUNT) -> StreamRead:
        """Committed events of ``stream`` from ``from_version`` (at most ``max_count``)."""
        _check_int("from_version", from_version, 64)
        _check_int("max_count", max_count, 32)
        c = await self.for_stream(stream)
        req = codec.ReadStream(stream.encode(), from_version, min(max_count, codec.MAX_READ_COUNT),
                               codec.MAX_READ_BYTES)
        r = await c._request(req.encode(0))
        if not isinstance(r, codec.StreamRecords):
            raise ProtocolError("expected StreamRecords")
        return StreamRead(_records(r.records), r.next_version, r.end_version)

    async def read_stream_all(self, stream: str, from_version: int = 0) -> List[Record]:
        """Every committed event of ``stream`` from ``from_version``."""
        out: List[Record] = []
        while True:
            got = await self.read_stream(stream, from_version)
            out.extend(got.events)
            if not got.events or got.next_version >= got.end_version:
                return out
            from_version = got.next_version

    def subscribe(self, stream: str, from_version: int = 0) -> "Subscription":
        """The events of ``stream`` from ``from_version`` on, catch-up then live."""
        _check_name(stream)
        _check_int("from_version", from_version, 64)
        return Subscription(self._given, self.config, stream=stream, from_version=from_version)

    def subscribe_prefix(self, prefix: str, positions: Optional[Dict[int, int]] = None) -> "Subscription":
        """The events of every stream whose name starts with ``prefix`` (``""``: all), on
        every shard, from ``positions`` (next offset per shard; missing: 0), live."""
        return Subscription(self._given, self.config, prefix=prefix, positions=positions)

    def consumer(self, group: str, member: str, prefix: str = "", k: int = 0, auto_commit: bool = False,
                 rejoin_timeout: Optional[float] = None) -> "Consumer":
        """A member ``member`` of consumer group ``group`` for the streams whose name
        starts with ``prefix``: ``async with c.consumer("billing", "w1") as m: async for
        event in m: ...``, then ``await m.commit()``. See :class:`~corelog.aio.Consumer`."""
        if self._closed:
            raise ClientClosed("the client is closed")
        return Consumer(self._given, self.config, group, member, prefix, k, auto_commit, rejoin_timeout)

    # ------------------------------------------------------------------ producers

    async def producer(self, shard: int = 0, id: Optional[int] = None, next_seq: int = 0) -> "Producer":
        """An idempotent producer for ``shard`` (random id unless given)."""
        await self.for_shard(shard)  # InvalidArgument for a shard that does not exist
        return await Producer.connect(self._given, shard, self.config, id=id, next_seq=next_seq)

    async def producer_for_stream(self, stream: str, id: Optional[int] = None, next_seq: int = 0) -> "Producer":
        """An idempotent producer for the shard that holds ``stream``."""
        return await self.producer(await self.shard_of(stream), id=id, next_seq=next_seq)


def connect(addrs: Addrs, config: Optional[ClientConfig] = None, **settings: Any) -> Client:
    """``async with corelog.aio.connect("A,B", certs="certs") as c: ...``"""
    return Client(addrs, config, **settings)


def _position(f: Frame) -> Position:
    r = _response(f)
    if not isinstance(r, codec.Appended):
        raise ProtocolError("expected Appended")
    return Position(r.shard, r.offset)


def _stream_appended(f: Frame) -> StreamAppended:
    r = _response(f)
    if not isinstance(r, codec.Appended2) or r.version is None:
        raise ProtocolError("expected Appended2 with a stream version")
    return StreamAppended(r.shard, r.offset, r.version)
