//! Idempotent appends: what each producer last wrote to one shard.
//!
//! An `Append2` may carry (producer id, sequence). Per producer the shard remembers the
//! next sequence it expects and the positions of the last `WINDOW` sequences written. A
//! producer's first append must be sequence 0; every later one the next sequence. A
//! sequence already written is answered with its original position (nothing new is
//! written); one beyond the next is refused (`SequenceGap`), as is any sequence but 0 from
//! a producer the shard does not know (`UnknownProducer`); a written sequence older than
//! the window is `StaleSequence`. Every refusal writes nothing, so a client that retries
//! an append whose outcome it does not know never stores it twice.
//!
//! The table is derived from the log alone: every node builds it by feeding each record
//! it holds, in offset order, to [`Producers::note`] — at start-up from the boot scan, on
//! a follower as replicated batches arrive, on a leader as appends are given offsets. So
//! leader and follower hold the same table, and it survives crashes and failover.
//! Offsets that are handed out again (staged appends dropped before a follower accepted
//! the leader's epoch; a follower's log cut by the handshake) are taken back with
//! [`Producers::forget_from`].
//!
//! Bounds: at most `max` producers per shard. A new producer beyond it evicts the one
//! whose last append is oldest (lowest offset) — deterministic, so both nodes evict the
//! same one. An evicted producer is unknown again: its next append (sequence > 0) is
//! refused with `UnknownProducer`, never written twice. Memory ≈ `ENTRY_BYTES` + 8 bytes
//! per remembered position, at most `max × (ENTRY_BYTES + 8 × WINDOW)`.

use std::collections::{BTreeSet, HashMap, VecDeque};

use corelog_client::codec::ErrorCode;
use corelog_client::record::ProducerSeq;

/// Positions remembered per producer: a retry may be up to this many sequences behind
/// the producer's newest. The Rust client keeps at most this many appends in flight per
/// producer.
pub const WINDOW: usize = 64;
/// Default bound on producers per shard (`--max-producers`).
pub const DEFAULT_MAX_PRODUCERS: usize = 16_384;
/// Approximate bytes per producer besides its positions: the entry, its hash slot and
/// its place in the age index.
pub const ENTRY_BYTES: usize = 120;

/// What to do with an idempotent append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The next sequence: write it.
    Fresh,
    /// Written before, at this offset: answer with it, write nothing.
    Duplicate(u64),
    /// A known producer skipped ahead: nothing written.
    Gap { expected: u64 },
    /// No state for this producer and the sequence is not 0: nothing written.
    Unknown,
    /// Written before, but older than the window: nothing written.
    Stale { next: u64 },
}

/// The error for a verdict that refuses the append (not `Fresh` or `Duplicate`).
pub fn refusal(p: ProducerSeq, v: Verdict) -> (ErrorCode, String) {
    let who = format!("producer {:#018x} sequence {}", p.id, p.seq);
    match v {
        Verdict::Gap { expected } => (
            ErrorCode::SequenceGap,
            format!("{who}: this shard expects sequence {expected} next (an earlier one is missing); nothing written"),
        ),
        Verdict::Unknown => (
            ErrorCode::UnknownProducer,
            format!("{who}: this shard holds no state for the producer (a producer starts at sequence 0; state is evicted after --max-producers newer producers); nothing written"),
        ),
        Verdict::Stale { next } => (
            ErrorCode::StaleSequence,
            format!("{who}: already written, more than {WINDOW} sequences before the next ({next}); its position is no longer remembered; nothing new written"),
        ),
        Verdict::Fresh | Verdict::Duplicate(_) => unreachable!("{v:?} is not a refusal"),
    }
}

/// One producer's state as saved in an index snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub id: u64,
    pub next_seq: u64,
    pub last_offset: u64,
    /// Offsets of sequences `next_seq - offsets.len() .. next_seq`.
    pub offsets: Vec<u64>,
}

struct Entry {
    /// The sequence expected next (one above the newest written).
    next_seq: u64,
    /// Offsets of sequences `next_seq - offsets.len() .. next_seq`.
    offsets: VecDeque<u64>,
    /// Offset of the newest append (its key in `by_age`).
    last_offset: u64,
}

pub struct Producers {
    map: HashMap<u64, Entry>,
    /// (last offset, producer): the eviction order.
    by_age: BTreeSet<(u64, u64)>,
    max: usize,
    positions: usize,
}

