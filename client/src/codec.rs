//! The wire protocol, sans-IO: bytes in → frames out, frames in → bytes out.
//!
//! Shared by the server, the client library, the load generator and the fuzz target.
//! Nothing here touches a socket, a runtime or a clock. The byte layout is specified in
//! `docs/protocol.md`; keep the two in step.
//!
//! Frame: `len: u32 LE` (bytes after this field) · `op: u8` · `req_id: u64 LE` · body.

use std::fmt;

pub use crate::record::{ProducerSeq, MAX_STREAM_NAME};

/// Client protocol version carried in `Hello`: the newest this build speaks. Version 2
/// adds `Append2` (idempotent appends: producer id + sequence; streams with an expected
/// version), `Appended2`, `ReadStream` and `StreamRecords`; a
/// server speaks every version from `MIN_PROTOCOL_VERSION` up and answers `HelloOk` with
/// the version the client asked for. Version 3 adds what a client needs to follow
/// leadership (docs/protocol.md §6): `HelloOk` carries the node's [`Leadership`] view
/// (its lease, the newest epoch it knows, whether a leader holds a live lease), and the
/// refusals that send a client elsewhere (`NotLeader`, `Unavailable`, `Fenced`,
/// `ShuttingDown`) carry a [`Hint`].
pub const PROTOCOL_VERSION: u16 = 3;
/// First protocol version whose `HelloOk` and refusals carry leadership (see above).
pub const LEADERSHIP_VERSION: u16 = 3;
/// The version a client opens with when a server refuses [`PROTOCOL_VERSION`] with
/// `BadVersion` (a server older than the client, as during a rolling upgrade): the oldest
/// with every request the client sends. Without version 3 a connection learns nothing of
/// leases and its refusals carry no hint (docs/operations.md §15).
pub const FALLBACK_VERSION: u16 = 2;
/// Oldest client protocol version a server still speaks.
pub const MIN_PROTOCOL_VERSION: u16 = 1;
/// Replication protocol version carried in `Repl::Hello`. 2: the follower answers
/// `Welcome` with `Joined` (its last record's epoch and CRC) instead of `Ack`, and a
/// leader writes nothing before a follower has accepted its epoch. Both nodes of a pair
/// must speak the same version; a different one is refused with `BadVersion`.
pub const REPL_PROTOCOL_VERSION: u16 = 2;
/// Magic in `Hello` / `ReplHello` bodies: lets a server reject a stray plaintext speaker.
pub const HELLO_MAGIC: [u8; 4] = *b"CLOG";
/// `len` field + op + req_id.
pub const FRAME_HEADER_LEN: usize = 4 + 1 + 8;
/// Largest payload of one appended event.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Largest `max_bytes` a `Read` may ask for; a `Records` frame stays below `MAX_FRAME`.
pub const MAX_READ_BYTES: u32 = 1024 * 1024;
/// Largest replication batch body (records bytes).
pub const MAX_REPL_BATCH_BYTES: usize = 2 * 1024 * 1024;
/// Largest whole frame, header included. Anything announcing more is refused unread.
pub const MAX_FRAME: usize = MAX_REPL_BATCH_BYTES + 64;
/// Largest frame a client may send: an `Append` of `MAX_PAYLOAD` bytes (the largest
/// request, with the largest `Append2` header). The client port refuses anything
/// announcing more, unread.
pub const MAX_REQUEST_FRAME: usize = FRAME_HEADER_LEN + APPEND2_MAX_HEADER + MAX_PAYLOAD;
/// `Append2` body before the payload: flags, producer id and sequence, stream name
/// length, the longest valid name, expected-version kind and value.
pub const APPEND2_MAX_HEADER: usize = 1 + 16 + 2 + MAX_STREAM_NAME + 9;
/// `Append2` flag bit: producer id and sequence follow.
pub const APPEND_FLAG_PRODUCER: u8 = 0x01;
/// `Append2` flag bit: a stream name and an expected version follow (after the producer).
pub const APPEND_FLAG_STREAM: u8 = 0x02;
/// `Appended2` flag bit: the sequence was written before; this is its original position.
pub const APPENDED_FLAG_DUPLICATE: u8 = 0x01;
/// `Appended2` flag bit: the event's stream version follows.
pub const APPENDED_FLAG_VERSION: u8 = 0x02;
/// `Subscribe` flag bit: `name` is one stream's name and `from` a version (else `name`
/// is a prefix and `from` an offset of the connection's shard).
pub const SUBSCRIBE_FLAG_STREAM: u8 = 0x01;
/// Most events one `ReadStream` may ask for.
pub const MAX_READ_COUNT: u32 = 10_000;
/// Expected-version kinds in `Append2` (docs/protocol.md §4).
pub const EXPECT_ANY: u8 = 0;
pub const EXPECT_NO_STREAM: u8 = 1;
pub const EXPECT_EXACT: u8 = 2;
/// `current` in a `WrongExpectedVersion` error when the stream has no event.
pub const NO_STREAM_VERSION: u64 = u64::MAX;
const _: () = assert!(MAX_REQUEST_FRAME <= MAX_FRAME);

/// Operation codes. Requests < 0x80 ≤ responses; replication frames 0x10..0x1F / 0x90..0x9F.
pub mod op {
    pub const HELLO: u8 = 0x01;
    pub const APPEND: u8 = 0x02;
    pub const READ: u8 = 0x03;
    pub const TAIL: u8 = 0x04;
    pub const APPEND2: u8 = 0x05;
    pub const READ_STREAM: u8 = 0x06;
    pub const SUBSCRIBE: u8 = 0x07;
    pub const TRIM: u8 = 0x08;
    pub const INDEX_SNAPSHOT: u8 = 0x09;
    pub const REPL_HELLO: u8 = 0x10;
    pub const REPL_ACK: u8 = 0x11;
    pub const REPL_JOINED: u8 = 0x12;
    pub const REPL_PING: u8 = 0x13;
    pub const HELLO_OK: u8 = 0x81;
    pub const APPENDED: u8 = 0x82;
    pub const RECORDS: u8 = 0x83;
    pub const APPENDED2: u8 = 0x84;
    pub const STREAM_RECORDS: u8 = 0x85;
    pub const TRIMMED: u8 = 0x86;
    pub const INDEX_SNAPSHOT_PIECE: u8 = 0x87;
    pub const REPL_WELCOME: u8 = 0x90;
    pub const REPL_BATCH: u8 = 0x91;
    pub const REPL_SEED: u8 = 0x92;
    pub const ERROR: u8 = 0xFF;
}

/// Error codes carried by `Response::Error`. Stable: documented in docs/protocol.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
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
}

