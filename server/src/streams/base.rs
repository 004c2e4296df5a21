//! The stream heads a start loaded from a checkpoint, held as the checkpoint's own bytes.
//!
//! Decoding a million heads into hash-map entries (a boxed name and a vector of pointers
//! each) took about a microsecond per stream, every start. Instead the start checks each
//! entry where it lies (the same checks as a decode, nothing allocated per stream), keeps
//! the bytes, and builds an open-addressing table of entry numbers keyed by the name's
//! hash: 0.12–0.25 µs per stream on the 2-vCPU kind (where decoding took ≈ 1.3 µs), and
//! 16–32 bytes of table and 4 of position per stream beside the bytes themselves.
//!
//! The table never changes. A stream that the shard touches (an event, a sealed run) is
//! decoded once into the index's map, which shadows the entry here from then on
//! (`shadowed`); a checkpoint copies the bytes of the entries nobody shadowed as they are
//! and encodes the rest from the map.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use super::entry::{decode_entry, Entry};
use crate::le::Reader;

#[derive(Default)]
pub(super) struct Base {
    /// The buffer holding the entries as `Streams::encode_heads` wrote them (the whole
    /// checkpoint a start read: no copy of it is made).
    bytes: Vec<u8>,
    /// Entry `i` is `bytes[pos[i]..pos[i + 1]]`.
    pos: Vec<u32>,
    /// Open addressing, linear probing: the name's hash in the high 32 bits (compared
    /// before the name, which is elsewhere in memory), entry number + 1 in the low; 0 for
    /// an empty slot. A power of two at least twice the entries.
    slots: Vec<u64>,
    /// Bit `i`: entry `i` lives in the map now.
    shadowed: Vec<u64>,
    n_shadowed: usize,
    /// Keyed per process: clients name streams, so the probe sequence must not be theirs
    /// to choose.
    hasher: RandomState,
}

impl Base {
    /// Checks the `n` entries at the front of `r` as `decode_entry` does (decoding none)
    /// and takes them off: where each starts, counted from `origin` (the position of
    /// `r`'s front in the buffer `build` gets), and where the last ends.
    pub(super) fn walk(r: &mut Reader<'_>, n: u64, active_from: u64, origin: usize) -> Result<Vec<u32>, String> {
        let all = r.0;
        let n = usize::try_from(n).ok().filter(|&n| n <= all.len() / 15).ok_or("more streams than bytes")?;
        if u32::try_from(origin + all.len()).is_err() {
            return Err(format!("{} bytes of stream heads, more than a shard holds", all.len()));
        }
        let mut pos = Vec::with_capacity(n + 1);
        for _ in 0..n {
            pos.push((origin + all.len() - r.rest()) as u32);
            decode_entry(r, active_from, false)?;
        }
        pos.push((origin + all.len() - r.rest()) as u32);
        debug_assert!(pos.windows(2).all(|w| w[0] < w[1]), "stream heads: entries not back to back");
        Ok(pos)
    }

    /// The table over the entries `walk` found, in `bytes` (kept as they are: the buffer
    /// the checkpoint was read into). Refuses a name that comes twice.
    pub(super) fn build(bytes: Vec<u8>, pos: Vec<u32>) -> Result<Base, String> {
        assert!(
            pos.last().is_some_and(|&e| e as usize <= bytes.len()),
            "stream heads end past the {} bytes kept",
            bytes.len()
        );
        let n = pos.len() - 1;
        let mut b = Base {
            bytes,
            pos,
            slots: vec![0; (2 * n).next_power_of_two().max(2)],
            shadowed: vec![0; n.div_ceil(64)],
            n_shadowed: 0,
            hasher: RandomState::new(),
        };
        // Inserted in the order of their first slot (a counting sort on its top bits), so
        // the table is written front to back, not at random: each insert finds its slot
        // in cache, where a random one waited on memory for most of a start's time.
        let mask = b.slots.len() - 1;
        let shift = mask.count_ones().saturating_sub(12);
        let bucket = |h: u64| (h as usize & mask) >> shift;
        let hashes: Vec<u64> = (0..n).map(|i| b.hasher.hash_one(b.name_bytes(i))).collect();
        let mut next = vec![0usize; (mask >> shift) + 2];
        for &h in &hashes {
            next[bucket(h) + 1] += 1;
        }
        for k in 1..next.len() {
            next[k] += next[k - 1];
        }
        let mut order = vec![(0u64, 0u32); n];
        for (i, &h) in hashes.iter().enumerate() {
            order[next[bucket(h)]] = (h, i as u32);
            next[bucket(h)] += 1;
        }
        drop(hashes);
        for (h, i) in order {
            let (tag, i) = (h >> 32, i as usize);
            match b.slot_of(h, b.name_bytes(i)) {
                Ok(_) => return Err(format!("stream {:?} twice", b.name(i))),
                Err(s) => b.slots[s] = tag << 32 | (i as u64 + 1),
            }
        }
        Ok(b)
    }

