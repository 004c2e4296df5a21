"""Frames as bytes: cutting one from the front of a buffer (:func:`decode_frame`,
:class:`FrameDecoder` for a stream of bytes), building one, and the bounds-checked
cursor every body is parsed with.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Iterator, Optional, Tuple, Type, TypeVar, Union

from .wire import CodecError, ErrorCode, FRAME_HEADER_LEN, MAX_FRAME


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


F = TypeVar("F", bound="_Fixed")


class _Fixed:
    """A frame whose body is its dataclass fields, in declaration order, packed as
    ``_LAYOUT`` (a :mod:`struct` format with ``<``): that one line is both its encoding
    and its parsing."""

    _OP: ClassVar[int]
    _LAYOUT: ClassVar[str]

    def __init_subclass__(cls, op: int, layout: str, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._OP, cls._LAYOUT = op, layout

    def encode(self, req_id: int = 0) -> bytes:
        values = (getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]
        return _frame(self._OP, req_id, struct.pack(self._LAYOUT, *values))

    @classmethod
    def _parse(cls: Type[F], b: _Body) -> F:
        return cls(*struct.unpack(cls._LAYOUT, b.take(struct.calcsize(cls._LAYOUT))))