impl ErrorCode {
    pub fn from_u16(v: u16) -> Option<ErrorCode> {
        use ErrorCode::*;
        Some(match v {
            1 => BadFrame,
            2 => UnknownOpcode,
            3 => TooLarge,
            4 => BadVersion,
            5 => NotLeader,
            6 => NoSuchShard,
            7 => OutOfRange,
            8 => ReplicationTimeout,
            9 => Overloaded,
            10 => Fenced,
            11 => ShuttingDown,
            12 => Internal,
            13 => BadHandshake,
            14 => Unexpected,
            15 => Unavailable,
            16 => Diverged,
            17 => OutcomeUnknown,
            18 => SequenceGap,
            19 => UnknownProducer,
            20 => StaleSequence,
            21 => WrongExpectedVersion,
            22 => WrongShard,
            23 => BadRequest,
            24 => Forbidden,
            _ => return None,
        })
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

/// A frame as cut from the byte stream; the body still borrows the input buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub op: u8,
    pub req_id: u64,
    pub body: &'a [u8],
}

/// Cuts one frame from the front of `buf`. `Ok(None)`: need more bytes.
/// On success returns the frame and the number of bytes it used.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, CodecError> {
    decode_frame_max(buf, MAX_FRAME)
}

/// `decode_frame` with a smaller bound on the whole frame (`max_frame ≤ MAX_FRAME`), e.g.
/// `MAX_REQUEST_FRAME` on the client port.
pub fn decode_frame_max(buf: &[u8], max_frame: usize) -> Result<Option<(Frame<'_>, usize)>, CodecError> {
    debug_assert!(max_frame <= MAX_FRAME);
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().unwrap());
    if (len as usize) < FRAME_HEADER_LEN - 4 {
        return Err(CodecError::FrameTooShort(len));
    }
    if len as usize > max_frame - 4 {
        return Err(CodecError::FrameTooLarge(len, max_frame));
    }
    let total = 4 + len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let op = buf[4];
    let req_id = u64::from_le_bytes(buf[5..13].try_into().unwrap());
    Ok(Some((Frame { op, req_id, body: &buf[13..total] }, total)))
}

/// Starts a frame in `out`; returns the position of its length field for `finish_frame`.
fn begin_frame(out: &mut Vec<u8>, op: u8, req_id: u64) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.push(op);
    out.extend_from_slice(&req_id.to_le_bytes());
    at
}

fn finish_frame(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 4) as u32;
    debug_assert!(len as usize <= MAX_FRAME - 4, "encoder built an oversized frame");
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// Little-endian cursor over a body; every read is bounds-checked.
struct Body<'a> {
    op: u8,
    rest: &'a [u8],
}

impl<'a> Body<'a> {
    fn new(f: &Frame<'a>) -> Self {
        Body { op: f.op, rest: f.body }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.rest.len() < n {
            return Err(CodecError::BadBody { op: self.op, reason: "body truncated" });
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn end(self) -> Result<(), CodecError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(CodecError::BadBody { op: self.op, reason: "trailing bytes" })
        }
    }
    fn magic(&mut self) -> Result<(), CodecError> {
        if self.take(4)? != HELLO_MAGIC {
            return Err(CodecError::BadBody { op: self.op, reason: "bad magic" });
        }
        Ok(())
    }
}

/// Client → server requests on the client port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Hello {
        version: u16,
    },
    Append {
        payload: &'a [u8],
    },
    /// Version 2: an append that may carry a producer id and sequence (idempotent) and
    /// a stream with an expected version.
    Append2 {
        producer: Option<ProducerSeq>,
        stream: Option<StreamReq<'a>>,
        payload: &'a [u8],
    },
    /// Version 2: events of one stream from `from_version`, at most `max_count` (≤
    /// `MAX_READ_COUNT`) and about `max_bytes`.
    ReadStream {
        name: &'a [u8],
        from_version: u64,
        max_count: u32,
        max_bytes: u32,
    },
    /// Version 2: like `Tail`, but only the events of one stream (`stream`: `name` is
    /// the stream, `from` a version) or of every stream whose name starts with `name`
    /// (`from`: an offset of the connection's shard).
    Subscribe {
        stream: bool,
        name: &'a [u8],
        from: u64,
    },
    Read {
        shard: u16,
        from: u64,
        max_bytes: u32,
    },
    Tail {
        shard: u16,
        from: u64,
    },
    /// Version 2: delete this node's whole segments of `shard` below `before` (never
    /// what its peer may still need); answered with `Trimmed`.
    Trim {
        shard: u16,
        before: u64,
    },
    /// Version 2: bytes from `at` of the node's index snapshot at its first offset of
    /// `shard` (docs/format.md §8; what a copy of the log from that offset needs);
    /// answered with `IndexSnapshotPiece`.
    IndexSnapshot {
        shard: u16,
        at: u64,
    },
}

impl<'a> Request<'a> {
    pub fn parse(f: &Frame<'a>) -> Result<Request<'a>, CodecError> {
        let mut b = Body::new(f);
        let r = match f.op {
            op::HELLO => {
                b.magic()?;
                Request::Hello { version: b.u16()? }
            }
            op::APPEND => {
                if f.body.len() > MAX_PAYLOAD {
                    return Err(CodecError::PayloadTooLarge(f.body.len()));
                }
                return Ok(Request::Append { payload: f.body });
            }
            op::APPEND2 => {
                let flags = b.u8()?;
                if flags & !(APPEND_FLAG_PRODUCER | APPEND_FLAG_STREAM) != 0 {
                    return Err(CodecError::BadBody { op: f.op, reason: "unknown Append2 flags" });
                }
                let producer = if flags & APPEND_FLAG_PRODUCER != 0 {
                    Some(ProducerSeq { id: b.u64()?, seq: b.u64()? })
                } else {
                    None
                };
                let stream = if flags & APPEND_FLAG_STREAM != 0 {
                    let n = b.u16()? as usize;
                    Some(StreamReq { name: b.take(n)?, expect_kind: b.u8()?, expected: b.u64()? })
                } else {
                    None
                };
                if b.rest.len() > MAX_PAYLOAD {
                    return Err(CodecError::PayloadTooLarge(b.rest.len()));
                }
                return Ok(Request::Append2 { producer, stream, payload: b.rest });
            }
            op::SUBSCRIBE => {
                let flags = b.u8()?;
                if flags & !SUBSCRIBE_FLAG_STREAM != 0 {
                    return Err(CodecError::BadBody { op: f.op, reason: "unknown Subscribe flags" });
                }
                let n = b.u16()? as usize;
                Request::Subscribe { stream: flags != 0, name: b.take(n)?, from: b.u64()? }
            }
            op::READ_STREAM => {
                let n = b.u16()? as usize;
                let name = b.take(n)?;
                Request::ReadStream { name, from_version: b.u64()?, max_count: b.u32()?, max_bytes: b.u32()? }
            }
            op::READ => Request::Read { shard: b.u16()?, from: b.u64()?, max_bytes: b.u32()? },
            op::TAIL => Request::Tail { shard: b.u16()?, from: b.u64()? },
            op::TRIM => Request::Trim { shard: b.u16()?, before: b.u64()? },
            op::INDEX_SNAPSHOT => Request::IndexSnapshot { shard: b.u16()?, at: b.u64()? },
            o => return Err(CodecError::UnknownOpcode(o)),
        };
        b.end()?;
        Ok(r)
    }

    pub fn encode(&self, req_id: u64, out: &mut Vec<u8>) {
        match self {
            Request::Hello { version } => {
                let at = begin_frame(out, op::HELLO, req_id);
                out.extend_from_slice(&HELLO_MAGIC);
                out.extend_from_slice(&version.to_le_bytes());
                finish_frame(out, at);
            }
            Request::Append { payload } => encode_append(req_id, payload, out),
            Request::Append2 { producer, stream, payload } => encode_append2(req_id, *producer, *stream, payload, out),
            Request::Subscribe { stream, name, from } => {
                let at = begin_frame(out, op::SUBSCRIBE, req_id);
                out.push(if *stream { SUBSCRIBE_FLAG_STREAM } else { 0 });
                out.extend_from_slice(&(name.len() as u16).to_le_bytes());
                out.extend_from_slice(name);
                out.extend_from_slice(&from.to_le_bytes());
                finish_frame(out, at);
            }
            Request::ReadStream { name, from_version, max_count, max_bytes } => {
                let at = begin_frame(out, op::READ_STREAM, req_id);
                out.extend_from_slice(&(name.len() as u16).to_le_bytes());
                out.extend_from_slice(name);
                out.extend_from_slice(&from_version.to_le_bytes());
                out.extend_from_slice(&max_count.to_le_bytes());
                out.extend_from_slice(&max_bytes.to_le_bytes());
                finish_frame(out, at);
            }
            Request::Read { shard, from, max_bytes } => {
                let at = begin_frame(out, op::READ, req_id);
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&from.to_le_bytes());
                out.extend_from_slice(&max_bytes.to_le_bytes());
                finish_frame(out, at);
            }
            Request::Tail { shard, from } => {
                let at = begin_frame(out, op::TAIL, req_id);
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&from.to_le_bytes());
                finish_frame(out, at);
            }
            Request::Trim { shard, before } => {
                let at = begin_frame(out, op::TRIM, req_id);
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&before.to_le_bytes());
                finish_frame(out, at);
            }
            Request::IndexSnapshot { shard, at: from } => {
                let at = begin_frame(out, op::INDEX_SNAPSHOT, req_id);
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&from.to_le_bytes());
                finish_frame(out, at);
            }
        }
    }
}

