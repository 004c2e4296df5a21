"""The asyncio :class:`Client` (part of :mod:`corelog.aio`): connecting to one of several
nodes, following leadership for appends, reads, trims and streams on the shards' direct
ports; tails, subscriptions and producers are made here and live in their own modules."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, Iterable, List, Optional

from . import codec
from .codec import Append2, Expect, ExpectLike, Record, StreamReq
from .errors import (
    CorelogError, Fenced, InvalidArgument, NotLeader, NotSent, ProtocolError, Unavailable, Unreachable,
)
from .types import ClientConfig, Position, ServerInfo, StreamAppended, StreamRead
from ._connection import (
    _BACKOFF_MAX, _BACKOFF_START, Addrs, Connection, _check_name, _check_payload, _records, _response, _why,
)
from ._producer import Producer
from ._push import Subscription, Tail

__all__ = ["Client", "connect"]


class Client:
    """A handle to a cluster's nodes (one connection at a time, shared by every task).

    ``addrs``: ``"host:port"`` or several, ``"A,B"`` (or a list), the nodes' client
    addresses. TLS settings as :class:`~corelog.types.ClientConfig` (``ca``, ``cert``,
    ``key`` or ``certs=DIR``; ``server_name``; ``insecure``) and its timeouts, or
    ``config=``. Use ``async with`` (or :meth:`connect` then :meth:`close`).
    """

    def __init__(self, addrs: Addrs, config: Optional[ClientConfig] = None, *,
                 _shard: Optional[int] = None, _given: Optional[List[str]] = None, **settings: Any) -> None:
        self.config = ClientConfig.of(config, **settings)
        given = codec.split_addrs(addrs)
        if not given:
            raise ValueError(f"no address in {addrs!r}")
        self._given = _given if _given is not None else given
        self._shard = _shard
        self._addrs = [codec.shard_addr(a, _shard) for a in given] if _shard is not None else given
        self._next = 0
        self._hint: Optional[str] = None
        self._conn: Optional[Connection] = None
        self._lock: Optional[asyncio.Lock] = None
        self._by_shard: Dict[int, "Client"] = {}
        self._closed = False

    # ------------------------------------------------------------------ connections

    async def __aenter__(self) -> "Client":
        await self.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def connect(self) -> "Client":
        """Connects now (else the first request does): :class:`Unreachable` if no node answers."""
        await self._connection()
        return self

    async def close(self) -> None:
        self._closed = True
        for c in list(self._by_shard.values()):
            await c.close()
        if self._conn is not None:
            await self._conn.aclose()
            self._conn = None

    @property
    def shard(self) -> Optional[int]:
        """The shard whose direct ports this client uses (``None``: the shared port)."""
        return self._shard

    async def info(self) -> ServerInfo:
        """The ``HelloOk`` of the current connection."""
        return (await self._connection()).info

    async def shard_count(self) -> int:
        return max(1, (await self._connection()).info.shard_count)

    async def _connection(self) -> Connection:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            c = self._conn
            if c is not None and not c.closed:
                return c
            if self._closed:
                raise NotSent("client closed")
            errs = []
            hint, self._hint = self._hint, None
            if hint is not None:
                try:
                    self._conn = await Connection.open(hint, self.config)
                    return self._conn
                except (OSError, asyncio.TimeoutError, CorelogError, ValueError) as e:
                    errs.append(f"{hint}: {_why(e)}")
            for _ in range(len(self._addrs)):
                i = self._next % len(self._addrs)
                a = self._addrs[i]
                try:
                    self._conn = await Connection.open(a, self.config)
                    return self._conn
                except (OSError, asyncio.TimeoutError, CorelogError, ValueError) as e:
                    errs.append(f"{a}: {_why(e)}")
                    self._next = i + 1
            raise Unreachable("no node reachable: " + "; ".join(errs))

    def _move_on(self, old: Connection, to: Optional[str] = None) -> None:
        """Drops ``old`` if it is still current; the next connection goes to ``to`` (a
        leader named by ``NotLeader``: an address of the list, or one tried once first)
        or to the address after the current one."""
        if to is not None and self._shard is not None:
            try:
                to = codec.shard_addr(to, self._shard)
            except ValueError:
                to = None
        if self._conn is old:
            self._conn = None
            old.retire()
            if to is not None and to in self._addrs:
                self._next = self._addrs.index(to)
            elif to is not None:
                self._hint = to
                self._next += 1
            else:
                self._next += 1

    async def _submit(self, frame: bytes) -> codec.Response:
        """Sends an append and returns its successful answer, following leadership while
        nothing was written."""
        give_up = time.monotonic() + self.config.failover_timeout
        backoff = _BACKOFF_START
        while True:
            try:
                conn = await asyncio.wait_for(self._connection(), max(0.0, give_up - time.monotonic()))
            except asyncio.TimeoutError:
                raise Unreachable("failover budget spent connecting") from None
            except Unreachable as e:
                err: CorelogError = e
            else:
                try:
                    reply = await conn.call(frame, self.config.request_timeout)
                except NotSent as e:
                    self._move_on(conn)
                    err = e
                except CorelogError:
                    self._move_on(conn)
                    raise  # sent, no answer: outcome unknown, never re-sent
                else:
                    try:
                        return _response(reply)
                    except NotLeader as e:
                        self._move_on(conn, e.leader or None)
                        err = e
                    except (Unavailable, Fenced) as e:
                        self._move_on(conn)
                        err = e
            # Nothing was written: try again, elsewhere, until the budget ends.
            if time.monotonic() + backoff >= give_up:
                raise err
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)

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
        """A client of ``shard``'s direct ports on the same nodes (made once, shared)."""
        if self._shard == shard:
            return self
        c = self._by_shard.get(shard)
        if c is None:
            c = Client(self._given, self.config, _shard=shard)
            self._by_shard[shard] = c
        return c

    async def shard_of(self, stream: str) -> int:
        """The shard that holds ``stream`` (FNV-1a-64 of the name mod the shard count)."""
        _check_name(stream)
        return codec.stream_shard(stream, await self.shard_count())

    async def for_stream(self, stream: str) -> "Client":
        return await self.for_shard(await self.shard_of(stream))

    # ------------------------------------------------------------------ appends and reads

    async def append(self, payload: bytes) -> Position:
        """Appends one event; returns its position once it is durable on every replica."""
        _check_payload(payload)
        r = await self._submit(codec.Append(bytes(payload)).encode(0))
        if not isinstance(r, codec.Appended):
            raise ProtocolError("expected Appended")
        return Position(r.shard, r.offset)

    async def append_many(self, payloads: Iterable[bytes]) -> List[Position]:
        """Appends every payload, all in flight at once on one connection (pipelined);
        positions in the order given. Raises the first error (the others may be written:
        see each error's ``outcome``)."""
        return list(await asyncio.gather(*(self.append(p) for p in payloads)))

    async def read(self, shard: int, offset: int = 0, max_bytes: int = codec.MAX_READ_BYTES) -> List[Record]:
        """Committed records of ``shard`` from ``offset``, about ``max_bytes`` (at least
        one if there is one); CRC-verified. ``[]`` at or past the end."""
        c = await self.for_shard(shard)
        r = await c._request(codec.Read(shard, offset, min(max_bytes, codec.MAX_READ_BYTES)).encode(0))
        if not isinstance(r, codec.Records):
            raise ProtocolError("expected Records")
        return _records(r.records)

    async def read_all(self, shard: int, offset: int = 0, end: Optional[int] = None) -> List[Record]:
        """Every committed record of ``shard`` from ``offset`` (up to ``end``, exclusive)."""
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
        if not 0 <= before < 1 << 64:
            raise InvalidArgument(f"offset {before} out of range")
        c = await self.for_shard(shard)
        r = await c._request(codec.Trim(shard, before).encode(0))
        if not isinstance(r, codec.Trimmed):
            raise ProtocolError("expected Trimmed")
        return r.first_offset

    def tail(self, shard: int, offset: int = 0) -> "Tail":
        """The records of ``shard`` from ``offset`` on, live: ``async for r in c.tail(0)``."""
        return Tail(self._given, shard, offset, self.config)

    # ------------------------------------------------------------------ streams

    async def append_to(self, stream: str, payload: bytes, expect: ExpectLike = None) -> StreamAppended:
        """Appends to ``stream`` if its version meets ``expect`` (``"any"``/``None``,
        ``"none"``: no event yet, or ``N``: its last event has version N). Returns
        ``(shard, offset, version)``. A mismatch raises :class:`WrongExpectedVersion`
        with ``.current`` (nothing written). Plain-append failure semantics; for
        exactly-once use :meth:`producer_for_stream`."""
        _check_payload(payload)
        e = Expect.parse(expect)
        c = await self.for_stream(stream)
        r = await c._submit(Append2(None, StreamReq.new(stream, e), bytes(payload)).encode(0))
        if not isinstance(r, codec.Appended2) or r.version is None:
            raise ProtocolError("expected Appended2 with a stream version")
        return StreamAppended(r.shard, r.offset, r.version)

    async def read_stream(self, stream: str, from_version: int = 0,
                          max_count: int = codec.MAX_READ_COUNT) -> StreamRead:
        """Committed events of ``stream`` from ``from_version`` (at most ``max_count``)."""
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
        return Subscription(self._given, self.config, stream=stream, from_version=from_version)

    def subscribe_prefix(self, prefix: str, positions: Optional[Dict[int, int]] = None) -> "Subscription":
        """The events of every stream whose name starts with ``prefix`` (``""``: all), on
        every shard, from ``positions`` (next offset per shard; missing: 0), live."""
        return Subscription(self._given, self.config, prefix=prefix, positions=positions)

    # ------------------------------------------------------------------ producers

    async def producer(self, shard: int = 0, id: Optional[int] = None, next_seq: int = 0) -> "Producer":
        """An idempotent producer for ``shard`` (random id unless given)."""
        return await Producer.connect(self._given, shard, self.config, id=id, next_seq=next_seq)

    async def producer_for_stream(self, stream: str, id: Optional[int] = None, next_seq: int = 0) -> "Producer":
        """An idempotent producer for the shard that holds ``stream``."""
        return await self.producer(await self.shard_of(stream), id=id, next_seq=next_seq)


def connect(addrs: Addrs, config: Optional[ClientConfig] = None, **settings: Any) -> Client:
    """``async with corelog.aio.connect("A,B", certs="certs") as c: ...``"""
    return Client(addrs, config, **settings)
