"""Typed errors: one class per protocol error code (docs/protocol.md §4), all under
:class:`CorelogError`, plus the client-side failures (no node reachable, connection lost
before the answer, timeout, ...).

Every error says what a failed append may have left behind (docs/protocol.md §6):
``err.outcome`` is :data:`NOT_WRITTEN` (no attempt of it can be in the log, now or later:
retrying is safe), :data:`WRITTEN` (it is in the log, though the call failed) or
:data:`UNKNOWN` (it may or may not be in the log: read the log, or use an idempotent
:class:`~corelog.aio.Producer`, which re-sends such appends without storing them twice).
The outcome is that of the whole call, over all its attempts: an error raised after an
attempt was lost in flight says :data:`UNKNOWN` even when the last attempt was refused
(``err.attempts`` counts them). The classification is that of the Rust client's
``Error::outcome``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Optional, Type

from .codec import ErrorCode, Hint

NOT_WRITTEN = "not_written"
WRITTEN = "written"
UNKNOWN = "unknown"

__all__ = [
    "NOT_WRITTEN", "WRITTEN", "UNKNOWN", "CorelogError", "ServerError", "BadFrame", "UnknownOpcode", "TooLarge",
    "BadVersion", "NotLeader", "NoSuchShard", "OutOfRange", "ReplicationTimeout", "Overloaded", "Fenced",
    "ShuttingDown", "Internal", "BadHandshake", "Unexpected", "Unavailable", "Diverged", "OutcomeUnknown",
    "SequenceGap", "UnknownProducer", "StaleSequence", "WrongExpectedVersion", "WrongShard", "BadRequest",
    "Forbidden", "StaleGeneration",
    "Unreachable", "NotSent", "ConnectionClosed", "RequestTimeout", "Abandoned", "ProtocolError", "ProducerStopped",
    "InvalidArgument", "ConfigError", "ClientClosed", "Cancelled", "error_for_code", "SERVER_ERRORS",
]


class CorelogError(Exception):
    """Base of every error this package raises for a request."""

    #: ``NOT_WRITTEN``, ``WRITTEN`` or ``UNKNOWN``: what the failed call may have left
    #: behind, over all its attempts (a class default, set per instance by the retries).
    outcome: str = UNKNOWN
    #: The protocol error code (server errors only).
    code: Optional[int] = None
    #: How many times the request was sent (0: never; set on errors of appends).
    attempts: int = 0


class ServerError(CorelogError):
    """The server answered with an ``Error`` frame. Subclasses name each code; a code
    this package does not know is a plain ``ServerError``."""

    #: A version-3 refusal's :class:`~corelog.codec.Hint` (``NotLeader``, ``Unavailable``,
    #: ``Fenced``, ``ShuttingDown``): the epoch the node knows, whether a leader holds a
    #: live lease, when to ask again. ``None`` otherwise.
    hint: Optional[Hint] = None

    def __init__(self, message: str = "", code: Optional[int] = None) -> None:
        if code is not None:
            self.code = code
        self.message = message
        try:
            name = ErrorCode(self.code).name if self.code is not None else "?"
        except ValueError:
            name = "?"
        super().__init__(f"server error {self.code} {name}: {message}")


class BadFrame(ServerError):
    """1: malformed frame (connection closed by the server)."""

    code = ErrorCode.BAD_FRAME
    outcome = NOT_WRITTEN


class UnknownOpcode(ServerError):
    """2: an opcode that is not a request (connection closed)."""

    code = ErrorCode.UNKNOWN_OPCODE
    outcome = NOT_WRITTEN


class TooLarge(ServerError):
    """3: frame or payload above the maximum (connection closed)."""

    code = ErrorCode.TOO_LARGE
    outcome = NOT_WRITTEN


class BadVersion(ServerError):
    """4: protocol version not spoken, or a version-2 request on a version-1 connection."""

    code = ErrorCode.BAD_VERSION
    outcome = NOT_WRITTEN


class NotLeader(ServerError):
    """5: append on a follower; ``leader`` is the leader's client address ('' unknown)."""

    code = ErrorCode.NOT_LEADER
    outcome = NOT_WRITTEN

    @property
    def leader(self) -> str:
        return self.message