/// The hot-path encoder for appends (no enum construction).
pub fn encode_append(req_id: u64, payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= MAX_PAYLOAD, "payload above MAX_PAYLOAD");
    let at = begin_frame(out, op::APPEND, req_id);
    out.extend_from_slice(payload);
    finish_frame(out, at);
}

/// The encoder for version-2 appends.
pub fn encode_append2(
    req_id: u64,
    producer: Option<ProducerSeq>,
    stream: Option<StreamReq<'_>>,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    assert!(payload.len() <= MAX_PAYLOAD, "payload above MAX_PAYLOAD");
    let at = begin_frame(out, op::APPEND2, req_id);
    out.push(producer.map_or(0, |_| APPEND_FLAG_PRODUCER) | stream.map_or(0, |_| APPEND_FLAG_STREAM));
    if let Some(p) = producer {
        out.extend_from_slice(&p.id.to_le_bytes());
        out.extend_from_slice(&p.seq.to_le_bytes());
    }
    if let Some(s) = stream {
        assert!(s.name.len() <= u16::MAX as usize, "stream name above the wire's bound");
        out.extend_from_slice(&(s.name.len() as u16).to_le_bytes());
        out.extend_from_slice(s.name);
        out.push(s.expect_kind);
        out.extend_from_slice(&s.expected.to_le_bytes());
    }
    out.extend_from_slice(payload);
    finish_frame(out, at);
}

/// What a stream append expects of the stream's current version (its last event's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Whatever the stream holds (also none).
    Any,
    /// The stream has no event yet.
    NoStream,
    /// The stream's last event has this version.
    Exact(u64),
}

impl Expect {
    pub fn kind(self) -> (u8, u64) {
        match self {
            Expect::Any => (EXPECT_ANY, 0),
            Expect::NoStream => (EXPECT_NO_STREAM, 0),
            Expect::Exact(v) => (EXPECT_EXACT, v),
        }
    }
    /// Whether a stream whose last version is `current` (None: no event) meets it.
    pub fn met_by(self, current: Option<u64>) -> bool {
        match self {
            Expect::Any => true,
            Expect::NoStream => current.is_none(),
            Expect::Exact(v) => current == Some(v),
        }
    }
}

impl std::str::FromStr for Expect {
    type Err = String;
    /// `any`, `none` (no stream yet) or a version number.
    fn from_str(s: &str) -> Result<Expect, String> {
        match s {
            "any" => Ok(Expect::Any),
            "none" | "no-stream" => Ok(Expect::NoStream),
            v => {
                v.parse().map(Expect::Exact).map_err(|_| format!("expected version {s:?}: give any, none or a number"))
            }
        }
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Any => write!(f, "any"),
            Expect::NoStream => write!(f, "none"),
            Expect::Exact(v) => write!(f, "{v}"),
        }
    }
}

/// The stream part of an `Append2`, as on the wire: checked by the server (name 1..=255
/// bytes of UTF-8, a known expect kind), so that a bad field is answered `BadRequest`
/// without ending the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamReq<'a> {
    pub name: &'a [u8],
    pub expect_kind: u8,
    pub expected: u64,
}

impl<'a> StreamReq<'a> {
    pub fn new(name: &'a str, expect: Expect) -> StreamReq<'a> {
        let (expect_kind, expected) = expect.kind();
        StreamReq { name: name.as_bytes(), expect_kind, expected }
    }
    pub fn expect(&self) -> Result<Expect, String> {
        match self.expect_kind {
            EXPECT_ANY => Ok(Expect::Any),
            EXPECT_NO_STREAM => Ok(Expect::NoStream),
            EXPECT_EXACT => Ok(Expect::Exact(self.expected)),
            k => Err(format!("unknown expected-version kind {k} (0 any, 1 no stream, 2 exact)")),
        }
    }
}

/// The shard that holds a stream: FNV-1a (64-bit) of the name's bytes modulo the
/// node's shard count (docs/protocol.md §4). Every node of a pair has the same count.
pub fn stream_shard(name: &[u8], shard_count: u16) -> u16 {
    assert!(shard_count > 0, "a node has at least one shard");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % shard_count as u64) as u16
}

/// The role a node reports in `HelloOk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    Leader = 1,
    Follower = 2,
    /// A former leader that saw a higher epoch: refuses appends until it rejoins.
    Fenced = 3,
}

impl Role {
    pub fn from_u8(v: u8) -> Option<Role> {
        match v {
            1 => Some(Role::Leader),
            2 => Some(Role::Follower),
            3 => Some(Role::Fenced),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Fenced => "fenced",
        }
    }
}

