//! The check of one sealed segment, sans I/O: fed the segment's bytes in order, it walks
//! its batches (each judged by `verdict.rs`), compares them with the segment's index file
//! and checks the zeros after the last batch, collecting [`Damage`].

use super::report::Damage;
use super::verdict::{self, Place, Verdict};
use crate::wal::batch::{BATCH_HEADER_LEN, BLOCK};
use crate::wal::segidx::{Digest, SegIdx};

/// Damaged spots itemised per segment; beyond it the rest of the segment is one report.
const MAX_FINDINGS: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading batches.
    Batches,
    /// After the last batch: zeros up to the file's end.
    Tail,
    /// Nothing more to check.
    Done,
}

/// The check of one sealed segment, fed its bytes in order from byte 0 (no I/O).
pub struct SegCheck {
    first: u64,
    /// The next segment's first offset: where this one's records must end.
    next: u64,
    /// Its index file, when there is one that names this segment and the next.
    idx: Option<SegIdx>,
    /// Bytes from file position `buf_at` on (never before `pos`).
    buf: Vec<u8>,
    buf_at: u64,
    /// Where the next batch (or, in the tail, the next unchecked byte) starts.
    pos: u64,
    expected: u64,
    /// Batches checked (and passed over after damage).
    bi: usize,
    digest: Digest,
    /// The digest and last batch are compared with the index only when every batch was whole.
    whole: bool,
    last: Option<(u32, u32)>,
    phase: Phase,
    found: Vec<Damage>,
}

impl SegCheck {
    /// The check of the segment starting at offset `first`, followed by one starting at
    /// `next`, with its index file if it has one.
    pub fn new(first: u64, next: u64, idx: Option<SegIdx>) -> SegCheck {
        assert!(first <= next, "scrub: segment {first} followed by one at {next}: offsets must ascend");
        let mut c = SegCheck {
            first,
            next,
            idx: None,
            buf: Vec::new(),
            buf_at: 0,
            pos: 0,
            expected: first,
            bi: 0,
            digest: Digest::default(),
            whole: true,
            last: None,
            phase: Phase::Batches,
            found: Vec::new(),
        };
        match idx {
            Some(ix) if ix.first_offset != first || ix.next_offset != next => c.found.push(Damage {
                pos: 0,
                offsets: None,
                what: format!(
                    "its index file says offsets {}..{}, the segments' names {first}..{next}",
                    ix.first_offset, ix.next_offset
                ),
            }),
            ix => c.idx = ix,
        }
        c
    }

