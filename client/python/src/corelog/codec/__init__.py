"""The corelog wire protocol and record encoding, sans-IO: bytes in, messages out.

Nothing here touches a socket, a thread or a clock. The layouts are those of
``docs/protocol.md`` (frames, requests, responses, error codes) and ``docs/format.md`` §3
(records), implemented in Rust in ``client/src/codec/`` and ``client/src/record.rs``;
this package follows those files byte for byte (the tests check it against the real
server and the Rust CLI).

Frame: ``len: u32 LE`` (bytes after this field) · ``op: u8`` · ``req_id: u64 LE`` · body.
All integers are little-endian. Record CRCs are CRC-32/IEEE (zlib's ``crc32``).

Its modules, from the bottom up: ``wire`` (versions, bounds, opcodes, error codes, the
decoding errors), ``frames`` (cutting and building frames), ``records`` (the record
encoding), ``requests``, ``responses``, ``placement`` (which shard holds a stream, a
shard's port). Every name is re-exported here: ``corelog.codec.X`` is the path to use.
"""

from __future__ import annotations

# Every public name of the modules, also those outside __all__ (flag bits, the record
# format's constants): callers reach them as corelog.codec.X.
from .wire import (
    APPEND2_MAX_HEADER, APPEND_FLAG_PRODUCER, APPEND_FLAG_STREAM, APPENDED_FLAG_DUPLICATE, APPENDED_FLAG_VERSION,
    CLIENT_VERSION, CodecError, ErrorCode, EXPECT_ANY, EXPECT_EXACT, EXPECT_NO_STREAM, FALLBACK_VERSION,
    FRAME_HEADER_LEN, GROUPS_VERSION, HELLO_MAGIC, HINT_CODES, LEADERSHIP_VERSION, MAX_BODY, MAX_EXT_LEN, MAX_FRAME,
    MAX_GROUP_K, MAX_GROUP_NAME, MAX_GROUP_PREFIX, MAX_MEMBER_ID, MAX_PAYLOAD, MAX_READ_BYTES, MAX_READ_COUNT,
    MAX_REPL_BATCH_BYTES, MAX_REQUEST_FRAME, MAX_STREAM_NAME, MIN_PROTOCOL_VERSION, NO_COMMIT, NO_STREAM_VERSION, Op,
    PROBE_ID, PRODUCER_EXT_LEN, PROTOCOL_VERSION, RECORD_FLAG_PRODUCER, RECORD_FLAG_STREAM,
    RECORD_FORMAT_VERSION, RECORD_FORMAT_VERSION_EXT, RECORD_HEADER_LEN, RECORD_KNOWN_FLAGS, RECORD_MAGIC,
    RecordError, Role, STREAM_EXT_FIXED, SUBSCRIBE_FLAG_STREAM,
)
from .frames import decode_frame, Frame, FrameDecoder
from .records import (
    check_stream_name, crc32, decode_record, encode_record, iter_records, ProducerSeq, Record, StreamPos, verify_run,
)
from .group import (
    GroupAssigned, GroupCommit, GroupCommitted, GroupHeartbeat, GroupJoin, GroupRecords, GroupRequest, GroupResponse,
)
from .requests import (
    Append, Append2, Expect, ExpectLike, Hello, parse_request, Read, ReadStream, Request, StreamReq, Subscribe,
    Tail, Trim,
)
from .responses import (
    Appended, Appended2, encode_error, ErrorResponse, HelloOk, Hint, Leadership, LeaderState, OutOfRangeResponse,
    parse_response, Records, Response, StreamRecords, Trimmed, WrongVersion,
)
from .placement import host_port, shard_addr, split_addrs, stream_shard

__all__ = [
    "PROTOCOL_VERSION", "CLIENT_VERSION", "GROUPS_VERSION", "MIN_PROTOCOL_VERSION", "FALLBACK_VERSION", "HELLO_MAGIC",
    "FRAME_HEADER_LEN", "MAX_PAYLOAD",
    "MAX_READ_BYTES", "MAX_REPL_BATCH_BYTES", "MAX_FRAME", "MAX_STREAM_NAME", "APPEND2_MAX_HEADER",
    "MAX_REQUEST_FRAME", "MAX_READ_COUNT", "NO_STREAM_VERSION", "Op", "ErrorCode", "Role",
    "CodecError", "RecordError", "Frame", "FrameDecoder", "decode_frame", "ProducerSeq", "Expect",
    "StreamReq", "Hello", "Append", "Append2", "Read", "Tail", "ReadStream", "Subscribe", "Trim", "Request",
    "HelloOk", "Appended", "Appended2", "Records", "StreamRecords", "WrongVersion", "OutOfRangeResponse", "Trimmed", "ErrorResponse",
    "LEADERSHIP_VERSION", "LeaderState", "Leadership", "Hint", "HINT_CODES", "PROBE_ID",
    "Response", "parse_request", "parse_response", "encode_error", "StreamPos", "Record",
    "encode_record", "decode_record", "iter_records", "verify_run", "crc32", "stream_shard",
    "check_stream_name", "shard_addr", "split_addrs", "MAX_GROUP_NAME", "MAX_MEMBER_ID", "MAX_GROUP_PREFIX",
    "MAX_GROUP_K", "NO_COMMIT", "GroupJoin", "GroupCommit", "GroupHeartbeat", "GroupAssigned", "GroupRecords",
    "GroupCommitted", "GroupRequest", "GroupResponse",
]