/// Server → client responses, in request order per connection (tail pushes share the
/// `req_id` of their `Tail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    HelloOk {
        version: u16,
        shard: u16,
        shard_count: u16,
        role: Role,
        epoch: u32,
        /// Version 3 and later (`version` ≥ [`LEADERSHIP_VERSION`]): the node's view of
        /// leadership; `None` below.
        leadership: Option<Leadership>,
    },
    Appended {
        shard: u16,
        offset: u64,
    },
    /// Answer to `Append2`: `duplicate` when the producer's sequence was already in the
    /// log and this is the position it got then (nothing new was written).
    Appended2 {
        shard: u16,
        offset: u64,
        duplicate: bool,
        /// The event's version in its stream (appends that named one).
        version: Option<u64>,
    },
    /// Answer to `ReadStream`: `count` events of the stream in the record encoding, in
    /// version order; `next_version` follows the last one; `end_version` is the number
    /// of committed events the stream holds (read on while `next_version` is below it).
    StreamRecords {
        shard: u16,
        next_version: u64,
        end_version: u64,
        count: u32,
        records: &'a [u8],
    },
    /// `Error` with code `WrongExpectedVersion`: the stream's current version (its last
    /// event's; `None`: no event) follows the message.
    WrongVersion {
        current: Option<u64>,
        message: &'a str,
    },
    /// `Error` with code `OutOfRange` from a version-2 connection: what was asked for was
    /// deleted by retention; `first` (after the message) is the first offset still held
    /// (`Read`, `Tail`, `Subscribe` of a prefix) or the stream's first version still
    /// held (`ReadStream`, `Subscribe` of a stream).
    OutOfRange {
        first: u64,
        message: &'a str,
    },
    /// Answer to `Trim`: the node's first offset of the shard now (segments below it
    /// are deleted).
    Trimmed {
        shard: u16,
        first_offset: u64,
    },
    /// Answer to `IndexSnapshot`: the node's first offset of the shard and bytes
    /// `at .. at + bytes.len()` of its `total`-byte index snapshot there (at most
    /// `MAX_READ_BYTES`; `total` 0 when the log starts at offset 0: nothing below it).
    IndexSnapshotPiece {
        shard: u16,
        first_offset: u64,
        total: u64,
        at: u64,
        bytes: &'a [u8],
    },
    /// `records` holds `count` records in the on-disk record encoding (see `record`).
    Records {
        shard: u16,
        next_offset: u64,
        count: u32,
        records: &'a [u8],
    },
    Error {
        code: u16,
        message: &'a str,
    },
    /// `Error` with a [`Hint`] after the message: a refusal that sends the client
    /// elsewhere (`NotLeader`, `Unavailable`, `Fenced`, `ShuttingDown`), on a version-3
    /// connection. Nothing was written.
    Refusal {
        code: u16,
        message: &'a str,
        hint: Hint,
    },
}

/// Whether a node sees a leader holding a live lease (docs/protocol.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LeaderState {
    /// Not known: static roles (no lease), or this node has not heard from etcd lately.
    Unknown = 0,
    /// A leader holds a live lease: on a leader, its own; on a follower, the leader's
    /// (its heartbeat is fresh in etcd).
    Live = 1,
    /// No leader holds a live lease now: on a leader, its own lapsed (it acknowledges
    /// nothing until it renews, and may never); on a follower, the leader's heartbeat
    /// stopped and a take-over is pending (or cannot happen: see operations.md §8).
    Lapsed = 2,
}

impl LeaderState {
    pub fn from_u8(v: u8) -> Option<LeaderState> {
        match v {
            0 => Some(LeaderState::Unknown),
            1 => Some(LeaderState::Live),
            2 => Some(LeaderState::Lapsed),
            _ => None,
        }
    }
}

/// What a version-3 `HelloOk` adds after `epoch`: lease_ms u32 · epoch u32 · state u8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leadership {
    /// The leader's lease (coordinator mode), in ms; 0: no lease (static roles). A
    /// client derives its waiting times from it (docs/protocol.md §6).
    pub lease_ms: u32,
    /// The newest epoch this node knows of: the term's in etcd (coordinator mode), else
    /// the shard's. At least the `HelloOk`'s own `epoch` on a leader.
    pub epoch: u32,
    pub state: LeaderState,
}

/// What a version-3 refusal carries after its message: epoch u32 · state u8 ·
/// retry_ms u16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    /// The newest epoch the refusing node knows of (for `NotLeader`: the epoch of the
    /// leader it names).
    pub epoch: u32,
    pub state: LeaderState,
    /// Try this node again after this many ms (0: no advice).
    pub retry_ms: u16,
}

/// Error codes that carry a [`Hint`] on a version-3 connection.
pub fn carries_hint(code: u16) -> bool {
    [ErrorCode::NotLeader, ErrorCode::Unavailable, ErrorCode::Fenced, ErrorCode::ShuttingDown]
        .iter()
        .any(|c| *c as u16 == code)
}

