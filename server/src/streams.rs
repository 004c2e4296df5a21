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
//! The newest checkpoint's heads are not decoded into the map: they stay as that
//! checkpoint's bytes (`base.rs`), read in place, and a stream moves into the map when it
//! is written. At each roll, once the roll's checkpoint is written, its heads become the
//! base and the streams with no event in the new segment leave the map (`rebase`).
//!
//! Memory: per stream in the base its encoded head (name + 14 bytes + 20 per pointer) and
//! 20–36 bytes of table; per stream in the map `STREAM_BYTES` + its name + 24 bytes per
//! level (≤ log2 of its runs + 1), + 8 per event in the last segment. Reported by
//! `corelog_stream_index_bytes`.

use std::collections::HashMap;

use corelog_client::codec::Expect;

use crate::le::Reader;
use crate::wal::segidx::{self, RunRef};
use base::Base;

mod base;

/// Approximate bytes per stream besides its name, levels and last-segment offsets: the
/// hash slot, the boxed name's and the vectors' headers, the fields, allocator overhead.
pub const STREAM_BYTES: usize = 128;

#[derive(Default, Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// The version its next event gets.
    next: u64,
    /// Offsets of its events at or above the last segment's first offset (`active_from`):
    /// versions `next - active.len()..next`.
    active: Vec<u64>,
    /// Runs in sealed segments so far (the next one gets this number).
    runs: u32,
    /// Its first run (number 0), once it has one.
    first: Option<RunRef>,
    /// `levels[j]`: its newest run whose number is a multiple of 2^j; levels above the
    /// last are its first run.
    levels: Vec<RunRef>,
}

impl Entry {
    fn level(&self, j: usize) -> Option<RunRef> {
        self.levels.get(j).copied().or(self.first)
    }

    /// The skip pointers a new run gets: the newest earlier run at each level.
    fn pointers(&self) -> Vec<RunRef> {
        if self.runs == 0 {
            return Vec::new();
        }
        let n = (32 - self.runs.leading_zeros()) as usize; // levels 0..=log2(runs)
        (0..n).filter_map(|j| self.level(j)).collect()
    }

    /// Takes a new sealed run as the newest (its number is `self.runs`).
    fn push_run(&mut self, r: RunRef) {
        let n = self.runs;
        if n == 0 {
            self.first = Some(r);
            self.levels = vec![r];
        } else {
            for j in 0..=n.trailing_zeros() as usize {
                match self.levels.get_mut(j) {
                    Some(l) => *l = r,
                    None => self.levels.push(r),
                }
            }
        }
        self.runs = n + 1;
    }
}

/// Set in a checkpoint stream's `refs` count: the stream has no first run.
const NO_FIRST: u8 = 0x80;

/// A stream at a segment's start, without byte positions: name, next version, runs,
/// first run and levels as (segment, first version).
pub type Head = (Box<str>, u64, u32, Vec<(u64, u64)>);

/// What a read of one stream needs from memory (`streamread.rs`): copied out, so that the
/// reads of its runs on disk hold no borrow.
#[derive(Clone, Debug)]
pub struct Located {
    pub next: u64,
    /// Offsets of its events in the last segment, from version `next - active.len()`.
    pub active: Vec<u64>,
    pub first: Option<RunRef>,
    pub levels: Vec<RunRef>,
    pub runs: u32,
}

impl Located {
    /// Version of the first event in the last segment.
    pub fn active_from(&self) -> u64 {
        self.next - self.active.len() as u64
    }

    /// The pointer at level `j` from the top (memory's view): the newest run whose number
    /// is a multiple of 2^j.
    pub fn level(&self, j: usize) -> Option<RunRef> {
        self.levels.get(j).copied().or(self.first)
    }

    /// Levels worth walking: up to log2 of its runs.
    pub fn height(&self) -> usize {
        (32 - self.runs.leading_zeros()) as usize
    }
}

/// A number no other index of this process has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Instance(u64);

