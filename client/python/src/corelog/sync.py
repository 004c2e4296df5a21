"""The synchronous client: the asyncio client driven by a private event loop thread.

.. code-block:: python

    import corelog

    with corelog.Client("127.0.0.1:19400,127.0.0.1:19500", certs="D/certs") as c:
        pos = c.append(b"Hello World")
        for r in c.read(pos.shard, pos.offset):
            print(r.offset, r.payload)

Every method blocks until its answer; it is safe to call from several threads at once
(the requests share one pipelined connection). :meth:`Client.append_many` and
:meth:`Client.append_nowait` (a :class:`concurrent.futures.Future`) keep many appends in
flight. Semantics, errors and leader following are those of :mod:`corelog.aio`.

``Future.cancel()`` on an ``append_nowait`` future keeps the standard meaning: it returns
True only while the append has not been handed to a connection (it is then never sent:
not written); once it has, ``cancel()`` returns False and the future gets the append's
real result or error. A closed client raises :class:`~corelog.errors.ClientClosed`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import (
    Any, Awaitable, Callable, Coroutine, Dict, Generic, Iterable, Iterator, List, Optional, TypeVar, overload,
)

from . import aio, codec
from .codec import ExpectLike, Record
from .errors import NOT_WRITTEN, UNKNOWN, ClientClosed
from .types import Appended, ClientConfig, Event, GroupEvent, Position, ServerInfo, StreamAppended, StreamRead

__all__ = ["Client", "Producer", "Tail", "Subscription", "Consumer"]

T = TypeVar("T")
V = TypeVar("V")


class _Loop:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="corelog-client", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        if self.loop.is_closed():
            coro.close()
            raise ClientClosed("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def gated(self, start: Callable[[Callable[[], bool]], Coroutine[Any, Any, T]]) -> "concurrent.futures.Future[T]":
        """Runs ``start(gate)`` on the loop; the returned future's ``cancel()`` succeeds
        only until the coroutine calls ``gate()`` (right before its request leaves), which
        moves the future to RUNNING, or returns False if it was cancelled (the coroutine
        then stops without sending). Every outcome of the task is retrieved: no
        "exception was never retrieved" noise."""
        if self.loop.is_closed():
            raise ClientClosed("the client is closed")
        cf: "concurrent.futures.Future[T]" = concurrent.futures.Future()

        def gate() -> bool:
            return cf.set_running_or_notify_cancel()

        def begin() -> None:
            task = self.loop.create_task(start(gate))

            def done(t: "asyncio.Task[T]") -> None:
                if t.cancelled():  # withdrawn by cf.cancel(), or ended by close()
                    if cf.done():
                        return
                    try:
                        t.result()
                    except asyncio.CancelledError as c:
                        outcome = getattr(c, "outcome", UNKNOWN if cf.running() else NOT_WRITTEN)
                    err = ClientClosed(f"the client was closed before the append's answer (outcome {outcome})")
                    err.outcome = outcome
                    if cf.running() or cf.set_running_or_notify_cancel():
                        cf.set_exception(err)
                    return
                e = t.exception()
                if cf.cancelled():
                    return  # withdrawn before it was sent: e is its Cancelled (not written)
                if not cf.running() and not cf.set_running_or_notify_cancel():
                    return
                if e is not None:
                    cf.set_exception(e)
                else:
                    cf.set_result(t.result())

            task.add_done_callback(done)

            def withdraw(f: "concurrent.futures.Future[T]") -> None:
                if f.cancelled() and not self.loop.is_closed():
                    self.loop.call_soon_threadsafe(task.cancel)

            cf.add_done_callback(withdraw)

        self.loop.call_soon_threadsafe(begin)
        return cf

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a corelog sync client cannot be called from its own loop thread")
        return self.submit(coro).result()

    def stop(self) -> None:
        """Ends what still runs on the loop (each task's end retrieved), then the loop."""
        if self.loop.is_closed():
            return

        async def drain() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=10) if tasks else None
            for t in tasks:
                if t.done() and not t.cancelled():
                    t.exception()

        try:
            asyncio.run_coroutine_threadsafe(drain(), self.loop).result(timeout=15)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class Client:
    """Blocking client. Arguments as :class:`corelog.aio.Client`: ``addrs`` (``"A,B"``),
    ``ca``/``cert``/``key`` or ``certs=DIR``, ``server_name``, ``insecure``,
    ``failover_timeout``, ``request_timeout``, ``connect_timeout`` (seconds), or
    ``config=ClientConfig(...)``. Use as a context manager or call :meth:`close`."""

    def __init__(self, addrs: aio.Addrs, config: Optional[ClientConfig] = None, **settings: Any) -> None:
        self._aio = aio.Client(addrs, config, **settings)  # ConfigError before a thread is started
        self._loop = _Loop()
        self.config = self._aio.config
        self._owned: List[Any] = []  # producers, tails, subscriptions, consumers: closed with the client

    def __enter__(self) -> "Client":
        self.connect()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    def connect(self) -> "Client":
        """Connects now (else the first request does); :class:`~corelog.errors.Unreachable`."""
        self._run(self._aio.connect())
        return self

    def close(self) -> None:
        """Closes the client, its producers, tails and subscriptions; appends still in
        flight end with their outcome. Later calls raise :class:`~corelog.errors.ClientClosed`."""
        if not self._loop.loop.is_closed():
            for o in self._owned:
                try:
                    o.close()
                except Exception:  # noqa: BLE001 - closing what may already be broken
                    pass
            self._owned.clear()
            self._run(self._aio.close())
            self._loop.stop()

    def _own(self, o: T) -> T:
        self._owned.append(o)
        return o

    def info(self) -> ServerInfo:
        """The ``HelloOk`` of the current connection (shard, shard count, role, epoch)."""
        return self._run(self._aio.info())

    def shard_count(self) -> int:
        """The cluster's shard count."""
        return self._run(self._aio.shard_count())

    def shard_of(self, stream: str) -> int:
        """The shard that holds ``stream``."""
        return self._run(self._aio.shard_of(stream))

    def append(self, payload: bytes) -> Position:
        """Appends one event; its position once durable on every replica."""
        return self._run(self._aio.append(payload))

    def append_nowait(self, payload: bytes) -> "concurrent.futures.Future[Position]":
        """Sends one append and returns at once: the future of its position. Appends
        submitted one after another leave in that order (pipelined). ``cancel()``
        succeeds only while the append has not been sent (see the module docs)."""
        return self._loop.gated(lambda gate: self._aio._append(payload, gate))

    def append_many(self, payloads: Iterable[bytes]) -> List[Position]:
        """Appends every payload, all in flight at once (pipelined); positions in order."""
        return self._run(self._aio.append_many(list(payloads)))

    def read(self, shard: int, offset: int = 0, max_bytes: int = codec.MAX_READ_BYTES) -> List[Record]:
        """Committed records of ``shard`` from ``offset`` (about ``max_bytes``)."""
        return self._run(self._aio.read(shard, offset, max_bytes))

    def read_all(self, shard: int, offset: int = 0, end: Optional[int] = None) -> List[Record]:
        """Every committed record of ``shard`` from ``offset`` (to ``end``, exclusive)."""
        return self._run(self._aio.read_all(shard, offset, end))

    def trim(self, shard: int, before: int) -> int:
        """Deletes the node's whole segments of ``shard`` below ``before`` (within what its
        peer may need); the node's first offset of the shard afterwards. See
        :meth:`corelog.aio.Client.trim`."""
        return self._run(self._aio.trim(shard, before))

    def tail(self, shard: int, offset: int = 0) -> "Tail":
        """``for record in client.tail(0, 0): ...`` (live; ``close()`` or ``with`` ends it)."""
        return self._own(Tail(self._loop, self._aio.tail(shard, offset)))

    def append_to(self, stream: str, payload: bytes, expect: ExpectLike = None) -> StreamAppended:
        """Stream append: ``(shard, offset, version)``; see :meth:`corelog.aio.Client.append_to`."""
        return self._run(self._aio.append_to(stream, payload, expect))

    def append_to_nowait(self, stream: str, payload: bytes,
                         expect: ExpectLike = None) -> "concurrent.futures.Future[StreamAppended]":
        """:meth:`append_to` without waiting: the future of its result (``cancel()`` as
        for :meth:`append_nowait`)."""
        return self._loop.gated(lambda gate: self._aio._append_to(stream, payload, expect, gate))

    def read_stream(self, stream: str, from_version: int = 0, max_count: int = codec.MAX_READ_COUNT) -> StreamRead:
        """Committed events of ``stream`` from ``from_version`` (at most ``max_count``)."""
        return self._run(self._aio.read_stream(stream, from_version, max_count))

    def read_stream_all(self, stream: str, from_version: int = 0) -> List[Record]:
        """Every committed event of ``stream`` from ``from_version``."""
        return self._run(self._aio.read_stream_all(stream, from_version))

    def subscribe(self, stream: str, from_version: int = 0) -> "Subscription":
        """The events of ``stream`` from ``from_version`` on, catch-up then live."""
        return self._own(Subscription(self._loop, self._aio.subscribe(stream, from_version)))

    def subscribe_prefix(self, prefix: str, positions: Optional[Dict[int, int]] = None) -> "Subscription":
        """The events of every stream whose name starts with ``prefix``, on every shard,
        from ``positions`` (next offset per shard), live."""
        return self._own(Subscription(self._loop, self._aio.subscribe_prefix(prefix, positions)))

    def consumer(self, group: str, member: str, prefix: str = "", k: int = 0, auto_commit: bool = False,
                 rejoin_timeout: Optional[float] = None) -> "Consumer":
        """A member of consumer group ``group``: ``with client.consumer("billing", "w1") as
        c: for event in c: ...``, then ``c.commit()``. See :class:`corelog.aio.Consumer`."""
        return self._own(Consumer(self._loop, self._aio.consumer(group, member, prefix, k, auto_commit,
                                                                 rejoin_timeout)))

    def producer(self, shard: int = 0, id: Optional[int] = None, next_seq: int = 0) -> "Producer":
        """An idempotent producer for ``shard`` (see :class:`corelog.aio.Producer`)."""
        return self._own(Producer(self._loop, self._run(self._aio.producer(shard, id, next_seq))))

    def producer_for_stream(self, stream: str, id: Optional[int] = None, next_seq: int = 0) -> "Producer":
        """An idempotent producer for the shard that holds ``stream``."""
        return self._own(Producer(self._loop, self._run(self._aio.producer_for_stream(stream, id, next_seq))))


