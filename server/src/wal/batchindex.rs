//! The in-memory index of one segment's batches: 8 bytes per batch (its first offset
//! relative to the segment's, and its first block), where a full `BatchLoc` took 24.
//! Batches lie back to back in a segment (each starts where the previous one's padding
//! ends, format.md §2), so a batch's record count and its span on disk follow from the
//! next entry, or for the last one from the segment's end, kept beside the entries.
//!
//! Bounds: one entry per batch and a batch takes at least one 4 KiB block, so a segment's
//! index is at most `segment_bytes / 4096 × 8` bytes (0.2 % of the log on disk); relative
//! offsets and block numbers fit in `u32` because a segment is at most
//! [`MAX_SEGMENT_BYTES`] (a record takes at least 24 bytes).

use std::io;

use super::batch::BLOCK;

/// The largest `--segment-bytes`: block numbers (< 2^32 × 4 KiB = 16 TiB) and record
/// offsets within a segment (≤ 64 GiB / 24 B per record < 2^32) fit in `u32`.
pub const MAX_SEGMENT_BYTES: u64 = 64 << 30;

/// Where one batch lives.
#[derive(Debug, Clone, Copy)]
pub struct BatchLoc {
    pub first_offset: u64,
    pub count: u32,
    /// Byte position of the batch header in its segment.
    pub pos: u64,
    pub records_len: u32,
    /// The batch's CRC field.
    pub crc: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    rel: u32,
    block: u32,
}

/// One batch as the index knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub first_offset: u64,
    pub count: u32,
    /// Byte position of the batch header in its segment.
    pub pos: u64,
    /// Bytes from `pos` to the next batch (header, records and padding).
    pub span: u64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SegmentIndex {
    entries: Vec<Entry>,
    /// Records in the segment (the offset after its last batch, relative).
    end_rel: u32,
    /// The block after the last batch.
    end_block: u32,
}

fn too_big(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("segment too large for the batch index: {what}"))
}

