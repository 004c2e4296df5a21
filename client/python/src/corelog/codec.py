"""The corelog wire protocol and record encoding, sans-IO: bytes in, messages out.

Nothing here touches a socket, a thread or a clock. The layouts are those of
``docs/protocol.md`` (frames, requests, responses, error codes) and ``docs/format.md`` §3
(records), implemented in Rust in ``client/src/codec.rs`` and ``client/src/record.rs``;
this module follows those files byte for byte (the tests check it against the real
server and the Rust CLI).

Frame: ``len: u32 LE`` (bytes after this field) · ``op: u8`` · ``req_id: u64 LE`` · body.
All integers are little-endian. Record CRCs are CRC-32/IEEE (zlib's ``crc32``).
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass
from typing import Iterator, List, NamedTuple, Optional, Tuple, Union

__all__ = [
    "PROTOCOL_VERSION", "MIN_PROTOCOL_VERSION", "FALLBACK_VERSION", "HELLO_MAGIC", "FRAME_HEADER_LEN", "MAX_PAYLOAD",
    "MAX_READ_BYTES", "MAX_REPL_BATCH_BYTES", "MAX_FRAME", "MAX_STREAM_NAME", "APPEND2_MAX_HEADER",
    "MAX_REQUEST_FRAME", "MAX_READ_COUNT", "NO_STREAM_VERSION", "Op", "ErrorCode", "Role",
    "CodecError", "RecordError", "Frame", "FrameDecoder", "decode_frame", "ProducerSeq", "Expect",
    "StreamReq", "Hello", "Append", "Append2", "Read", "Tail", "ReadStream", "Subscribe", "Trim", "Request",
    "HelloOk", "Appended", "Appended2", "Records", "StreamRecords", "WrongVersion", "OutOfRangeResponse", "Trimmed", "ErrorResponse",
    "LEADERSHIP_VERSION", "LeaderState", "Leadership", "Hint", "HINT_CODES", "PROBE_ID",
    "Response", "parse_request", "parse_response", "encode_error", "StreamPos", "Record",
    "encode_record", "decode_record", "iter_records", "verify_run", "crc32", "stream_shard",
    "check_stream_name", "shard_addr", "split_addrs",
]

# ----------------------------------------------------------------------------- constants

#: Newest client protocol version (carried in ``Hello``); version 2 adds ``Append2``,
#: ``ReadStream``, ``Subscribe`` and error codes 18-23; version 3 adds leadership:
#: ``HelloOk`` carries the node's :class:`Leadership`, and the refusals that send a client
#: elsewhere carry a :class:`Hint` (docs/protocol.md §6.3).
PROTOCOL_VERSION = 3
MIN_PROTOCOL_VERSION = 1
#: The version a client opens with when a server refuses PROTOCOL_VERSION with BadVersion
#: (a server older than the client, as during a rolling upgrade): the oldest with every
#: request the client sends. Such a connection learns nothing of leases and its refusals
#: carry no hint (docs/operations.md §15).
FALLBACK_VERSION = 2
#: First version whose ``HelloOk`` and refusals carry leadership.
LEADERSHIP_VERSION = 3
#: ``req_id`` of a probe (a repeated ``Hello`` on a connection where a request waits).
PROBE_ID = 2**64 - 1
HELLO_MAGIC = b"CLOG"
#: ``len`` field + op + req_id.
FRAME_HEADER_LEN = 4 + 1 + 8
#: Largest payload of one event.
MAX_PAYLOAD = 64 * 1024
#: Largest ``max_bytes`` a ``Read`` may ask for.
MAX_READ_BYTES = 1024 * 1024
MAX_REPL_BATCH_BYTES = 2 * 1024 * 1024
#: Largest whole frame (length field included).
MAX_FRAME = MAX_REPL_BATCH_BYTES + 64
#: Longest stream name in bytes (UTF-8).
MAX_STREAM_NAME = 255
#: ``Append2`` body before the payload at most: flags, producer, name length, name, expect.
APPEND2_MAX_HEADER = 1 + 16 + 2 + MAX_STREAM_NAME + 9
#: Largest frame a client may send; the client port refuses more from the header alone.
MAX_REQUEST_FRAME = FRAME_HEADER_LEN + APPEND2_MAX_HEADER + MAX_PAYLOAD
#: Most events one ``ReadStream`` may ask for.
MAX_READ_COUNT = 10_000
#: ``current`` of a ``WrongExpectedVersion`` error when the stream has no event.
NO_STREAM_VERSION = 2**64 - 1

APPEND_FLAG_PRODUCER = 0x01
APPEND_FLAG_STREAM = 0x02
APPENDED_FLAG_DUPLICATE = 0x01
APPENDED_FLAG_VERSION = 0x02
SUBSCRIBE_FLAG_STREAM = 0x01
EXPECT_ANY = 0
EXPECT_NO_STREAM = 1
EXPECT_EXACT = 2

# Record format (docs/format.md §3).
RECORD_MAGIC = b"CR"
RECORD_FORMAT_VERSION = 1
RECORD_FORMAT_VERSION_EXT = 2
RECORD_HEADER_LEN = 24
RECORD_FLAG_PRODUCER = 0x01
RECORD_FLAG_STREAM = 0x02
RECORD_KNOWN_FLAGS = RECORD_FLAG_PRODUCER | RECORD_FLAG_STREAM
PRODUCER_EXT_LEN = 16
STREAM_EXT_FIXED = 9
MAX_EXT_LEN = PRODUCER_EXT_LEN + STREAM_EXT_FIXED + MAX_STREAM_NAME
MAX_BODY = MAX_PAYLOAD + MAX_EXT_LEN

_U64 = 2**64


class Op(enum.IntEnum):
    """Operation codes: requests < 0x80 <= responses (replication frames not included)."""

    HELLO = 0x01
    APPEND = 0x02
    READ = 0x03
    TAIL = 0x04
    APPEND2 = 0x05
    READ_STREAM = 0x06
    SUBSCRIBE = 0x07
    TRIM = 0x08
    HELLO_OK = 0x81
    APPENDED = 0x82
    RECORDS = 0x83
    APPENDED2 = 0x84
    STREAM_RECORDS = 0x85
    TRIMMED = 0x86
    ERROR = 0xFF


class ErrorCode(enum.IntEnum):
    """Error codes carried by ``Error`` frames (docs/protocol.md §4). Stable numbers."""

    BAD_FRAME = 1
    UNKNOWN_OPCODE = 2
    TOO_LARGE = 3
    BAD_VERSION = 4
    NOT_LEADER = 5
    NO_SUCH_SHARD = 6
    OUT_OF_RANGE = 7
    REPLICATION_TIMEOUT = 8
    OVERLOADED = 9
    FENCED = 10
    SHUTTING_DOWN = 11
    INTERNAL = 12
    BAD_HANDSHAKE = 13
    UNEXPECTED = 14
    UNAVAILABLE = 15
    DIVERGED = 16
    OUTCOME_UNKNOWN = 17
    SEQUENCE_GAP = 18
    UNKNOWN_PRODUCER = 19
    STALE_SEQUENCE = 20
    WRONG_EXPECTED_VERSION = 21
    WRONG_SHARD = 22
    BAD_REQUEST = 23
    FORBIDDEN = 24


class Role(enum.IntEnum):
    """The role a node reports in ``HelloOk``."""

    LEADER = 1
    FOLLOWER = 2
    FENCED = 3


#: Error codes that carry a :class:`Hint` on a version-3 connection: the refusals that
#: send a client elsewhere (nothing was written).
HINT_CODES = frozenset((ErrorCode.NOT_LEADER, ErrorCode.UNAVAILABLE, ErrorCode.FENCED, ErrorCode.SHUTTING_DOWN))


# ----------------------------------------------------------------------------- errors


class CodecError(ValueError):
    """Bytes that do not decode. ``code`` is the protocol error a server answers with."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.BAD_FRAME) -> None:
        super().__init__(message)
        self.code = code