impl<'a> Response<'a> {
    pub fn parse(f: &Frame<'a>) -> Result<Response<'a>, CodecError> {
        let mut b = Body::new(f);
        let r = match f.op {
            op::HELLO_OK => {
                let version = b.u16()?;
                let shard = b.u16()?;
                let shard_count = b.u16()?;
                let role = Role::from_u8(b.u8()?).ok_or(CodecError::BadBody { op: f.op, reason: "unknown role" })?;
                let epoch = b.u32()?;
                let leadership = if version >= LEADERSHIP_VERSION {
                    let (lease_ms, view) = (b.u32()?, b.u32()?);
                    let state = LeaderState::from_u8(b.u8()?)
                        .ok_or(CodecError::BadBody { op: f.op, reason: "unknown leader state" })?;
                    Some(Leadership { lease_ms, epoch: view, state })
                } else {
                    None
                };
                Response::HelloOk { version, shard, shard_count, role, epoch, leadership }
            }
            op::APPENDED => Response::Appended { shard: b.u16()?, offset: b.u64()? },
            op::APPENDED2 => {
                let (shard, offset, flags) = (b.u16()?, b.u64()?, b.u8()?);
                if flags & !(APPENDED_FLAG_DUPLICATE | APPENDED_FLAG_VERSION) != 0 {
                    return Err(CodecError::BadBody { op: f.op, reason: "unknown Appended2 flags" });
                }
                let version = if flags & APPENDED_FLAG_VERSION != 0 { Some(b.u64()?) } else { None };
                Response::Appended2 { shard, offset, duplicate: flags & APPENDED_FLAG_DUPLICATE != 0, version }
            }
            op::STREAM_RECORDS => {
                let shard = b.u16()?;
                let next_version = b.u64()?;
                let end_version = b.u64()?;
                let count = b.u32()?;
                return Ok(Response::StreamRecords { shard, next_version, end_version, count, records: b.rest });
            }
            op::RECORDS => {
                let shard = b.u16()?;
                let next_offset = b.u64()?;
                let count = b.u32()?;
                let records = b.rest;
                return Ok(Response::Records { shard, next_offset, count, records });
            }
            op::ERROR => match parse_error(&mut b)? {
                Response::Error { code, message } if code == ErrorCode::WrongExpectedVersion as u16 => {
                    let v = b.u64()?;
                    Response::WrongVersion { current: (v != NO_STREAM_VERSION).then_some(v), message }
                }
                // A version-1 connection gets the plain form.
                Response::Error { code, message } if code == ErrorCode::OutOfRange as u16 && b.rest.len() == 8 => {
                    Response::OutOfRange { first: b.u64()?, message }
                }
                // A version-1 or -2 connection gets the plain form.
                Response::Error { code, message } if carries_hint(code) && b.rest.len() == HINT_LEN => {
                    let epoch = b.u32()?;
                    let state = LeaderState::from_u8(b.u8()?)
                        .ok_or(CodecError::BadBody { op: f.op, reason: "unknown leader state" })?;
                    Response::Refusal { code, message, hint: Hint { epoch, state, retry_ms: b.u16()? } }
                }
                r => r,
            },
            op::TRIMMED => Response::Trimmed { shard: b.u16()?, first_offset: b.u64()? },
            op::INDEX_SNAPSHOT_PIECE => {
                let (shard, first_offset, total, at) = (b.u16()?, b.u64()?, b.u64()?, b.u64()?);
                let bytes = b.rest;
                if bytes.len() > MAX_READ_BYTES as usize || at.checked_add(bytes.len() as u64).is_none_or(|e| e > total)
                {
                    return Err(CodecError::BadBody { op: f.op, reason: "a piece outside the snapshot" });
                }
                return Ok(Response::IndexSnapshotPiece { shard, first_offset, total, at, bytes });
            }
            o => return Err(CodecError::UnknownOpcode(o)),
        };
        b.end()?;
        Ok(r)
    }

    pub fn encode(&self, req_id: u64, out: &mut Vec<u8>) {
        match self {
            Response::HelloOk { version, shard, shard_count, role, epoch, leadership } => {
                let at = begin_frame(out, op::HELLO_OK, req_id);
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&shard_count.to_le_bytes());
                out.push(*role as u8);
                out.extend_from_slice(&epoch.to_le_bytes());
                // The version decides the layout: a version-3 answer always carries it.
                if *version >= LEADERSHIP_VERSION {
                    let l =
                        leadership.unwrap_or(Leadership { lease_ms: 0, epoch: *epoch, state: LeaderState::Unknown });
                    out.extend_from_slice(&l.lease_ms.to_le_bytes());
                    out.extend_from_slice(&l.epoch.to_le_bytes());
                    out.push(l.state as u8);
                }
                finish_frame(out, at);
            }
            Response::Appended { shard, offset } => encode_appended(req_id, *shard, *offset, out),
            Response::Appended2 { shard, offset, duplicate, version } => {
                encode_appended2(req_id, *shard, *offset, *duplicate, *version, out)
            }
            Response::StreamRecords { shard, next_version, end_version, count, records } => {
                let at = begin_frame(out, op::STREAM_RECORDS, req_id);
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&next_version.to_le_bytes());
                out.extend_from_slice(&end_version.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
                out.extend_from_slice(records);
                finish_frame(out, at);
            }
            Response::WrongVersion { current, message } => encode_wrong_version(req_id, *current, message, out),
            Response::OutOfRange { first, message } => encode_out_of_range(req_id, *first, message, out),
            Response::Trimmed { shard, first_offset } => {
                let at = begin_frame(out, op::TRIMMED, req_id);
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&first_offset.to_le_bytes());
                finish_frame(out, at);
            }
            Response::IndexSnapshotPiece { shard, first_offset, total, at: from, bytes } => {
                let at = begin_frame(out, op::INDEX_SNAPSHOT_PIECE, req_id);
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&first_offset.to_le_bytes());
                out.extend_from_slice(&total.to_le_bytes());
                out.extend_from_slice(&from.to_le_bytes());
                out.extend_from_slice(bytes);
                finish_frame(out, at);
            }
            Response::Records { shard, next_offset, count, records } => {
                let at = begin_frame(out, op::RECORDS, req_id);
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&next_offset.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
                out.extend_from_slice(records);
                finish_frame(out, at);
            }
            Response::Error { code, message } => encode_error(req_id, *code, message, out),
            Response::Refusal { code, message, hint } => encode_refusal(req_id, *code, message, *hint, out),
        }
    }
}

/// Bytes of a [`Hint`] on the wire.
const HINT_LEN: usize = 7;

/// A refusal with its [`Hint`] (version-3 connections; `code` one of [`carries_hint`]).
pub fn encode_refusal(req_id: u64, code: u16, message: &str, hint: Hint, out: &mut Vec<u8>) {
    debug_assert!(carries_hint(code), "error code {code} carries no hint");
    let at = begin_error(req_id, code, message, out);
    out.extend_from_slice(&hint.epoch.to_le_bytes());
    out.push(hint.state as u8);
    out.extend_from_slice(&hint.retry_ms.to_le_bytes());
    finish_frame(out, at);
}

/// The hot-path encoder for append acknowledgements.
pub fn encode_appended(req_id: u64, shard: u16, offset: u64, out: &mut Vec<u8>) {
    let at = begin_frame(out, op::APPENDED, req_id);
    out.extend_from_slice(&shard.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    finish_frame(out, at);
}

/// The encoder for `Append2` acknowledgements.
pub fn encode_appended2(
    req_id: u64,
    shard: u16,
    offset: u64,
    duplicate: bool,
    version: Option<u64>,
    out: &mut Vec<u8>,
) {
    let at = begin_frame(out, op::APPENDED2, req_id);
    out.extend_from_slice(&shard.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    let flags = if duplicate { APPENDED_FLAG_DUPLICATE } else { 0 } | version.map_or(0, |_| APPENDED_FLAG_VERSION);
    out.push(flags);
    if let Some(v) = version {
        out.extend_from_slice(&v.to_le_bytes());
    }
    finish_frame(out, at);
}

/// Error frame; the message is cut to 1 KiB on a char boundary.
pub fn encode_error(req_id: u64, code: u16, message: &str, out: &mut Vec<u8>) {
    let at = begin_error(req_id, code, message, out);
    finish_frame(out, at);
}

/// `WrongExpectedVersion` error frame: an error frame followed by the current version.
pub fn encode_wrong_version(req_id: u64, current: Option<u64>, message: &str, out: &mut Vec<u8>) {
    let at = begin_error(req_id, ErrorCode::WrongExpectedVersion as u16, message, out);
    out.extend_from_slice(&current.unwrap_or(NO_STREAM_VERSION).to_le_bytes());
    finish_frame(out, at);
}

/// `OutOfRange` error frame (version-2 connections): an error frame followed by the
/// first offset (or stream version) still held.
pub fn encode_out_of_range(req_id: u64, first: u64, message: &str, out: &mut Vec<u8>) {
    let at = begin_error(req_id, ErrorCode::OutOfRange as u16, message, out);
    out.extend_from_slice(&first.to_le_bytes());
    finish_frame(out, at);
}

fn begin_error(req_id: u64, code: u16, message: &str, out: &mut Vec<u8>) -> usize {
    let mut end = message.len().min(1024);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let msg = &message.as_bytes()[..end];
    let at = begin_frame(out, op::ERROR, req_id);
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_le_bytes());
    out.extend_from_slice(msg);
    at
}

fn parse_error<'a, T>(b: &mut Body<'a>) -> Result<T, CodecError>
where
    T: From<(u16, &'a str)>,
{
    let code = b.u16()?;
    let n = b.u16()? as usize;
    let msg = std::str::from_utf8(b.take(n)?)
        .map_err(|_| CodecError::BadBody { op: op::ERROR, reason: "message not UTF-8" })?;
    Ok(T::from((code, msg)))
}

impl<'a> From<(u16, &'a str)> for Response<'a> {
    fn from((code, message): (u16, &'a str)) -> Self {
        Response::Error { code, message }
    }
}

impl<'a> From<(u16, &'a str)> for Repl<'a> {
    fn from((code, message): (u16, &'a str)) -> Self {
        Repl::Error { code, message }
    }
}