class NoSuchShard(ServerError):
    """6: Read/Tail naming another shard than the connection's, or no such shard."""

    code = ErrorCode.NO_SUCH_SHARD
    outcome = NOT_WRITTEN


class OutOfRange(ServerError):
    """7: what was asked for is not held (deleted by retention, on servers that have it).
    ``first``: the first offset (or stream version) still held, when the server says."""

    code = ErrorCode.OUT_OF_RANGE
    outcome = NOT_WRITTEN

    def __init__(self, message: str = "", code: Optional[int] = None, first: Optional[int] = None) -> None:
        super().__init__(message, code)
        self.first = first


class ReplicationTimeout(ServerError):
    """8: durable on the leader, not confirmed by the follower in time: may still appear."""

    code = ErrorCode.REPLICATION_TIMEOUT


class Overloaded(ServerError):
    """9: defined, never sent (the server applies back-pressure instead)."""

    code = ErrorCode.OVERLOADED
    outcome = NOT_WRITTEN


class Fenced(ServerError):
    """10: the node is a fenced former leader; nothing was written."""

    code = ErrorCode.FENCED
    outcome = NOT_WRITTEN


class ShuttingDown(ServerError):
    """11: the node is shutting down."""

    code = ErrorCode.SHUTTING_DOWN
    outcome = NOT_WRITTEN


class Internal(ServerError):
    """12: an I/O error on the server reading the log."""

    code = ErrorCode.INTERNAL


class BadHandshake(ServerError):
    """13: first frame not Hello, or no Hello in time."""

    code = ErrorCode.BAD_HANDSHAKE
    outcome = NOT_WRITTEN


class Unexpected(ServerError):
    """14: a byte sent after Tail/Subscribe."""

    code = ErrorCode.UNEXPECTED


class Unavailable(ServerError):
    """15: the leader's epoch is not accepted by a follower yet; nothing written."""

    code = ErrorCode.UNAVAILABLE
    outcome = NOT_WRITTEN


class Diverged(ServerError):
    """16: replication only."""

    code = ErrorCode.DIVERGED


class OutcomeUnknown(ServerError):
    """17: accepted, then the node stopped leading before the follower confirmed."""

    code = ErrorCode.OUTCOME_UNKNOWN


class SequenceGap(ServerError):
    """18: an idempotent append skipped a sequence; nothing written."""

    code = ErrorCode.SEQUENCE_GAP
    outcome = NOT_WRITTEN


class UnknownProducer(ServerError):
    """19: sequence != 0 from a producer the shard holds no state for; nothing written."""

    code = ErrorCode.UNKNOWN_PRODUCER
    outcome = NOT_WRITTEN


class StaleSequence(ServerError):
    """20: a re-sent sequence older than the 64 the shard remembers; nothing new written:
    the record with this producer id and sequence is in the log (outcome ``written``)."""

    code = ErrorCode.STALE_SEQUENCE
    outcome = WRITTEN


class WrongExpectedVersion(ServerError):
    """21: the stream is not at the expected version; nothing written. ``current`` is its
    version (its last event's), ``None`` when the stream has no event."""

    code = ErrorCode.WRONG_EXPECTED_VERSION
    outcome = NOT_WRITTEN

    def __init__(self, message: str = "", code: Optional[int] = None, current: Optional[int] = None) -> None:
        super().__init__(message, code)
        self.current = current


class WrongShard(ServerError):
    """22: the stream lives on another shard; nothing written."""

    code = ErrorCode.WRONG_SHARD
    outcome = NOT_WRITTEN


class BadRequest(ServerError):
    """23: a well-formed frame with a bad field (stream name, expect kind); nothing done."""

    code = ErrorCode.BAD_REQUEST
    outcome = NOT_WRITTEN


class Forbidden(ServerError):
    """24: the server's policy (``--authz``) does not let this certificate's principal do
    this; the message names the operation and the resource. Nothing done; not retried."""

    code = ErrorCode.FORBIDDEN
    outcome = NOT_WRITTEN


