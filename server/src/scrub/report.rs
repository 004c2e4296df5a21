//! What a check finds ([`Damage`]) and what becomes of it: logged once per damaged spot,
//! counted, and shown by the gauge and `/health` while it is known.

use std::path::Path;

use crate::shard::Shard;

/// One damaged spot of a sealed segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte position in the segment: the batch's, where no batch is, or where non-zero
    /// bytes follow the last batch.
    pub pos: u64,
    /// The offsets it holds (`first..end`); None where it holds no record (after the last
    /// batch, the index file).
    pub offsets: Option<(u64, u64)>,
    pub what: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.offsets {
            Some((a, b)) => write!(f, "byte {} (offsets {a}..={}): {}", self.pos, b.saturating_sub(1), self.what),
            None => write!(f, "byte {} (no record): {}", self.pos, self.what),
        }
    }
}
/// The damage known in one segment (by its first offset).
pub(super) struct Known {
    pub(super) first: u64,
    found: Vec<Damage>,
}

/// Reports what a check of segment `first` found (each damaged spot once) and forgets
/// damage it no longer finds.
pub(super) fn note(shard: &Shard, known: &mut Vec<Known>, first: u64, path: &Path, found: Vec<Damage>) {
    let id = shard.id();
    debug_assert!(known.iter().filter(|k| k.first == first).count() <= 1, "scrub: segment {first} known twice");
    let i = known.iter().position(|k| k.first == first);
    if found.is_empty() {
        if let Some(i) = i {
            known.remove(i);
            log::info!("shard {id}: scrub: {} reads whole again", path.display());
        }
    } else {
        let before: &[Damage] = i.map_or(&[], |i| &known[i].found);
        for d in found.iter().filter(|d| !before.contains(d)) {
            shard.metrics().scrub_damage.increment(1);
            log::error!(
                "shard {id}: scrub: DAMAGED segment {} {d}; a read of these records fails on this node: rebuild the shard from its peer (docs/operations.md §7.3)",
                path.display()
            );
        }
        match i {
            Some(i) => known[i].found = found,
            None => known.push(Known { first, found }),
        }
    }
}

/// The gauge and `/health` follow whether any damage is known (`now`; `was` before).
pub(super) fn set_damaged(shard: &Shard, was: &mut bool, now: bool) {
    if *was != now {
        *was = now;
        shard.metrics().scrub_damaged.set(if now { 1.0 } else { 0.0 });
        crate::metrics::scrub_damage_known(now);
    }
}
