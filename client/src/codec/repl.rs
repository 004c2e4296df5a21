//! The replication port's frames, both directions: a follower's `Hello`, the leader's
//! `Welcome`, batches and seed pieces, the follower's acks, pings and errors.

use super::errors::CodecError;
use super::frame::{encode_error, encode_parts, parse_body, parse_error, Frame};
use super::{op, HELLO_MAGIC, MAX_REPL_BATCH_BYTES};

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
        parse_body(f, |b| {
            Ok(match f.op {
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
                    let records = b.take_rest();
                    if records.len() > MAX_REPL_BATCH_BYTES {
                        return Err(CodecError::PayloadTooLarge(records.len()));
                    }
                    Repl::Batch { epoch, first_offset, count, records }
                }
                op::REPL_SEED => {
                    let (first_offset, total, at) = (b.u64()?, b.u64()?, b.u64()?);
                    let bytes = b.take_rest();
                    if bytes.len() > MAX_REPL_BATCH_BYTES
                        || at.checked_add(bytes.len() as u64).is_none_or(|e| e > total)
                    {
                        return Err(CodecError::BadBody { op: op::REPL_SEED, reason: "a piece outside the snapshot" });
                    }
                    Repl::Seed { first_offset, total, at, bytes }
                }
                op::REPL_ACK => Repl::Ack { next_offset: b.u64()? },
                op::REPL_PING => Repl::Ping,
                op::REPL_JOINED => Repl::Joined { next_offset: b.u64()?, last_epoch: b.u32()?, last_crc: b.u32()? },
                op::ERROR => parse_error(b)?,
                o => return Err(CodecError::UnknownOpcode(o)),
            })
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Repl::Hello { version, shard, shard_count, epoch, next_offset, last_epoch } => {
                let (version, shard, count) = (version.to_le_bytes(), shard.to_le_bytes(), shard_count.to_le_bytes());
                let (epoch, next, last) = (epoch.to_le_bytes(), next_offset.to_le_bytes(), last_epoch.to_le_bytes());
                encode_parts(out, op::REPL_HELLO, 0, &[&HELLO_MAGIC, &version, &shard, &count, &epoch, &next, &last])
            }
            Repl::Welcome { epoch, truncate_to, common_epoch } => {
                let (epoch, truncate, common) =
                    (epoch.to_le_bytes(), truncate_to.to_le_bytes(), common_epoch.to_le_bytes());
                encode_parts(out, op::REPL_WELCOME, 0, &[&epoch, &truncate, &common])
            }
            Repl::Batch { epoch, first_offset, count, records } => {
                assert!(records.len() <= MAX_REPL_BATCH_BYTES, "replication batch too large");
                let (epoch, first, count) = (epoch.to_le_bytes(), first_offset.to_le_bytes(), count.to_le_bytes());
                encode_parts(out, op::REPL_BATCH, 0, &[&epoch, &first, &count, records])
            }
            Repl::Seed { first_offset, total, at, bytes } => {
                assert!(bytes.len() <= MAX_REPL_BATCH_BYTES, "seed piece too large");
                let (first, total, at) = (first_offset.to_le_bytes(), total.to_le_bytes(), at.to_le_bytes());
                encode_parts(out, op::REPL_SEED, 0, &[&first, &total, &at, bytes])
            }
            Repl::Ack { next_offset } => encode_parts(out, op::REPL_ACK, 0, &[&next_offset.to_le_bytes()]),
            Repl::Joined { next_offset, last_epoch, last_crc } => {
                let (next, epoch, crc) = (next_offset.to_le_bytes(), last_epoch.to_le_bytes(), last_crc.to_le_bytes());
                encode_parts(out, op::REPL_JOINED, 0, &[&next, &epoch, &crc])
            }
            Repl::Ping => encode_parts(out, op::REPL_PING, 0, &[]),
            Repl::Error { code, message } => encode_error(0, *code, message, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::*;

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
}