class RecordError(ValueError):
    """A record that does not decode or verify (``kind``: Truncated, BadMagic, BadVersion,
    BadFlags, PayloadTooLarge, BadCrc, OffsetGap, BadStream, as in record.rs)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# ----------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class Frame:
    """One frame as cut from the byte stream."""

    op: int
    req_id: int
    body: bytes


def decode_frame(buf: Union[bytes, bytearray, memoryview], max_frame: int = MAX_FRAME) -> Optional[Tuple[Frame, int]]:
    """Cuts one frame from the front of ``buf``: ``(frame, bytes used)``, or ``None`` when
    more bytes are needed. Raises :class:`CodecError` for a length field out of bounds
    (decided from the 4 length bytes alone)."""
    if len(buf) < 4:
        return None
    (length,) = struct.unpack_from("<I", buf, 0)
    if length < FRAME_HEADER_LEN - 4:
        raise CodecError(f"frame length {length} below minimum 9", ErrorCode.BAD_FRAME)
    if length > max_frame - 4:
        raise CodecError(
            f"frame length field {length} above maximum {max_frame - 4} (frame {max_frame} bytes in all)",
            ErrorCode.TOO_LARGE,
        )
    total = 4 + length
    if len(buf) < total:
        return None
    op = buf[4]
    (req_id,) = struct.unpack_from("<Q", buf, 5)
    return Frame(op, req_id, bytes(buf[13:total])), total


class FrameDecoder:
    """Accumulates received bytes and yields whole frames (a connection's read buffer)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._start = 0
        self.max_frame = max_frame

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> Optional[Frame]:
        """The next whole frame, or ``None`` until more bytes are fed."""
        got = decode_frame(memoryview(self._buf)[self._start:], self.max_frame)
        if got is None:
            if self._start:
                del self._buf[: self._start]
                self._start = 0
            return None
        frame, used = got
        self._start += used
        if self._start == len(self._buf):
            self._buf.clear()
            self._start = 0
        return frame

    def __iter__(self) -> Iterator[Frame]:
        while True:
            f = self.next_frame()
            if f is None:
                return
            yield f

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._start


def _frame(op: int, req_id: int, body: bytes) -> bytes:
    return struct.pack("<IBQ", 9 + len(body), op, req_id) + body


class _Body:
    """Little-endian cursor over a body; every read is bounds-checked."""

    __slots__ = ("op", "buf", "at")

    def __init__(self, frame: Frame) -> None:
        self.op = frame.op
        self.buf = frame.body
        self.at = 0

    def take(self, n: int) -> bytes:
        if len(self.buf) - self.at < n:
            raise CodecError(f"bad body for opcode 0x{self.op:02x}: body truncated")
        b = self.buf[self.at: self.at + n]
        self.at += n
        return b

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "little")

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "little")

    def u64(self) -> int:
        return int.from_bytes(self.take(8), "little")

    def rest(self) -> bytes:
        b = self.buf[self.at:]
        self.at = len(self.buf)
        return b

    def end(self) -> None:
        if self.at != len(self.buf):
            raise CodecError(f"bad body for opcode 0x{self.op:02x}: trailing bytes")


