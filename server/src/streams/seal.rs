//! Sealing: when a segment is sealed each stream's events in it become one run of the
//! segment's index file and leave memory; a start takes those runs back
//! ([`Streams::feed_sealed`]) from the index files it trusts.

use super::entry::Entry;
use super::Streams;
use crate::wal::segidx::{self, RunRef};

impl Streams {
    /// A segment `seg..next` is sealed: each stream's events in it (all below `next` in
    /// memory) become one run, encoded as the segment index file's run entries with the
    /// stream's skip pointers (`segidx::encode_run`), and leave memory. Returns (runs,
    /// their bytes) for the file. Events at or above `next` (staged for the next segment)
    /// stay. Visits every stream with events in memory.
    pub fn seal(&mut self, seg: u64, next: u64) -> (u32, Vec<u8>) {
        assert!(
            seg >= self.active_from && next >= seg,
            "streams: sealing segment {seg}..{next} with the last segment from {}",
            self.active_from
        );
        let (mut runs, mut out) = (0u32, Vec::new());
        for (name, e) in self.map.iter_mut() {
            let n = e.active.partition_point(|&o| o < next);
            if n == 0 {
                continue;
            }
            // Offsets relative to the segment are u32 in the index file.
            assert!(
                e.active[0] >= seg && e.active[n - 1] - seg <= u64::from(u32::MAX),
                "stream {name:?}: events {}..={} outside the sealed segment {seg}..{next}",
                e.active[0],
                e.active[n - 1]
            );
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
            debug_assert_eq!(e.runs, r.run + 1, "stream {:?}: run numbers contiguous", r.name);
        }
        self.recount();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(s.reloaded().same_as(&s) && s.reloaded().len() == 2);
    }
}