impl Producers {
    pub fn new(max: usize) -> Producers {
        assert!(max > 0, "at least one producer must fit");
        Producers { map: HashMap::new(), by_age: BTreeSet::new(), max, positions: 0 }
    }

    pub fn check(&self, p: ProducerSeq) -> Verdict {
        let Some(e) = self.map.get(&p.id) else {
            return if p.seq == 0 { Verdict::Fresh } else { Verdict::Unknown };
        };
        if p.seq == e.next_seq {
            return Verdict::Fresh;
        }
        if p.seq > e.next_seq {
            return Verdict::Gap { expected: e.next_seq };
        }
        let back = (e.next_seq - p.seq) as usize;
        if back <= e.offsets.len() {
            Verdict::Duplicate(e.offsets[e.offsets.len() - back])
        } else {
            Verdict::Stale { next: e.next_seq }
        }
    }

    /// Records that `p` was written at `offset` (offsets only grow between calls, except
    /// after `forget_from`). A sequence that does not follow the producer's last one —
    /// possible only where this node's table lacks what the writer's had — starts the
    /// producer's state afresh from it.
    pub fn note(&mut self, p: ProducerSeq, offset: u64) {
        if !self.map.contains_key(&p.id) && self.map.len() >= self.max {
            self.evict_oldest();
        }
        let e = self.map.entry(p.id).or_insert_with(|| Entry {
            next_seq: p.seq,
            offsets: VecDeque::new(),
            last_offset: offset,
        });
        if p.seq != e.next_seq {
            self.positions -= e.offsets.len();
            e.offsets.clear();
            e.next_seq = p.seq;
        }
        self.by_age.remove(&(e.last_offset, p.id));
        e.offsets.push_back(offset);
        self.positions += 1;
        if e.offsets.len() > WINDOW {
            e.offsets.pop_front();
            self.positions -= 1;
        }
        e.next_seq = p.seq + 1;
        e.last_offset = offset;
        self.by_age.insert((offset, p.id));
    }

    fn evict_oldest(&mut self) {
        let Some(&(off, id)) = self.by_age.iter().next() else { return };
        self.by_age.remove(&(off, id));
        let e = self.map.remove(&id).expect("age index and map agree");
        self.positions -= e.offsets.len();
    }

    /// Offsets from `from` on were handed out again: forget every append there. A
    /// producer left with no position keeps its expected sequence (what it wrote before
    /// is still written) unless it expects 0 again, which is the same as unknown.
    pub fn forget_from(&mut self, from: u64) {
        let mut emptied = Vec::new();
        for (id, e) in self.map.iter_mut() {
            if e.last_offset < from {
                continue;
            }
            self.by_age.remove(&(e.last_offset, *id));
            while e.offsets.back().is_some_and(|&o| o >= from) {
                e.offsets.pop_back();
                e.next_seq -= 1;
                self.positions -= 1;
            }
            // Below `from` (the true offset is unknown when no position is left).
            e.last_offset = e.offsets.back().copied().unwrap_or(from.saturating_sub(1));
            if e.next_seq == 0 {
                emptied.push(*id);
            } else {
                self.by_age.insert((e.last_offset, *id));
            }
        }
        for id in emptied {
            let e = self.map.remove(&id).expect("listed above");
            self.positions -= e.offsets.len();
        }
    }

    /// Every producer's state, oldest first (for the index snapshot).
    pub fn saved(&self) -> Vec<Saved> {
        self.by_age
            .iter()
            .map(|&(last_offset, id)| {
                let e = &self.map[&id];
                Saved { id, next_seq: e.next_seq, last_offset, offsets: e.offsets.iter().copied().collect() }
            })
            .collect()
    }

    /// Feeds the producer extensions of verified records, in offset order.
    pub fn note_run(&mut self, records: &[u8]) {
        let mut at = 0;
        while at < records.len() {
            let (offset, ext, n) = corelog_client::record::peek(&records[at..]).expect("records were verified");
            if let Some(p) = ext.producer {
                self.note(p, offset);
            }
            at += n;
        }
    }

    /// A table holding the same producers and windows.
    pub fn copy(&self) -> Producers {
        let mut t = Producers::new(self.max);
        for s in self.saved() {
            t.restore(s).expect("a table's own saved state");
        }
        t
    }

