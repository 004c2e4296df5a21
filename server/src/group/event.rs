//! The events of a consumer group, as stored in its reserved stream on each shard
//! (`$g/<group>/<shard>`): the group's state on a shard is the fold of these events.
//! Sans-IO: bytes in, values out, every malformed input an error, never a panic.

use super::{Bucket, MAX_BUCKETS, MAX_MEMBERS, MAX_MEMBER_ID};

/// One event of a group's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The group's whole state: who owns which bucket in generation `gen` and every
    /// bucket's committed position. A `gen` above the last one opens a generation; the
    /// same `gen` again is a snapshot (written every `SNAPSHOT_EVERY` commits), so a fold
    /// starts at the last `State` and reads a bounded tail. Every bucket of the shard is
    /// named at most once; a generation with no member owns nothing.
    /// `k` and `prefix` are the group's subscription (fixed at its first join).
    State { gen: u64, k: u16, prefix: String, owners: Vec<(String, Vec<Bucket>)>, next: Vec<(Bucket, u64)> },
    /// `member` has processed everything delivered to it below offset `next` in
    /// generation `gen`: each bucket it owns there is committed at least to `next`.
    Commit { gen: u64, member: String, next: u64 },
}

const STATE: u8 = 1;
const COMMIT: u8 = 2;

impl Event {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            Event::State { gen, k, prefix, owners, next } => {
                assert!(owners.len() <= MAX_MEMBERS, "a generation of {} members", owners.len());
                assert!(next.len() <= MAX_BUCKETS, "{} committed buckets", next.len());
                assert!(prefix.len() <= u8::MAX as usize, "a prefix of {} bytes", prefix.len());
                out.push(STATE);
                out.extend_from_slice(&gen.to_le_bytes());
                out.extend_from_slice(&k.to_le_bytes());
                out.push(prefix.len() as u8);
                out.extend_from_slice(prefix.as_bytes());
                out.extend_from_slice(&(owners.len() as u16).to_le_bytes());
                for (member, buckets) in owners {
                    put_id(&mut out, member);
                    assert!(buckets.len() <= MAX_BUCKETS, "{} buckets for one member", buckets.len());
                    out.extend_from_slice(&(buckets.len() as u16).to_le_bytes());
                    for b in buckets {
                        out.extend_from_slice(&b.to_le_bytes());
                    }
                }
                out.extend_from_slice(&(next.len() as u16).to_le_bytes());
                for (b, n) in next {
                    out.extend_from_slice(&b.to_le_bytes());
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
            Event::Commit { gen, member, next } => {
                out.push(COMMIT);
                out.extend_from_slice(&gen.to_le_bytes());
                put_id(&mut out, member);
                out.extend_from_slice(&next.to_le_bytes());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Event, String> {
        let mut r = Reader { bytes, at: 0 };
        let event = match r.u8()? {
            STATE => {
                let gen = r.u64()?;
                let k = r.u16()?;
                if k == 0 || k as usize > MAX_BUCKETS {
                    return Err(format!("a group of {k} buckets per shard (1..={MAX_BUCKETS})"));
                }
                let n = r.u8()? as usize;
                let prefix =
                    String::from_utf8(r.take(n)?.to_vec()).map_err(|e| format!("prefix is not UTF-8 ({e})"))?;
                let members = r.u16()? as usize;
                if members > MAX_MEMBERS {
                    return Err(format!("a generation of {members} members (at most {MAX_MEMBERS})"));
                }
                let mut owners = Vec::with_capacity(members);
                for _ in 0..members {
                    let member = r.id()?;
                    let n = r.u16()? as usize;
                    if n > MAX_BUCKETS {
                        return Err(format!("{n} buckets for one member (at most {MAX_BUCKETS})"));
                    }
                    let buckets = (0..n).map(|_| r.u16()).collect::<Result<Vec<_>, _>>()?;
                    owners.push((member, buckets));
                }
                let n = r.u16()? as usize;
                if n > MAX_BUCKETS {
                    return Err(format!("{n} committed buckets (at most {MAX_BUCKETS})"));
                }
                let next = (0..n).map(|_| Ok((r.u16()?, r.u64()?))).collect::<Result<Vec<_>, String>>()?;
                Event::State { gen, k, prefix, owners, next }
            }
            COMMIT => Event::Commit { gen: r.u64()?, member: r.id()?, next: r.u64()? },
            k => return Err(format!("unknown group event kind {k}")),
        };
        if r.at != bytes.len() {
            return Err(format!("{} bytes after a group event", bytes.len() - r.at));
        }
        Ok(event)
    }
}

fn put_id(out: &mut Vec<u8>, id: &str) {
    assert!(!id.is_empty() && id.len() <= MAX_MEMBER_ID, "member id of {} bytes", id.len());
    out.push(id.len() as u8);
    out.extend_from_slice(id.as_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("group event cut at byte {} (wanted {n} more)", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn id(&mut self) -> Result<String, String> {
        let n = self.u8()? as usize;
        if n == 0 || n > MAX_MEMBER_ID {
            return Err(format!("member id of {n} bytes (1..={MAX_MEMBER_ID})"));
        }
        let raw = self.take(n)?;
        String::from_utf8(raw.to_vec()).map_err(|e| format!("member id is not UTF-8 ({e})"))
    }
}
