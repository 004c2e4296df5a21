//! Server → client answers on the client port: the node's role and (version 3) its view
//! of leadership, acknowledgements, records, and the error frames that carry a value
//! (the stream's version, the first offset held, a refusal's hint); with their encoders.

use super::errors::{CodecError, ErrorCode};
use super::frame::{
    begin_error, begin_frame, encode_error, encode_parts, finish_frame, parse_body, parse_error, Frame,
};
use super::group::GroupResp;
use super::{
    op, APPENDED_FLAG_DUPLICATE, APPENDED_FLAG_VERSION, LEADERSHIP_VERSION, MAX_READ_BYTES, NO_STREAM_VERSION,
};

wire_enum! {
/// The role a node reports in `HelloOk`.
pub enum Role: u8, from from_u8 {
    Leader = 1,
    Follower = 2,
    /// A former leader that saw a higher epoch: refuses appends until it rejoins.
    Fenced = 3,
}
}

impl Role {
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
    /// Version 4: a consumer group's pushes and answers (`codec::group`).
    Group(GroupResp<'a>),
}

wire_enum! {
/// Whether a node sees a leader holding a live lease (docs/protocol.md §6).
pub enum LeaderState: u8, from from_u8 {
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
        parse_body(f, |b| {
            Ok(match f.op {
                op::HELLO_OK => {
                    let version = b.u16()?;
                    let shard = b.u16()?;
                    let shard_count = b.u16()?;
                    let role =
                        Role::from_u8(b.u8()?).ok_or(CodecError::BadBody { op: f.op, reason: "unknown role" })?;
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
                    Response::StreamRecords { shard, next_version, end_version, count, records: b.take_rest() }
                }
                op::RECORDS => {
                    let shard = b.u16()?;
                    let next_offset = b.u64()?;
                    let count = b.u32()?;
                    Response::Records { shard, next_offset, count, records: b.take_rest() }
                }
                op::ERROR => match parse_error(b)? {
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
                    let bytes = b.take_rest();
                    if bytes.len() > MAX_READ_BYTES as usize
                        || at.checked_add(bytes.len() as u64).is_none_or(|e| e > total)
                    {
                        return Err(CodecError::BadBody { op: f.op, reason: "a piece outside the snapshot" });
                    }
                    Response::IndexSnapshotPiece { shard, first_offset, total, at, bytes }
                }
                op::GROUP_ASSIGNED | op::GROUP_RECORDS | op::GROUP_COMMITTED => {
                    Response::Group(GroupResp::parse(f.op, b)?)
                }
                o => return Err(CodecError::UnknownOpcode(o)),
            })
        })
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
                let (shard, next, end, count) =
                    (shard.to_le_bytes(), next_version.to_le_bytes(), end_version.to_le_bytes(), count.to_le_bytes());
                encode_parts(out, op::STREAM_RECORDS, req_id, &[&shard, &next, &end, &count, records])
            }
            Response::WrongVersion { current, message } => encode_wrong_version(req_id, *current, message, out),
            Response::OutOfRange { first, message } => encode_out_of_range(req_id, *first, message, out),
            Response::Trimmed { shard, first_offset } => {
                encode_parts(out, op::TRIMMED, req_id, &[&shard.to_le_bytes(), &first_offset.to_le_bytes()])
            }
            Response::IndexSnapshotPiece { shard, first_offset, total, at, bytes } => {
                let (shard, first, total, at) =
                    (shard.to_le_bytes(), first_offset.to_le_bytes(), total.to_le_bytes(), at.to_le_bytes());
                encode_parts(out, op::INDEX_SNAPSHOT_PIECE, req_id, &[&shard, &first, &total, &at, bytes])
            }
            Response::Records { shard, next_offset, count, records } => {
                let (shard, next, count) = (shard.to_le_bytes(), next_offset.to_le_bytes(), count.to_le_bytes());
                encode_parts(out, op::RECORDS, req_id, &[&shard, &next, &count, records])
            }
            Response::Error { code, message } => encode_error(req_id, *code, message, out),
            Response::Refusal { code, message, hint } => encode_refusal(req_id, *code, message, *hint, out),
            Response::Group(g) => g.encode(req_id, out),
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
    encode_parts(out, op::APPENDED, req_id, &[&shard.to_le_bytes(), &offset.to_le_bytes()]);
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

impl<'a> From<(u16, &'a str)> for Response<'a> {
    fn from((code, message): (u16, &'a str)) -> Self {
        Response::Error { code, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::*;

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
}
