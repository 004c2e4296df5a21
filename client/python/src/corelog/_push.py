"""Push streams of the asyncio client (part of :mod:`corelog.aio`): :class:`Tail` (one
shard's records) and :class:`Subscription` (a stream's or a name prefix's events), each on
connections of its own."""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Awaitable, Deque, Dict, Generic, List, NoReturn, Optional, TypeVar, Union

from . import codec
from .codec import FrameDecoder, Record, Role
from .errors import (
    ConnectionClosed, CorelogError, InvalidArgument, ProtocolError, RequestTimeout, ServerError, Unreachable,
)
from .types import ClientConfig, Event
from ._connection import (
    Addrs, Connection, _check_name, _close_writer, _greet, _read_frame, _records, _response, _why, _within,
    config_error,
)
from ._retry import Nodes

__all__ = ["Tail", "Subscription"]

P = TypeVar("P", bound="_Pushed[Any]")
I = TypeVar("I")  # noqa: E741 - what a push stream hands out
T = TypeVar("T")


class _Pushed(Generic[I]):
    """What a tail, a subscription and a consumer share: ``async with`` starts and closes
    it, ``async for`` takes what the server pushes until it ends (``next`` gives ``None``
    once it is closed)."""

    async def start(self: P) -> P:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def next(self, timeout: Optional[float] = None) -> Optional[I]:
        raise NotImplementedError

    async def __anext__(self) -> I:
        item = await self.next()
        if item is None:
            raise StopAsyncIteration
        return item

    async def __aenter__(self: P) -> P:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __aiter__(self: P) -> P:
        return self


async def _timed(aw: Awaitable[T], timeout: Optional[float], what: str) -> T:
    """``aw``, within ``timeout`` seconds when one is given: then :class:`RequestTimeout`
    naming ``what`` did not come (the caller's stream goes on)."""
    if timeout is None:
        return await aw
    try:
        return await _within(aw, timeout)
    except asyncio.TimeoutError:
        raise RequestTimeout(f"no {what} within {timeout} s") from None


class Tail(_Pushed[Record]):
    """A live tail of one shard: records pushed as they become committed, gap-free, in
    offset order, on a connection of its own (to the shard's direct port of the first
    node that answers). ``async for record in tail``; :meth:`close` (or ``async with``)
    ends it. An error ends it too (raised again by every later call): a lost connection
    (:class:`ConnectionClosed`), or :class:`~corelog.errors.OutOfRange` when retention
    deleted records it had yet to deliver (``.first``: the first offset still held).
    Resume with a new tail from :attr:`next_offset` (or ``first``)."""

    def __init__(self, addrs: Addrs, shard: int, offset: int, config: ClientConfig) -> None:
        self._addrs = codec.split_addrs(addrs)
        self.shard = shard
        self._next_offset = offset
        #: The offset the next record received must have (records received run ahead of
        #: those handed out by up to one pushed frame).
        self._fetched = offset
        self._config = config
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._dec = FrameDecoder()
        self._buf: Deque[Record] = collections.deque()
        self._done = False
        self._error: Optional[CorelogError] = None

    @property
    def next_offset(self) -> int:
        """The offset after the last record handed out (the ``from`` of the tail until
        the first): where a new tail resumes without skipping or repeating a record."""
        return self._next_offset

    async def start(self) -> "Tail":
        """Connects (the shard's direct port of the first node that answers) and sends
        the ``Tail``; :class:`Unreachable` if no node answers, :class:`InvalidArgument`
        if the cluster has no such shard."""
        errs = []
        for a in self._addrs:
            direct = codec.shard_addr(a, self.shard)
            try:
                await _within(self._start_at(direct), self._config.connect_timeout)
                return self
            except (OSError, asyncio.TimeoutError, CorelogError) as e:
                bad = config_error(direct, self._config, e)
                if bad is not None:
                    raise bad from None
                errs.append(f"{direct}: {_why(e)}")
        await _check_shard(self._addrs, self._config, self.shard)
        raise Unreachable("no node reachable: " + "; ".join(errs))

    async def _start_at(self, direct: str) -> None:
        self._fetched = self._next_offset
        self._buf.clear()
        reader, writer, _, dec = await _greet(direct, self._config, codec.Tail(self.shard, self._fetched).encode(1))
        self._reader, self._writer, self._dec = reader, writer, dec

    async def next(self, timeout: Optional[float] = None) -> Optional[Record]:
        """The next record (``None`` once closed); :class:`RequestTimeout` after ``timeout``
        (the tail goes on). Any other error ends the tail."""
        if self._error is not None:
            raise self._error
        if self._reader is None and not self._done:
            await self.start()
        try:
            r = await _timed(self._next(), timeout, "record")
        except RequestTimeout:
            raise  # the tail goes on
        except CorelogError as e:
            # OutOfRange, a lost connection, bad bytes: nothing more will come.
            self._error = e
            if self._writer is not None:
                _close_writer(self._writer)
            raise
        if r is not None:
            self._next_offset = r.offset + 1
        return r

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
                if rec.offset != self._fetched:
                    raise ProtocolError(f"tail gap: expected {self._fetched}, got {rec.offset}")
                self._fetched += 1
                self._buf.append(rec)
        return self._buf.popleft()

    async def close(self) -> None:
        """Ends the tail (closes its connection); :meth:`next` then returns ``None``."""
        self._done = True
        if self._writer is not None:
            _close_writer(self._writer)
            try:
                await self._writer.wait_closed()
            except Exception:  # noqa: BLE001
                pass


