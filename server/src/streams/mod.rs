//! Streams: the events of each stream of one shard, by version.
//!
//! An `Append2` may name a stream; its event gets the stream's next version (0 for the
//! first event, then 1, 2, …), written into the record (format.md §3, stream extension)
//! and returned with the position. The append may expect the stream's current version —
//! its last event's — to be `any`, none (no event yet) or exactly N; otherwise it is
//! refused with `WrongExpectedVersion` and the current version, and nothing is written.
//! Within a shard appends are taken one at a time in offset order, so of many racing on
//! one expected version exactly one gets it.
//!
//! Like the producers' table this index is derived from the log alone, in offset order:
//! fed on a follower as batches arrive and on a leader as appends are given offsets,
//! rolled back where offsets are handed out again ([`Streams::forget_from`]). Leader and
//! follower hold the same versions.
//!
//! **Memory does not grow with the log.** Per stream this index holds its next version,
//! the offsets of its events in the log's last segment (the one being written), and a few
//! pointers to its runs in sealed segments. When a segment is sealed, each stream's events
//! in it become one *run* in the segment's index file (`wal::segidx`), and the offsets
//! leave memory. A run's entry carries skip pointers: `ptrs[j]` is the newest earlier run
//! of the stream whose number is a multiple of 2^j. Memory keeps, per stream, the newest
//! run at each level (`levels`) and its first run, so the run holding any version is
//! found by walking down the levels, a few entry reads per level (`streamread.rs`):
//! O(log runs) reads, the runs of a stream being at most the segments it has events in.
//!
//! Retention deletes whole segments and their runs; the first version still held is found
//! when asked (`streamread.rs`), not kept up to date here. The index at a segment's start
//! is saved in each checkpoint (`checkpoint.rs`): next version, run count, first run and
//! levels per stream.
//!
//! The newest checkpoint's heads are not decoded into the map: they stay in that
//! checkpoint's pages (`base.rs`, `pages.rs`), in its file, looked up when asked, and a
//! stream moves into the map when it is written. At each roll, once the roll's checkpoint
//! is written, its heads become the base and the streams with no event in the new segment
//! leave the map (`rebase`). A start does nothing per stream: it reads the checkpoint's
//! page directory.
//!
//! Memory: per stream in the base nothing (its page is read when asked; the directory is
//! ≈ 40 bytes per 4 KiB page, and a bit per stream says whether the map shadows it); per
//! stream in the map `STREAM_BYTES` + its name + 24 bytes per level (≤ log2 of its runs +
//! 1), + 8 per event in the last segment. Reported by `corelog_stream_index_bytes`.
//!
//! Files: this one holds the index and what appends and reads ask of it; `entry.rs` one
//! stream's entry and skip list; `seal.rs` runs made at a seal and taken back at a start;
//! `heads.rs` the checkpoint form; `pages.rs` its pages; `rebase.rs` a roll's checkpoint
//! becoming the base; `base.rs` that base, read in place.

use std::collections::HashMap;

use corelog_client::codec::Expect;

use self::base::Base;
use self::entry::Entry;
use self::rebase::Instance;

mod base;
mod entry;
mod heads;
mod pages;
mod rebase;
mod seal;

pub use self::entry::Located;
pub use self::heads::{Head, HeadsJob, Paged, Written};
pub use self::pages::{Dir, Src};
pub use self::rebase::Rebase;

/// Approximate bytes per stream besides its name, levels and last-segment offsets: the
/// hash slot, the boxed name's and the vectors' headers, the fields, allocator overhead.
pub const STREAM_BYTES: usize = 128;

#[derive(Default)]
pub struct Streams {
    /// Every stream the shard touched since the start (or every stream, without a
    /// checkpoint): these shadow `base`.
    map: HashMap<Box<str>, Entry>,
    /// The newest checkpoint's streams (the start's, then each roll's: `rebase`), kept as
    /// its bytes (`base.rs`).
    base: Base,
    /// Which index this is: a rebase built for another (one rebuilt after a cut) is not
    /// taken.
    instance: Instance,
    /// First offset of the log's last segment: the events below it are in the sealed
    /// segments' index files.
    active_from: u64,
    /// Whether events' offsets are kept at all (a tool that needs only versions — the
    /// trim's index snapshot, `inspect` — keeps none).
    versions_only: bool,
    /// Sum of the offset vectors' and level vectors' capacities (8 and 24 bytes).
    active_slots: usize,
    level_slots: usize,
    name_bytes: usize,
}

