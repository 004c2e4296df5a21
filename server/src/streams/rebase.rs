//! Rebasing: at each roll, once the roll's checkpoint is written, its heads become the
//! index's base (its pages in the checkpoint's bytes, `base.rs`) and the streams with no
//! event in the new segment leave the map, so memory holds the streams written since, not
//! every stream ever touched. The base is made off the executor
//! ([`Streams::prepare_rebase`]) and taken on it ([`Streams::rebase`]).

use super::base::Base;
use super::heads::Paged;
use super::pages::{Pages, Src};
use super::Streams;

/// A number no other index of this process has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Instance(u64);

impl Default for Instance {
    fn default() -> Instance {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Instance(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

/// A checkpoint's streams made ready off the executor for the index that wrote them
/// (`Streams::prepare_rebase`, `Streams::rebase`).
pub struct Rebase {
    instance: Instance,
    at: u64,
    base: Base,
    from_map: std::collections::HashMap<Box<str>, u64>,
}

impl Streams {
    /// What `rebase` needs, from the heads `heads_job` wrote (their pages and directory)
    /// when this index's last segment started where it starts now. Borrows nothing of the
    /// index, so it runs off the executor.
    pub fn prepare_rebase(&self) -> impl FnOnce(Src, Paged) -> Rebase + Send + 'static {
        let (instance, at) = (self.instance, self.active_from);
        move |src, p| Rebase { instance, at, base: Base::new(Pages::new(src, p.dir, at)), from_map: p.from_map }
    }

    /// Takes the heads of the checkpoint written at this index's last roll as its base and
    /// lets go of every stream without events in the last segment (the base holds them
    /// as they are): memory keeps the checkpoint's bytes and the streams written since,
    /// not every stream ever touched. Refused (false) if the index rolled again or was
    /// rebuilt since: the heads would be stale.
    pub fn rebase(&mut self, r: Rebase) -> bool {
        if r.instance != self.instance || r.at != self.active_from {
            return false;
        }
        self.base = r.base;
        self.map.retain(|_, e| !e.active.is_empty());
        // The streams the heads took from the map are where the write said; a stream
        // first touched since (from the old base, or new) is looked up.
        let base = &mut self.base;
        for name in self.map.keys() {
            match r.from_map.get(name) {
                Some(&i) => base.shadow(i as usize),
                None => {
                    if let Some((i, _)) = base.find(name) {
                        base.shadow(i);
                    }
                }
            }
        }
        debug_assert!(self.map.keys().all(|n| self.base.find(n).is_none()), "a stream live in the map and the base");
        self.name_bytes = self.map.keys().map(|n| n.len()).sum();
        self.map.shrink_to_fit();
        self.recount();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A roll's checkpoint becomes the base: streams without events in the last segment
    /// leave the map, nothing changes to a reader, and heads for an older roll or another
    /// index are refused.
    #[test]
    fn a_rebase_keeps_only_the_streams_written_since_the_roll() {
        let mut s = Streams::default();
        for k in 0..50u64 {
            s.note(&format!("s{k}"), 0, k).unwrap();
        }
        s.seal(0, 100);
        s.note("s3", 1, 100).unwrap();
        s.note("new", 0, 101).unwrap();
        let (before, len) = (s.heads(), s.len());
        let pages = |s: &Streams| {
            let w = s.heads_job().write();
            (Src::Mem { bytes: std::sync::Arc::new(w.pages), at: 0 }, w.paged)
        };
        let (src, dir) = pages(&s);
        let prep = s.prepare_rebase();
        let mut o = Streams::default();
        o.set_active_from(100);
        let (src2, dir2) = pages(&s);
        assert!(!s.rebase(o.prepare_rebase()(src2, dir2)), "heads made for another index");
        assert!(s.rebase(prep(src, dir)));
        assert_eq!(s.map.len(), 2, "only the streams with events since the roll stay decoded");
        assert_eq!((s.heads(), s.len()), (before, len));
        assert_eq!((s.current("s3"), s.current("s4"), s.current("new")), (Some(1), Some(0), Some(0)));
        assert_eq!(s.locate("s4").unwrap().runs, 1);
        // Heads prepared before a further roll are stale by then.
        let prep = s.prepare_rebase();
        let (src, dir) = pages(&s);
        s.seal(100, 200);
        assert!(!s.rebase(prep(src, dir)));
        assert_eq!(s.locate("s3").unwrap().runs, 2);
    }
}