# ----------------------------------------------------------------------------- requests


class ProducerSeq(NamedTuple):
    """An idempotent append's identity: the producer's 64-bit id and its sequence."""

    id: int
    seq: int


class Expect:
    """What a stream append expects of the stream's current version (its last event's):
    ``Expect.ANY``, ``Expect.NO_STREAM`` or ``Expect.exact(n)``. :meth:`parse` also takes
    ``"any"``, ``"none"``/``"no-stream"``, an ``int`` or a decimal string."""

    __slots__ = ("kind", "value")

    ANY: "Expect"
    NO_STREAM: "Expect"

    def __init__(self, kind: int, value: int = 0) -> None:
        self.kind = kind
        self.value = value

    @classmethod
    def exact(cls, version: int) -> "Expect":
        if not 0 <= version < _U64:
            raise ValueError(f"expected version {version} out of range")
        return cls(EXPECT_EXACT, version)

    @classmethod
    def parse(cls, v: "ExpectLike") -> "Expect":
        if isinstance(v, Expect):
            return v
        if v is None or v == "any":
            return cls.ANY
        if v in ("none", "no-stream"):
            return cls.NO_STREAM
        if isinstance(v, bool):
            raise ValueError(f"expected version {v!r}: give 'any', 'none' or a number")
        if isinstance(v, int):
            return cls.exact(v)
        if isinstance(v, str) and v.isdigit():
            return cls.exact(int(v))
        raise ValueError(f"expected version {v!r}: give 'any', 'none' or a number")

    def met_by(self, current: Optional[int]) -> bool:
        if self.kind == EXPECT_ANY:
            return True
        if self.kind == EXPECT_NO_STREAM:
            return current is None
        return current == self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expect) and (self.kind, self.value) == (other.kind, other.value)

    def __hash__(self) -> int:
        return hash((self.kind, self.value))

    def __repr__(self) -> str:
        if self.kind == EXPECT_ANY:
            return "Expect.ANY"
        if self.kind == EXPECT_NO_STREAM:
            return "Expect.NO_STREAM"
        if self.kind == EXPECT_EXACT:
            return f"Expect.exact({self.value})"
        return f"Expect({self.kind}, {self.value})"


Expect.ANY = Expect(EXPECT_ANY)
Expect.NO_STREAM = Expect(EXPECT_NO_STREAM)

ExpectLike = Union[Expect, int, str, None]


class StreamReq(NamedTuple):
    """The stream part of an ``Append2`` as on the wire (the server checks the fields)."""

    name: bytes
    expect_kind: int = EXPECT_ANY
    expected: int = 0

    @classmethod
    def new(cls, name: Union[str, bytes], expect: ExpectLike = None) -> "StreamReq":
        e = Expect.parse(expect)
        return cls(name.encode() if isinstance(name, str) else bytes(name), e.kind, e.value)

    def expect(self) -> Expect:
        if self.expect_kind in (EXPECT_ANY, EXPECT_NO_STREAM, EXPECT_EXACT):
            return Expect(self.expect_kind, self.expected if self.expect_kind == EXPECT_EXACT else 0)
        raise ValueError(f"unknown expected-version kind {self.expect_kind} (0 any, 1 no stream, 2 exact)")