    /// Whether the rest of the file need not be read.
    pub fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The next bytes of the segment.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.phase == Phase::Done {
            return;
        }
        self.drop_consumed();
        self.buf.extend_from_slice(bytes);
        self.run(false);
        debug_assert!(self.found.len() <= MAX_FINDINGS, "scrub: {} findings itemised", self.found.len());
    }

    /// The file ended after the bytes fed: what was found.
    pub fn finish(mut self) -> Vec<Damage> {
        self.run(true);
        assert!(self.phase == Phase::Done, "scrub: the file's end left the check in phase {:?}", self.phase);
        assert!(self.found.len() <= MAX_FINDINGS, "scrub: {} findings itemised", self.found.len());
        self.found
    }

    /// A read at `pos` failed: the rest of the segment cannot be checked.
    pub fn read_failed(&mut self, pos: u64, e: &std::io::Error) {
        let offsets = match self.phase {
            Phase::Batches => Some(self.covering(pos)),
            _ => None,
        };
        self.damage(pos, offsets, format!("read error: {e}"));
        self.phase = Phase::Done;
    }

    fn run(&mut self, eof: bool) {
        loop {
            let progressed = match self.phase {
                Phase::Batches => self.step_batch(eof),
                Phase::Tail => self.step_tail(eof),
                Phase::Done => false,
            };
            if !progressed {
                break;
            }
        }
        if self.phase == Phase::Done {
            self.buf = Vec::new();
        }
    }

    /// Drops the bytes before `pos` (once per piece fed: a batch at a time would move
    /// the rest of the buffer for every 4 KiB batch).
    fn drop_consumed(&mut self) {
        if self.pos > self.buf_at {
            let n = ((self.pos - self.buf_at) as usize).min(self.buf.len());
            self.buf.drain(..n);
            self.buf_at += n as u64;
        }
        debug_assert!(self.buf_at <= self.pos, "scrub: bytes at {} dropped past {}", self.buf_at, self.pos);
    }

    /// The bytes from `pos` on that have been fed.
    fn here(&self) -> &[u8] {
        assert!(self.buf_at <= self.pos, "scrub: the check at byte {} lost bytes from {}", self.pos, self.buf_at);
        let skip = (self.pos - self.buf_at) as usize;
        self.buf.get(skip..).unwrap_or_default()
    }

    fn damage(&mut self, pos: u64, offsets: Option<(u64, u64)>, what: String) {
        assert!(self.found.len() < MAX_FINDINGS, "scrub: damage reported after the last finding");
        debug_assert!(offsets.is_none_or(|(a, b)| a <= b), "scrub: damage at offsets {offsets:?}");
        if self.found.len() + 1 >= MAX_FINDINGS {
            self.found.push(Damage {
                pos,
                offsets: Some((offsets.map_or(self.expected, |o| o.0), self.next)),
                what: format!("{what}; and more damage: the rest of the segment is not checked this pass"),
            });
            self.phase = Phase::Done;
            return;
        }
        self.found.push(Damage { pos, offsets, what });
    }

    /// The offsets of the batch the index places at or before byte `pos` (without an
    /// index: from the next expected offset to the segment's end).
    fn covering(&self, pos: u64) -> (u64, u64) {
        debug_assert!(self.expected <= self.next, "scrub: the log continues at {} past {}", self.expected, self.next);
        let Some(ix) = &self.idx else { return (self.expected, self.next) };
        let i = (0..ix.batches.len()).rev().find(|&i| ix.batches.get(self.first, i).pos <= pos);
        match i {
            Some(i) => {
                let l = ix.batches.get(self.first, i);
                (l.first_offset, l.first_offset + l.count as u64)
            }
            None => (self.expected, self.next),
        }
    }

    /// Checks the batch at `pos` once its bytes are in; false when more are needed.
    fn step_batch(&mut self, eof: bool) -> bool {
        let end = match &self.idx {
            Some(ix) => self.bi == ix.batches.len(),
            None => self.expected == self.next,
        };
        if end {
            self.end_of_batches();
            return true;
        }
        let pos = self.pos;
        let at = Place {
            pos,
            first: self.first,
            expected: self.expected,
            next: self.next,
            bi: self.bi,
            idx: self.idx.as_ref(),
        };
        match verdict::judge(self.here(), eof, &at) {
            Verdict::More => return false,
            Verdict::Whole { count, span, crc, records_len } => {
                assert!(
                    span > 0 && self.expected + count <= self.next,
                    "scrub: a whole batch of {count} records in {span} bytes at {pos} past offset {}",
                    self.next
                );
                let skip = (self.pos - self.buf_at) as usize + BATCH_HEADER_LEN;
                self.digest.update(&self.buf[skip..skip + records_len as usize]);
                self.last = Some((crc, records_len));
                self.expected += count;
                self.pos += span;
                self.bi += 1;
            }
            Verdict::Cut(what) => {
                // The rest of the segment is missing.
                let from = self.covering(pos).0;
                self.damage(pos, Some((from, self.next)), what);
                self.phase = Phase::Done;
            }
            Verdict::Bad(what) => {
                self.whole = false;
                let offsets = self.covering(pos);
                self.damage(pos, Some(offsets), what);
                self.skip_batch();
            }
        }
        true
    }

    /// After a damaged batch: on to the next batch the index knows of; without an index
    /// nothing after it can be placed.
    fn skip_batch(&mut self) {
        match &self.idx {
            Some(ix) if self.phase == Phase::Batches && self.bi + 1 < ix.batches.len() => {
                self.bi += 1;
                let l = ix.batches.get(self.first, self.bi);
                // The index file's batches ascend (checked when it is read): no going back.
                assert!(
                    l.pos > self.pos && l.first_offset >= self.expected,
                    "scrub: index batch {} at byte {} offset {} after byte {} offset {}",
                    self.bi,
                    l.pos,
                    l.first_offset,
                    self.pos,
                    self.expected
                );
                self.pos = l.pos;
                self.expected = l.first_offset;
            }
            Some(ix) if self.phase == Phase::Batches => {
                self.bi = ix.batches.len();
                self.pos = ix.end_pos;
                self.expected = self.next;
            }
            _ => self.phase = Phase::Done,
        }
    }

    /// Every batch is read: what the index says of them as a whole, then the tail.
    fn end_of_batches(&mut self) {
        assert!(self.phase == Phase::Batches, "scrub: the batches ended twice");
        let (pos, first, next) = (self.pos, self.first, self.next);
        let mut wrong = Vec::new();
        if let Some(ix) = self.idx.as_ref().filter(|_| self.whole) {
            if pos != ix.end_pos {
                wrong.push(format!("its batches end at byte {pos}, its index file says {}", ix.end_pos));
            }
            if self.digest.value() != ix.digest {
                wrong.push(format!(
                    "the digest of its records is {:016x}, its index file says {:016x}",
                    self.digest.value(),
                    ix.digest
                ));
            }
            if self.last.is_some_and(|l| l != (ix.last_crc, ix.last_records_len)) {
                wrong.push("its last batch is not the one its index file names".to_string());
            }
        }
        for w in wrong {
            self.damage(0, Some((first, next)), w);
        }
        if self.phase == Phase::Batches {
            self.phase = Phase::Tail;
        }
    }

    /// Zeros after the last batch, as the boot scan requires of a full segment.
    fn step_tail(&mut self, eof: bool) -> bool {
        debug_assert!(self.phase == Phase::Tail, "scrub: the tail checked in phase {:?}", self.phase);
        let a = self.here();
        if let Some(i) = a.iter().position(|b| *b != 0) {
            let at = self.pos + i as u64;
            let block = at / BLOCK * BLOCK;
            let end = self.pos;
            self.damage(
                block,
                None,
                format!("non-zero bytes at byte {at}, after the segment's last batch (which ends at byte {end})"),
            );
            self.phase = Phase::Done;
            return false;
        }
        self.pos += a.len() as u64;
        if eof {
            self.phase = Phase::Done;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrub::testdata::{check, segment};

    #[test]
    fn a_whole_segment_passes_with_and_without_its_index_in_any_pieces() {
        let (seg, _, ix) = segment(1000, 20, 3);
        for step in [1, 77, 4096, 5000, 1 << 20] {
            assert_eq!(check(&seg, 1000, 1060, Some(ix.clone()), step), vec![], "step {step}");
            assert_eq!(check(&seg, 1000, 1060, None, step), vec![], "step {step}");
        }
    }

    #[test]
    fn a_flipped_record_byte_names_its_batch_and_the_batches_after_it_are_still_checked() {
        let (mut seg, at, ix) = segment(1000, 20, 3);
        seg[at[7] as usize + 32 + 24 + 5] ^= 0x10; // a payload byte of offset 1021
        seg[at[12] as usize + 32 + 124 + 125 + 24 + 3] ^= 0x01; // a payload byte of 1038
        let found = check(&seg, 1000, 1060, Some(ix), 4096);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].pos, found[0].offsets), (at[7], Some((1021, 1024))));
        assert!(found[0].what.contains("batch CRC mismatch; CRC mismatch in record 1021"), "{}", found[0].what);
        assert_eq!((found[1].pos, found[1].offsets), (at[12], Some((1036, 1039))));
        assert!(found[1].what.contains("CRC mismatch in record 1038"), "{}", found[1].what);
        // Without the index nothing after the first damage can be placed.
        let found = check(&seg, 1000, 1060, None, 4096);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].pos, found[0].offsets), (at[7], Some((1021, 1060))));
    }

    #[test]
    fn what_the_index_says_is_checked_and_so_is_the_tail() {
        let (seg, at, ix) = segment(0, 10, 2);
        let mut wrong = ix.clone();
        wrong.digest ^= 1;
        let found = check(&seg, 0, 20, Some(wrong), 4096);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].what.contains("digest") && found[0].offsets == Some((0, 20)), "{found:?}");
        let found = check(&seg, 0, 21, Some(ix.clone()), 4096);
        assert!(found[0].what.contains("index file says offsets 0..20"), "{found:?}");
        // Without an index: the records end where the next segment begins.
        let found = check(&seg, 0, 21, None, 4096);
        assert!(found[0].what.contains("no batch header"), "{found:?}");
        assert_eq!(found[0].offsets, Some((20, 21)));
        let found = check(&seg, 0, 19, None, 4096);
        assert!(found[0].what.contains("past the next segment"), "{found:?}");
        // A non-zero byte after the last batch; a file cut inside a batch.
        let end = ix.end_pos as usize;
        let mut s = seg.clone();
        s[end + 5000] = 7;
        let found = check(&s, 0, 20, Some(ix.clone()), 4096);
        assert_eq!(found, vec![Damage { pos: (end + 4096) as u64, offsets: None, what: found[0].what.clone() }]);
        let cut = &seg[..at[9] as usize + 100];
        let found = check(cut, 0, 20, Some(ix.clone()), 4096);
        assert_eq!((found[0].pos, found[0].offsets), (at[9], Some((18, 20))), "{found:?}");
        assert!(found[0].what.contains("ends at byte"), "{found:?}");
    }

    #[test]
    fn damage_everywhere_is_itemised_up_to_a_bound_then_reported_as_one() {
        let (mut seg, at, ix) = segment(0, 40, 1);
        seg[at[2] as usize..at[39] as usize + 4096].fill(0);
        let found = check(&seg, 0, 40, Some(ix), 1 << 20);
        assert_eq!(found.len(), MAX_FINDINGS, "{found:?}");
        assert_eq!((found[0].pos, found[0].offsets), (at[2], Some((2, 3))));
        let last = found.last().unwrap();
        assert_eq!((last.pos, last.offsets), (at[33], Some((33, 40))), "{last:?}");
        assert!(last.what.contains("and more damage"), "{last:?}");
    }

    #[test]
    fn a_read_error_ends_the_check_of_the_segment() {
        let (seg, at, ix) = segment(0, 10, 2);
        let mut c = SegCheck::new(0, 20, Some(ix));
        c.feed(&seg[..at[3] as usize]);
        c.read_failed(at[3], &std::io::Error::other("Input/output error"));
        assert!(c.done());
        let found = c.finish();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].pos, found[0].offsets), (at[3], Some((6, 8))));
    }
}
