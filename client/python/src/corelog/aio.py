"""The asyncio client.

.. code-block:: python

    import asyncio, corelog.aio

    async def main():
        async with corelog.aio.Client("127.0.0.1:19400,127.0.0.1:19500", certs="D/certs") as c:
            pos = await c.append(b"Hello World")
            print(await c.read(pos.shard, pos.offset))

    asyncio.run(main())

Behaviour mirrors the Rust client (``client/src/client.rs``, docs/protocol.md §6):

* one connection carries many requests at once (pipelined; answers matched by
  ``req_id``); :meth:`Client.append_many` or ``asyncio.gather`` of :meth:`Client.append`
  keep many in flight;
* several nodes (``"A,B"``): connecting tries them in order; an append follows
  leadership for up to ``failover_timeout`` (back-off 20 ms doubling to 200 ms) where
  nothing was written — ``NotLeader`` (to the named leader, even one not in the list),
  ``Unavailable``, ``Fenced``, no node reachable, the connection closed before the
  request was handed over. An append whose connection broke after it was sent, that got
  no answer in ``request_timeout``, or that was answered ``OutcomeUnknown`` /
  ``ReplicationTimeout`` is **not** re-sent (it could be stored twice): the error's
  ``outcome`` is ``"unknown"``. The idempotent :class:`Producer` re-sends those safely;
* reads, tails and stream requests go to the shard's direct port (client port + 1 +
  shard); a stream lives on shard ``FNV-1a-64(name) % shard_count`` (``shard_count``
  from the node's ``HelloOk``).
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from typing import (
    Any, AsyncIterator, Dict, Iterable, List, Optional, Set, Tuple, Union,
)

from . import codec
from .codec import (
    Append2, ErrorCode, Expect, ExpectLike, Frame, FrameDecoder, Hello, HelloOk, ProducerSeq, Record,
    Role, StreamReq,
)
from .errors import (
    ConnectionClosed, CorelogError, Fenced, InvalidArgument, NotLeader, NotSent, OutcomeUnknown,
    Overloaded, ProducerStopped, ProtocolError, ReplicationTimeout, RequestTimeout, SequenceGap,
    ShuttingDown, Unavailable, UnknownProducer, Unreachable, error_for_code,
)
from .types import (
    Appended, ClientConfig, Event, Position, ServerInfo, StreamAppended, StreamRead,
)

__all__ = ["Client", "Producer", "Tail", "Subscription", "Connection", "WINDOW", "connect"]

#: Appends of one producer in flight at most (the positions a shard remembers).
WINDOW = 64
_BACKOFF_START = 0.02
_BACKOFF_MAX = 0.2
#: Unsent bytes on a connection above which senders wait for the socket.
_HIGH_WATER = 1 << 20

Addrs = Union[str, List[str], Tuple[str, ...]]


def _response(frame: Frame) -> codec.Response:
    """Parses an answer; an ``Error`` frame is raised as its typed exception."""
    try:
        r = codec.parse_response(frame)
    except codec.CodecError as e:
        raise ProtocolError(str(e)) from None
    if isinstance(r, codec.ErrorResponse):
        raise error_for_code(r.code, r.message)
    if isinstance(r, codec.WrongVersion):
        raise error_for_code(ErrorCode.WRONG_EXPECTED_VERSION, r.message, r.current)
    if isinstance(r, codec.OutOfRangeResponse):
        raise error_for_code(ErrorCode.OUT_OF_RANGE, r.message, first=r.first)
    return r


def _records(buf: bytes) -> List[Record]:
    try:
        return list(codec.iter_records(buf))
    except codec.RecordError as e:
        raise ProtocolError(f"bad record from server: {e}") from None


async def _open_stream(addr: str, cfg: ClientConfig) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = codec.host_port(addr)
    ctx = cfg.ssl_context()
    reader, writer = await asyncio.open_connection(
        host, port, ssl=ctx, server_hostname=cfg.server_name if ctx else None, limit=1 << 22
    )
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
    return reader, writer


async def _read_frame(reader: asyncio.StreamReader, dec: FrameDecoder) -> Optional[Frame]:
    """The next frame, or ``None`` at EOF."""
    while True:
        f = dec.next_frame()
        if f is not None:
            return f
        data = await reader.read(1 << 16)
        if not data:
            return None
        dec.feed(data)


def _close_writer(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
    except Exception:  # noqa: BLE001 - closing a broken transport
        pass


class Connection:
    """One connection: requests written in call order, answers matched by ``req_id``.
    Low level (tests, tools); :class:`Client` manages connections for you."""

    def __init__(self, addr: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 decoder: FrameDecoder, info: ServerInfo) -> None:
        self.addr = addr
        self.info = info
        self._reader = reader
        self._writer = writer
        self._decoder = decoder
        self._pending: Dict[int, "asyncio.Future[Frame]"] = {}
        self._next_id = 1
        self._closed = False
        self._retired = False
        self._drain_lock: Optional[asyncio.Lock] = None
        self._task = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def open(cls, addr: str, cfg: ClientConfig, version: int = codec.PROTOCOL_VERSION) -> "Connection":
        """TCP, TLS and ``Hello``/``HelloOk``, all within ``cfg.connect_timeout``."""
        return await asyncio.wait_for(cls._open(addr, cfg, version), cfg.connect_timeout)

    @classmethod
    async def _open(cls, addr: str, cfg: ClientConfig, version: int) -> "Connection":
        reader, writer = await _open_stream(addr, cfg)
        try:
            writer.write(Hello(version).encode(0))
            dec = FrameDecoder()
            f = await _read_frame(reader, dec)
            if f is None:
                raise ConnectionClosed("connection closed before HelloOk")
            r = _response(f)
            if not isinstance(r, HelloOk):
                raise ProtocolError("expected HelloOk")
        except BaseException:
            _close_writer(writer)
            raise
        info = ServerInfo(r.shard, r.shard_count, r.role, r.epoch, r.version, addr)
        return cls(addr, reader, writer, dec, info)

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, frame: bytes) -> "asyncio.Future[Frame]":
        """Writes one request frame (its ``req_id`` is set here) and returns the future of
        its answer frame. Raises :class:`NotSent` if the connection is closed."""
        if self._closed:
            raise NotSent(f"connection to {self.addr} closed before the request was sent")
        req_id = self._next_id
        self._next_id += 1
        fut: "asyncio.Future[Frame]" = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        self._writer.write(frame[:5] + struct.pack("<Q", req_id) + frame[13:])
        return fut

    def send_raw(self, data: bytes) -> None:
        """Writes bytes as they are (tests of the server's error handling)."""
        self._writer.write(data)

    async def drain(self) -> None:
        """Waits while more than about 1 MiB is unsent (back-pressure toward senders)."""
        transport = self._writer.transport
        if transport.get_write_buffer_size() <= _HIGH_WATER or self._closed:
            return
        if self._drain_lock is None:
            self._drain_lock = asyncio.Lock()
        async with self._drain_lock:
            try:
                await self._writer.drain()
            except (OSError, ConnectionError):
                pass  # the read loop reports it to the waiting requests

    async def call(self, frame: bytes, timeout: float) -> Frame:
        fut = self.send(frame)
        await self.drain()
        return await self.wait(fut, timeout)

    async def wait(self, fut: "asyncio.Future[Frame]", timeout: float) -> Frame:
        """The answer of a request sent with :meth:`send`; :class:`RequestTimeout` after
        ``timeout`` seconds (the request is forgotten; a late answer is dropped)."""
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            for k, v in list(self._pending.items()):
                if v is fut:
                    del self._pending[k]
            if not fut.done():
                fut.cancel()
            self._maybe_close()
            raise RequestTimeout(f"no answer from {self.addr} within {timeout:g} s") from None

    def retire(self) -> None:
        """No new requests go here; closes once the pending ones are answered."""
        self._retired = True
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self._retired and not self._pending:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _close_writer(self._writer)
        self._fail_all(ConnectionClosed(f"connection to {self.addr} closed before the answer"))
        if not self._task.done() and self._task is not asyncio.current_task():
            self._task.cancel()

    async def aclose(self) -> None:
        self.close()
        try:
            await self._task
        except BaseException:  # noqa: BLE001 - cancelled or failed, either way it is over
            pass

    def _fail_all(self, err: CorelogError) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # a forgotten future must not warn

    async def _read_loop(self) -> None:
        err: CorelogError = ConnectionClosed(f"connection to {self.addr} closed before the answer")
        try:
            while True:
                f = await _read_frame(self._reader, self._decoder)
                if f is None:
                    break
                fut = self._pending.pop(f.req_id, None)
                if fut is None:
                    if f.op == codec.Op.ERROR:
                        # An error about the frame itself (req_id 0) or a request we gave up
                        # on: whoever still waits gets it, the server closes anyway.
                        try:
                            _response(f)
                        except CorelogError as e:
                            err = e
                        if f.req_id == 0:
                            break
                    continue
                if not fut.done():
                    fut.set_result(f)
                if self._retired and not self._pending:
                    break
        except codec.CodecError as e:
            err = ProtocolError(str(e))
        except (OSError, ConnectionError, EOFError) as e:
            err = ConnectionClosed(f"connection to {self.addr} lost: {e}")
        except asyncio.CancelledError:
            pass
        finally:
            self._closed = True
            _close_writer(self._writer)
            self._fail_all(err)


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


def _why(e: BaseException) -> str:
    if isinstance(e, asyncio.TimeoutError):
        return "no HelloOk in time"
    return str(e) or type(e).__name__


def _check_payload(payload: bytes) -> None:
    if len(payload) > codec.MAX_PAYLOAD:
        raise InvalidArgument(f"payload of {len(payload)} bytes above maximum {codec.MAX_PAYLOAD}")


def _check_name(stream: str) -> None:
    try:
        codec.check_stream_name(stream)
    except ValueError as e:
        raise InvalidArgument(str(e)) from None


# ---------------------------------------------------------------------- idempotent producer


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


# ---------------------------------------------------------------------- tail


class Tail:
    """A live tail of one shard: records pushed as they become committed, gap-free, in
    offset order, on a connection of its own (to the shard's direct port of the first
    node that answers). ``async for record in tail``; :meth:`close` (or ``async with``)
    ends it. A lost connection raises; resume with a new tail from :attr:`next_offset`."""

    def __init__(self, addrs: Addrs, shard: int, offset: int, config: ClientConfig) -> None:
        self._addrs = codec.split_addrs(addrs)
        self.shard = shard
        self.next_offset = offset
        self._config = config
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._dec = FrameDecoder()
        self._buf: List[Record] = []
        self._done = False

    async def start(self) -> "Tail":
        errs = []
        for a in self._addrs:
            direct = codec.shard_addr(a, self.shard)
            try:
                await asyncio.wait_for(self._start_at(direct), self._config.connect_timeout)
                return self
            except (OSError, asyncio.TimeoutError, CorelogError) as e:
                errs.append(f"{direct}: {_why(e)}")
        raise Unreachable("no node reachable: " + "; ".join(errs))

    async def _start_at(self, direct: str) -> None:
        reader, writer = await _open_stream(direct, self._config)
        try:
            writer.write(Hello().encode(0) + codec.Tail(self.shard, self.next_offset).encode(1))
            dec = FrameDecoder()
            f = await _read_frame(reader, dec)
            if f is None:
                raise ConnectionClosed("closed before HelloOk")
            _response(f)
        except BaseException:
            _close_writer(writer)
            raise
        self._reader, self._writer, self._dec = reader, writer, dec

    async def __aenter__(self) -> "Tail":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Record]:
        return self

    async def __anext__(self) -> Record:
        r = await self.next()
        if r is None:
            raise StopAsyncIteration
        return r

    async def next(self, timeout: Optional[float] = None) -> Optional[Record]:
        """The next record (``None`` once closed); :class:`RequestTimeout` after ``timeout``."""
        if self._reader is None and not self._done:
            await self.start()
        try:
            return await asyncio.wait_for(self._next(), timeout)
        except asyncio.TimeoutError:
            raise RequestTimeout(f"no record within {timeout} s") from None

    async def _next(self) -> Optional[Record]:
        while not self._buf:
            if self._done or self._reader is None:
                return None
            try:
                f = await _read_frame(self._reader, self._dec)
            except codec.CodecError as e:
                raise ProtocolError(str(e)) from None
            except (OSError, ConnectionError) as e:
                raise ConnectionClosed(f"tail connection lost: {e}") from None
            if f is None:
                if self._done:
                    return None
                raise ConnectionClosed("the server closed the tail")
            r = _response(f)
            if not isinstance(r, codec.Records):
                raise ProtocolError("expected Records")
            for rec in _records(r.records):
                if rec.offset != self.next_offset:
                    raise ProtocolError(f"tail gap: expected {self.next_offset}, got {rec.offset}")
                self.next_offset += 1
                self._buf.append(rec)
        return self._buf.pop(0)

    async def close(self) -> None:
        self._done = True
        if self._writer is not None:
            _close_writer(self._writer)
            try:
                await self._writer.wait_closed()
            except Exception:  # noqa: BLE001
                pass


