"""The record encoding (docs/format.md §3): the same bytes on disk, on the replication
link and in reads, so a reader checks the CRC end to end. Encoding, decoding, and
checking a run of records read back; the extensions' values (:class:`ProducerSeq`,
:class:`StreamPos`) are the records', and the requests take them from here.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Iterator, List, NamedTuple, Optional, Tuple, Union

from .wire import (
    MAX_BODY, MAX_PAYLOAD, MAX_STREAM_NAME, PRODUCER_EXT_LEN, RECORD_FLAG_PRODUCER, RECORD_FLAG_STREAM,
    RECORD_FORMAT_VERSION, RECORD_FORMAT_VERSION_EXT, RECORD_HEADER_LEN, RECORD_KNOWN_FLAGS, RECORD_MAGIC,
    RecordError, STREAM_EXT_FIXED,
)


def crc32(data: bytes, crc: int = 0) -> int:
    """CRC-32/IEEE as the records use it (crc32fast = zlib's crc32; ``crc32(b"123456789")
    == 0xCBF43926``)."""
    return zlib.crc32(data, crc) & 0xFFFFFFFF


class ProducerSeq(NamedTuple):
    """An idempotent append's identity: the producer's 64-bit id and its sequence."""

    id: int
    seq: int


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