/// Frames on the replication port (both directions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repl<'a> {
    /// Follower → leader, first frame: who I am and where my log ends.
    Hello {
        version: u16,
        shard: u16,
        shard_count: u16,
        /// The follower's current epoch.
        epoch: u32,
        /// The follower's next offset (everything below is durable there).
        next_offset: u64,
        /// Epoch of the follower's last record (0 when its log is empty).
        last_epoch: u32,
    },
    /// Leader → follower: accepted. `common_epoch` is the largest leader epoch not above
    /// the follower's last record epoch; `truncate_to` is min(follower end, end of that
    /// epoch in the leader's log). The follower drops every record at or above
    /// min(truncate_to, end of `common_epoch` in its own log), then `Ack`s its end.
    Welcome {
        epoch: u32,
        truncate_to: u64,
        common_epoch: u32,
    },
    /// Leader → follower: records `first_offset ..` in the record encoding.
    Batch {
        epoch: u32,
        first_offset: u64,
        count: u32,
        records: &'a [u8],
    },
    /// Follower → leader: everything below `next_offset` is durable here.
    Ack {
        next_offset: u64,
    },
    /// Follower → leader, once, right after `Welcome` and its cut: its log end and the
    /// identity (epoch, CRC) of its last record (both 0 for an empty log). The leader
    /// checks them against its own record at `next_offset - 1` before anything else.
    Joined {
        next_offset: u64,
        last_epoch: u32,
        last_crc: u32,
    },
    /// Leader → follower, instead of `Welcome`, to a follower that holds no record and
    /// ends below the leader's first offset (retention deleted what it would need): one
    /// piece of the leader's index snapshot at `first_offset` (docs/format.md §8), bytes
    /// `at .. at + bytes.len()` of `total`. The follower stores it, starts its log at
    /// `first_offset`, and joins again (docs/protocol.md §8, "Seeding").
    Seed {
        first_offset: u64,
        total: u64,
        at: u64,
        bytes: &'a [u8],
    },
    /// Leader → follower when it has shipped nothing for a while: the follower answers
    /// with an `Ack` of its durable end. Either side drops a link silent for too long.
    Ping,
    Error {
        code: u16,
        message: &'a str,
    },
}