class StaleGeneration(ServerError):
    """25: a consumer group's member committed for a generation that is not the group's
    current one (a rebalance happened), or its session ended. Nothing was committed; the
    new assignment restarts from the committed positions."""

    code = ErrorCode.STALE_GENERATION
    outcome = NOT_WRITTEN


SERVER_ERRORS: Dict[int, Type[ServerError]] = {
    cls.code: cls  # type: ignore[misc]
    for cls in (
        BadFrame, UnknownOpcode, TooLarge, BadVersion, NotLeader, NoSuchShard, OutOfRange,
        ReplicationTimeout, Overloaded, Fenced, ShuttingDown, Internal, BadHandshake, Unexpected,
        Unavailable, Diverged, OutcomeUnknown, SequenceGap, UnknownProducer, StaleSequence,
        WrongExpectedVersion, WrongShard, BadRequest, Forbidden, StaleGeneration,
    )
}


def error_for_code(code: int, message: str, current: Optional[int] = None, first: Optional[int] = None,
                   hint: Optional[Hint] = None) -> ServerError:
    """The typed exception for an ``Error`` frame (``current``: code 21's trailing
    version; ``first``: code 7's trailing first offset; ``hint``: a version-3 refusal's)."""
    cls = SERVER_ERRORS.get(code)
    if cls is None:
        return ServerError(message, code)
    if cls is WrongExpectedVersion:
        return WrongExpectedVersion(message, current=current)
    if cls is OutOfRange:
        return OutOfRange(message, first=first)
    e = cls(message)
    e.hint = hint
    return e


# ----------------------------------------------------------------------------- client side


class Unreachable(CorelogError):
    """No node could be reached (TCP, TLS or Hello failed everywhere): nothing was sent."""

    outcome = NOT_WRITTEN


class NotSent(CorelogError):
    """The connection had closed before the request was handed to it: nothing was sent."""

    outcome = NOT_WRITTEN


class ConnectionClosed(CorelogError):
    """The connection closed after the request was sent, before its answer."""

    outcome = UNKNOWN


class RequestTimeout(CorelogError):
    """No answer within the request timeout."""

    outcome = UNKNOWN


class Abandoned(ConnectionClosed):
    """The connection was given up while the request waited: its node went silent for a
    whole lease, or answered a probe that it no longer leads with a live lease. It cannot
    acknowledge the request any more within its lease; the request may still be in its
    log (docs/protocol.md §6.3)."""

    outcome = UNKNOWN


class ProtocolError(CorelogError):
    """The server's bytes made no sense (bad frame, bad record CRC, unexpected answer)."""

    outcome = UNKNOWN


class ProducerStopped(CorelogError):
    """An idempotent producer refuses appends after one failed for good."""

    outcome = NOT_WRITTEN


class InvalidArgument(CorelogError, ValueError):
    """Refused by the client before sending (payload too large, bad stream name, a shard
    that does not exist, an offset out of range)."""

    outcome = NOT_WRITTEN


class ConfigError(CorelogError, ValueError):
    """The client's configuration cannot work (a certificate file missing or unreadable,
    an address without a port, a server name the node's certificate does not carry): not
    retried, the message names the value."""

    outcome = NOT_WRITTEN


class ClientClosed(CorelogError):
    """The client (or producer) was closed: nothing was sent."""

    outcome = NOT_WRITTEN


class Cancelled(asyncio.CancelledError):
    """An append was cancelled (its task was cancelled, or a timeout around it ran out).
    A :class:`asyncio.CancelledError`, so that cancellation propagates as asyncio requires,
    with the append's outcome: ``not_written`` if its request never left, ``written`` if
    its answer had already arrived (``position``), else ``unknown``."""

    def __init__(self, outcome: str, position: Any = None, why: str = "") -> None:
        super().__init__(f"append cancelled; outcome {outcome}" + (f": {why}" if why else ""))
        self.outcome = outcome
        #: The position (or :class:`~corelog.types.Appended`) when ``outcome`` is ``written``.
        self.position = position