class _OfAio(Generic[V]):
    """A read-only attribute of a blocking object (producer, tail, subscription,
    consumer): the attribute of the same name of the asyncio object it wraps (``_p``),
    read when asked, so the two never differ."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: Optional[type] = None) -> "_OfAio[V]": ...

    @overload
    def __get__(self, obj: Any, owner: Optional[type] = None) -> V: ...

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        return self if obj is None else getattr(obj._p, self._name)

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"can't set attribute {self._name!r}")


class Producer:
    """Blocking idempotent producer (made by :meth:`Client.producer`; see
    :class:`corelog.aio.Producer`)."""

    id = _OfAio[int]("The producer id (64 bits).")
    shard = _OfAio[int]("The shard every append of this producer goes to.")
    next_seq = _OfAio[int]("The sequence the next new append gets.")
    retries = _OfAio[int]("Attempts sent again after a failure, so far.")
    stopped = _OfAio[bool]("Whether an append failed for good (later ones raise ``ProducerStopped``).")

    def __init__(self, loop: _Loop, p: aio.Producer) -> None:
        self._loop = loop
        self._p = p

    def append(self, payload: bytes) -> Appended:
        """Appends ``payload`` exactly once; its position when durable on every replica."""
        return self._loop.run(self._p.append(payload))

    def append_nowait(self, payload: bytes) -> "concurrent.futures.Future[Appended]":
        """Sends one append and returns at once: the future of its result. ``cancel()``
        succeeds only while it has not been sent (see the module docs)."""
        return self._loop.gated(lambda gate: self._p._append(None, payload, gate))

    def append_many(self, payloads: Iterable[bytes]) -> List[Appended]:
        """Appends every payload (up to 64 in flight), in order."""
        return self._loop.run(self._p.append_many(list(payloads)))

    def append_to(self, stream: str, payload: bytes, expect: ExpectLike = None) -> Appended:
        """Appends once to ``stream`` (on this producer's shard) if it meets ``expect``."""
        return self._loop.run(self._p.append_to(stream, payload, expect))

    def close(self) -> None:
        """Closes the producer's connection."""
        if not self._loop.loop.is_closed():
            self._loop.run(self._p.close())

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


It = TypeVar("It", bound="_Iter[Any]")


class _Iter(Generic[V]):
    """What a blocking tail, subscription and consumer share: the asyncio one (``_p``)
    driven on the client's loop, started by ``with``, ended by ``close``; an iterator of
    what it hands out, until it is closed."""

    def __init__(self, loop: _Loop, p: Any) -> None:
        self._loop = loop
        self._p = p

    def _call(self, aw: Awaitable[T]) -> T:
        async def go() -> T:
            return await aw

        return self._loop.run(go())

    def __enter__(self: It) -> It:
        self._call(self._p.start())
        return self

    def __exit__(self, *exc: Any) -> None:
        # The asyncio one's exit: a consumer with auto_commit commits on a clean one.
        if not self._loop.loop.is_closed():
            self._call(self._p.__aexit__(*exc))

    def __iter__(self: It) -> It:
        return self

    def __next__(self) -> V:
        item = self._call(self._p.next())
        if item is None:
            raise StopIteration
        return item

    def next(self, timeout: Optional[float] = None) -> Optional[V]:
        """The next item (``None`` once closed); :class:`~corelog.errors.RequestTimeout`
        if none within ``timeout`` seconds (the iterator goes on)."""
        return self._call(self._p.next(timeout))

    def close(self) -> None:
        """Ends the tail, subscription or consumer."""
        if not self._loop.loop.is_closed():
            self._call(self._p.close())


class Tail(_Iter[Record]):
    """Blocking live tail: an iterator of records."""

    next_offset = _OfAio[int]("The offset after the last record handed out (where a new tail resumes).")


class Subscription(_Iter[Event]):
    """Blocking subscription: an iterator of :class:`~corelog.types.Event`."""

    positions = _OfAio[Dict[int, int]]("The next offset per shard after the events handed out (to resume a prefix).")
    next_version = _OfAio[int]("The version after the last event handed out (to resume a stream).")


class Consumer(_Iter[GroupEvent]):
    """Blocking consumer-group member: an iterator of :class:`~corelog.types.GroupEvent`;
    :meth:`commit` commits what was handed out (see :class:`corelog.aio.Consumer`)."""

    generations = _OfAio[Dict[int, int]]("The generation of each shard's current assignment.")

    def commit(self) -> Dict[int, int]:
        """Commits everything handed out so far; ``{shard: next}`` of the commits confirmed."""
        return self._call(self._p.commit())
