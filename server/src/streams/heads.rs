//! A checkpoint's stream heads: the index as it stood at the last segment's start, every
//! stream's entry in `entry.rs`'s form, sorted by name and packed into pages
//! (`pages.rs`). [`Streams::heads_job`] takes what the next checkpoint needs from the
//! index on the executor (the map's entries, encoded; a view of the base's pages) and
//! [`HeadsJob::write`] merges them off it; [`Streams::from_pages`] is an index whose
//! heads are read where they lie.

use std::collections::HashMap;

use super::base::{for_each_unshadowed, Base};
use super::pages::{Dir, Pager, Pages, Src};
use super::Streams;

/// A stream at a segment's start, without byte positions: name, next version, runs,
/// first run and levels as (segment, first version).
pub type Head = (Box<str>, u64, u32, Vec<(u64, u64)>);

/// The heads of the next checkpoint, taken from the index (`Streams::heads_job`) and
/// written on another thread (`write`).
pub struct HeadsJob {
    /// The map's entries in the checkpoint form, back to back, and where each lies.
    fresh: Vec<u8>,
    spans: Vec<(u32, u32)>,
    /// The base's pages and which of their entries the map shadows.
    base: Option<(Pages, Vec<u64>)>,
}

/// Written heads: what the index needs to take them as its base, and the pages.
pub struct Written {
    pub paged: Paged,
    pub pages: Vec<u8>,
}

/// The directory of written pages (for the checkpoint's metadata), and the entry number
/// each of the map's streams got in them (a rebase shadows those it keeps in the map
/// without looking them up).
pub struct Paged {
    pub dir: Dir,
    pub(super) from_map: HashMap<Box<str>, u64>,
}

impl Written {
    /// The directory in the checkpoint form (`pages.rs`).
    pub fn encode_dir(&self, out: &mut Vec<u8>) {
        self.paged.dir.encode(out)
    }
}

impl Streams {
    /// What the checkpoint at the last segment's start needs: every stream with an event
    /// below it, its next version there, runs, first run and levels. Encodes the map's
    /// streams; the base's are read from its pages by `HeadsJob::write`.
    pub fn heads_job(&self) -> HeadsJob {
        let (mut fresh, mut spans) = (Vec::new(), Vec::with_capacity(self.map.len()));
        for (name, e) in &self.map {
            let at = fresh.len();
            if e.encode_head(name, &mut fresh) {
                spans.push((at as u32, (fresh.len() - at) as u32));
            }
        }
        assert!(u32::try_from(fresh.len()).is_ok(), "{} bytes of stream heads in memory", fresh.len());
        HeadsJob { fresh, spans, base: self.base.view() }
    }

    /// The index whose heads are `pages` (a checkpoint at `active_from`), read in place
    /// until the shard touches a stream.
    pub fn from_pages(src: Src, dir: Dir, active_from: u64) -> Streams {
        Streams { active_from, base: Base::new(Pages::new(src, dir, active_from)), ..Streams::default() }
    }

    /// The index of heads in the form before pages (`CLCKPT01`: a count, then the entries
    /// in no order), at the front of `r`, taken off it: each checked, then sorted and
    /// paged in memory (what a start of an upgraded node reads once, until its first
    /// roll writes pages).
    pub fn from_unpaged(r: &mut crate::le::Reader<'_>, active_from: u64) -> Result<Streams, String> {
        let all = r.0;
        let n = usize::try_from(r.u64()?).ok().filter(|&n| n <= r.rest() / 15).ok_or("more streams than bytes")?;
        let mut spans = Vec::with_capacity(n);
        for _ in 0..n {
            let at = all.len() - r.rest();
            super::entry::decode_entry(r, active_from, false)?;
            spans.push(&all[at..all.len() - r.rest()]);
        }
        let name = |b: &[u8]| b[1..1 + b[0] as usize].to_vec();
        spans.sort_unstable_by_key(|b| name(b));
        if let Some(w) = spans.windows(2).find(|w| name(w[0]) == name(w[1])) {
            return Err(format!("stream {:?} twice", String::from_utf8_lossy(&name(w[0]))));
        }
        let mut pager = Pager::default();
        spans.iter().for_each(|b| pager.push(b));
        let (dir, pages) = pager.finish();
        Ok(Streams::from_pages(Src::Mem { bytes: std::sync::Arc::new(pages), at: 0 }, dir, active_from))
    }

    /// Checks every page of the heads (a start runs it in the background; `inspect` before
    /// it compares).
    pub fn verify_heads(&self) -> Result<(), String> {
        self.base.pages().map_or(Ok(()), Pages::verify)
    }

