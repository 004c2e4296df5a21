//! Client → server requests on the client port, their encoders (the append ones are on
//! the hot path: no enum to build), and the stream parts of an `Append2`: what it expects
//! of the stream's version, and which shard holds a stream.

use std::fmt;

use super::errors::CodecError;
use super::frame::{begin_frame, encode_parts, finish_frame, parse_body, Frame};
use super::group::GroupReq;
use super::{
    op, APPEND_FLAG_PRODUCER, APPEND_FLAG_STREAM, EXPECT_ANY, EXPECT_EXACT, EXPECT_NO_STREAM, HELLO_MAGIC, MAX_PAYLOAD,
    SUBSCRIBE_FLAG_STREAM,
};
use crate::record::ProducerSeq;

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
    /// Version 4: a consumer group's requests (`codec::group`).
    Group(GroupReq<'a>),
}

impl<'a> Request<'a> {
    pub fn parse(f: &Frame<'a>) -> Result<Request<'a>, CodecError> {
        parse_body(f, |b| {
            Ok(match f.op {
                op::HELLO => {
                    b.magic()?;
                    Request::Hello { version: b.u16()? }
                }
                op::APPEND => {
                    if f.body.len() > MAX_PAYLOAD {
                        return Err(CodecError::PayloadTooLarge(f.body.len()));
                    }
                    Request::Append { payload: b.take_rest() }
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
                    let payload = b.take_rest();
                    if payload.len() > MAX_PAYLOAD {
                        return Err(CodecError::PayloadTooLarge(payload.len()));
                    }
                    Request::Append2 { producer, stream, payload }
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
                op::GROUP_JOIN | op::GROUP_COMMIT | op::GROUP_HEARTBEAT => Request::Group(GroupReq::parse(f.op, b)?),
                o => return Err(CodecError::UnknownOpcode(o)),
            })
        })
    }

    pub fn encode(&self, req_id: u64, out: &mut Vec<u8>) {
        match self {
            Request::Hello { version } => encode_parts(out, op::HELLO, req_id, &[&HELLO_MAGIC, &version.to_le_bytes()]),
            Request::Append { payload } => encode_append(req_id, payload, out),
            Request::Append2 { producer, stream, payload } => encode_append2(req_id, *producer, *stream, payload, out),
            Request::Subscribe { stream, name, from } => {
                let flags = if *stream { SUBSCRIBE_FLAG_STREAM } else { 0 };
                let name_len = (name.len() as u16).to_le_bytes();
                encode_parts(out, op::SUBSCRIBE, req_id, &[&[flags], &name_len, name, &from.to_le_bytes()])
            }
            Request::ReadStream { name, from_version, max_count, max_bytes } => {
                let name_len = (name.len() as u16).to_le_bytes();
                let (from, count, bytes) =
                    (from_version.to_le_bytes(), max_count.to_le_bytes(), max_bytes.to_le_bytes());
                encode_parts(out, op::READ_STREAM, req_id, &[&name_len, name, &from, &count, &bytes])
            }
            Request::Read { shard, from, max_bytes } => encode_parts(
                out,
                op::READ,
                req_id,
                &[&shard.to_le_bytes(), &from.to_le_bytes(), &max_bytes.to_le_bytes()],
            ),
            Request::Tail { shard, from } => {
                encode_parts(out, op::TAIL, req_id, &[&shard.to_le_bytes(), &from.to_le_bytes()])
            }
            Request::Trim { shard, before } => {
                encode_parts(out, op::TRIM, req_id, &[&shard.to_le_bytes(), &before.to_le_bytes()])
            }
            Request::IndexSnapshot { shard, at } => {
                encode_parts(out, op::INDEX_SNAPSHOT, req_id, &[&shard.to_le_bytes(), &at.to_le_bytes()])
            }
            Request::Group(g) => g.encode(req_id, out),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::frame::{begin_frame, finish_frame};
    use crate::codec::*;

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
}
