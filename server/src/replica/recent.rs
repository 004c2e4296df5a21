//! The leader's recent batches, kept in memory for the replication link: a follower that
//! is a little behind is served from here instead of the segments.
//!
//! Bounded by the heap the batches hold, not by their record bytes: a batch's buffer is
//! allocated ahead (4 KiB for the first staged batch, `MAX_BATCH_BYTES` behind it), so
//! at moderate load a batch of one 40-byte record holds a 4 KiB buffer, and a bound that
//! counted the 40 bytes would let 32 MiB of records pin ~3 GiB per shard. So a batch's
//! buffer is trimmed to fit when it wastes more than half ([`compact`]) and the ring
//! counts capacity plus per-entry overhead ([`Recent::footprint`]).

use std::collections::VecDeque;
use std::ops::Deref;
use std::rc::Rc;
use std::time::Instant;

/// A batch handed to the disk, kept for the replication link.
pub struct Recent {
    pub first_offset: u64,
    pub count: u32,
    pub epoch: u32,
    pub records: Rc<Vec<u8>>,
    /// When it was handed to the link (for `corelog_replication_rtt_seconds`).
    pub shipped: Instant,
}

/// Heap per entry besides the records: the entry in the ring, the `Rc` box (two counts
/// and the `Vec` header) and two allocator headers.
const ENTRY_OVERHEAD: usize = std::mem::size_of::<Recent>() + 2 * 8 + std::mem::size_of::<Vec<u8>>() + 2 * 16;

impl Recent {
    /// Bytes of heap this entry keeps alive.
    pub fn footprint(&self) -> usize {
        self.records.capacity() + ENTRY_OVERHEAD
    }
}

/// A batch buffer trimmed to its contents when more than half of it is unused (a
/// shrinking `realloc`, in place for small buffers); full batches are left alone.
pub fn compact(mut records: Vec<u8>) -> Vec<u8> {
    if records.capacity() > 2 * records.len() + 64 {
        records.shrink_to_fit();
    }
    records
}

/// Recent batches in offset order, at most `max` bytes of heap (the two newest are kept
/// whatever their size: the link may be sending them).
pub struct RecentRing {
    q: VecDeque<Recent>,
    held: usize,
    max: usize,
}

impl RecentRing {
    pub fn new(max: usize) -> RecentRing {
        RecentRing { q: VecDeque::new(), held: 0, max }
    }

    /// Keeps `r` (the newest), then drops the oldest while over the bound.
    pub fn push(&mut self, r: Recent) {
        debug_assert!(self.q.back().is_none_or(|b| b.first_offset + b.count as u64 <= r.first_offset));
        self.held += r.footprint();
        self.q.push_back(r);
        while self.held > self.max && self.q.len() > 2 {
            let old = self.q.pop_front().expect("len > 2");
            self.held -= old.footprint();
        }
    }

    pub fn clear(&mut self) {
        self.q.clear();
        self.held = 0;
    }

    /// Heap bytes held now.
    pub fn held(&self) -> usize {
        self.held
    }
}

impl Deref for RecentRing {
    type Target = VecDeque<Recent>;
    fn deref(&self) -> &VecDeque<Recent> {
        &self.q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(first_offset: u64, cap: usize, len: usize) -> Recent {
        let mut v = Vec::with_capacity(cap);
        v.resize(len, 7u8);
        Recent { first_offset, count: 1, epoch: 1, records: Rc::new(v), shipped: Instant::now() }
    }

    /// The bound holds for what the batches really pin: 10,000 one-record batches in
    /// 4 KiB buffers under a 1 MiB bound keep ≤ 1 MiB of capacity (counting record bytes,
    /// the ring kept all 10,000: 40 MB).
    #[test]
    fn the_ring_is_bounded_by_the_heap_it_holds() {
        let mut ring = RecentRing::new(1 << 20);
        for i in 0..10_000 {
            ring.push(batch(i, 4096, 50));
            let pinned: usize = ring.iter().map(|r| r.records.capacity()).sum();
            assert!(pinned <= 1 << 20, "{pinned} bytes pinned after {i} batches");
            assert_eq!(ring.held(), ring.iter().map(Recent::footprint).sum::<usize>());
        }
        assert!(ring.len() < (1 << 20) / 4096 + 1, "{} batches kept", ring.len());
        assert_eq!(ring.back().map(|r| r.first_offset), Some(9_999), "the newest is kept");
    }

    #[test]
    fn the_two_newest_stay_whatever_their_size() {
        let mut ring = RecentRing::new(1024);
        ring.push(batch(0, 4096, 4096));
        ring.push(batch(1, 4096, 4096));
        ring.push(batch(2, 4096, 4096));
        assert_eq!(ring.iter().map(|r| r.first_offset).collect::<Vec<_>>(), vec![1, 2]);
        ring.clear();
        assert_eq!((ring.len(), ring.held()), (0, 0));
    }

    #[test]
    fn compact_trims_mostly_empty_buffers_only() {
        let small = compact({
            let mut v = Vec::with_capacity(4096);
            v.extend_from_slice(&[1u8; 50]);
            v
        });
        assert_eq!(&small[..], &[1u8; 50][..]);
        assert!(small.capacity() < 4096 / 2, "capacity {}", small.capacity());
        let full = compact({
            let mut v = Vec::with_capacity(4096);
            v.extend_from_slice(&[2u8; 3000]);
            v
        });
        assert_eq!(full.capacity(), 4096, "a buffer three quarters full is left alone");
        assert_eq!(&full[..], &[2u8; 3000][..]);
    }
}