    /// The slot holding the entry named `name` (hash `h`), or the empty slot where its
    /// probe sequence ends.
    fn slot_of(&self, h: u64, name: &[u8]) -> Result<usize, usize> {
        let (mask, tag) = (self.slots.len() - 1, h >> 32);
        let mut s = h as usize & mask;
        while self.slots[s] != 0 {
            if self.slots[s] >> 32 == tag && self.name_bytes(self.slot_entry(s)) == name {
                return Ok(s);
            }
            s = (s + 1) & mask;
        }
        Err(s)
    }

    fn slot_entry(&self, s: usize) -> usize {
        (self.slots[s] & u64::from(u32::MAX)) as usize - 1
    }

    fn entry_bytes(&self, i: usize) -> &[u8] {
        &self.bytes[self.pos[i] as usize..self.pos[i + 1] as usize]
    }

    fn name_bytes(&self, i: usize) -> &[u8] {
        let b = self.entry_bytes(i);
        &b[1..1 + b[0] as usize]
    }

    fn name(&self, i: usize) -> &str {
        std::str::from_utf8(self.name_bytes(i)).expect("checked at decode")
    }

    /// The entry of `name`, unless the map holds it.
    pub(super) fn find(&self, name: &str) -> Option<usize> {
        if self.pos.len() <= 1 {
            return None;
        }
        let s = self.slot_of(self.hasher.hash_one(name.as_bytes()), name.as_bytes()).ok()?;
        let i = self.slot_entry(s);
        (!self.is_shadowed(i)).then_some(i)
    }

    pub(super) fn entry(&self, i: usize) -> Entry {
        decode_entry(&mut Reader(self.entry_bytes(i)), u64::MAX, true).expect("checked at decode").1
    }

    /// The next version of entry `i`, read in place.
    pub(super) fn next(&self, i: usize) -> u64 {
        let b = self.entry_bytes(i);
        debug_assert!(b.len() >= 1 + b[0] as usize + 8, "stream head {i}: {} bytes", b.len());
        let at = 1 + b[0] as usize;
        u64::from_le_bytes(b[at..at + 8].try_into().expect("checked at decode"))
    }

    fn is_shadowed(&self, i: usize) -> bool {
        self.shadowed[i / 64] & (1 << (i % 64)) != 0
    }

    /// Entry `i` moved into the map.
    pub(super) fn shadow(&mut self, i: usize) {
        assert!(!self.is_shadowed(i), "stream head {i} shadowed twice");
        self.shadowed[i / 64] |= 1 << (i % 64);
        self.n_shadowed += 1;
    }

    /// Entries not in the map.
    pub(super) fn live(&self) -> usize {
        self.pos.len().saturating_sub(1) - self.n_shadowed
    }

    /// The numbers of those entries.
    fn live_ids(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.pos.len().saturating_sub(1)).filter(|&i| !self.is_shadowed(i))
    }

    /// Those entries' names and next versions.
    pub(super) fn live_versions(&self) -> impl Iterator<Item = (&str, u64)> {
        self.live_ids().map(|i| (self.name(i), self.next(i)))
    }

    /// Those entries decoded (for a comparison of whole indexes).
    pub(super) fn live_entries(&self) -> impl Iterator<Item = (&str, Entry)> {
        self.live_ids().map(|i| (self.name(i), self.entry(i)))
    }

    /// Appends the bytes of the entries not in the map, runs of them at a time; returns
    /// how many.
    pub(super) fn copy_live(&self, out: &mut Vec<u8>) -> u64 {
        let n = self.pos.len().saturating_sub(1);
        let (mut i, mut copied) = (0, 0);
        // (Entries are back to back: a run of them is one slice.)
        while i < n {
            if self.is_shadowed(i) {
                i += 1;
                continue;
            }
            let from = i;
            while i < n && !self.is_shadowed(i) {
                i += 1;
            }
            out.extend_from_slice(&self.bytes[self.pos[from] as usize..self.pos[i] as usize]);
            copied += i - from;
        }
        assert_eq!(copied, self.live(), "stream heads: the shadowed count disagrees with the bits");
        self.live() as u64
    }

    /// Memory held.
    pub(super) fn bytes_held(&self) -> usize {
        self.bytes.capacity() + 4 * self.pos.capacity() + 8 * self.slots.capacity() + 8 * self.shadowed.capacity()
    }
}
