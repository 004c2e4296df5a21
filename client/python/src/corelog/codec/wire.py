"""The protocol's numbers and names: versions, bounds, flag bits, the record format's
constants, opcodes, error codes, roles, and the two ways bytes fail to decode
(:class:`CodecError` for frames, :class:`RecordError` for records).
"""

from __future__ import annotations

import enum


#: Newest protocol version (carried in ``Hello``); version 2 adds ``Append2``,
#: ``ReadStream``, ``Subscribe`` and error codes 18-23; version 3 adds leadership:
#: ``HelloOk`` carries the node's :class:`Leadership`, and the refusals that send a client
#: elsewhere carry a :class:`Hint` (docs/protocol.md §6.3); version 4 adds consumer groups
#: (``GroupJoin``, ``GroupCommit``, ``GroupHeartbeat``, their pushes, error code 25).
PROTOCOL_VERSION = 4
#: The version a connection greets with when it uses no consumer group: the newest a
#: version-3 server (the release before groups) also speaks, so that such a server keeps
#: giving leadership hints instead of refusing the greeting.
CLIENT_VERSION = 3
#: First protocol version with consumer groups: what a group member's connections greet with.
GROUPS_VERSION = 4
MIN_PROTOCOL_VERSION = 1
#: The version a client opens with when a server refuses CLIENT_VERSION with BadVersion
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
#: Longest group name and member id, in bytes (UTF-8).
MAX_GROUP_NAME = 128
MAX_MEMBER_ID = 128
#: Longest group prefix, in bytes (a stream name's bound).
MAX_GROUP_PREFIX = MAX_STREAM_NAME
#: Most buckets of a group per shard (``k``).
MAX_GROUP_K = 64
#: ``next`` of a bucket in ``GroupAssigned`` that has no committed position yet.
NO_COMMIT = 2**64 - 1

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
    GROUP_JOIN = 0x0A
    GROUP_COMMIT = 0x0B
    GROUP_HEARTBEAT = 0x0C
    HELLO_OK = 0x81
    APPENDED = 0x82
    RECORDS = 0x83
    APPENDED2 = 0x84
    STREAM_RECORDS = 0x85
    TRIMMED = 0x86
    GROUP_ASSIGNED = 0x88
    GROUP_RECORDS = 0x89
    GROUP_COMMITTED = 0x8A
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
    #: A consumer group's member named a generation that is not the group's current one,
    #: or its session ended; nothing was committed.
    STALE_GENERATION = 25


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