@dataclass(frozen=True)
class Hello:
    version: int = PROTOCOL_VERSION

    def encode(self, req_id: int = 0) -> bytes:
        return _frame(Op.HELLO, req_id, HELLO_MAGIC + struct.pack("<H", self.version))


@dataclass(frozen=True)
class Append:
    payload: bytes

    def encode(self, req_id: int = 0) -> bytes:
        if len(self.payload) > MAX_PAYLOAD:
            raise ValueError(f"payload of {len(self.payload)} bytes above maximum {MAX_PAYLOAD}")
        return _frame(Op.APPEND, req_id, bytes(self.payload))


@dataclass(frozen=True)
class Append2:
    """Version 2 append: an optional producer (id, seq), an optional stream with an
    expected version, the payload."""

    producer: Optional[ProducerSeq]
    stream: Optional[StreamReq]
    payload: bytes

    def encode(self, req_id: int = 0) -> bytes:
        if len(self.payload) > MAX_PAYLOAD:
            raise ValueError(f"payload of {len(self.payload)} bytes above maximum {MAX_PAYLOAD}")
        flags = (APPEND_FLAG_PRODUCER if self.producer is not None else 0) | (
            APPEND_FLAG_STREAM if self.stream is not None else 0
        )
        parts = [bytes([flags])]
        if self.producer is not None:
            parts.append(struct.pack("<QQ", self.producer.id, self.producer.seq))
        if self.stream is not None:
            s = self.stream
            if len(s.name) > 0xFFFF:
                raise ValueError("stream name above the wire's bound")
            parts.append(struct.pack("<H", len(s.name)) + s.name + struct.pack("<BQ", s.expect_kind, s.expected))
        parts.append(bytes(self.payload))
        return _frame(Op.APPEND2, req_id, b"".join(parts))


@dataclass(frozen=True)
class Read:
    shard: int
    from_offset: int
    max_bytes: int = MAX_READ_BYTES

    def encode(self, req_id: int = 0) -> bytes:
        return _frame(Op.READ, req_id, struct.pack("<HQI", self.shard, self.from_offset, self.max_bytes))


@dataclass(frozen=True)
class Tail:
    shard: int
    from_offset: int

    def encode(self, req_id: int = 0) -> bytes:
        return _frame(Op.TAIL, req_id, struct.pack("<HQ", self.shard, self.from_offset))


@dataclass(frozen=True)
class ReadStream:
    name: bytes
    from_version: int = 0
    max_count: int = MAX_READ_COUNT
    max_bytes: int = MAX_READ_BYTES

    def encode(self, req_id: int = 0) -> bytes:
        body = struct.pack("<H", len(self.name)) + self.name
        body += struct.pack("<QII", self.from_version, self.max_count, self.max_bytes)
        return _frame(Op.READ_STREAM, req_id, body)


@dataclass(frozen=True)
class Subscribe:
    """``stream``: ``name`` is one stream and ``from_`` a version; else ``name`` is a
    prefix and ``from_`` an offset of the connection's shard."""

    stream: bool
    name: bytes
    from_: int

    def encode(self, req_id: int = 0) -> bytes:
        body = bytes([SUBSCRIBE_FLAG_STREAM if self.stream else 0]) + struct.pack("<H", len(self.name))
        body += self.name + struct.pack("<Q", self.from_)
        return _frame(Op.SUBSCRIBE, req_id, body)


@dataclass(frozen=True)
class Trim:
    """Version 2, retention: delete the node's whole segments of ``shard`` below
    ``before`` (answered with ``Trimmed``). Only servers with retention know it; others
    answer ``UnknownOpcode``."""

    shard: int
    before: int

    def encode(self, req_id: int = 0) -> bytes:
        return _frame(Op.TRIM, req_id, struct.pack("<HQ", self.shard, self.before))


Request = Union[Hello, Append, Append2, Read, Tail, ReadStream, Subscribe, Trim]