    /// A copy of the heads' pages, for a thread that checks them while the index goes on.
    pub fn heads_checker(&self) -> Option<impl FnOnce() + Send + 'static> {
        let p = self.base.pages()?.clone();
        Some(move || {
            if let Err(e) = p.verify() {
                p.stop(&e);
            }
        })
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

impl HeadsJob {
    /// The heads in name order, packed into pages: the map's entries merged with the
    /// base's unshadowed ones (no name is in both).
    pub fn write(mut self) -> Written {
        let fresh = std::mem::take(&mut self.fresh);
        let name = |s: &(u32, u32)| {
            let b = &fresh[s.0 as usize..];
            &b[1..1 + b[0] as usize]
        };
        self.spans.sort_unstable_by(|a, b| name(a).cmp(name(b)));
        let entry = |s: &(u32, u32)| &fresh[s.0 as usize..(s.0 + s.1) as usize];
        let mut pager = Pager::default();
        let mut from_map = HashMap::with_capacity(self.spans.len());
        let mut fresh_one = |pager: &mut Pager, s: &(u32, u32)| {
            let n = std::str::from_utf8(name(s)).expect("a stream name in memory is UTF-8");
            from_map.insert(n.into(), pager.pushed());
            pager.push(entry(s));
        };
        let mut next = self.spans.iter().peekable();
        if let Some((pages, shadowed)) = &self.base {
            for_each_unshadowed(pages, shadowed, &mut |n, b| {
                while let Some(s) = next.next_if(|s| name(s) < n.as_bytes()) {
                    fresh_one(&mut pager, s);
                }
                assert!(next.peek().is_none_or(|s| name(s) != n.as_bytes()), "stream {n:?} in the map and the base");
                pager.push(b);
            });
        }
        for s in next {
            fresh_one(&mut pager, s);
        }
        let (dir, pages) = pager.finish();
        Written { paged: Paged { dir, from_map }, pages }
    }
}

#[cfg(test)]
impl Streams {
    /// The index a checkpoint of these heads gives, its pages held in memory.
    pub(crate) fn reloaded(&self) -> Streams {
        let w = self.heads_job().write();
        Streams::from_pages(Src::Mem { bytes: std::sync::Arc::new(w.pages), at: 0 }, w.paged.dir, self.active_from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::le::Reader;

    /// A checkpoint's streams read from their pages behave as the decoded index they stand
    /// for: versions and reads answered in place, a touched stream moved into the map,
    /// and the next checkpoint (merged entries) giving the same.
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
        let mut t = s.reloaded();
        assert!(t.base.pages().unwrap().pages() > 1, "the heads span pages");
        assert!(t.map.is_empty() && t.len() == 300 && t.same_as(&s));
        t.verify_heads().unwrap();
        for k in [0, 7, 299] {
            assert_eq!(t.current(&name(k)), s.current(&name(k)));
            let (a, b) = (t.locate(&name(k)).unwrap(), s.locate(&name(k)).unwrap());
            assert_eq!((a.next, a.runs, a.first, a.levels), (b.next, b.runs, b.first, b.levels));
        }
        for n in ["nobody", "", "a", "stream-", "stream-99x", "zzz"] {
            assert_eq!(t.current(n), None, "{n}");
        }
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
        let back = t.reloaded();
        assert!(back.same_as(&t) && back.len() == 301);
        let mut names = back.next_versions();
        let mut want = s.next_versions();
        names.sort();
        want.sort();
        assert_eq!(names, want);
        assert_eq!(back.heads(), s.heads());
    }

    /// Pages read from a file: every flipped byte of them is found by the check a start
    /// runs (and by the read of that page); a directory out of order is refused.
    #[test]
    fn damaged_pages_are_found_and_a_directory_out_of_order_is_refused() {
        let mut s = Streams::default();
        for k in 0..400u64 {
            s.note(&format!("s-{k:04}"), 0, k).unwrap();
        }
        s.seal(0, 1_000);
        s.set_active_from(1_000);
        let w = s.heads_job().write();
        let (mut dir_bytes, pages) = (Vec::new(), w.pages.clone());
        assert_eq!(w.paged.from_map.len(), 400, "every stream came from the map");
        w.encode_dir(&mut dir_bytes);
        let dir = || Dir::decode(&mut Reader(&dir_bytes), pages.len() as u64).unwrap();
        let path = std::env::temp_dir().join(format!("corelog-pages-{}", std::process::id()));
        for i in (0..pages.len()).step_by(97).chain([pages.len() - 1]) {
            let mut d = pages.clone();
            d[i] ^= 0x20;
            std::fs::write(&path, &d).unwrap();
            let file = std::sync::Arc::new(std::fs::File::open(&path).unwrap());
            let src = Src::File { file, at: 0, path: std::sync::Arc::new(path.clone()) };
            let t = Streams::from_pages(src, dir(), 1_000);
            let e = t.verify_heads().expect_err("a flipped byte");
            assert!(e.contains("is damaged"), "{e}");
        }
        std::fs::write(&path, &pages).unwrap();
        let file = std::sync::Arc::new(std::fs::File::open(&path).unwrap());
        let t = Streams::from_pages(Src::File { file, at: 0, path: std::sync::Arc::new(path.clone()) }, dir(), 1_000);
        t.verify_heads().unwrap();
        assert!(t.same_as(&s) && t.current("s-0399") == Some(0));
        std::fs::remove_file(&path).unwrap();
        assert!(Dir::decode(&mut Reader(&dir_bytes), pages.len() as u64 + 1).is_err(), "length");
        // A directory whose second page starts below the first page's last name: the
        // first names still increase, the pages overlap.
        let mut overlap = Dir::decode(&mut Reader(&dir_bytes), pages.len() as u64).unwrap();
        overlap.set_first_name(1, b"s-0000a");
        let t = Streams::from_pages(Src::Mem { bytes: std::sync::Arc::new(pages.clone()), at: 0 }, overlap, 1_000);
        let e = t.verify_heads().expect_err("overlapping pages");
        assert!(e.contains("next page's first"), "{e}");
        // Swap the first names of the first two pages.
        let mut bad = Dir::decode(&mut Reader(&dir_bytes), pages.len() as u64).unwrap();
        assert!(bad.pages() > 2);
        bad.swap_first_names(0, 1);
        let mut b = Vec::new();
        bad.encode(&mut b);
        let e = Dir::decode(&mut Reader(&b), pages.len() as u64).err().expect("refused");
        assert!(e.contains("out of order"), "{e}");
    }
}
