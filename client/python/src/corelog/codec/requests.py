"""Client → server requests, each with its ``encode``, and :func:`parse_request` (what
a server reads; the tests use it); :class:`Expect`, what a stream append expects of the
stream's version.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional, Type, Union

from .wire import (
    APPEND_FLAG_PRODUCER, APPEND_FLAG_STREAM, CodecError, ErrorCode, EXPECT_ANY, EXPECT_EXACT, EXPECT_NO_STREAM,
    HELLO_MAGIC, MAX_PAYLOAD, MAX_READ_BYTES, MAX_READ_COUNT, Op, CLIENT_VERSION, SUBSCRIBE_FLAG_STREAM, _U64,
)
from .frames import _Body, _Fixed, Frame, _frame
from .group import GROUP_REQUEST_OPS, GroupRequest, parse_group_request
from .records import ProducerSeq


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
    version: int = CLIENT_VERSION

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
class Read(_Fixed, op=Op.READ, layout="<HQI"):
    shard: int
    from_offset: int
    max_bytes: int = MAX_READ_BYTES


@dataclass(frozen=True)
class Tail(_Fixed, op=Op.TAIL, layout="<HQ"):
    shard: int
    from_offset: int


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
class Trim(_Fixed, op=Op.TRIM, layout="<HQ"):
    """Version 2, retention: delete the node's whole segments of ``shard`` below
    ``before`` (answered with ``Trimmed``). Only servers with retention know it; others
    answer ``UnknownOpcode``."""

    shard: int
    before: int


Request = Union[Hello, Append, Append2, Read, Tail, ReadStream, Subscribe, Trim, GroupRequest]

_FIXED: Dict[int, Type[Union[Read, Tail, Trim]]] = {cls._OP: cls for cls in (Read, Tail, Trim)}


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
    elif op in _FIXED:
        r = _FIXED[op]._parse(b)
    elif op in GROUP_REQUEST_OPS:
        r = parse_group_request(b)
    else:
        raise CodecError(f"unknown opcode 0x{op:02x}", ErrorCode.UNKNOWN_OPCODE)
    b.end()
    return r