def parse_request(frame: Frame) -> Request:
    """Decodes a client request (what the server does); raises :class:`CodecError`."""
    b = _Body(frame)
    op = frame.op
    r: Request
    if op == Op.HELLO:
        if b.take(4) != HELLO_MAGIC:
            raise CodecError(f"bad body for opcode 0x{op:02x}: bad magic")
        r = Hello(b.u16())
    elif op == Op.APPEND:
        if len(frame.body) > MAX_PAYLOAD:
            raise CodecError(f"payload of {len(frame.body)} bytes above maximum {MAX_PAYLOAD}", ErrorCode.TOO_LARGE)
        return Append(frame.body)
    elif op == Op.APPEND2:
        flags = b.u8()
        if flags & ~(APPEND_FLAG_PRODUCER | APPEND_FLAG_STREAM):
            raise CodecError(f"bad body for opcode 0x{op:02x}: unknown Append2 flags")
        producer = ProducerSeq(b.u64(), b.u64()) if flags & APPEND_FLAG_PRODUCER else None
        stream = None
        if flags & APPEND_FLAG_STREAM:
            n = b.u16()
            name = b.take(n)
            stream = StreamReq(name, b.u8(), b.u64())
        payload = b.rest()
        if len(payload) > MAX_PAYLOAD:
            raise CodecError(f"payload of {len(payload)} bytes above maximum {MAX_PAYLOAD}", ErrorCode.TOO_LARGE)
        return Append2(producer, stream, payload)
    elif op == Op.SUBSCRIBE:
        flags = b.u8()
        if flags & ~SUBSCRIBE_FLAG_STREAM:
            raise CodecError(f"bad body for opcode 0x{op:02x}: unknown Subscribe flags")
        n = b.u16()
        r = Subscribe(flags != 0, b.take(n), b.u64())
    elif op == Op.READ_STREAM:
        n = b.u16()
        r = ReadStream(b.take(n), b.u64(), b.u32(), b.u32())
    elif op == Op.READ:
        r = Read(b.u16(), b.u64(), b.u32())
    elif op == Op.TAIL:
        r = Tail(b.u16(), b.u64())
    elif op == Op.TRIM:
        r = Trim(b.u16(), b.u64())
    else:
        raise CodecError(f"unknown opcode 0x{op:02x}", ErrorCode.UNKNOWN_OPCODE)
    b.end()
    return r


# ----------------------------------------------------------------------------- responses


class LeaderState(enum.IntEnum):
    """Whether a node sees a leader holding a live lease (version 3)."""

    #: Static roles (no lease), or the node has not heard from etcd lately.
    UNKNOWN = 0
    #: A leader holds a live lease (a leader: its own; a follower: its leader's).
    LIVE = 1
    #: No leader holds a live lease now (a leader: its own lapsed; a follower: the
    #: leader's heartbeat stopped, a take-over is pending).
    LAPSED = 2


@dataclass(frozen=True)
class Leadership:
    """What a version-3 ``HelloOk`` adds: the lease (ms; 0: none), the newest epoch the
    node knows of, and whether a leader holds a live lease."""

    lease_ms: int
    epoch: int
    state: LeaderState


@dataclass(frozen=True)
class Hint:
    """What a version-3 refusal (codes in :data:`HINT_CODES`) carries after its message:
    the newest epoch the node knows of, whether a leader holds a live lease, and when to
    ask that node again (ms; 0: no advice)."""

    epoch: int
    state: LeaderState
    retry_ms: int


@dataclass(frozen=True)
class HelloOk:
    version: int
    shard: int
    shard_count: int
    role: Role
    epoch: int
    #: Version 3 and later: the node's view of leadership.
    leadership: Optional[Leadership] = None

    def encode(self, req_id: int = 0) -> bytes:
        body = struct.pack("<HHHBI", self.version, self.shard, self.shard_count, int(self.role), self.epoch)
        if self.version >= LEADERSHIP_VERSION:
            ld = self.leadership or Leadership(0, self.epoch, LeaderState.UNKNOWN)
            body += struct.pack("<IIB", ld.lease_ms, ld.epoch, int(ld.state))
        return _frame(Op.HELLO_OK, req_id, body)


@dataclass(frozen=True)
class Appended:
    shard: int
    offset: int

    def encode(self, req_id: int = 0) -> bytes:
        return _frame(Op.APPENDED, req_id, struct.pack("<HQ", self.shard, self.offset))


@dataclass(frozen=True)
class Appended2:
    """Answer to ``Append2``: ``duplicate`` when the producer's sequence was in the log
    already (this is its original position); ``version``: the event's stream version."""

    shard: int
    offset: int
    duplicate: bool = False
    version: Optional[int] = None

    def encode(self, req_id: int = 0) -> bytes:
        flags = (APPENDED_FLAG_DUPLICATE if self.duplicate else 0) | (
            APPENDED_FLAG_VERSION if self.version is not None else 0
        )
        body = struct.pack("<HQB", self.shard, self.offset, flags)
        if self.version is not None:
            body += struct.pack("<Q", self.version)
        return _frame(Op.APPENDED2, req_id, body)


