//! At the end of a shard's log: a torn write (never acknowledged, safe to cut) or damage
//! to a batch that may have been acknowledged (never cut silently)?
//!
//! Why the bytes can tell: a shard writes one batch at a time (write, then fdatasync,
//! then the next), with Direct I/O, onto blocks that were never written since they were
//! preallocated or zeroed (format.md §2), and a device persists each 512-byte sector
//! whole or not at all. A write cut by a crash therefore leaves every sector of its batch
//! either exactly as written or all zero. So:
//! - the batch's first sector all zero: torn (an acknowledged batch always has its header);
//! - a sector that holds bytes but the wrong ones (a record failing its CRC with no zero
//!   sector under it, a header that is not one, counts or lengths that disagree with the
//!   records): that sector was written whole and changed afterwards — **damage**, and the
//!   batch may have been acknowledged;
//! - every record that fails its check overlaps an all-zero sector: torn.
//!
//! The one case this cannot tell apart: damage inside a record whose own payload holds a
//! 512-byte aligned run of zeros (a legitimate zero sector under it) reads as torn.

use std::path::PathBuf;

use corelog_client::record::{self, RECORD_HEADER_LEN};

use super::batch::{BATCH_HEADER_LEN, BATCH_MAGIC, BATCH_VERSION, MAX_BATCH_BYTES, MAX_BATCH_RECORDS};
use super::segread::{ReadFault, SegReader};

/// The unit a device persists atomically (the smallest logical block size in use).
pub const SECTOR: usize = 512;

/// A batch at the end of the log that is invalid although it was written whole.
#[derive(Debug, Clone)]
pub struct Damage {
    pub segment: PathBuf,
    /// Byte position of the damaged batch in its segment.
    pub pos: u64,
    /// The offset the damaged batch starts at (the end of the valid log).
    pub first_offset: u64,
    /// Its record count, where its header says so plausibly.
    pub count: Option<u32>,
    pub reason: String,
}

impl Damage {
    /// "offsets 120..=124" or "offsets from 120".
    pub fn offsets(&self) -> String {
        match self.count {
            Some(c) => format!("offsets {}..={}", self.first_offset, self.first_offset + c as u64 - 1),
            None => format!("offsets from {}", self.first_offset),
        }
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "damaged batch at the end of the log: segment {}, byte offset {}, {}: {}",
            self.segment.display(),
            self.pos,
            self.offsets(),
            self.reason
        )
    }
}

fn is_zero(b: &[u8]) -> bool {
    b.iter().all(|x| *x == 0)
}

/// Classifies the invalid bytes at `pos` (a block boundary) where the log should continue
/// with offset `expected`. `None`: a torn write.
pub fn classify(
    r: &mut SegReader,
    path: &std::path::Path,
    pos: u64,
    expected: u64,
) -> Result<Option<Damage>, ReadFault> {
    let b = r.get(pos, BATCH_HEADER_LEN + MAX_BATCH_BYTES)?;
    let damaged = |count: Option<u32>, reason: String| {
        Ok(Some(Damage { segment: path.to_path_buf(), pos, first_offset: expected, count, reason }))
    };
    if is_zero(&b[..SECTOR.min(b.len())]) {
        return Ok(None);
    }
    if b.len() < BATCH_HEADER_LEN {
        return damaged(None, format!("{} bytes at the end of the file, too short for a batch header", b.len()));
    }
    if b[0..4] != BATCH_MAGIC || b[4] != BATCH_VERSION {
        return damaged(None, "its first sector holds bytes but not a batch header (magic or version)".into());
    }
    let first = u64::from_le_bytes(b[8..16].try_into().unwrap());
    let count = u32::from_le_bytes(b[16..20].try_into().unwrap());
    let records_len = u32::from_le_bytes(b[20..24].try_into().unwrap()) as usize;
    if first != expected {
        return damaged(None, format!("its header says first offset {first}, the log continues at {expected}"));
    }
    if count == 0 || count > MAX_BATCH_RECORDS || records_len > MAX_BATCH_BYTES {
        return damaged(None, format!("its header says {count} records in {records_len} bytes, which no batch holds"));
    }
    let claimed = BATCH_HEADER_LEN + records_len;
    if claimed > b.len() {
        return damaged(
            Some(count),
            format!("its header says {records_len} bytes of records, past the end of the file"),
        );
    }
    let zero_under = |from: usize, to: usize| {
        let (from, to) = (from / SECTOR * SECTOR, to.min(claimed).max(from + 1));
        (from..to).step_by(SECTOR).any(|s| is_zero(&b[s..(s + SECTOR).min(b.len())]))
    };
    let mut at = BATCH_HEADER_LEN;
    for k in 0..count as u64 {
        if at >= claimed {
            return damaged(Some(count), format!("its header says {count} records, the records end after {k}"));
        }
        let want = expected + k;
        match record::decode(&b[at..]) {
            Ok((rec, n)) if rec.offset == want && at + n <= claimed => at += n,
            Ok((rec, _)) if rec.offset == want => {
                return damaged(Some(count), format!("record {want} is intact but runs past the header's length"))
            }
            res => {
                let len = b.get(at + 4..at + 8).map(|l| u32::from_le_bytes(l.try_into().unwrap()) as usize);
                let end = match len {
                    Some(l) if l <= record::MAX_BODY => at + RECORD_HEADER_LEN + l,
                    _ => at + RECORD_HEADER_LEN,
                };
                if zero_under(at, end) {
                    return Ok(None);
                }
                let why = match res {
                    Ok((rec, _)) => format!("offset {} where {want} belongs", rec.offset),
                    Err(e) => e.to_string(),
                };
                return damaged(
                    Some(count),
                    format!(
                        "record {want} at byte {} fails its check ({why}) and every sector under it was written",
                        pos + at as u64
                    ),
                );
            }
        }
    }
    if at != claimed {
        return damaged(Some(count), format!("the records end at byte {at} of the batch, its header says {claimed}"));
    }
    damaged(Some(count), "every record is intact but the batch header's CRC does not match".into())
}

