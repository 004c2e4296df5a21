"""Server → client answers, each with its ``encode``, and :func:`parse_response`: the
node's role and (version 3) its view of leadership, acknowledgements, records, and the
error frames, some carrying a value (the stream's version, the first offset held, a
refusal's :class:`Hint`).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Dict, Optional, Type, Union

from .wire import (
    APPENDED_FLAG_DUPLICATE, APPENDED_FLAG_VERSION, CodecError, ErrorCode, HINT_CODES, LEADERSHIP_VERSION,
    NO_STREAM_VERSION, Op, Role,
)
from .frames import _Body, _Fixed, Frame, _frame
from .group import GROUP_RESPONSE_OPS, GroupResponse, parse_group_response


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
class Appended(_Fixed, op=Op.APPENDED, layout="<HQ"):
    shard: int
    offset: int


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
class Trimmed(_Fixed, op=Op.TRIMMED, layout="<HQ"):
    """Answer to ``Trim``: the node's first offset of the shard now."""

    shard: int
    first_offset: int


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
                 ErrorResponse, GroupResponse]

_FIXED: Dict[int, Type[Union[Appended, Trimmed]]] = {cls._OP: cls for cls in (Appended, Trimmed)}


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
    elif op in _FIXED:
        r = _FIXED[op]._parse(b)
    elif op == Op.APPENDED2:
        shard, offset, flags = b.u16(), b.u64(), b.u8()
        if flags & ~(APPENDED_FLAG_DUPLICATE | APPENDED_FLAG_VERSION):
            raise CodecError(f"bad body for opcode 0x{op:02x}: unknown Appended2 flags")
        version = b.u64() if flags & APPENDED_FLAG_VERSION else None
        r = Appended2(shard, offset, bool(flags & APPENDED_FLAG_DUPLICATE), version)
    elif op == Op.STREAM_RECORDS:
        return StreamRecords(b.u16(), b.u64(), b.u64(), b.u32(), b.rest())
    elif op == Op.RECORDS:
        return Records(b.u16(), b.u64(), b.u32(), b.rest())
    elif op in GROUP_RESPONSE_OPS:
        r = parse_group_response(b)
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