impl SegmentIndex {
    /// The index of a scanned segment (its batches are back to back: the scan follows
    /// them so; checked here).
    pub fn from_scan(first_offset: u64, batches: &[BatchLoc]) -> io::Result<SegmentIndex> {
        let mut ix = SegmentIndex::default();
        for b in batches {
            let rel = b.first_offset.checked_sub(first_offset).ok_or_else(|| too_big("offset below the segment"))?;
            let rel = u32::try_from(rel).map_err(|_| too_big("offset"))?;
            let block = u32::try_from(b.pos / BLOCK).map_err(|_| too_big("position"))?;
            let blocks = super::batch::span(b.records_len as usize) / BLOCK;
            if rel != ix.end_rel || block != ix.end_block || b.pos % BLOCK != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("batch at offset {} (byte {}) does not follow the one before it", b.first_offset, b.pos),
                ));
            }
            ix.push(rel, block, b.count, blocks as u32);
        }
        Ok(ix)
    }

    /// Appends the batch that starts at the segment's end: `count` records from the
    /// relative offset `rel`, `blocks` blocks from `block`.
    pub fn push(&mut self, rel: u32, block: u32, count: u32, blocks: u32) {
        assert!(rel == self.end_rel && block == self.end_block, "batches are appended back to back");
        assert!(count > 0 && blocks > 0);
        self.entries.push(Entry { rel, block });
        self.end_rel = rel.checked_add(count).expect("MAX_SEGMENT_BYTES bounds the records of a segment");
        self.end_block = block.checked_add(blocks).expect("MAX_SEGMENT_BYTES bounds the blocks of a segment");
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// (relative offset, first block) of each batch, in order.
    pub fn entries(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.entries.iter().map(|e| (e.rel, e.block))
    }

    /// The index of a segment holding `records` records in `end_block` blocks, from its
    /// batches' (relative offset, first block): checked to start at 0, grow, and stay
    /// inside (a segment index file's batches, `segidx`).
    pub fn from_entries(entries: &[(u32, u32)], records: u64, end_block: u64) -> Result<SegmentIndex, String> {
        let end_rel = u32::try_from(records).map_err(|_| format!("{records} records: too many for a segment"))?;
        let end_block = u32::try_from(end_block).map_err(|_| format!("block {end_block}: past any segment"))?;
        let starts = entries.first().is_none_or(|e| *e == (0, 0));
        let grows = entries.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1);
        let inside = entries.last().is_none_or(|l| l.0 < end_rel && l.1 < end_block);
        let empty_ok = !entries.is_empty() || (end_rel == 0 && end_block == 0);
        if !(starts && grows && inside && empty_ok) {
            return Err(format!("batch entries do not describe {records} records in {end_block} blocks"));
        }
        let entries: Vec<Entry> = entries.iter().map(|&(rel, block)| Entry { rel, block }).collect();
        Ok(SegmentIndex { entries, end_rel, end_block })
    }

    /// Records in the segment, and the block after its last batch.
    pub fn end(&self) -> (u32, u32) {
        (self.end_rel, self.end_block)
    }

    /// The batch holding relative offset `rel` of a segment starting at `first`, and its
    /// index among the segment's batches.
    pub fn locate(&self, first: u64, rel: u64) -> Option<(Loc, usize)> {
        let rel = u32::try_from(rel).ok()?;
        let bi = self.entries.partition_point(|e| e.rel <= rel).checked_sub(1)?;
        let l = self.get(first, bi);
        (rel < self.end_rel_of(bi)).then_some((l, bi))
    }

    fn end_rel_of(&self, bi: usize) -> u32 {
        self.entries.get(bi + 1).map(|n| n.rel).unwrap_or(self.end_rel)
    }

    /// Batch `bi` (which must exist) of a segment starting at `first`.
    pub fn get(&self, first: u64, bi: usize) -> Loc {
        let e = self.entries[bi];
        let end_block = self.entries.get(bi + 1).map(|n| n.block).unwrap_or(self.end_block);
        Loc {
            first_offset: first + e.rel as u64,
            count: self.end_rel_of(bi) - e.rel,
            pos: e.block as u64 * BLOCK,
            span: (end_block - e.block) as u64 * BLOCK,
        }
    }

    /// Keeps the first `bi` batches.
    pub fn truncate(&mut self, bi: usize) {
        if let Some(e) = self.entries.get(bi).copied() {
            self.entries.truncate(bi);
            self.end_rel = e.rel;
            self.end_block = e.block;
        }
    }

    /// Gives back the growth room of a segment that takes no more batches.
    pub fn seal(&mut self) {
        self.entries.shrink_to_fit();
    }

    /// Bytes this index holds (its allocation).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_bytes_per_batch_and_locate_finds_every_offset() {
        assert_eq!(std::mem::size_of::<Entry>(), 8);
        let mut ix = SegmentIndex::default();
        // Batches of 1..=5 records taking 1..=3 blocks, back to back, from offset 1000.
        let (mut rel, mut block) = (0u32, 0u32);
        let mut want = Vec::new();
        for i in 0..200u32 {
            let (count, blocks) = (1 + i % 5, 1 + i % 3);
            ix.push(rel, block, count, blocks);
            want.push(Loc {
                first_offset: 1000 + rel as u64,
                count,
                pos: block as u64 * BLOCK,
                span: blocks as u64 * BLOCK,
            });
            rel += count;
            block += blocks;
        }
        assert_eq!(ix.len(), 200);
        for (bi, w) in want.iter().enumerate() {
            for o in w.first_offset..w.first_offset + w.count as u64 {
                assert_eq!(ix.locate(1000, o - 1000), Some((*w, bi)), "offset {o}");
            }
        }
        assert_eq!(ix.locate(1000, rel as u64), None, "past the end");
        ix.truncate(150);
        assert_eq!(ix.len(), 150);
        assert_eq!(ix.locate(1000, want[150].first_offset - 1000), None);
        assert_eq!(ix.get(1000, 149), want[149]);
        // The next batch goes where the cut one was.
        ix.push((want[150].first_offset - 1000) as u32, (want[150].pos / BLOCK) as u32, 7, 2);
        assert_eq!(ix.get(1000, 150).count, 7);
        ix.seal();
        assert!(ix.heap_bytes() <= 151 * 8);
    }

    #[test]
    fn a_scan_whose_batches_do_not_follow_each_other_is_refused() {
        let seg = |batches: Vec<BatchLoc>| batches;
        let b = |first_offset, count, pos, records_len| BatchLoc { first_offset, count, pos, records_len, crc: 0 };
        let ok = SegmentIndex::from_scan(10, &seg(vec![b(10, 2, 0, 100), b(12, 1, 4096, 5000), b(13, 1, 3 * 4096, 1)]));
        let ix = ok.unwrap();
        assert_eq!(ix.get(10, 1), Loc { first_offset: 12, count: 1, pos: 4096, span: 2 * 4096 });
        assert_eq!(ix.get(10, 2).span, 4096);
        assert!(SegmentIndex::from_scan(10, &seg(vec![b(10, 2, 0, 100), b(13, 1, 4096, 1)])).is_err(), "offset gap");
        assert!(SegmentIndex::from_scan(10, &seg(vec![b(10, 2, 0, 100), b(12, 1, 8192, 1)])).is_err(), "block gap");
        assert!(SegmentIndex::from_scan(10, &seg(vec![b(11, 1, 0, 1)])).is_err(), "not at the segment's start");
    }
}
