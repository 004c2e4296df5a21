//! A checkpoint's stream heads: the index as it stood at the last segment's start,
//! encoded for a checkpoint ([`Streams::encode_heads`]: a count (8), then one entry per
//! stream in `entry.rs`'s form), walked and checked where they lie
//! ([`Streams::walk_heads`]) and taken back by a start ([`Streams::from_heads`]).

use super::base::Base;
use super::Streams;
use crate::le::Reader;

/// A stream at a segment's start, without byte positions: name, next version, runs,
/// first run and levels as (segment, first version).
pub type Head = (Box<str>, u64, u32, Vec<(u64, u64)>);

/// Where each stream head lies in a checkpoint's bytes (`Streams::walk_heads`).
pub struct Heads {
    pub(super) pos: Vec<u32>,
    pub(super) active_from: u64,
}

impl Streams {
    /// The index as it stood at the last segment's start (`active_from`), for a
    /// checkpoint: every stream with an event below it, its next version there, runs,
    /// first run and levels. Encodes the streams in the map; copies the bytes of the
    /// checkpoint's entries that nothing touched since the start loaded them.
    pub fn encode_heads(&self, out: &mut Vec<u8>) -> u64 {
        let mut n = 0u64;
        let count_at = out.len();
        out.extend_from_slice(&0u64.to_le_bytes());
        for (name, e) in &self.map {
            n += u64::from(e.encode_head(name, out));
        }
        n += self.base.copy_live(out);
        // `Base::walk` refuses more entries than 15 bytes each (the smallest) could hold.
        assert!(
            out.len() - count_at - 8 >= 15 * n as usize,
            "stream heads: {n} entries in {} bytes",
            out.len() - count_at - 8
        );
        out[count_at..count_at + 8].copy_from_slice(&n.to_le_bytes());
        n
    }

    /// Checks what `encode_heads` wrote, at the front of `r`, for a shard whose last
    /// segment starts at `active_from`, and takes it off; `origin`: where `r`'s front is
    /// in the buffer `from_heads` will get. Decodes no entry.
    pub fn walk_heads(r: &mut Reader<'_>, active_from: u64, origin: usize) -> Result<Heads, String> {
        let n = r.u64()?;
        Ok(Heads { pos: Base::walk(r, n, active_from, origin + 8)?, active_from })
    }

    /// The index of those heads, kept in `bytes` (the buffer they were walked in) and read
    /// in place until the shard touches a stream (`base.rs`).
    pub fn from_heads(h: Heads, bytes: Vec<u8>) -> Result<Streams, String> {
        Ok(Streams { active_from: h.active_from, base: Base::build(bytes, h.pos)?, ..Streams::default() })
    }

    /// `walk_heads` and `from_heads` on a copy of what was walked.
    pub fn decode_heads(r: &mut Reader<'_>, active_from: u64) -> Result<Streams, String> {
        let all = r.0;
        let h = Streams::walk_heads(r, active_from, 0)?;
        let used = all.len() - r.rest();
        Streams::from_heads(h, all[..used].to_vec())
    }

    /// Each stream as it stood at the last segment's start, without byte positions
    /// (name, next version, runs, first run and levels as (segment, first version)),
    /// sorted: what `inspect` compares a checkpoint with.
    pub fn heads(&self) -> Vec<Head> {
        let mut v: Vec<_> = self
            .all()
            .into_iter()
            .map(|(n, e)| {
                let refs = e.first.iter().chain(&e.levels).map(|r| (r.seg, r.first_version)).collect();
                (n, e.next - e.active.len() as u64, e.runs, refs)
            })
            .filter(|h| h.1 > 0)
            .collect();
        v.sort();
        debug_assert!(v.windows(2).all(|w| w[0].0 != w[1].0), "a stream twice among the heads");
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint's streams held as its bytes behave as the decoded index they stand
    /// for: versions and reads answered in place, a touched stream moved into the map,
    /// and the next checkpoint (copied entries and encoded ones) decoding to the same.
    #[test]
    fn a_checkpoints_streams_serve_in_place_and_encode_again() {
        let name = |k: u32| format!("stream-{k}");
        let mut s = Streams::default();
        let mut offset = 0;
        for seg in 0..6u64 {
            s.set_active_from(seg * 1_000);
            offset = offset.max(seg * 1_000);
            for k in 0..300u32 {
                if !(k as u64 + seg).is_multiple_of(3) {
                    let next = s.current(&name(k)).map_or(0, |c| c + 1);
                    s.note(&name(k), next, offset).unwrap();
                    offset += 1;
                }
            }
            s.seal(seg * 1_000, (seg + 1) * 1_000);
        }
        s.set_active_from(6_000);
        let mut out = Vec::new();
        let n = s.encode_heads(&mut out);
        assert_eq!(n, 300);
        let mut t = Streams::decode_heads(&mut Reader(&out), 6_000).unwrap();
        assert!(t.map.is_empty() && t.len() == 300 && t.same_as(&s));
        for k in [0, 7, 299] {
            assert_eq!(t.current(&name(k)), s.current(&name(k)));
            let (a, b) = (t.locate(&name(k)).unwrap(), s.locate(&name(k)).unwrap());
            assert_eq!((a.next, a.runs, a.first, a.levels), (b.next, b.runs, b.first, b.levels));
        }
        assert_eq!(t.current("nobody"), None);
        // Touch some streams (and a new one) on both, seal on both: the same index.
        for ix in [&mut s, &mut t] {
            for k in (0..300u32).step_by(7) {
                let next = ix.current(&name(k)).map_or(0, |c| c + 1);
                ix.note(&name(k), next, 6_000 + k as u64).unwrap();
            }
            ix.note("fresh", 0, 6_500).unwrap();
            ix.seal(6_000, 7_000);
        }
        assert_eq!(t.map.len(), 44);
        assert_eq!((t.len(), t.current("fresh")), (301, Some(0)));
        // (Byte positions of the runs differ: each seal writes them in its map's order.)
        assert_eq!(t.heads(), s.heads());
        let mut mut_out = Vec::new();
        t.encode_heads(&mut mut_out);
        let back = Streams::decode_heads(&mut Reader(&mut_out), 7_000).unwrap();
        assert!(back.same_as(&t) && back.len() == 301);
        let mut names: Vec<_> = back.next_versions().map(|(n, v)| (n.to_string(), v)).collect();
        let mut want: Vec<_> = s.next_versions().map(|(n, v)| (n.to_string(), v)).collect();
        names.sort();
        want.sort();
        assert_eq!(names, want);
        assert_eq!(back.heads(), s.heads());
        // A name twice is refused.
        let mut twice = Vec::new();
        let mut one = Streams::default();
        one.note("a", 0, 1).unwrap();
        one.seal(0, 10);
        one.encode_heads(&mut twice);
        let entry = twice[8..].to_vec();
        twice.extend_from_slice(&entry);
        twice[..8].copy_from_slice(&2u64.to_le_bytes());
        let e = Streams::decode_heads(&mut Reader(&twice), 10).err().expect("refused");
        assert!(e.contains("twice"), "{e}");
    }
}