impl Default for Instance {
    fn default() -> Instance {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Instance(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

/// Where each stream head lies in a checkpoint's bytes (`Streams::walk_heads`).
pub struct Heads {
    pos: Vec<u32>,
    active_from: u64,
}

/// A checkpoint's streams made ready off the executor for the index that wrote them
/// (`Streams::prepare_rebase`, `Streams::rebase`).
pub struct Rebase {
    instance: Instance,
    at: u64,
    base: Base,
}

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
            None => self.base.find(name).map_or(0, |i| self.base.next(i)),
        };
        next.checked_sub(1)
    }

    /// Moves the checkpoint's entry of `name`, if it has one, into the map.
    fn touch(&mut self, name: &str) {
        if self.map.contains_key(name) {
            return;
        }
        if let Some(i) = self.base.find(name) {
            let e = self.base.entry(i);
            self.base.shadow(i);
            self.name_bytes += name.len();
            self.level_slots += e.levels.capacity();
            self.map.insert(name.into(), e);
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
        self.name_bytes -= names;
        self.recount();
    }

    fn recount(&mut self) {
        self.active_slots = self.map.values().map(|e| e.active.capacity()).sum();
        self.level_slots = self.map.values().map(|e| e.levels.capacity()).sum();
    }

    /// A segment `seg..next` is sealed: each stream's events in it (all below `next` in
    /// memory) become one run, encoded as the segment index file's run entries with the
    /// stream's skip pointers (`segidx::encode_run`), and leave memory. Returns (runs,
    /// their bytes) for the file. Events at or above `next` (staged for the next segment)
    /// stay. Visits every stream with events in memory.
    pub fn seal(&mut self, seg: u64, next: u64) -> (u32, Vec<u8>) {
        assert!(seg >= self.active_from && next >= seg);
        let (mut runs, mut out) = (0u32, Vec::new());
        for (name, e) in self.map.iter_mut() {
            let n = e.active.partition_point(|&o| o < next);
            if n == 0 {
                continue;
            }
            let first_version = e.next - e.active.len() as u64;
            let rels: Vec<u32> = e.active[..n].iter().map(|&o| (o - seg) as u32).collect();
            let pos = segidx::RUNS_AT + out.len();
            segidx::encode_run(&mut out, name, e.runs, first_version, &e.pointers(), &rels);
            e.push_run(RunRef { seg, pos: pos as u32, first_version });
            e.active.drain(..n);
            runs += 1;
        }
        self.active_from = next;
        self.recount();
        (runs, out)
    }

    /// Takes the runs of a sealed segment's index file (`seg`, from a start that trusts
    /// it), as `seal` would have made them: the runs must continue the streams' versions
    /// and run numbers (the segments are fed in order, after a checkpoint).
    pub fn feed_sealed(&mut self, seg: u64, runs: &[(u32, segidx::Run)]) -> Result<(), String> {
        for (pos, r) in runs {
            self.touch(&r.name);
            if !self.map.contains_key(&*r.name) {
                self.name_bytes += r.name.len();
                self.map.insert(r.name.clone(), Entry::default());
            }
            let e = self.map.get_mut(&*r.name).expect("inserted above");
            // A stream whose earlier runs retention deleted (known from the trim's index
            // snapshot, or not at all) takes the run's number and pointers as they are.
            let adopt = e.runs == 0 && e.first.is_none() && r.run > 0;
            if adopt {
                e.runs = r.run;
                e.levels = r.ptrs.clone();
            } else if e.first.is_none() && e.runs > 0 {
                // Adopted earlier, its first run unknown: the writer's pointers reach it
                // (one level above those held) once the runs count a power of two.
                let mine = e.pointers();
                if r.ptrs.len() == mine.len() + 1 && r.ptrs[..mine.len()] == mine[..] {
                    e.first = r.ptrs.last().copied();
                }
            }
            let in_line = e.active.is_empty() && e.runs == r.run && e.next == r.first_version;
            if !in_line || (!adopt && r.ptrs != e.pointers()) {
                return Err(format!(
                    "stream {:?}: run {} from version {} does not follow its {} run(s) ending before version {}",
                    r.name, r.run, r.first_version, e.runs, e.next
                ));
            }
            e.next = r.first_version + r.count as u64;
            e.push_run(RunRef { seg, pos: *pos, first_version: r.first_version });
        }
        self.recount();
        Ok(())
    }

    /// Where the events below the next segment end: the start of the last segment.
    pub fn set_active_from(&mut self, offset: u64) {
        self.active_from = offset;
    }

    /// What a read of `name` needs (None: no such stream).
    pub fn locate(&self, name: &str) -> Option<Located> {
        let at = |e: &Entry| Located {
            next: e.next,
            active: e.active.clone(),
            first: e.first,
            levels: e.levels.clone(),
            runs: e.runs,
        };
        match self.map.get(name) {
            Some(e) => Some(at(e)),
            None => self.base.find(name).map(|i| at(&self.base.entry(i))),
        }
    }

    /// Every stream and its next version (for the trim's index snapshot).
    pub fn next_versions(&self) -> impl Iterator<Item = (&str, u64)> {
        self.map.iter().map(|(n, e)| (&**n, e.next)).chain(self.base.live_versions())
    }

    /// A stream known from an index snapshot: `next` versions counted, none held.
    pub fn restore(&mut self, name: &str, next: u64) {
        if next == 0 {
            return;
        }
        self.touch(name);
        if self.map.insert(name.into(), Entry { next, ..Entry::default() }).is_none() {
            self.name_bytes += name.len();
        }
    }

    /// The index as it stood at the last segment's start (`active_from`), for a
    /// checkpoint: every stream with an event below it, its next version there, runs,
    /// first run and levels. Encodes the streams in the map; copies the bytes of the
    /// checkpoint's entries that nothing touched since the start loaded them.
    pub fn encode_heads(&self, out: &mut Vec<u8>) -> u64 {
        let mut n = 0u64;
        let count_at = out.len();
        out.extend_from_slice(&0u64.to_le_bytes());
        for (name, e) in &self.map {
            let next = e.next - e.active.len() as u64;
            if next == 0 {
                continue;
            }
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&next.to_le_bytes());
            out.extend_from_slice(&e.runs.to_le_bytes());
            let refs: Vec<RunRef> = e.first.into_iter().chain(e.levels.iter().copied()).collect();
            // The high bit: no first run (retention deleted it before this node saw it).
            let no_first = if e.first.is_none() && e.runs > 0 { NO_FIRST } else { 0 };
            out.push(refs.len() as u8 | no_first);
            for r in refs {
                out.extend_from_slice(&r.seg.to_le_bytes());
                out.extend_from_slice(&r.pos.to_le_bytes());
                out.extend_from_slice(&r.first_version.to_le_bytes());
            }
            n += 1;
        }
        n += self.base.copy_live(out);
        out[count_at..count_at + 8].copy_from_slice(&n.to_le_bytes());
        n
    }

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
        self.name_bytes = self.map.keys().map(|n| n.len()).sum();
        self.map.shrink_to_fit();
        self.recount();
        true
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
        v
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
        all.extend(self.base.live_entries().map(|(n, e)| (n.into(), e)));
        all
    }

    /// Two indexes hold the same streams, versions, runs and levels (a start's, checked
    /// against another way of building it).
    pub fn same_as(&self, other: &Streams) -> bool {
        self.all() == other.all()
    }
}