# ---------------------------------------------------------------------- subscriptions


class Subscription:
    """The events of one stream, or of every stream whose name starts with a prefix,
    catch-up from disk then live (``client/src/subscribe.rs``). A stream subscription is
    one connection to its shard's direct port on the leader; a prefix subscription one
    per shard, merged (no order across shards; each stream's events in version order).
    ``async for event in sub`` gives :class:`~corelog.types.Event` (``shard``,
    ``record`` with ``record.stream``). A lost connection raises; resume with a new
    subscription from :attr:`next_version` (stream) or :attr:`positions` (prefix)."""

    _QUEUE = 4096

    def __init__(self, addrs: Addrs, config: ClientConfig, *, stream: Optional[str] = None,
                 from_version: int = 0, prefix: Optional[str] = None,
                 positions: Optional[Dict[int, int]] = None) -> None:
        if (stream is None) == (prefix is None):
            raise ValueError("give a stream or a prefix")
        self._addrs = codec.split_addrs(addrs)
        self._config = config
        self.stream = stream
        self.prefix = prefix
        self.next_version = from_version
        self.positions: Dict[int, int] = dict(positions or {})
        self._queue: Optional["asyncio.Queue[Union[Event, BaseException]]"] = None
        self._tasks: List["asyncio.Task[None]"] = []
        self._writers: List[asyncio.StreamWriter] = []
        self._started = False

    async def start(self) -> "Subscription":
        if self._started:
            return self
        self._started = True
        self._queue = asyncio.Queue(self._QUEUE)
        probe = Client(self._addrs, self._config)
        try:
            count = await probe.shard_count()
        finally:
            await probe.close()
        try:
            if self.stream is not None:
                _check_name(self.stream)
                shard = codec.stream_shard(self.stream, count)
                await self._feed(shard, codec.Subscribe(True, self.stream.encode(), self.next_version))
            else:
                assert self.prefix is not None
                for shard in range(count):
                    at = self.positions.get(shard, 0)
                    await self._feed(shard, codec.Subscribe(False, self.prefix.encode(), at))
        except BaseException:
            await self.close()
            raise
        return self

    async def _feed(self, shard: int, req: codec.Subscribe) -> None:
        errs = []
        for a in self._addrs:
            direct = codec.shard_addr(a, shard)
            try:
                reader, writer = await asyncio.wait_for(_open_stream(direct, self._config),
                                                        self._config.connect_timeout)
            except (OSError, asyncio.TimeoutError, CorelogError) as e:
                errs.append(f"{direct}: {_why(e)}")
                continue
            dec = FrameDecoder()
            try:
                writer.write(Hello().encode(0) + req.encode(1))
                f = await asyncio.wait_for(_read_frame(reader, dec), self._config.connect_timeout)
                if f is None:
                    raise ConnectionClosed("closed before HelloOk")
                r = _response(f)
                if not isinstance(r, HelloOk):
                    raise ProtocolError("expected HelloOk")
            except BaseException:
                _close_writer(writer)
                raise
            if r.role != Role.LEADER:
                _close_writer(writer)
                errs.append(f"{direct}: {r.role.name.lower()} (subscriptions are served by the leader)")
                continue
            self._writers.append(writer)
            self._tasks.append(asyncio.ensure_future(self._pump(shard, reader, dec)))
            return
        raise Unreachable("no leader reachable: " + "; ".join(errs))

    async def _pump(self, shard: int, reader: asyncio.StreamReader, dec: FrameDecoder) -> None:
        assert self._queue is not None
        try:
            while True:
                f = await _read_frame(reader, dec)
                if f is None:
                    raise ConnectionClosed(f"subscription on shard {shard} closed by the server")
                r = _response(f)
                if not isinstance(r, codec.Records):
                    raise ProtocolError("expected Records")
                for rec in _records(r.records):
                    await self._queue.put(Event(shard, rec))
        except asyncio.CancelledError:
            raise
        except codec.CodecError as e:
            await self._queue.put(ProtocolError(str(e)))
        except (OSError, ConnectionError) as e:
            await self._queue.put(ConnectionClosed(f"subscription connection lost: {e}"))
        except CorelogError as e:
            await self._queue.put(e)

    async def __aenter__(self) -> "Subscription":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        return await self.next()

    async def next(self, timeout: Optional[float] = None) -> Event:
        """The next event; :class:`RequestTimeout` if none within ``timeout`` seconds."""
        if not self._started:
            await self.start()
        assert self._queue is not None
        try:
            got = await asyncio.wait_for(self._queue.get(), timeout)
        except asyncio.TimeoutError:
            raise RequestTimeout(f"no event within {timeout} s") from None
        if isinstance(got, BaseException):
            raise got
        s = got.record.stream
        if self.stream is not None and s is not None and (s.name != self.stream or s.version != self.next_version):
            raise ProtocolError(f"subscription got {s.name!r} version {s.version} where {self.stream!r} version "
                                f"{self.next_version} was due")
        self.positions[got.shard] = got.record.offset + 1
        if s is not None:
            self.next_version = s.version + 1
        return got

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for w in self._writers:
            _close_writer(w)
        for t in self._tasks:
            try:
                await t
            except BaseException:  # noqa: BLE001
                pass
        self._tasks.clear()
        self._writers.clear()