#[cfg(test)]
mod tests {
    use super::super::batch::{encode_into, span, BatchHeader};
    use super::*;

    /// One segment file holding a valid batch of `n` records of `size` bytes at 0 and a
    /// second one at its end (the one under test), returned as (file bytes, its position).
    fn two_batches(n: u32, size: usize) -> (Vec<u8>, u64) {
        let mut out = Vec::new();
        for (first, fill) in [(0u64, 1u8), (n as u64, 2u8)] {
            let mut recs = Vec::new();
            for i in 0..n as u64 {
                record::encode(first + i, 3, &vec![fill.wrapping_add(i as u8) | 1; size], &mut recs);
            }
            let h = BatchHeader { first_offset: first, count: n, records_len: recs.len() as u32, epoch: 3 };
            let mut buf = vec![0u8; span(recs.len()) as usize];
            encode_into(&h, &recs, &mut buf);
            out.extend_from_slice(&buf);
        }
        let pos = out.len() as u64 / 2;
        out.resize(out.len() + 8192, 0);
        (out, pos)
    }

    fn run(bytes: &[u8], pos: u64, expected: u64) -> Option<Damage> {
        let dir = std::env::temp_dir().join(format!(
            "corelog-damage-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("0.log");
        std::fs::write(&path, bytes).unwrap();
        let got = classify(&mut SegReader::open(&path).unwrap(), &path, pos, expected).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        got
    }

    #[test]
    fn a_flipped_byte_anywhere_in_a_written_batch_is_damage() {
        let (good, pos) = two_batches(20, 300);
        let end = pos as usize + BATCH_HEADER_LEN + 20 * (RECORD_HEADER_LEN + 300);
        for at in [0, 5, 9, 17, 21, 29, 40, 700, 3000, end - pos as usize - 1] {
            let mut b = good.clone();
            b[pos as usize + at] ^= 0x10;
            let d = run(&b, pos, 20).unwrap_or_else(|| panic!("flip at +{at} read as torn"));
            assert_eq!((d.first_offset, d.pos), (20, pos));
        }
    }

    #[test]
    fn unwritten_sectors_are_a_torn_write() {
        let (good, pos) = two_batches(20, 300);
        let p = pos as usize;
        // Any subset of sectors lost, the header's first: torn.
        for lost in [vec![0usize], vec![2], vec![1, 5], vec![3, 4, 6, 7]] {
            let mut b = good.clone();
            for s in lost {
                b[p + s * SECTOR..p + (s + 1) * SECTOR].fill(0);
            }
            assert!(run(&b, pos, 20).is_none());
        }
        // A lost sector and, elsewhere, a flipped byte in a written one: damage.
        let mut b = good.clone();
        b[p + 6 * SECTOR..p + 7 * SECTOR].fill(0);
        b[p + 2 * SECTOR + 7] ^= 1;
        assert!(run(&b, pos, 20).is_some());
    }

    #[test]
    fn nothing_written_is_torn_and_a_wrong_header_is_damage() {
        let (good, pos) = two_batches(4, 100);
        let mut b = good.clone();
        b[pos as usize..].fill(0);
        b[pos as usize + 2 * SECTOR] = 9; // garbage after a zero header sector
        assert!(run(&b, pos, 4).is_none());
        let mut b = good.clone();
        b[pos as usize + 16] = 200; // count
        assert!(run(&b, pos, 4).is_some());
        let mut b = good;
        b[pos as usize + 21] ^= 0x01; // records_len + 256
        assert!(run(&b, pos, 4).is_some());
    }
}