    /// Takes back a producer's state from an index snapshot (a restart after a trim).
    pub fn restore(&mut self, s: Saved) -> Result<(), String> {
        if s.offsets.len() > WINDOW || s.offsets.len() as u64 > s.next_seq || self.map.contains_key(&s.id) {
            return Err(format!("producer {:#018x}: bad saved state", s.id));
        }
        if self.map.len() >= self.max {
            self.evict_oldest();
        }
        self.positions += s.offsets.len();
        self.by_age.insert((s.last_offset, s.id));
        self.map.insert(s.id, Entry { next_seq: s.next_seq, offsets: s.offsets.into(), last_offset: s.last_offset });
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The bound on producers (`--max-producers`).
    pub fn max(&self) -> usize {
        self.max
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Approximate memory held (see the module docs).
    pub fn bytes(&self) -> usize {
        self.map.len() * ENTRY_BYTES + self.positions * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ps(id: u64, seq: u64) -> ProducerSeq {
        ProducerSeq { id, seq }
    }

    #[test]
    fn sequences_duplicates_gaps() {
        let mut t = Producers::new(10);
        assert_eq!(t.check(ps(1, 1)), Verdict::Unknown);
        assert_eq!(t.check(ps(1, 0)), Verdict::Fresh);
        t.note(ps(1, 0), 100);
        t.note(ps(1, 1), 105);
        assert_eq!(t.check(ps(1, 2)), Verdict::Fresh);
        assert_eq!(t.check(ps(1, 1)), Verdict::Duplicate(105));
        assert_eq!(t.check(ps(1, 0)), Verdict::Duplicate(100));
        assert_eq!(t.check(ps(1, 9)), Verdict::Gap { expected: 2 });
        for s in 2..(WINDOW as u64 + 10) {
            t.note(ps(1, s), 200 + s);
        }
        let next = WINDOW as u64 + 10;
        assert_eq!(t.check(ps(1, next - WINDOW as u64)), Verdict::Duplicate(200 + next - WINDOW as u64));
        assert_eq!(t.check(ps(1, next - WINDOW as u64 - 1)), Verdict::Stale { next });
        assert_eq!(t.bytes(), ENTRY_BYTES + 8 * WINDOW);
    }

    #[test]
    fn eviction_takes_the_oldest_and_is_deterministic() {
        let mut a = Producers::new(3);
        for (i, id) in [10u64, 20, 30].iter().enumerate() {
            a.note(ps(*id, 0), i as u64);
        }
        a.note(ps(10, 1), 3); // 20 is now the oldest
        a.note(ps(40, 0), 4);
        assert_eq!(a.len(), 3);
        assert_eq!(a.check(ps(20, 1)), Verdict::Unknown);
        assert_eq!(a.check(ps(10, 2)), Verdict::Fresh);
        assert_eq!(a.check(ps(30, 0)), Verdict::Duplicate(2));
    }

    #[test]
    fn forget_from_takes_back_handed_out_offsets() {
        let mut t = Producers::new(10);
        t.note(ps(1, 0), 0);
        t.note(ps(1, 1), 1);
        t.note(ps(2, 0), 2);
        t.note(ps(1, 2), 3);
        t.forget_from(2);
        assert_eq!(t.check(ps(1, 2)), Verdict::Fresh);
        assert_eq!(t.check(ps(1, 1)), Verdict::Duplicate(1));
        assert_eq!(t.check(ps(2, 0)), Verdict::Fresh);
        assert_eq!(t.len(), 1);
        assert_eq!(t.bytes(), ENTRY_BYTES + 16);
        // A producer whose window is all forgotten still knows what it wrote before.
        let mut t = Producers::new(10);
        for s in 0..(WINDOW as u64 + 5) {
            t.note(ps(7, s), s);
        }
        t.forget_from(5);
        assert_eq!(t.check(ps(7, 5)), Verdict::Fresh);
        assert_eq!(t.check(ps(7, 4)), Verdict::Stale { next: 5 });
    }

    #[test]
    fn a_sequence_out_of_line_restarts_the_producer() {
        let mut t = Producers::new(10);
        t.note(ps(1, 5), 0);
        assert_eq!(t.check(ps(1, 6)), Verdict::Fresh);
        assert_eq!(t.check(ps(1, 5)), Verdict::Duplicate(0));
        assert_eq!(t.check(ps(1, 4)), Verdict::Stale { next: 6 });
    }
}