@dataclass(frozen=True)
class Records:
    """``count`` records in the record encoding (see :func:`iter_records`)."""

    shard: int
    next_offset: int
    count: int
    records: bytes

    def encode(self, req_id: int = 0) -> bytes:
        return _frame(Op.RECORDS, req_id, struct.pack("<HQI", self.shard, self.next_offset, self.count) + self.records)


@dataclass(frozen=True)
class StreamRecords:
    shard: int
    next_version: int
    end_version: int
    count: int
    records: bytes

    def encode(self, req_id: int = 0) -> bytes:
        head = struct.pack("<HQQI", self.shard, self.next_version, self.end_version, self.count)
        return _frame(Op.STREAM_RECORDS, req_id, head + self.records)


def _error_body(code: int, message: str) -> bytes:
    raw = message.encode("utf-8")
    if len(raw) > 1024:
        raw = raw[:1024]
        while raw:  # cut on a character boundary, as the Rust encoder does
            try:
                raw.decode("utf-8")
                break
            except UnicodeDecodeError:
                raw = raw[:-1]
    return struct.pack("<HH", code, len(raw)) + raw


def encode_error(req_id: int, code: int, message: str) -> bytes:
    """An ``Error`` frame; the message is cut to 1 KiB on a character boundary."""
    return _frame(Op.ERROR, req_id, _error_body(code, message))


@dataclass(frozen=True)
class WrongVersion:
    """``Error`` with code 21: the stream's current version follows the message
    (``None``: the stream has no event; ``u64::MAX`` on the wire)."""

    current: Optional[int]
    message: str

    def encode(self, req_id: int = 0) -> bytes:
        body = _error_body(ErrorCode.WRONG_EXPECTED_VERSION, self.message)
        body += struct.pack("<Q", NO_STREAM_VERSION if self.current is None else self.current)
        return _frame(Op.ERROR, req_id, body)


@dataclass(frozen=True)
class OutOfRangeResponse:
    """``Error`` with code 7 on a version-2 connection of a server with retention: what
    was asked for was deleted; ``first`` (after the message) is the first offset (or
    stream version) still held. Version-1 connections get a plain :class:`ErrorResponse`."""

    first: int
    message: str

    def encode(self, req_id: int = 0) -> bytes:
        body = _error_body(ErrorCode.OUT_OF_RANGE, self.message) + struct.pack("<Q", self.first)
        return _frame(Op.ERROR, req_id, body)


@dataclass(frozen=True)
class Trimmed:
    """Answer to ``Trim``: the node's first offset of the shard now."""

    shard: int
    first_offset: int

    def encode(self, req_id: int = 0) -> bytes:
        return _frame(Op.TRIMMED, req_id, struct.pack("<HQ", self.shard, self.first_offset))


@dataclass(frozen=True)
class ErrorResponse:
    code: int
    message: str
    #: A version-3 refusal's :class:`Hint` (codes in :data:`HINT_CODES` only).
    hint: Optional[Hint] = None

    def encode(self, req_id: int = 0) -> bytes:
        if self.hint is None:
            return encode_error(req_id, self.code, self.message)
        h = self.hint
        return _frame(Op.ERROR, req_id, _error_body(self.code, self.message)
                      + struct.pack("<IBH", h.epoch, int(h.state), h.retry_ms))


Response = Union[HelloOk, Appended, Appended2, Records, StreamRecords, WrongVersion, OutOfRangeResponse, Trimmed,
                 ErrorResponse]


