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
//! rebuilt by the boot scan, fed on a follower as batches arrive and on a leader as
//! appends are given offsets, rolled back where offsets are handed out again
//! ([`Streams::forget_from`]). Leader and follower hold the same index.
//!
//! Retention (`Streams::trim_below`) drops the offsets of deleted events: a stream
//! then starts at a base version (its first event still held); versions keep counting
//! from where they were. A stream whose every event was deleted keeps its name and next
//! version. The state at a trim point is saved in the index snapshot (`snapshot.rs`).
//!
//! Memory: per stream `STREAM_BYTES` + its name; per event held its offset (8 bytes, up
//! to 16 while a stream's vector has spare capacity). Reported by
//! `corelog_stream_index_bytes`.

use std::collections::HashMap;

use corelog_client::codec::Expect;

/// Approximate bytes per stream besides its name and offsets: the hash slot, the boxed
/// name's and the vector's headers, allocator overhead.
pub const STREAM_BYTES: usize = 96;

#[derive(Default)]
struct Entry {
    /// Version of the first event held (events below it were deleted by retention).
    base: u64,
    /// Offsets of the events held: version `base + i` is at index i.
    offsets: Vec<u64>,
}

impl Entry {
    fn next(&self) -> u64 {
        self.base + self.offsets.len() as u64
    }
}

#[derive(Default)]
pub struct Streams {
    map: HashMap<Box<str>, Entry>,
    /// Sum of the offset vectors' capacities.
    slots: usize,
    name_bytes: usize,
    events: usize,
}

impl Streams {
    /// The stream's current version (its last event's), `None` when it has none.
    pub fn current(&self, name: &str) -> Option<u64> {
        self.map.get(name).and_then(|e| e.next().checked_sub(1))
    }

