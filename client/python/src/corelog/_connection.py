"""The asyncio client's connections (part of :mod:`corelog.aio`): TLS and ``Hello``, one
pipelined connection whose answers are matched by ``req_id``, and the helpers the rest of
the client shares (answer parsing into typed errors, argument checks)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import time
from typing import Any, Awaitable, Dict, List, Optional, Tuple, TypeVar, Union

from . import codec
from .codec import ErrorCode, Frame, FrameDecoder, Hello, HelloOk, Record
from .errors import (
    Abandoned, BadVersion, ConfigError, ConnectionClosed, CorelogError, InvalidArgument, NotSent, ProtocolError,
    RequestTimeout, error_for_code,
)
from .types import ClientConfig, ServerInfo
from ._leadership import Seen

__all__ = ["Connection", "WINDOW", "Addrs"]

#: The package's logger: connections opened and lost, leaders followed, retries, give-ups.
log = logging.getLogger("corelog")
# A library's logger says nothing unless the application configures logging.
log.addHandler(logging.NullHandler())
T = TypeVar("T")

#: Appends of one producer in flight at most (the positions a shard remembers).
WINDOW = 64
_BACKOFF_START = 0.02
_BACKOFF_MAX = 0.1
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
        raise error_for_code(r.code, r.message, hint=r.hint)
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


async def _hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes) -> Tuple[HelloOk, FrameDecoder]:
    """Sends ``first`` (a ``Hello``, maybe followed by a request) and reads the
    ``HelloOk``; closes the writer if anything fails (cancellation included)."""
    dec = FrameDecoder()
    try:
        writer.write(first)
        f = await _read_frame(reader, dec)
        if f is None:
            raise ConnectionClosed("connection closed before HelloOk")
        r = _response(f)
        if not isinstance(r, HelloOk):
            raise ProtocolError("expected HelloOk")
    except BaseException:
        _close_writer(writer)
        raise
    return r, dec


async def _greet(addr: str, cfg: ClientConfig, then: bytes = b"",
                 version: int = codec.CLIENT_VERSION) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter, HelloOk, FrameDecoder]:
    """Opens a connection and says ``Hello`` (then ``then``, in the same write): with
    ``version``, and, when that is the version of connections without groups
    (``codec.CLIENT_VERSION``) and the server refuses it with
    ``BadVersion`` (a server older than this client, as half-way through a rolling
    upgrade: docs/operations.md §15), once more on a new connection with
    ``codec.FALLBACK_VERSION``. A version the caller chose is not replaced."""
    reader, writer = await _open_stream(addr, cfg)
    try:
        r, dec = await _hello(reader, writer, Hello(version).encode(0) + then)
    except BadVersion:
        if version != codec.CLIENT_VERSION:
            raise
        return await _greet(addr, cfg, then, codec.FALLBACK_VERSION)
    return reader, writer, r, dec


def _close_writer(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
    except Exception:  # noqa: BLE001 - closing a broken transport
        pass


async def _within(aw: Awaitable[T], timeout: float) -> T:
    """``aw`` within ``timeout`` seconds (``asyncio.TimeoutError`` after). Unlike
    ``asyncio.wait_for`` before Python 3.12, a cancellation of the caller is never turned
    into a result: it is raised, and a connection ``aw`` opened anyway is closed."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        _abandon(task)
        raise
    if not done:
        _abandon(task)
        raise asyncio.TimeoutError
    return task.result()


def _abandon(task: "asyncio.Future[Any]") -> None:
    """Cancels ``task``; whatever it still produces is closed and its error retrieved."""
    def dispose(t: "asyncio.Future[Any]") -> None:
        if t.cancelled() or t.exception() is not None:
            return
        r = t.result()
        if isinstance(r, Connection):
            r.close()
        elif isinstance(r, tuple) and r and isinstance(r[-1], asyncio.StreamWriter):
            _close_writer(r[-1])

    task.cancel()
    task.add_done_callback(dispose)


