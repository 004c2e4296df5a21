//! The events of a consumer group, as stored in its reserved stream on each shard
//! (`$g/<group>/<shard>`): the group's state on a shard is the fold of these events.
//! Sans-IO: bytes in, values out, every malformed input an error, never a panic.

use super::{Bucket, MAX_BUCKETS, MAX_MEMBERS, MAX_MEMBER_ID};

/// One event of a group's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A generation opens: who owns which bucket from here on. Every bucket of the shard
    /// is named at most once; a generation with no member owns nothing.
    Gen { gen: u64, owners: Vec<(String, Vec<Bucket>)> },
    /// `member`, owning `bucket` in generation `gen`, has processed everything of the
    /// bucket below offset `next`.
    Commit { gen: u64, member: String, bucket: Bucket, next: u64 },
}

const GEN: u8 = 1;
const COMMIT: u8 = 2;

impl Event {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            Event::Gen { gen, owners } => {
                assert!(owners.len() <= MAX_MEMBERS, "a generation of {} members", owners.len());
                out.push(GEN);
                out.extend_from_slice(&gen.to_le_bytes());
                out.extend_from_slice(&(owners.len() as u16).to_le_bytes());
                for (member, buckets) in owners {
                    put_id(&mut out, member);
                    assert!(buckets.len() <= MAX_BUCKETS, "{} buckets for one member", buckets.len());
                    out.extend_from_slice(&(buckets.len() as u16).to_le_bytes());
                    for b in buckets {
                        out.extend_from_slice(&b.to_le_bytes());
                    }
                }
            }
            Event::Commit { gen, member, bucket, next } => {
                out.push(COMMIT);
                out.extend_from_slice(&gen.to_le_bytes());
                put_id(&mut out, member);
                out.extend_from_slice(&bucket.to_le_bytes());
                out.extend_from_slice(&next.to_le_bytes());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Event, String> {
        let mut r = Reader { bytes, at: 0 };
        let event = match r.u8()? {
            GEN => {
                let gen = r.u64()?;
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
                Event::Gen { gen, owners }
            }
            COMMIT => Event::Commit { gen: r.u64()?, member: r.id()?, bucket: r.u16()?, next: r.u64()? },
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