# ---------------------------------------------------------------------- subscriptions


class Subscription(_Pushed[Event]):
    """The events of one stream, or of every stream whose name starts with a prefix,
    catch-up from disk then live (``client/src/subscribe.rs``). A stream subscription is
    one connection to its shard's direct port on the leader; a prefix subscription one
    per shard, merged (no order across shards; each stream's events in version order).
    ``async for event in sub`` gives :class:`~corelog.types.Event` (``shard``,
    ``record`` with ``record.stream``). An error ends the subscription (raised again by
    every later call): a lost connection, or :class:`~corelog.errors.OutOfRange` when
    retention deleted what it had yet to deliver (``.first``: the stream's first version
    still held, or the shard's first offset for a prefix subscription). Resume with a
    new subscription from :attr:`next_version` (stream) or :attr:`positions` (prefix)."""

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
        self._error: Optional[BaseException] = None

    async def start(self) -> "Subscription":
        """Connects to the leader's direct port of each shard concerned and subscribes;
        :class:`Unreachable` if no leader answers."""
        if self._started:
            return self
        self._started = True
        self._queue = asyncio.Queue(self._QUEUE)
        probe = Nodes(self._addrs, self._config)
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
                reader, writer, r, dec = await _within(_greet(direct, self._config, req.encode(1)),
                                                       self._config.connect_timeout)
            except (ServerError, ProtocolError):
                raise
            except (OSError, asyncio.TimeoutError, CorelogError) as e:
                bad = config_error(direct, self._config, e)
                if bad is not None:
                    raise bad from None
                errs.append(f"{direct}: {_why(e)}")
                continue
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

    async def next(self, timeout: Optional[float] = None) -> Event:
        """The next event; :class:`RequestTimeout` if none within ``timeout`` seconds (the
        subscription goes on). Any other error ends the subscription."""
        if self._error is not None:
            raise self._error
        if not self._started:
            await self.start()
        assert self._queue is not None
        got = await _timed(self._queue.get(), timeout, "event")
        if isinstance(got, BaseException):
            await self._fail(got)
        s = got.record.stream
        if self.stream is not None and s is not None and (s.name != self.stream or s.version != self.next_version):
            await self._fail(ProtocolError(f"subscription got {s.name!r} version {s.version} where {self.stream!r} "
                                           f"version {self.next_version} was due"))
        self.positions[got.shard] = got.record.offset + 1
        if s is not None:
            self.next_version = s.version + 1
        return got

    async def _fail(self, err: BaseException) -> NoReturn:
        """Ends the subscription (every shard's connection) with ``err``."""
        self._error = err
        await self.close()
        raise err

    async def close(self) -> None:
        """Ends the subscription (every shard's connection)."""
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


async def _check_shard(addrs: List[str], cfg: ClientConfig, shard: int) -> None:
    """:class:`InvalidArgument` if a node (on its client port) says it has no ``shard``."""
    for a in addrs:
        try:
            c = await Connection.open(a, cfg)
        except (OSError, asyncio.TimeoutError, CorelogError):
            continue
        count = c.info.shard_count
        await c.aclose()
        if shard >= count:
            raise InvalidArgument(f"shard {shard} does not exist: the cluster has {count} (0 to {count - 1})")
        return