def config_error(addr: str, cfg: ClientConfig, e: BaseException) -> Optional[ConfigError]:
    """A :class:`ConfigError` naming the setting at fault when ``e`` is a TLS failure no
    retry can cure (the node's certificate does not match ``server_name`` or ``ca``, or
    the node refused this client's certificate); else ``None``."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return ConfigError(f"{addr}: the node's certificate does not verify against ca={cfg.ca!r} with "
                           f"server_name={cfg.server_name!r}: {e.verify_message or e}")
    if isinstance(e, ssl.SSLError) and (e.reason or "") in _REFUSED_CERT:
        return ConfigError(f"{addr}: the node refused this client's certificate cert={cfg.cert!r} "
                           f"({e.reason}): is it signed by the node's client CA?")
    return None


_REFUSED_CERT = {"TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE", "TLSV13_ALERT_CERTIFICATE_REQUIRED",
                 "TLSV1_ALERT_ACCESS_DENIED", "SSLV3_ALERT_CERTIFICATE_UNKNOWN"}


class Connection:
    """One connection: requests written in call order, answers matched by ``req_id``.
    Low level (tests, tools); :class:`Client` manages connections for you.

    With ``seen`` and a node that advertises a lease (coordinator mode, protocol version
    3), a watchdog probes the connection when a request has waited half a lease with
    nothing received (a ``Hello``, answered at once by a live node even behind waiting
    appends) and abandons it when nothing arrived for a whole lease, or when the probe's
    answer shows the node no longer leads with a live lease: what waits there fails with
    :class:`~corelog.errors.Abandoned` (outcome unknown) and the node becomes a suspect
    (docs/protocol.md §6.3)."""

    def __init__(self, addr: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 decoder: FrameDecoder, info: ServerInfo, seen: Optional[Seen] = None) -> None:
        self.addr = addr
        self.info = info
        self._reader = reader
        self._writer = writer
        self._decoder = decoder
        self._pending: Dict[int, "asyncio.Future[Frame]"] = {}
        #: When each pending append was written (monotonic seconds).
        self._sent: Dict[int, float] = {}
        #: Pending requests that are not appends (reads): while one waits the node answers
        #: nothing else on this connection (a probe neither), so the watchdog waits too.
        self._unwatched: set = set()
        self._next_id = 1
        self._closed = False
        self._retired = False
        self._drain_lock: Optional[asyncio.Lock] = None
        self._seen = seen
        #: When the last frame arrived; when a probe went out with nothing since.
        self._heard: Optional[float] = None
        self._probing: Optional[float] = None
        self._abandoned: Optional[str] = None
        self._task = asyncio.ensure_future(self._read_loop())
        self._watch: "Optional[asyncio.Future[None]]" = None
        if seen is not None:
            seen.learn(info.leadership)
            # Any role: a follower answers at once, so one that goes silent is gone too. A
            # server older than version 3 tells nothing of leases and would refuse the
            # probe's version: no watchdog on its connections.
            if seen.probe_after() is not None and info.version >= codec.LEADERSHIP_VERSION:
                self._watch = asyncio.ensure_future(self._watchdog())

    @classmethod
    async def open(cls, addr: str, cfg: ClientConfig, version: int = codec.CLIENT_VERSION,
                   timeout: Optional[float] = None, seen: Optional[Seen] = None) -> "Connection":
        """TCP, TLS and ``Hello``/``HelloOk``, all within ``timeout`` (default
        ``cfg.connect_timeout``) seconds. ``seen``: the client's leadership state (see the
        class docs)."""
        c = await _within(cls._open(addr, cfg, version, seen), cfg.connect_timeout if timeout is None else timeout)
        log.info("connected to %s (shard %d of %d, %s, epoch %d)", addr, c.info.shard, c.info.shard_count,
                 c.info.role.name.lower(), c.info.epoch)
        return c

    @classmethod
    async def _open(cls, addr: str, cfg: ClientConfig, version: int, seen: Optional[Seen]) -> "Connection":
        reader, writer, r, dec = await _greet(addr, cfg, version=version)
        info = ServerInfo(r.shard, r.shard_count, r.role, r.epoch, r.version, addr, r.leadership)
        return cls(addr, reader, writer, dec, info, seen)

    async def _watchdog(self) -> None:
        """Probes, then abandons, a connection on which a request waits in silence."""
        assert self._seen is not None
        probe_after = self._seen.probe_after() or 0.0
        silent = self._seen.silent_limit() or probe_after * 2
        tick = max(probe_after / 4, 0.005)
        while not self._closed:
            await asyncio.sleep(tick)
            if not self._sent or self._unwatched or self._closed:
                continue
            now = time.monotonic()
            oldest = min(self._sent.values())
            quiet = now - (oldest if self._heard is None else max(self._heard, oldest))
            if quiet >= silent:
                self._abandon(f"nothing received from {self.addr} for {quiet:.3f} s (the lease is {silent:g} s)")
                return
            if quiet >= probe_after and self._probing is None:
                self._probing = now
                self._writer.write(Hello(codec.CLIENT_VERSION).encode(codec.PROBE_ID))

    def _abandon(self, why: str) -> None:
        """Gives the connection up: what waits fails with :class:`Abandoned`; the node is
        a suspect for the epoch it said it leads."""
        if self._abandoned is not None or self._closed:
            return
        self._abandoned = why
        if self._seen is not None:
            self._seen.suspect(self.addr, self.info.epoch, time.monotonic())
        log.info("abandoning the connection to %s (%d requests waiting): %s", self.addr, len(self._pending), why)
        err = Abandoned(f"connection to {self.addr} abandoned while the request waited: {why}")
        self._closed = True
        _close_writer(self._writer)
        self._fail_all(err)
        if not self._task.done() and self._task is not asyncio.current_task():
            self._task.cancel()

    @property
    def closed(self) -> bool:
        """Whether the connection is closed (requests raise :class:`NotSent`)."""
        return self._closed

    def send(self, frame: bytes, watch: bool = False) -> "asyncio.Future[Frame]":
        """Writes one request frame (its ``req_id`` is set here) and returns the future of
        its answer frame. Raises :class:`NotSent` if the connection is closed. ``watch``:
        an append, which the watchdog may abandon (see the class docs)."""
        if self._closed:
            raise NotSent(f"connection to {self.addr} closed before the request was sent")
        req_id = self._next_id
        self._next_id += 1
        fut: "asyncio.Future[Frame]" = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        if watch:
            self._sent[req_id] = time.monotonic()
        else:
            self._unwatched.add(req_id)
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
        """Sends ``frame`` and returns its answer frame (see :meth:`send`, :meth:`wait`)."""
        fut = self.send(frame)
        await self.drain()
        return await self.wait(fut, timeout)

    async def wait(self, fut: "asyncio.Future[Frame]", timeout: float) -> Frame:
        """The answer of a request sent with :meth:`send`; :class:`RequestTimeout` after
        ``timeout`` seconds (the request is forgotten; a late answer is dropped). A
        cancellation of the caller is raised as such (the answer, if any, is left in
        ``fut``)."""
        if fut.done():
            return fut.result()
        timer = asyncio.get_running_loop().call_later(timeout, self._expire, fut, timeout)
        try:
            return await fut
        finally:
            timer.cancel()

    def _expire(self, fut: "asyncio.Future[Frame]", timeout: float) -> None:
        if fut.done():
            return
        for k, v in list(self._pending.items()):
            if v is fut:
                del self._pending[k]
                self._sent.pop(k, None)
                self._unwatched.discard(k)
        fut.set_exception(RequestTimeout(f"no answer from {self.addr} within {timeout:g} s"))
        self._maybe_close()

    def retire(self) -> None:
        """No new requests go here; closes once the pending ones are answered."""
        self._retired = True
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self._retired and not self._pending:
            self.close()

    def close(self) -> None:
        """Closes now: requests still waiting fail with :class:`ConnectionClosed`."""
        if not self._closed:
            self._closed = True
            log.info("closing the connection to %s (%d requests unanswered)", self.addr, len(self._pending))
            _close_writer(self._writer)
        self._fail_all(ConnectionClosed(f"connection to {self.addr} closed before the answer"))
        if not self._task.done() and self._task is not asyncio.current_task():
            self._task.cancel()
        if self._watch is not None and not self._watch.done() and self._watch is not asyncio.current_task():
            self._watch.cancel()

    async def aclose(self) -> None:
        """:meth:`close`, then waits for the connection's reader to stop."""
        self.close()
        try:
            await self._task
        except BaseException:  # noqa: BLE001 - cancelled or failed, either way it is over
            pass

    def _fail_all(self, err: CorelogError) -> None:
        pending, self._pending = self._pending, {}
        self._sent = {}
        self._unwatched = set()
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
                self._heard, self._probing = time.monotonic(), None
                if f.op == codec.Op.HELLO_OK and f.req_id == codec.PROBE_ID:
                    # A probe's answer: does the node still lead, with a live lease?
                    r = _response(f)
                    why = "bad answer to a probe"
                    if isinstance(r, HelloOk) and self._seen is not None:
                        why = self._seen.usable(self.addr, r.role, r.epoch, r.leadership, time.monotonic()) or ""
                    if why:
                        self._abandon(why)
                        return
                    continue
                self._sent.pop(f.req_id, None)
                self._unwatched.discard(f.req_id)
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
            if not self._closed:
                log.info("connection to %s ended (%d requests unanswered): %s", self.addr, len(self._pending), err)
            self._closed = True
            _close_writer(self._writer)
            self._fail_all(err)
            if self._watch is not None and not self._watch.done():
                self._watch.cancel()