def parse_response(frame: Frame) -> Response:
    """Decodes a server answer; raises :class:`CodecError` for anything malformed."""
    b = _Body(frame)
    op = frame.op
    r: Response
    if op == Op.HELLO_OK:
        version, shard, count, role = b.u16(), b.u16(), b.u16(), b.u8()
        if role not in (1, 2, 3):
            raise CodecError(f"bad body for opcode 0x{op:02x}: unknown role")
        epoch = b.u32()
        leadership = None
        if version >= LEADERSHIP_VERSION:
            lease_ms, view, state = b.u32(), b.u32(), b.u8()
            if state not in (0, 1, 2):
                raise CodecError(f"bad body for opcode 0x{op:02x}: unknown leader state")
            leadership = Leadership(lease_ms, view, LeaderState(state))
        r = HelloOk(version, shard, count, Role(role), epoch, leadership)
    elif op == Op.APPENDED:
        r = Appended(b.u16(), b.u64())
    elif op == Op.APPENDED2:
        shard, offset, flags = b.u16(), b.u64(), b.u8()
        if flags & ~(APPENDED_FLAG_DUPLICATE | APPENDED_FLAG_VERSION):
            raise CodecError(f"bad body for opcode 0x{op:02x}: unknown Appended2 flags")
        version = b.u64() if flags & APPENDED_FLAG_VERSION else None
        r = Appended2(shard, offset, bool(flags & APPENDED_FLAG_DUPLICATE), version)
    elif op == Op.TRIMMED:
        r = Trimmed(b.u16(), b.u64())
    elif op == Op.STREAM_RECORDS:
        return StreamRecords(b.u16(), b.u64(), b.u64(), b.u32(), b.rest())
    elif op == Op.RECORDS:
        return Records(b.u16(), b.u64(), b.u32(), b.rest())
    elif op == Op.ERROR:
        code = b.u16()
        n = b.u16()
        try:
            message = b.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise CodecError(f"bad body for opcode 0x{op:02x}: message not UTF-8") from None
        if code == ErrorCode.WRONG_EXPECTED_VERSION:
            v = b.u64()
            r = WrongVersion(None if v == NO_STREAM_VERSION else v, message)
        elif code == ErrorCode.OUT_OF_RANGE and len(frame.body) - b.at == 8:
            r = OutOfRangeResponse(b.u64(), message)
        elif code in HINT_CODES and len(frame.body) - b.at == 7:
            epoch, state, retry_ms = b.u32(), b.u8(), b.u16()
            if state not in (0, 1, 2):
                raise CodecError(f"bad body for opcode 0x{op:02x}: unknown leader state")
            r = ErrorResponse(code, message, Hint(epoch, LeaderState(state), retry_ms))
        else:
            r = ErrorResponse(code, message)
    else:
        raise CodecError(f"unknown opcode 0x{op:02x}", ErrorCode.UNKNOWN_OPCODE)
    b.end()
    return r


# ----------------------------------------------------------------------------- records


def crc32(data: bytes, crc: int = 0) -> int:
    """CRC-32/IEEE as the records use it (crc32fast = zlib's crc32; ``crc32(b"123456789")
    == 0xCBF43926``)."""
    return zlib.crc32(data, crc) & 0xFFFFFFFF


class StreamPos(NamedTuple):
    """An event's stream and its version there (0 for the stream's first event)."""

    name: str
    version: int


@dataclass(frozen=True)
class Record:
    """A decoded, CRC-verified record."""

    offset: int
    epoch: int
    payload: bytes
    #: The stored CRC-32: with ``offset`` and ``epoch``, a record's identity.
    crc: int = 0
    #: Set on records of idempotent appends.
    producer: Optional[ProducerSeq] = None
    #: Set on events appended to a stream.
    stream: Optional[StreamPos] = None

    @property
    def encoded_len(self) -> int:
        n = RECORD_HEADER_LEN + len(self.payload)
        if self.producer is not None:
            n += PRODUCER_EXT_LEN
        if self.stream is not None:
            n += STREAM_EXT_FIXED + len(self.stream.name.encode())
        return n


def check_stream_name(name: Union[str, bytes]) -> str:
    """The name as ``str`` if it may name a stream (1 to 255 bytes of UTF-8); else
    ``ValueError`` saying why."""
    raw = name.encode("utf-8") if isinstance(name, str) else bytes(name)
    if not raw:
        raise ValueError("stream name is empty (1 to 255 bytes of UTF-8)")
    if len(raw) > MAX_STREAM_NAME:
        raise ValueError(f"stream name of {len(raw)} bytes is too long (at most {MAX_STREAM_NAME})")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"stream name is not UTF-8 ({e})") from None


