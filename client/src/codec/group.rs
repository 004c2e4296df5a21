//! Consumer-group frames (protocol version 4, docs/protocol.md §11): a member joins a
//! group on a shard connection, which then carries the group's pushes (`Assigned`,
//! `Records`) one way and the member's `Commit`s and `Heartbeat`s the other.

use super::errors::CodecError;
use super::frame::{encode_parts, Body};
use super::op;

/// Longest group name, in bytes (UTF-8).
pub const MAX_GROUP_NAME: usize = 128;
/// Longest member id, in bytes (UTF-8).
pub const MAX_MEMBER_ID: usize = 128;
/// Longest subscription prefix, in bytes (a stream name's bound).
pub const MAX_GROUP_PREFIX: usize = crate::record::MAX_STREAM_NAME;
/// Most buckets of a group per shard (k).
pub const MAX_GROUP_K: u8 = 64;
/// `next` of a bucket in `Assigned` that has no committed position yet.
pub const NO_COMMIT: u64 = u64::MAX;

/// A member's requests (client → server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupReq<'a> {
    /// Join `group` as `member`, for the events of every stream whose name starts with
    /// `prefix` ("" = every stream), in `k` buckets per shard (fixed by the group's first
    /// join; 0: the group's, or the default). Answered by pushes with this `req_id`.
    Join { group: &'a str, member: &'a str, prefix: &'a str, k: u8 },
    /// Everything delivered to this member below log offset `next` is processed.
    /// Answered by `Committed` (or `StaleGeneration`).
    Commit { gen: u64, next: u64 },
    /// Keeps the member's session; no answer.
    Heartbeat { gen: u64 },
}

/// The server's group frames (server → client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupResp<'a> {
    /// A generation opened: the member's buckets and where each one's delivery starts
    /// (`NO_COMMIT`: nothing committed, from the log's first offset). Every `Records`
    /// after it belongs to this generation until the next `Assigned`.
    Assigned { gen: u64, shard_count: u16, k: u8, buckets: Vec<(u16, u64)> },
    /// Records of the member's buckets in offset order; `next_offset` follows the last
    /// record read (commit it once they are processed).
    Records { gen: u64, next_offset: u64, count: u32, records: &'a [u8] },
    /// A commit is durable on both nodes as the record at `offset` of the shard.
    Committed { gen: u64, next: u64, offset: u64 },
}

fn text<'a>(b: &mut Body<'a>, n: usize, max: usize, op: u8, what: &'static str) -> Result<&'a str, CodecError> {
    if n > max {
        return Err(CodecError::BadBody { op, reason: what });
    }
    std::str::from_utf8(b.take(n)?).map_err(|_| CodecError::BadBody { op, reason: what })
}