def _why(e: BaseException) -> str:
    if isinstance(e, asyncio.TimeoutError):
        return "no HelloOk in time"
    return str(e) or type(e).__name__


def _check_payload(payload: bytes) -> None:
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"payload must be bytes, not {type(payload).__name__}")
    if len(payload) > codec.MAX_PAYLOAD:
        raise InvalidArgument(f"payload of {len(payload)} bytes above maximum {codec.MAX_PAYLOAD}")


def _check_name(stream: str) -> None:
    try:
        codec.check_stream_name(stream)
    except ValueError as e:
        raise InvalidArgument(str(e)) from None


def _check_int(what: str, v: int, bits: int) -> int:
    """``v`` if it is an int in ``0 .. 2**bits - 1``; else :class:`InvalidArgument`."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidArgument(f"{what} must be an int, not {type(v).__name__}")
    if not 0 <= v < 1 << bits:
        raise InvalidArgument(f"{what} {v} out of range (0 to {(1 << bits) - 1})")
    return v


def _check_addrs(addrs: Addrs) -> List[str]:
    """The addresses of ``"A,B"`` (or a list), each ``host:port``; :class:`ConfigError`
    naming the first that is not."""
    if not isinstance(addrs, (str, list, tuple)):
        raise ConfigError(f"addresses must be 'host:port[,host:port...]' or a list, not {type(addrs).__name__}")
    given = codec.split_addrs(addrs)
    if not given:
        raise ConfigError(f"no address in {addrs!r} (want 'host:port[,host:port...]')")
    for a in given:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 0xFFFF:
            raise ConfigError(f"address {a!r} is not host:port")
    return given