impl<'a> Repl<'a> {
    pub fn parse(f: &Frame<'a>) -> Result<Repl<'a>, CodecError> {
        let mut b = Body::new(f);
        let r = match f.op {
            op::REPL_HELLO => {
                b.magic()?;
                Repl::Hello {
                    version: b.u16()?,
                    shard: b.u16()?,
                    shard_count: b.u16()?,
                    epoch: b.u32()?,
                    next_offset: b.u64()?,
                    last_epoch: b.u32()?,
                }
            }
            op::REPL_WELCOME => Repl::Welcome { epoch: b.u32()?, truncate_to: b.u64()?, common_epoch: b.u32()? },
            op::REPL_BATCH => {
                let epoch = b.u32()?;
                let first_offset = b.u64()?;
                let count = b.u32()?;
                if b.rest.len() > MAX_REPL_BATCH_BYTES {
                    return Err(CodecError::PayloadTooLarge(b.rest.len()));
                }
                return Ok(Repl::Batch { epoch, first_offset, count, records: b.rest });
            }
            op::REPL_SEED => {
                let (first_offset, total, at) = (b.u64()?, b.u64()?, b.u64()?);
                let bytes = b.rest;
                if bytes.len() > MAX_REPL_BATCH_BYTES || at.checked_add(bytes.len() as u64).is_none_or(|e| e > total) {
                    return Err(CodecError::BadBody { op: op::REPL_SEED, reason: "a piece outside the snapshot" });
                }
                return Ok(Repl::Seed { first_offset, total, at, bytes });
            }
            op::REPL_ACK => Repl::Ack { next_offset: b.u64()? },
            op::REPL_PING => Repl::Ping,
            op::REPL_JOINED => Repl::Joined { next_offset: b.u64()?, last_epoch: b.u32()?, last_crc: b.u32()? },
            op::ERROR => parse_error(&mut b)?,
            o => return Err(CodecError::UnknownOpcode(o)),
        };
        b.end()?;
        Ok(r)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Repl::Hello { version, shard, shard_count, epoch, next_offset, last_epoch } => {
                let at = begin_frame(out, op::REPL_HELLO, 0);
                out.extend_from_slice(&HELLO_MAGIC);
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&shard_count.to_le_bytes());
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&next_offset.to_le_bytes());
                out.extend_from_slice(&last_epoch.to_le_bytes());
                finish_frame(out, at);
            }
            Repl::Welcome { epoch, truncate_to, common_epoch } => {
                let at = begin_frame(out, op::REPL_WELCOME, 0);
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&truncate_to.to_le_bytes());
                out.extend_from_slice(&common_epoch.to_le_bytes());
                finish_frame(out, at);
            }
            Repl::Batch { epoch, first_offset, count, records } => {
                assert!(records.len() <= MAX_REPL_BATCH_BYTES, "replication batch too large");
                let at = begin_frame(out, op::REPL_BATCH, 0);
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&first_offset.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
                out.extend_from_slice(records);
                finish_frame(out, at);
            }
            Repl::Seed { first_offset, total, at: from, bytes } => {
                assert!(bytes.len() <= MAX_REPL_BATCH_BYTES, "seed piece too large");
                let at = begin_frame(out, op::REPL_SEED, 0);
                out.extend_from_slice(&first_offset.to_le_bytes());
                out.extend_from_slice(&total.to_le_bytes());
                out.extend_from_slice(&from.to_le_bytes());
                out.extend_from_slice(bytes);
                finish_frame(out, at);
            }
            Repl::Ack { next_offset } => {
                let at = begin_frame(out, op::REPL_ACK, 0);
                out.extend_from_slice(&next_offset.to_le_bytes());
                finish_frame(out, at);
            }
            Repl::Joined { next_offset, last_epoch, last_crc } => {
                let at = begin_frame(out, op::REPL_JOINED, 0);
                out.extend_from_slice(&next_offset.to_le_bytes());
                out.extend_from_slice(&last_epoch.to_le_bytes());
                out.extend_from_slice(&last_crc.to_le_bytes());
                finish_frame(out, at);
            }
            Repl::Ping => {
                let at = begin_frame(out, op::REPL_PING, 0);
                finish_frame(out, at);
            }
            Repl::Error { code, message } => encode_error(0, *code, message, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip_req(r: Request<'_>) {
        let mut out = Vec::new();
        r.encode(7, &mut out);
        let (f, used) = decode_frame(&out).unwrap().unwrap();
        assert_eq!(used, out.len());
        assert_eq!(f.req_id, 7);
        assert_eq!(Request::parse(&f).unwrap(), r);
        for cut in 0..out.len() {
            assert_eq!(decode_frame(&out[..cut]).unwrap(), None, "partial frame at {cut}");
        }
    }

    #[test]
    fn requests_roundtrip() {
        roundtrip_req(Request::Hello { version: PROTOCOL_VERSION });
        roundtrip_req(Request::Append { payload: b"Hello World" });
        roundtrip_req(Request::Append { payload: &[] });
        roundtrip_req(Request::Append2 { producer: None, stream: None, payload: b"x" });
        roundtrip_req(Request::Append2 {
            producer: Some(ProducerSeq { id: u64::MAX, seq: 7 }),
            stream: None,
            payload: &[],
        });
        roundtrip_req(Request::Append2 {
            producer: Some(ProducerSeq { id: 1, seq: 2 }),
            stream: Some(StreamReq::new("order-42", Expect::Exact(3))),
            payload: b"paid",
        });
        roundtrip_req(Request::Append2 {
            producer: None,
            stream: Some(StreamReq { name: &[0xff; 300], expect_kind: 9, expected: 1 }),
            payload: b"",
        });
        roundtrip_req(Request::ReadStream { name: b"order-42", from_version: 5, max_count: 10, max_bytes: 4096 });
        roundtrip_req(Request::Subscribe { stream: true, name: b"order-42", from: 3 });
        roundtrip_req(Request::Subscribe { stream: false, name: b"", from: u64::MAX });
        roundtrip_req(Request::Read { shard: 3, from: 99, max_bytes: 4096 });
        roundtrip_req(Request::Tail { shard: 1, from: u64::MAX });
        roundtrip_req(Request::Trim { shard: 1, before: 1 << 33 });
        roundtrip_req(Request::IndexSnapshot { shard: 1, at: 1 << 20 });
    }

    #[test]
    fn responses_roundtrip() {
        let rs = [
            Response::HelloOk {
                version: 1,
                shard: 2,
                shard_count: 4,
                role: Role::Follower,
                epoch: 9,
                leadership: None,
            },
            Response::HelloOk {
                version: 3,
                shard: 0,
                shard_count: 2,
                role: Role::Leader,
                epoch: 7,
                leadership: Some(Leadership { lease_ms: 400, epoch: 7, state: LeaderState::Lapsed }),
            },
            Response::Refusal {
                code: ErrorCode::NotLeader as u16,
                message: "10.0.0.1:9400",
                hint: Hint { epoch: 9, state: LeaderState::Live, retry_ms: 0 },
            },
            Response::Refusal {
                code: ErrorCode::Unavailable as u16,
                message: "",
                hint: Hint { epoch: u32::MAX, state: LeaderState::Unknown, retry_ms: 50 },
            },
            Response::Appended { shard: 1, offset: 1 << 40 },
            Response::Appended2 { shard: 1, offset: 9, duplicate: true, version: None },
            Response::Appended2 { shard: 0, offset: 0, duplicate: false, version: Some(0) },
            Response::Appended2 { shard: 0, offset: 7, duplicate: true, version: Some(u64::MAX - 1) },
            Response::StreamRecords { shard: 1, next_version: 9, end_version: 12, count: 0, records: &[] },
            Response::WrongVersion { current: Some(4), message: "stream at 4" },
            Response::WrongVersion { current: None, message: "no stream" },
            Response::OutOfRange { first: 4096, message: "trimmed" },
            Response::Trimmed { shard: 1, first_offset: 77 },
            Response::IndexSnapshotPiece { shard: 1, first_offset: 77, total: 9, at: 3, bytes: b"snap" },
            Response::Error { code: ErrorCode::OutOfRange as u16, message: "version-1 form" },
            Response::Records { shard: 0, next_offset: 5, count: 0, records: &[] },
            Response::Error { code: ErrorCode::NotLeader as u16, message: "127.0.0.1:9400" },
        ];
        for r in rs {
            let mut out = Vec::new();
            r.encode(1, &mut out);
            let (f, _) = decode_frame(&out).unwrap().unwrap();
            assert_eq!(Response::parse(&f).unwrap(), r);
        }
    }

    #[test]
    fn version_3_leadership_is_versioned_and_older_forms_stay() {
        // A version-2 HelloOk is 11 bytes and carries no leadership; a version-3 one 20.
        for (version, len) in [(2u16, 11usize), (3, 20)] {
            let mut out = Vec::new();
            let l = Leadership { lease_ms: 400, epoch: 5, state: LeaderState::Live };
            Response::HelloOk { version, shard: 0, shard_count: 1, role: Role::Leader, epoch: 5, leadership: Some(l) }
                .encode(0, &mut out);
            assert_eq!(out.len(), FRAME_HEADER_LEN + len);
            let (f, _) = decode_frame(&out).unwrap().unwrap();
            let Response::HelloOk { leadership, .. } = Response::parse(&f).unwrap() else { panic!() };
            assert_eq!(leadership, (version >= 3).then_some(l));
        }
        // A version-3 HelloOk cut to the version-2 length, or with an unknown state: refused.
        let mut out = Vec::new();
        Response::HelloOk { version: 3, shard: 0, shard_count: 1, role: Role::Leader, epoch: 5, leadership: None }
            .encode(0, &mut out);
        let mut short = out[..FRAME_HEADER_LEN + 11].to_vec();
        let len = (short.len() - 4) as u32;
        short[0..4].copy_from_slice(&len.to_le_bytes());
        let (f, _) = decode_frame(&short).unwrap().unwrap();
        assert!(matches!(Response::parse(&f), Err(CodecError::BadBody { reason: "body truncated", .. })));
        let mut bad = out.clone();
        *bad.last_mut().unwrap() = 3;
        let (f, _) = decode_frame(&bad).unwrap().unwrap();
        assert!(matches!(Response::parse(&f), Err(CodecError::BadBody { reason: "unknown leader state", .. })));
        // A hint only on the refusals that send a client elsewhere; other codes with the
        // same trailing bytes are refused.
        let hint = Hint { epoch: 3, state: LeaderState::Lapsed, retry_ms: 50 };
        let mut out = Vec::new();
        encode_refusal(0, ErrorCode::NotLeader as u16, "", hint, &mut out);
        let (f, _) = decode_frame(&out).unwrap().unwrap();
        assert_eq!(
            Response::parse(&f).unwrap(),
            Response::Refusal { code: ErrorCode::NotLeader as u16, message: "", hint }
        );
        out[FRAME_HEADER_LEN] = ErrorCode::Internal as u8;
        let (f, _) = decode_frame(&out).unwrap().unwrap();
        assert!(matches!(Response::parse(&f), Err(CodecError::BadBody { reason: "trailing bytes", .. })));
        assert!(!carries_hint(ErrorCode::ReplicationTimeout as u16) && carries_hint(ErrorCode::Fenced as u16));
    }

    #[test]
    fn repl_roundtrip() {
        let rs = [
            Repl::Hello { version: 1, shard: 0, shard_count: 2, epoch: 3, next_offset: 10, last_epoch: 2 },
            Repl::Welcome { epoch: 3, truncate_to: 8, common_epoch: 2 },
            Repl::Batch { epoch: 3, first_offset: 10, count: 1, records: b"xyz" },
            Repl::Ack { next_offset: 11 },
            Repl::Seed { first_offset: 500, total: 10, at: 4, bytes: b"snap.." },
            Repl::Joined { next_offset: 11, last_epoch: 3, last_crc: 0xdead_beef },
            Repl::Ping,
            Repl::Error { code: 10, message: "stale epoch" },
        ];
        for r in rs {
            let mut out = Vec::new();
            r.encode(&mut out);
            let (f, _) = decode_frame(&out).unwrap().unwrap();
            assert_eq!(Repl::parse(&f).unwrap(), r);
        }
        // A seed piece past the snapshot's end is refused.
        let mut out = Vec::new();
        Repl::Seed { first_offset: 500, total: 10, at: 5, bytes: b"snap.." }.encode(&mut out);
        let (f, _) = decode_frame(&out).unwrap().unwrap();
        assert!(matches!(Repl::parse(&f), Err(CodecError::BadBody { op: op::REPL_SEED, .. })));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert_eq!(decode_frame(&[1, 0, 0, 0, 2]), Err(CodecError::FrameTooShort(1)));
        let big = ((MAX_FRAME as u32) + 1).to_le_bytes();
        assert!(matches!(decode_frame(&big), Err(CodecError::FrameTooLarge(..))));
        // One byte above the largest request: refused on the client port only.
        let mut req = vec![0u8; MAX_REQUEST_FRAME + 1];
        req[0..4].copy_from_slice(&((MAX_REQUEST_FRAME - 3) as u32).to_le_bytes());
        assert!(matches!(
            decode_frame_max(&req, MAX_REQUEST_FRAME),
            Err(CodecError::FrameTooLarge(_, MAX_REQUEST_FRAME))
        ));
        assert!(decode_frame(&req).unwrap().is_some());
        let mut out = Vec::new();
        Request::Read { shard: 0, from: 0, max_bytes: 1 }.encode(0, &mut out);
        out[4] = 0x7e;
        let (f, _) = decode_frame(&out).unwrap().unwrap();
        assert_eq!(Request::parse(&f), Err(CodecError::UnknownOpcode(0x7e)));
        // Truncated body: announce a Read with one byte missing.
        let mut out = Vec::new();
        Request::Read { shard: 0, from: 0, max_bytes: 1 }.encode(0, &mut out);
        out.pop();
        let len = (out.len() - 4) as u32;
        out[0..4].copy_from_slice(&len.to_le_bytes());
        let (f, _) = decode_frame(&out).unwrap().unwrap();
        assert!(matches!(Request::parse(&f), Err(CodecError::BadBody { .. })));
        // Oversized append payload.
        let payload = vec![0u8; MAX_PAYLOAD + 1];
        let mut out = Vec::new();
        let at = begin_frame(&mut out, op::APPEND, 0);
        out.extend_from_slice(&payload);
        finish_frame(&mut out, at);
        let (f, _) = decode_frame(&out).unwrap().unwrap();
        assert_eq!(Request::parse(&f), Err(CodecError::PayloadTooLarge(MAX_PAYLOAD + 1)));
        // Append2: unknown flags, a producer header cut short, the largest one fits.
        let mut out = Vec::new();
        encode_append2(0, None, None, b"p", &mut out);
        out[FRAME_HEADER_LEN] = 0x04;
        let (f, _) = decode_frame(&out).unwrap().unwrap();
        assert!(matches!(Request::parse(&f), Err(CodecError::BadBody { reason: "unknown Append2 flags", .. })));
        let mut out = Vec::new();
        let at = begin_frame(&mut out, op::APPEND2, 0);
        out.extend_from_slice(&[APPEND_FLAG_PRODUCER, 1, 2, 3]);
        finish_frame(&mut out, at);
        let (f, _) = decode_frame(&out).unwrap().unwrap();
        assert!(matches!(Request::parse(&f), Err(CodecError::BadBody { reason: "body truncated", .. })));
        let mut out = Vec::new();
        let name = "n".repeat(MAX_STREAM_NAME);
        let st = Some(StreamReq::new(&name, Expect::NoStream));
        encode_append2(0, Some(ProducerSeq { id: 1, seq: 2 }), st, &vec![0u8; MAX_PAYLOAD], &mut out);
        assert_eq!(out.len(), MAX_REQUEST_FRAME);
        assert!(decode_frame_max(&out, MAX_REQUEST_FRAME).unwrap().is_some());
    }

    /// Property: every `Append2` / `Appended2` (random flags, ids, sequences, payload
    /// lengths up to the maximum) survives encode → frame → parse unchanged, and every
    /// record of either version survives encode → decode with `peek` agreeing.
    #[test]
    fn version_2_messages_and_records_roundtrip_for_random_values() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..2_000 {
            let n = if rng.gen_bool(0.05) { MAX_PAYLOAD } else { rng.gen_range(0..300) };
            let payload: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            let producer = rng.gen_bool(0.7).then(|| ProducerSeq { id: rng.gen(), seq: rng.gen() });
            let name_len = if rng.gen_bool(0.1) { MAX_STREAM_NAME } else { rng.gen_range(1..40) };
            let name: String = (0..name_len).map(|_| rng.gen_range(b'a'..=b'z') as char).collect();
            let expect = match rng.gen_range(0..3) {
                0 => Expect::Any,
                1 => Expect::NoStream,
                _ => Expect::Exact(rng.gen()),
            };
            let stream = rng.gen_bool(0.5).then(|| StreamReq::new(&name, expect));
            let req_id = rng.gen();
            let mut out = Vec::new();
            Request::Append2 { producer, stream, payload: &payload }.encode(req_id, &mut out);
            let (f, used) = decode_frame_max(&out, MAX_REQUEST_FRAME).unwrap().unwrap();
            assert_eq!((used, f.req_id), (out.len(), req_id));
            let parsed = Request::parse(&f).unwrap();
            assert_eq!(parsed, Request::Append2 { producer, stream, payload: &payload });
            if let Request::Append2 { stream: Some(s), .. } = parsed {
                assert_eq!(s.expect(), Ok(expect));
            }
            let version = rng.gen_bool(0.5).then(|| rng.gen());
            let r = Response::Appended2 { shard: rng.gen(), offset: rng.gen(), duplicate: rng.gen(), version };
            let mut out = Vec::new();
            r.encode(req_id, &mut out);
            let (f, _) = decode_frame(&out).unwrap().unwrap();
            assert_eq!(Response::parse(&f).unwrap(), r);
            let (offset, epoch) = (rng.gen(), rng.gen());
            let ext = crate::record::Ext {
                producer,
                stream: stream.map(|_| crate::record::StreamPos { name: &name, version: rng.gen() }),
            };
            let mut rec = Vec::new();
            crate::record::encode_ex(offset, epoch, ext, &payload, &mut rec);
            let (got, len) = crate::record::decode(&rec).unwrap();
            assert_eq!(
                (got.offset, got.epoch, got.ext(), got.payload, len),
                (offset, epoch, ext, &payload[..], rec.len())
            );
            assert_eq!(crate::record::peek(&rec).unwrap(), (offset, ext, rec.len()));
            // Any single flipped byte is caught (CRC, or a shape check first).
            let at = rng.gen_range(0..rec.len());
            rec[at] ^= 1 << rng.gen_range(0..8);
            assert!(crate::record::decode(&rec).is_err(), "flip at {at} not detected");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        for _ in 0..20_000 {
            let n = rng.gen_range(0..64);
            let mut buf: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            if n >= 4 && rng.gen_bool(0.7) {
                let len = rng.gen_range(0..(n as u32));
                buf[0..4].copy_from_slice(&len.to_le_bytes());
            }
            if let Ok(Some((f, used))) = decode_frame(&buf) {
                assert!(used <= buf.len());
                let _ = Request::parse(&f);
                let _ = Response::parse(&f);
                let _ = Repl::parse(&f);
            }
        }
    }
}
