//! What can go wrong on the wire: the error codes a server sends (stable, in
//! docs/protocol.md) and why bytes could not be decoded.

use std::fmt;

use super::MAX_PAYLOAD;

wire_enum! {
/// Error codes carried by `Response::Error`. Stable: documented in docs/protocol.md.
pub enum ErrorCode: u16, from from_u16 {
    BadFrame = 1,
    UnknownOpcode = 2,
    TooLarge = 3,
    BadVersion = 4,
    NotLeader = 5,
    NoSuchShard = 6,
    OutOfRange = 7,
    ReplicationTimeout = 8,
    Overloaded = 9,
    Fenced = 10,
    ShuttingDown = 11,
    Internal = 12,
    BadHandshake = 13,
    Unexpected = 14,
    /// Nothing was written: the leader cannot take writes yet (no follower has accepted
    /// its epoch since it started). A definite failure: retrying is safe.
    Unavailable = 15,
    /// Replication only: the two logs hold different records at the same offset after
    /// the handshake's cut. The link is refused; see docs/operations.md.
    Diverged = 16,
    /// The append was accepted but this node stopped leading before it was confirmed:
    /// it may or may not be in the log. Not retried automatically (a retry could store
    /// it twice); read the log to find out.
    OutcomeUnknown = 17,
    /// Idempotent append: the producer is known but this sequence is not the next one
    /// (an earlier one is missing). Nothing was written; the message names the expected
    /// sequence.
    SequenceGap = 18,
    /// Idempotent append: the shard knows no state for this producer and the sequence is
    /// not 0 (never seen, or forgotten: evicted, or the node restarted without it).
    /// Nothing was written.
    UnknownProducer = 19,
    /// Idempotent append: this sequence was written, but so long ago that its position is
    /// no longer remembered. Nothing new was written.
    StaleSequence = 20,
    /// Stream append: the stream is not at the expected version. Nothing was written;
    /// the frame carries the stream's current version.
    WrongExpectedVersion = 21,
    /// Stream request on a connection of a shard that does not hold the stream. Nothing
    /// was written; the message names the shard (reach it on its direct port).
    WrongShard = 22,
    /// A well-formed frame with a bad field (a stream name that is empty, too long or not
    /// UTF-8; an unknown expected-version kind). Nothing was done; the connection stays.
    BadRequest = 23,
    /// The policy (`--authz`) does not let this connection's principal do this; the
    /// message names the operation and the resource. Nothing was done; the connection
    /// stays.
    Forbidden = 24,
    /// Consumer group: the member named a generation that is not the group's current
    /// one, or its session ended (it timed out, or the node took over). Nothing was
    /// committed; a member takes the next `GroupAssigned` (or joins again).
    StaleGeneration = 25,
}
}

/// Why bytes could not be decoded. A decoding error always ends the connection (after
/// an `Error` frame where the peer can still read one): the stream position is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// `len` smaller than op + req_id.
    FrameTooShort(u32),
    /// `len` larger than the bound in force (second field: the whole-frame bound).
    FrameTooLarge(u32, usize),
    UnknownOpcode(u8),
    /// The body does not have the layout its opcode requires.
    BadBody {
        op: u8,
        reason: &'static str,
    },
    PayloadTooLarge(usize),
}

impl CodecError {
    pub fn code(&self) -> ErrorCode {
        match self {
            CodecError::FrameTooShort(_) | CodecError::BadBody { .. } => ErrorCode::BadFrame,
            CodecError::FrameTooLarge(..) | CodecError::PayloadTooLarge(_) => ErrorCode::TooLarge,
            CodecError::UnknownOpcode(_) => ErrorCode::UnknownOpcode,
        }
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::FrameTooShort(n) => write!(f, "frame length {n} below minimum 9"),
            CodecError::FrameTooLarge(n, max) => {
                write!(f, "frame length field {n} above maximum {} (frame {max} bytes in all)", max - 4)
            }
            CodecError::UnknownOpcode(o) => write!(f, "unknown opcode 0x{o:02x}"),
            CodecError::BadBody { op, reason } => {
                write!(f, "bad body for opcode 0x{op:02x}: {reason}")
            }
            CodecError::PayloadTooLarge(n) => {
                write!(f, "payload of {n} bytes above maximum {MAX_PAYLOAD}")
            }
        }
    }
}

impl std::error::Error for CodecError {}
