//! What a client call can fail with ([`Error`]), and what a failed append may have left
//! in the log ([`Outcome`], docs/protocol.md §6).

use std::time::Duration;

use crate::codec::{CodecError, ErrorCode, Hint};

#[derive(Debug)]
pub enum Error {
    Io(std::io::Error),
    Tls(String),
    Codec(CodecError),
    /// The server answered with an error frame (`hint`: a version-3 refusal's, see
    /// docs/protocol.md §6.3).
    Server {
        code: u16,
        message: String,
        hint: Option<Hint>,
    },
    /// The connection closed before the answer arrived (the request may have been sent:
    /// outcome unknown for an append).
    Closed,
    Protocol(String),
    /// No node could be reached (nothing was sent).
    Unreachable(String),
    /// The request was never handed to a connection (it had closed): nothing was sent.
    NotSent,
    /// No answer within the request timeout (outcome unknown for an append).
    Timeout(Duration),
    /// The connection was given up while the request waited: its node went silent for
    /// a whole lease, or answered a probe that it no longer leads with a live lease. It
    /// cannot acknowledge the request any more within its lease; the request may still
    /// be in its log (outcome unknown).
    Abandoned(String),
    /// An idempotent producer refuses appends after one failed for good (nothing sent).
    ProducerStopped(String),
    /// A stream append's expected version did not hold: nothing was written. `current`
    /// is the stream's version (its last event's; `None`: the stream has no event).
    WrongExpectedVersion {
        current: Option<u64>,
        message: String,
    },
    /// What was asked for was deleted by retention: `first` is the first offset (a
    /// shard read or tail) or stream version (a stream read or subscription) still held.
    OutOfRange {
        first: u64,
        message: String,
    },
    /// Refused by the client before anything was sent: a bad argument or configuration
    /// (an address without a port, a server name the node's certificate does not carry,
    /// a stream name, a payload too large). Not retried; the message names the value.
    Invalid(String),
    /// An append gave up with `last` after an earlier attempt got no definite answer (it
    /// may still be written): the outcome is unknown whatever `last` says.
    InDoubt {
        attempts: u32,
        last: Box<Error>,
    },
}

/// What a failed append may have left behind, over all its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No attempt of it is in the log, nor can one land later.
    NotWritten,
    /// It is in the log, though the call failed (`StaleSequence`: the original is).
    Written,
    /// It may or may not be in the log (read the log to find out).
    Unknown,
}

impl Error {
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server { code, .. } => ErrorCode::from_u16(*code),
            Error::WrongExpectedVersion { .. } => Some(ErrorCode::WrongExpectedVersion),
            Error::OutOfRange { .. } => Some(ErrorCode::OutOfRange),
            Error::InDoubt { last, .. } => last.code(),
            _ => None,
        }
    }

    /// Whether a failed append may be in the log.
    pub fn outcome(&self) -> Outcome {
        use ErrorCode::*;
        match self {
            Error::Unreachable(_)
            | Error::NotSent
            | Error::Tls(_)
            | Error::Invalid(_)
            | Error::ProducerStopped(_)
            | Error::WrongExpectedVersion { .. }
            | Error::OutOfRange { .. } => Outcome::NotWritten,
            Error::Codec(CodecError::PayloadTooLarge(_)) => Outcome::NotWritten,
            Error::Server { .. } => match self.code() {
                Some(
                    NotLeader | Unavailable | Fenced | BadFrame | TooLarge | UnknownOpcode | BadVersion | NoSuchShard
                    | Overloaded | ShuttingDown | BadHandshake | SequenceGap | UnknownProducer | WrongShard
                    | BadRequest | Forbidden,
                ) => Outcome::NotWritten,
                Some(StaleSequence) => Outcome::Written,
                _ => Outcome::Unknown,
            },
            _ => Outcome::Unknown,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o: {e}"),
            Error::Tls(e) => write!(f, "tls: {e}"),
            Error::Codec(e) => write!(f, "protocol: {e}"),
            Error::Server { code, message, .. } => {
                let name = ErrorCode::from_u16(*code).map(|c| format!("{c:?}")).unwrap_or_default();
                write!(f, "server error {code} {name}: {message}")
            }
            Error::Closed => write!(f, "connection closed before the answer"),
            Error::Protocol(m) => write!(f, "protocol: {m}"),
            Error::Unreachable(m) => write!(f, "no node reachable: {m}"),
            Error::NotSent => write!(f, "connection closed before the request was sent"),
            Error::Timeout(d) => write!(f, "no answer within {d:?}"),
            Error::Abandoned(why) => write!(f, "connection abandoned while the request waited: {why}"),
            Error::ProducerStopped(m) => write!(f, "{m}"),
            Error::WrongExpectedVersion { message, .. } => write!(f, "server error 21 WrongExpectedVersion: {message}"),
            Error::OutOfRange { message, .. } => write!(f, "server error 7 OutOfRange: {message}"),
            Error::Invalid(m) => write!(f, "{m}"),
            Error::InDoubt { attempts, last } => write!(
                f,
                "{last} (outcome unknown: an earlier of {attempts} attempts got no answer and may still be written)"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