impl Streams {
    /// An index that counts versions and keeps no offsets or runs.
    pub fn versions_only() -> Streams {
        Streams { versions_only: true, ..Streams::default() }
    }

    /// The stream's current version (its last event's), `None` when it has none.
    pub fn current(&self, name: &str) -> Option<u64> {
        let next = match self.map.get(name) {
            Some(e) => e.next,
            None => self.base.find(name).map_or(0, |(_, e)| e.next),
        };
        next.checked_sub(1)
    }

    /// Moves the checkpoint's entry of `name`, if it has one, into the map.
    fn touch(&mut self, name: &str) {
        if self.map.contains_key(name) {
            return;
        }
        if let Some((i, e)) = self.base.find(name) {
            self.base.shadow(i);
            self.name_bytes += name.len();
            self.level_slots += e.levels.capacity();
            self.map.insert(name.into(), e);
            debug_assert!(self.base.find(name).is_none(), "stream {name:?}: in the map and still live in the base");
        }
    }

    /// The version an append expecting `expect` gets, or the stream's current version
    /// when the expectation fails.
    pub fn check(&self, name: &str, expect: Expect) -> Result<u64, Option<u64>> {
        let current = self.current(name);
        if expect.met_by(current) {
            Ok(current.map_or(0, |v| v + 1))
        } else {
            Err(current)
        }
    }

    /// Records that version `version` of `name` is at `offset` (in the last segment).
    /// Versions come in order: every node sees a stream's events in offset order, and an
    /// offset handed out again was taken back with `forget_from` first; a version out of
    /// line (a log that disagrees with itself) is an error and changes nothing.
    pub fn note(&mut self, name: &str, version: u64, offset: u64) -> Result<(), String> {
        self.touch(name);
        let next = self.map.get(name).map_or(0, |e| e.next);
        if version != next {
            return Err(out_of_line(offset, version, name, next));
        }
        if !self.map.contains_key(name) {
            self.name_bytes += name.len();
            self.map.insert(name.into(), Entry::default());
        }
        let e = self.map.get_mut(name).expect("inserted above");
        e.next += 1;
        debug_assert!(e.active.len() as u64 <= e.next, "stream {name:?}: more events in memory than versions");
        if !self.versions_only {
            assert!(offset >= self.active_from, "stream {name:?}: event at {offset} below the last segment");
            assert!(e.active.last().is_none_or(|&l| l < offset), "stream {name:?}: offsets must grow");
            let cap = e.active.capacity();
            e.active.push(offset);
            self.active_slots += e.active.capacity() - cap;
        }
        Ok(())
    }

    /// Offsets from `from` on were handed out again: forget every event there. `from` is
    /// in the last segment (a cut into sealed segments rebuilds the index instead, `seal`).
    /// Visits every stream (rare: a leader's staged appends dropped, a follower's log cut).
    pub fn forget_from(&mut self, from: u64) {
        assert!(self.versions_only || from >= self.active_from, "a cut below the last segment rebuilds the index");
        let mut names = 0;
        self.map.retain(|name, e| {
            let keep = e.active.partition_point(|&o| o < from);
            assert!(e.active.len() as u64 <= e.next, "stream {name:?}: more events in memory than versions");
            e.next -= (e.active.len() - keep) as u64;
            e.active.truncate(keep);
            // A stream of the checkpoint has events below it, so never goes: the
            // checkpoint's stale entry stays shadowed.
            let gone = e.next == 0;
            if gone {
                names += name.len();
            }
            !gone
        });
        assert!(names <= self.name_bytes, "streams: {names} bytes of names forgotten of {}", self.name_bytes);
        self.name_bytes -= names;
        self.recount();
    }

    fn recount(&mut self) {
        self.active_slots = self.map.values().map(|e| e.active.capacity()).sum();
        self.level_slots = self.map.values().map(|e| e.levels.capacity()).sum();
    }

    /// Where the events below the next segment end: the start of the last segment.
    pub fn set_active_from(&mut self, offset: u64) {
        self.active_from = offset;
    }