impl<'a> GroupReq<'a> {
    pub(super) fn parse(op: u8, b: &mut Body<'a>) -> Result<GroupReq<'a>, CodecError> {
        Ok(match op {
            op::GROUP_JOIN => {
                let n = b.u8()? as usize;
                let group = text(b, n, MAX_GROUP_NAME, op, "group name too long or not UTF-8")?;
                let n = b.u8()? as usize;
                let member = text(b, n, MAX_MEMBER_ID, op, "member id too long or not UTF-8")?;
                let n = b.u16()? as usize;
                let prefix = text(b, n, MAX_GROUP_PREFIX, op, "prefix too long or not UTF-8")?;
                GroupReq::Join { group, member, prefix, k: b.u8()? }
            }
            op::GROUP_COMMIT => GroupReq::Commit { gen: b.u64()?, next: b.u64()? },
            op::GROUP_HEARTBEAT => GroupReq::Heartbeat { gen: b.u64()? },
            o => return Err(CodecError::UnknownOpcode(o)),
        })
    }

    pub fn encode(&self, req_id: u64, out: &mut Vec<u8>) {
        match self {
            GroupReq::Join { group, member, prefix, k } => {
                assert!(group.len() <= MAX_GROUP_NAME && member.len() <= MAX_MEMBER_ID, "group or member too long");
                assert!(prefix.len() <= MAX_GROUP_PREFIX, "prefix too long");
                let parts: [&[u8]; 6] = [
                    &[group.len() as u8],
                    group.as_bytes(),
                    &[member.len() as u8],
                    member.as_bytes(),
                    &(prefix.len() as u16).to_le_bytes(),
                    prefix.as_bytes(),
                ];
                let mut body = parts.concat();
                body.push(*k);
                encode_parts(out, op::GROUP_JOIN, req_id, &[&body]);
            }
            GroupReq::Commit { gen, next } => {
                encode_parts(out, op::GROUP_COMMIT, req_id, &[&gen.to_le_bytes(), &next.to_le_bytes()])
            }
            GroupReq::Heartbeat { gen } => encode_parts(out, op::GROUP_HEARTBEAT, req_id, &[&gen.to_le_bytes()]),
        }
    }
}

impl<'a> GroupResp<'a> {
    pub(super) fn parse(op: u8, b: &mut Body<'a>) -> Result<GroupResp<'a>, CodecError> {
        Ok(match op {
            op::GROUP_ASSIGNED => {
                let (gen, shard_count, k, n) = (b.u64()?, b.u16()?, b.u8()?, b.u16()? as usize);
                if n > MAX_GROUP_K as usize {
                    return Err(CodecError::BadBody { op, reason: "more buckets than a group has per shard" });
                }
                let buckets = (0..n).map(|_| Ok((b.u16()?, b.u64()?))).collect::<Result<_, CodecError>>()?;
                GroupResp::Assigned { gen, shard_count, k, buckets }
            }
            op::GROUP_RECORDS => {
                let (gen, next_offset, count) = (b.u64()?, b.u64()?, b.u32()?);
                GroupResp::Records { gen, next_offset, count, records: b.take_rest() }
            }
            op::GROUP_COMMITTED => GroupResp::Committed { gen: b.u64()?, next: b.u64()?, offset: b.u64()? },
            o => return Err(CodecError::UnknownOpcode(o)),
        })
    }

    pub fn encode(&self, req_id: u64, out: &mut Vec<u8>) {
        match self {
            GroupResp::Assigned { gen, shard_count, k, buckets } => {
                assert!(buckets.len() <= MAX_GROUP_K as usize, "{} buckets assigned", buckets.len());
                let mut body = Vec::with_capacity(13 + 10 * buckets.len());
                body.extend_from_slice(&gen.to_le_bytes());
                body.extend_from_slice(&shard_count.to_le_bytes());
                body.push(*k);
                body.extend_from_slice(&(buckets.len() as u16).to_le_bytes());
                for (bucket, next) in buckets {
                    body.extend_from_slice(&bucket.to_le_bytes());
                    body.extend_from_slice(&next.to_le_bytes());
                }
                encode_parts(out, op::GROUP_ASSIGNED, req_id, &[&body]);
            }
            GroupResp::Records { gen, next_offset, count, records } => {
                let (gen, next, count) = (gen.to_le_bytes(), next_offset.to_le_bytes(), count.to_le_bytes());
                encode_parts(out, op::GROUP_RECORDS, req_id, &[&gen, &next, &count, records])
            }
            GroupResp::Committed { gen, next, offset } => encode_parts(
                out,
                op::GROUP_COMMITTED,
                req_id,
                &[&gen.to_le_bytes(), &next.to_le_bytes(), &offset.to_le_bytes()],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{decode_frame, Request, Response};
    use super::*;

    #[test]
    fn group_frames_roundtrip() {
        let reqs = [
            GroupReq::Join { group: "billing", member: "worker-1", prefix: "order-", k: 4 },
            GroupReq::Join { group: "g", member: "m", prefix: "", k: 0 },
            GroupReq::Commit { gen: 7, next: 1 << 40 },
            GroupReq::Heartbeat { gen: u64::MAX },
        ];
        for r in reqs {
            let mut out = Vec::new();
            Request::Group(r.clone()).encode(9, &mut out);
            let (f, used) = decode_frame(&out).unwrap().unwrap();
            assert_eq!((used, f.req_id), (out.len(), 9));
            assert_eq!(Request::parse(&f).unwrap(), Request::Group(r));
        }
        let recs = [1u8, 2, 3];
        let resps = [
            GroupResp::Assigned { gen: 3, shard_count: 2, k: 4, buckets: vec![(0, NO_COMMIT), (6, 12)] },
            GroupResp::Assigned { gen: 4, shard_count: 1, k: 1, buckets: vec![] },
            GroupResp::Records { gen: 3, next_offset: 99, count: 1, records: &recs },
            GroupResp::Committed { gen: 3, next: 99, offset: 120 },
        ];
        for r in resps {
            let mut out = Vec::new();
            Response::Group(r.clone()).encode(5, &mut out);
            let (f, _) = decode_frame(&out).unwrap().unwrap();
            assert_eq!(Response::parse(&f).unwrap(), Response::Group(r));
        }
    }

    #[test]
    fn bad_group_frames_are_errors() {
        // A join whose group name is not UTF-8, and one cut short.
        let mut out = Vec::new();
        GroupReq::Join { group: "ab", member: "m", prefix: "", k: 1 }.encode(1, &mut out);
        let mut bad = out.clone();
        bad[13 + 1] = 0xFF;
        let (f, _) = decode_frame(&bad).unwrap().unwrap();
        assert!(Request::parse(&f).is_err());
        let cut = out.len() - 1;
        out[..4].copy_from_slice(&((cut - 4) as u32).to_le_bytes());
        let (f, _) = decode_frame(&out[..cut]).unwrap().unwrap();
        assert!(Request::parse(&f).is_err());
        // An assignment announcing more buckets than a group can have.
        let mut out = Vec::new();
        let body = [&3u64.to_le_bytes()[..], &1u16.to_le_bytes(), &[1], &500u16.to_le_bytes()].concat();
        encode_parts(&mut out, op::GROUP_ASSIGNED, 1, &[&body]);
        let (f, _) = decode_frame(&out).unwrap().unwrap();
        assert!(Response::parse(&f).is_err());
    }
}