def encode_record(
    offset: int,
    epoch: int,
    payload: bytes,
    producer: Optional[ProducerSeq] = None,
    stream: Optional[StreamPos] = None,
) -> bytes:
    """One record: version 1 without extensions, else version 2 (record.rs ``encode_ex``)."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError("record payload above MAX_PAYLOAD")
    ext = b""
    flags = 0
    if producer is not None:
        flags |= RECORD_FLAG_PRODUCER
        ext += struct.pack("<QQ", producer.id, producer.seq)
    if stream is not None:
        name = stream.name.encode("utf-8")
        if not 0 < len(name) <= MAX_STREAM_NAME:
            raise ValueError("stream name length out of bounds")
        flags |= RECORD_FLAG_STREAM
        ext += struct.pack("<QB", stream.version, len(name)) + name
    version = RECORD_FORMAT_VERSION_EXT if flags else RECORD_FORMAT_VERSION
    head = RECORD_MAGIC + bytes([version, flags]) + struct.pack("<IQI", len(ext) + len(payload), offset, epoch)
    body = ext + bytes(payload)
    return head + struct.pack("<I", crc32(body, crc32(head))) + body


def decode_record(buf: Union[bytes, memoryview], at: int = 0) -> Tuple[Record, int]:
    """Decodes and verifies the record at ``buf[at:]``; returns it and its length. Checks
    in record.rs's order: size, magic, version/flags, body length, extensions, CRC."""
    mv = memoryview(buf)[at:]
    if len(mv) < RECORD_HEADER_LEN:
        raise RecordError("Truncated", "record truncated")
    if bytes(mv[0:2]) != RECORD_MAGIC:
        raise RecordError("BadMagic", "bad record magic")
    version, flags = mv[2], mv[3]
    if version == RECORD_FORMAT_VERSION:
        if flags != 0:
            raise RecordError("BadVersion", f"unknown record format version {version}")
    elif version == RECORD_FORMAT_VERSION_EXT:
        if flags == 0 or flags & ~RECORD_KNOWN_FLAGS:
            raise RecordError("BadFlags", f"unknown record flags 0x{flags:02x}")
    else:
        raise RecordError("BadVersion", f"unknown record format version {version}")
    length, offset, epoch, crc = struct.unpack_from("<IQII", mv, 4)
    if length > MAX_BODY:
        raise RecordError("PayloadTooLarge", f"record body length {length} too large")
    total = RECORD_HEADER_LEN + length
    if len(mv) < total:
        raise RecordError("Truncated", "record truncated")
    body = mv[RECORD_HEADER_LEN:total]
    p = 0
    producer = None
    stream = None
    if flags & RECORD_FLAG_PRODUCER:
        if len(body) < PRODUCER_EXT_LEN:
            raise RecordError("PayloadTooLarge", f"record body length {length} too large")
        producer = ProducerSeq(*struct.unpack_from("<QQ", body, 0))
        p = PRODUCER_EXT_LEN
    if flags & RECORD_FLAG_STREAM:
        if len(body) < p + STREAM_EXT_FIXED:
            raise RecordError("BadStream", "malformed stream extension")
        sversion, n = struct.unpack_from("<QB", body, p)
        if len(body) < p + STREAM_EXT_FIXED + n:
            raise RecordError("BadStream", "malformed stream extension")
        try:
            name = check_stream_name(bytes(body[p + STREAM_EXT_FIXED: p + STREAM_EXT_FIXED + n]))
        except ValueError:
            raise RecordError("BadStream", "malformed stream extension") from None
        stream = StreamPos(name, sversion)
        p += STREAM_EXT_FIXED + n
    if length - p > MAX_PAYLOAD:
        raise RecordError("PayloadTooLarge", f"record body length {length} too large")
    if crc32(body, crc32(mv[0:20])) != crc:
        raise RecordError("BadCrc", f"CRC mismatch in record {offset}")
    return Record(offset, epoch, bytes(body[p:]), crc, producer, stream), total


def iter_records(buf: bytes) -> Iterator[Record]:
    """The records packed back to back in ``buf`` (a ``Records`` body), each verified."""
    at = 0
    while at < len(buf):
        r, n = decode_record(buf, at)
        at += n
        yield r


def verify_run(buf: bytes, first: int, count: int) -> List[Record]:
    """Checks that ``buf`` holds exactly ``count`` records with offsets ``first ..
    first + count``, every CRC valid; returns them."""
    out: List[Record] = []
    at = 0
    for i in range(count):
        r, n = decode_record(buf, at)
        if r.offset != first + i:
            raise RecordError("OffsetGap", f"offset gap: expected {first + i}, found {r.offset}")
        out.append(r)
        at += n
    if at != len(buf):
        raise RecordError("Truncated", "record truncated")
    return out


# ----------------------------------------------------------------------------- placement


def stream_shard(name: Union[str, bytes], shard_count: int) -> int:
    """The shard that holds a stream: FNV-1a-64 of the name's bytes modulo the node's
    shard count (codec.rs ``stream_shard``)."""
    if shard_count <= 0:
        raise ValueError("a node has at least one shard")
    raw = name.encode("utf-8") if isinstance(name, str) else name
    h = 0xCBF29CE484222325
    for b in raw:
        h ^= b
        h = (h * 0x100000001B3) % _U64
    return h % shard_count


def split_addrs(addrs: Union[str, List[str], Tuple[str, ...]]) -> List[str]:
    """``"A,B"`` (or a list) -> ``["A", "B"]``."""
    items = addrs.split(",") if isinstance(addrs, str) else list(addrs)
    return [a.strip() for a in items if a.strip()]


def shard_addr(addr: str, shard: int) -> str:
    """The direct address of ``shard`` (client port + 1 + shard) of a node's ``host:port``."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {addr!r} has no port")
    p = int(port) + 1 + shard
    if p > 0xFFFF:
        raise ValueError("port overflow")
    return f"{host}:{p}"


def host_port(addr: str) -> Tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {addr!r} has no port")
    return host.strip("[]"), int(port)