    /// What a read of `name` needs (None: no such stream).
    pub fn locate(&self, name: &str) -> Option<Located> {
        let at = |e: &Entry| {
            debug_assert!(e.active.len() as u64 <= e.next, "stream {name:?}: more events in memory than versions");
            Located { next: e.next, active: e.active.clone(), first: e.first, levels: e.levels.clone(), runs: e.runs }
        };
        match self.map.get(name) {
            Some(e) => Some(at(e)),
            None => self.base.find(name).map(|(_, e)| at(&e)),
        }
    }

    /// Every stream and its next version (for the trim's index snapshot; reads every
    /// page of the base).
    pub fn next_versions(&self) -> Vec<(Box<str>, u64)> {
        let mut v: Vec<(Box<str>, u64)> = self.map.iter().map(|(n, e)| (n.clone(), e.next)).collect();
        self.base.for_each_live(&mut |n, b| v.push((n.into(), entry::head_next(b))));
        v
    }

    /// A stream known from an index snapshot: `next` versions counted, none held.
    pub fn restore(&mut self, name: &str, next: u64) {
        if next == 0 {
            return;
        }
        self.touch(name);
        // Only a start restores, before any event of the last segment is noted.
        debug_assert!(
            self.map.get(name).is_none_or(|e| e.active.is_empty()),
            "stream {name:?}: restored over events in memory"
        );
        if self.map.insert(name.into(), Entry { next, ..Entry::default() }).is_none() {
            self.name_bytes += name.len();
        }
    }

    pub fn len(&self) -> usize {
        self.map.len() + self.base.live()
    }

    /// Streams held decoded (touched since the last checkpoint's heads became the base).
    pub fn decoded(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events held in memory (those of the last segment).
    pub fn events(&self) -> usize {
        self.map.values().map(|e| e.active.len()).sum()
    }

    /// Approximate memory held (see the module docs).
    pub fn bytes(&self) -> usize {
        self.map.len() * STREAM_BYTES
            + self.name_bytes
            + self.active_slots * 8
            + self.level_slots * 24
            + self.base.bytes_held()
    }

    /// Every stream, decoded (for comparisons and `inspect`: visits and copies all).
    fn all(&self) -> HashMap<Box<str>, Entry> {
        let mut all = self.map.clone();
        all.extend(self.base.live_entries());
        all
    }

    /// Two indexes hold the same streams, versions, runs and levels (a start's, checked
    /// against another way of building it).
    pub fn same_as(&self, other: &Streams) -> bool {
        self.all() == other.all()
    }
}

/// The error for an event whose version is not its stream's next.
pub fn out_of_line(offset: u64, version: u64, name: &str, next: u64) -> String {
    format!("record {offset} is version {version} of stream {name:?}, whose next version here is {next}")
}

#[cfg(test)]
impl Streams {
    /// Notes each (stream, version, offset) in order; every one must fit.
    pub(crate) fn note_all(&mut self, events: &[(&str, u64, u64)]) {
        for &(name, version, offset) in events {
            self.note(name, version, offset).unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_expectations() {
        let mut s = Streams::default();
        assert_eq!(s.check("a", Expect::Exact(0)), Err(None));
        assert_eq!(s.check("a", Expect::NoStream), Ok(0));
        s.note_all(&[("a", 0, 10), ("b", 0, 11), ("a", 1, 12)]);
        assert_eq!(s.check("a", Expect::NoStream), Err(Some(1)));
        assert_eq!(s.check("a", Expect::Exact(0)), Err(Some(1)));
        assert_eq!(s.check("a", Expect::Exact(1)), Ok(2));
        assert_eq!(s.check("a", Expect::Any), Ok(2));
        assert_eq!(s.locate("a").unwrap().active, vec![10, 12]);
        assert_eq!((s.len(), s.events()), (2, 3));
        assert!(s.bytes() >= 2 * STREAM_BYTES + 2 + 3 * 8);
        let e = s.note("a", 5, 13).unwrap_err();
        assert!(e.contains("record 13 is version 5 of stream \"a\", whose next version here is 2"), "{e}");
    }

    #[test]
    fn forget_from_takes_back_versions() {
        let mut s = Streams::default();
        s.note_all(&[("a", 0, 1), ("b", 0, 2), ("a", 1, 3)]);
        s.forget_from(2);
        assert_eq!(s.current("a"), Some(0));
        assert_eq!(s.current("b"), None);
        assert_eq!((s.len(), s.events()), (1, 1));
        s.note_all(&[("a", 1, 2), ("b", 0, 3)]);
        assert_eq!(s.current("a"), Some(1));
    }
}