    /// The stream's first version still held (0 unless retention deleted some).
    pub fn first_version(&self, name: &str) -> u64 {
        self.map.get(name).map_or(0, |e| e.base)
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

    /// Records that version `version` of `name` is at `offset`. Versions come in order:
    /// every node sees a stream's events in offset order, and an offset handed out again
    /// was taken back with `forget_from` first; a version out of line (a log that
    /// disagrees with itself) is an error and changes nothing.
    pub fn note(&mut self, name: &str, version: u64, offset: u64) -> Result<(), String> {
        let next = self.map.get(name).map_or(0, Entry::next);
        if version != next {
            return Err(out_of_line(offset, version, name, next));
        }
        let v = match self.map.get_mut(name) {
            Some(e) => &mut e.offsets,
            None => {
                self.name_bytes += name.len();
                &mut self.map.entry(name.into()).or_default().offsets
            }
        };
        assert!(v.last().is_none_or(|&l| l < offset), "stream {name:?}: offsets must grow");
        let cap = v.capacity();
        v.push(offset);
        self.slots += v.capacity() - cap;
        self.events += 1;
        Ok(())
    }

    /// Feeds a stream's events read from a segment index: versions `first_version..` at
    /// `offsets` (ascending, above every offset fed before). A stream met for the first
    /// time starts at `first_version` (its earlier events were deleted by retention);
    /// otherwise `first_version` must be its next version.
    pub fn feed_run(
        &mut self,
        name: &str,
        first_version: u64,
        offsets: impl Iterator<Item = u64>,
    ) -> Result<(), String> {
        if !self.map.contains_key(name) {
            self.name_bytes += name.len();
            self.map.insert(name.into(), Entry { base: first_version, offsets: Vec::new() });
        }
        let e = self.map.get_mut(name).expect("inserted above");
        if e.next() != first_version {
            return Err(format!(
                "stream {name:?}: a segment index starts it at version {first_version}, expected {}",
                e.next()
            ));
        }
        let cap = e.offsets.capacity();
        for o in offsets {
            if e.offsets.last().is_some_and(|&l| l >= o) {
                return Err(format!("stream {name:?}: offsets out of order at {o}"));
            }
            e.offsets.push(o);
            self.events += 1;
        }
        self.slots += e.offsets.capacity() - cap;
        Ok(())
    }

    /// Every stream's next version as it stood below `offset` (leaving out streams with
    /// no event there): a checkpoint's. Visits every stream.
    pub fn heads_at(&self, offset: u64) -> Vec<(Box<str>, u64)> {
        self.map
            .iter()
            .map(|(n, e)| (n.clone(), e.base + e.offsets.partition_point(|&o| o < offset) as u64))
            .filter(|(_, next)| *next > 0)
            .collect()
    }

    /// The events at offsets `first..next` (a segment's), one run per stream: what the
    /// segment's index file holds. Visits every stream.
    pub fn runs_between(&self, first: u64, next: u64) -> Vec<crate::wal::segidx::StreamRun> {
        let mut out = Vec::new();
        for (n, e) in &self.map {
            let lo = e.offsets.partition_point(|&o| o < first);
            let hi = e.offsets.partition_point(|&o| o < next);
            if lo < hi {
                out.push(crate::wal::segidx::StreamRun {
                    name: n.clone(),
                    first_version: e.base + lo as u64,
                    rels: e.offsets[lo..hi].iter().map(|&o| (o - first) as u32).collect(),
                });
            }
        }
        out
    }

    /// Offsets from `from` on were handed out again: forget every event there. Visits
    /// every stream (rare: a leader's staged appends dropped, a follower's log cut).
    /// Never below a trim point: what retention deleted was committed.
    pub fn forget_from(&mut self, from: u64) {
        let (mut dropped, mut names) = (0, 0);
        self.map.retain(|name, e| {
            let keep = e.offsets.partition_point(|&o| o < from);
            dropped += e.offsets.len() - keep;
            e.offsets.truncate(keep);
            let gone = e.next() == 0;
            if gone {
                names += name.len();
            }
            !gone
        });
        self.events -= dropped;
        self.name_bytes -= names;
        self.slots = self.map.values().map(|e| e.offsets.capacity()).sum();
    }

    /// Retention deleted every event below offset `first`: forget their offsets (their
    /// versions stay counted). Visits every stream (once per trim).
    pub fn trim_below(&mut self, first: u64) {
        let mut dropped = 0;
        for e in self.map.values_mut() {
            let n = e.offsets.partition_point(|&o| o < first);
            if n > 0 {
                e.offsets.drain(..n);
                e.base += n as u64;
                dropped += n;
                if e.offsets.len() < e.offsets.capacity() / 2 {
                    e.offsets.shrink_to_fit();
                }
            }
        }
        self.events -= dropped;
        self.slots = self.map.values().map(|e| e.offsets.capacity()).sum();
    }

    /// Every stream and its next version (for the index snapshot).
    pub fn next_versions(&self) -> impl Iterator<Item = (&str, u64)> {
        self.map.iter().map(|(n, e)| (&**n, e.next()))
    }

    /// A stream known from an index snapshot: no event held, `next` versions counted.
    pub fn restore(&mut self, name: &str, next: u64) {
        if next == 0 {
            return;
        }
        if self.map.insert(name.into(), Entry { base: next, offsets: Vec::new() }).is_none() {
            self.name_bytes += name.len();
        }
    }

    /// Offsets of `name`'s events from version `from`, below offset `end` (the committed
    /// end), at most `max`; and the number of its events below `end`.
    pub fn offsets(&self, name: &str, from: u64, end: u64, max: usize) -> (&[u64], u64) {
        let Some(e) = self.map.get(name) else { return (&[], 0) };
        let v = &e.offsets;
        let below = v.partition_point(|&o| o < end);
        let start = (from.saturating_sub(e.base).min(below as u64)) as usize;
        (&v[start..below.min(start + max)], e.base + below as u64)
    }

    /// The version of `name`'s event at `offset`, if it has one there.
    pub fn version_of(&self, name: &str, offset: u64) -> Option<u64> {
        let e = self.map.get(name)?;
        e.offsets.binary_search(&offset).ok().map(|i| e.base + i as u64)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn events(&self) -> usize {
        self.events
    }

    /// Approximate memory held (see the module docs).
    pub fn bytes(&self) -> usize {
        self.map.len() * STREAM_BYTES + self.name_bytes + self.slots * 8
    }
}

/// The error for an event whose version is not its stream's next.
pub fn out_of_line(offset: u64, version: u64, name: &str, next: u64) -> String {
    format!("record {offset} is version {version} of stream {name:?}, whose next version here is {next}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_expectations_and_reads() {
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
        assert_eq!(s.offsets("a", 0, 100, 10), (&[10u64, 12][..], 2));
        assert_eq!(s.offsets("a", 1, 100, 10), (&[12u64][..], 2));
        assert_eq!(s.offsets("a", 0, 12, 10), (&[10u64][..], 1), "not above the committed end");
        assert_eq!(s.offsets("a", 5, 100, 10), (&[][..], 2));
        assert_eq!(s.offsets("a", 0, 100, 1), (&[10u64][..], 2));
        assert_eq!(s.version_of("a", 12), Some(1));
        assert_eq!(s.version_of("a", 11), None);
        assert_eq!((s.len(), s.events()), (2, 3));
        assert!(s.bytes() >= 2 * STREAM_BYTES + 2 + 3 * 8);
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

    #[test]
    fn trimmed_streams_keep_counting_versions() {
        let mut s = Streams::default();
        for (v, o) in [(0, 1), (1, 5), (2, 9)] {
            s.note("a", v, o).unwrap();
        }
        s.note("b", 0, 2).unwrap();
        s.trim_below(6);
        assert_eq!((s.first_version("a"), s.current("a")), (2, Some(2)));
        assert_eq!((s.first_version("b"), s.current("b")), (1, Some(0)), "b: no event held, version kept");
        assert_eq!(s.offsets("a", 0, 100, 10), (&[9u64][..], 3));
        assert_eq!(s.offsets("a", 2, 100, 10), (&[9u64][..], 3));
        assert_eq!(s.version_of("a", 9), Some(2));
        assert_eq!(s.events(), 1);
        assert!(s.note("a", 2, 10).is_err());
        s.note("a", 3, 10).unwrap();
        s.note("b", 1, 11).unwrap();
        // A cut above the trim point keeps the bases; a stream with nothing held stays.
        s.forget_from(10);
        assert_eq!((s.current("a"), s.current("b")), (Some(2), Some(0)));
        let mut r = Streams::default();
        for (n, v) in s.next_versions() {
            r.restore(n, v);
        }
        assert_eq!((r.current("a"), r.first_version("a"), r.current("b")), (Some(2), 3, Some(0)));
        assert_eq!(r.check("a", Expect::Exact(2)), Ok(3));
        r.note("a", 3, 20).unwrap();
        assert_eq!(r.offsets("a", 0, 100, 10), (&[20u64][..], 4));
    }

    #[test]
    fn a_version_out_of_line_is_refused_and_changes_nothing() {
        let mut s = Streams::default();
        let e = s.note("a", 1, 0).unwrap_err();
        assert!(e.contains("record 0 is version 1 of stream \"a\", whose next version here is 0"), "{e}");
        assert_eq!((s.len(), s.events(), s.bytes()), (0, 0, 0));
    }
}
