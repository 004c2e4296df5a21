//! Rebasing: at each roll, once the roll's checkpoint is written, its heads become the
//! index's base (held as the checkpoint's bytes, `base.rs`) and the streams with no event
//! in the new segment leave the map, so memory holds the streams written since, not every
//! stream ever touched. The heads are checked and tabled off the executor
//! ([`Streams::prepare_rebase`]) and taken on it ([`Streams::rebase`]).

use super::base::Base;
use super::Streams;
use crate::le::Reader;

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
}

impl Streams {
    /// What `rebase` needs, from the heads `encode_heads` wrote (at byte `from` of the
    /// buffer given, which the base keeps) when this index's last segment started where
    /// it starts now: checks and tables them. Borrows nothing of the index, so it runs
    /// off the executor.
    pub fn prepare_rebase(&self) -> impl FnOnce(Vec<u8>, usize) -> Result<Rebase, String> + Send + 'static {
        let (instance, at) = (self.instance, self.active_from);
        move |bytes, from| {
            let heads = Streams::walk_heads(&mut Reader(&bytes[from..]), at, from)?;
            Ok(Rebase { instance, at, base: Base::build(bytes, heads.pos)? })
        }
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
        for name in self.map.keys() {
            if let Some(i) = self.base.find(name) {
                self.base.shadow(i);
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
        let mut out = Vec::new();
        s.encode_heads(&mut out);
        let prep = s.prepare_rebase();
        let mut o = Streams::default();
        o.set_active_from(100);
        let other = o.prepare_rebase()(out.clone(), 0).unwrap();
        assert!(!s.rebase(other), "heads made for another index");
        assert!(s.rebase(prep(out.clone(), 0).unwrap()));
        assert_eq!(s.map.len(), 2, "only the streams with events since the roll stay decoded");
        assert_eq!((s.heads(), s.len()), (before, len));
        assert_eq!((s.current("s3"), s.current("s4"), s.current("new")), (Some(1), Some(0), Some(0)));
        assert_eq!(s.locate("s4").unwrap().runs, 1);
        // Heads prepared before a further roll are stale by then.
        let prep = s.prepare_rebase();
        let mut out = Vec::new();
        s.encode_heads(&mut out);
        s.seal(100, 200);
        assert!(!s.rebase(prep(out.clone(), 0).unwrap()));
        assert_eq!(s.locate("s3").unwrap().runs, 2);
    }
}