/// One stream of a checkpoint (`Streams::encode_heads`), checked: a name, a next version
/// above every pointer, no more pointers than its runs allow, none at or above
/// `active_from` (the checkpoint's offset). Without `keep` the pointers are only checked
/// (the entry's `first` and `levels` are left empty: nothing allocated).
fn decode_entry<'a>(r: &mut Reader<'a>, active_from: u64, keep: bool) -> Result<(&'a str, Entry), String> {
    let len = r.u8()? as usize;
    let name = std::str::from_utf8(r.take(len)?).map_err(|_| "a stream name is not UTF-8")?;
    let (next, runs) = (r.u64()?, r.u32()?);
    let flags = r.u8()?;
    let (nrefs, no_first) = ((flags & !NO_FIRST) as usize, flags & NO_FIRST != 0);
    let mut e = Entry { next, runs, ..Entry::default() };
    if keep {
        e.levels.reserve_exact(nrefs);
    }
    let mut fits = true;
    for k in 0..nrefs {
        let p = RunRef { seg: r.u64()?, pos: r.u32()?, first_version: r.u64()? };
        fits &= p.first_version < next && p.seg < active_from;
        match (keep, k == 0 && !no_first) {
            (false, _) => {}
            (true, true) => e.first = Some(p),
            (true, false) => e.levels.push(p),
        }
    }
    // Pointers: the first run (unless retention took it) and one per level up to
    // log2(runs); a stream with runs has at least one, one without runs none.
    let levels_ok = match (runs, nrefs) {
        (0, 0) => true,
        (0, _) | (_, 0) => false,
        (n, k) => k - 1 <= (32 - n.leading_zeros()) as usize,
    };
    if name.is_empty() || next == 0 || !levels_ok || !fits {
        return Err(format!(
            "stream {name:?}: runs {runs}, {nrefs} pointer(s) do not fit a checkpoint at {active_from}"
        ));
    }
    Ok((name, e))
}

/// The error for an event whose version is not its stream's next.
pub fn out_of_line(offset: u64, version: u64, name: &str, next: u64) -> String {
    format!("record {offset} is version {version} of stream {name:?}, whose next version here is {next}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_expectations() {
        let mut s = Streams::default();
        assert_eq!(s.check("a", Expect::Exact(0)), Err(None));
        assert_eq!(s.check("a", Expect::NoStream), Ok(0));
        s.note("a", 0, 10).unwrap();
        s.note("b", 0, 11).unwrap();
        s.note("a", 1, 12).unwrap();
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
        s.note("a", 0, 1).unwrap();
        s.note("b", 0, 2).unwrap();
        s.note("a", 1, 3).unwrap();
        s.forget_from(2);
        assert_eq!(s.current("a"), Some(0));
        assert_eq!(s.current("b"), None);
        assert_eq!((s.len(), s.events()), (1, 1));
        s.note("a", 1, 2).unwrap();
        s.note("b", 0, 3).unwrap();
        assert_eq!(s.current("a"), Some(1));
    }

    /// Sealing moves the events into run entries whose pointers are the skip list's, and
    /// feeding those entries to a fresh index (a start) gives the same index.
    #[test]
    fn seal_makes_runs_with_skip_pointers_that_a_start_takes_back() {
        let mut s = Streams::default();
        let mut files: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        let mut offset = 0u64;
        for seg_no in 0..40u64 {
            let seg = seg_no * 100;
            s.set_active_from(seg);
            offset = offset.max(seg);
            for _ in 0..3 {
                let next = s.current("a").map_or(0, |c| c + 1);
                s.note("a", next, offset).unwrap();
                offset += 1;
            }
            if seg_no % 3 == 0 {
                let next = s.current("b").map_or(0, |c| c + 1);
                s.note("b", next, offset).unwrap();
                offset += 1;
            }
            let (n, bytes) = s.seal(seg, seg + 100);
            files.push((seg, n, bytes));
        }
        let a = s.locate("a").unwrap();
        assert_eq!((a.next, a.runs, a.active.len()), (120, 40, 0));
        // levels[j] is the newest run whose number is a multiple of 2^j: 39, 38, 36, 32, 32, 32.
        let runs_of = |r: RunRef| r.seg / 100;
        let want = [39u64, 38, 36, 32, 32, 32];
        assert_eq!(a.levels.iter().map(|r| runs_of(*r)).collect::<Vec<_>>(), want);
        assert_eq!(a.first.map(runs_of), Some(0));
        // A start feeding the same entries ends with the same index.
        let mut t = Streams::default();
        for (seg, n, bytes) in &files {
            let ix = segidx::SegIdx {
                first_offset: *seg,
                next_offset: seg + 100,
                end_pos: 0,
                digest: 0,
                last_crc: 0,
                last_records_len: 0,
                epochs: vec![],
                batches: Default::default(),
                runs: *n,
                run_bytes: bytes.clone(),
                runs_len: bytes.len() as u32,
                runs_crc: crc32fast::hash(bytes),
            };
            t.feed_sealed(*seg, &ix.stream_runs().unwrap()).unwrap();
        }
        t.set_active_from(4000);
        s.set_active_from(4000);
        assert!(t.same_as(&s));
        // And a checkpoint of it decodes to the same.
        let mut out = Vec::new();
        assert_eq!(s.encode_heads(&mut out), 2);
        let back = Streams::decode_heads(&mut Reader(&out), 4000).unwrap();
        assert!(back.same_as(&s));
    }

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
