//! Boot-time scan of one shard's segments (plain std I/O; also used by the offline
//! `corelog inspect`). Every batch CRC and every record CRC is verified, offsets must be
//! gap-free. The first position that does not hold the next valid batch is the end of
//! the log. Anything valid found *after* it means the middle of the log is damaged:
//! recovery refuses, naming shard, segment and byte offset. Non-zero bytes after the end
//! with nothing valid behind them are either a torn tail (a write cut by a crash, never
//! acknowledged: `repair` zeroes them) or a batch written whole and damaged afterwards,
//! which may have been acknowledged ([`damage`] tells them apart; `ShardScan::damage`).
//! Files are read with positioned reads ([`segread`]): a device error is an error naming
//! the file and byte, not a SIGBUS.

use std::path::{Path, PathBuf};

use corelog_client::record;

use super::batch::{self, BLOCK};
use super::damage::{self, Damage};
use super::digest::Digest;
use super::segread::{ReadFault, SegReader};

pub use super::batchindex::BatchLoc;

#[derive(Debug, Clone)]
pub struct SegmentInfo {
    pub path: PathBuf,
    pub first_offset: u64,
    pub len: u64,
    pub batches: Vec<BatchLoc>,
    /// Of the records of its valid batches (a sealed segment's index holds it).
    pub digest: Digest,
}

impl SegmentInfo {
    pub fn end_pos(&self) -> u64 {
        self.batches.last().map(|b| b.pos + batch::span(b.records_len as usize)).unwrap_or(0)
    }
}

/// A torn tail found by the scan.
#[derive(Debug, Clone)]
pub struct Torn {
    pub segment: PathBuf,
    /// Where the invalid bytes start (a block boundary).
    pub pos: u64,
    /// End of the last non-zero block after `pos` in that segment.
    pub dirty_end: u64,
    /// Later segment files holding no valid batch (removed by `repair`).
    pub empty_segments: Vec<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct ShardScan {
    pub shard: u16,
    pub segments: Vec<SegmentInfo>,
    pub next_offset: u64,
    pub records: u64,
    /// (epoch, first offset written under it), ascending, from the records themselves.
    pub epochs: Vec<(u32, u64)>,
    /// Bytes past the valid end to zero before writing (`repair`). With `damage` set
    /// they are not a torn write: see `damage`.
    pub torn: Option<Torn>,
    /// The invalid batch at the end was written whole and damaged afterwards: it may
    /// have been acknowledged ([`damage`] explains how this is told from a torn write).
    pub damage: Option<Damage>,
}

impl ShardScan {
    pub fn first_offset(&self) -> u64 {
        self.segments.first().map(|s| s.first_offset).unwrap_or(0)
    }
    pub fn last_epoch(&self) -> u32 {
        self.epochs.last().map(|e| e.0).unwrap_or(0)
    }
}

#[derive(Debug)]
pub enum ScanError {
    Io(String),
    Read(ReadFault),
    Corrupt { shard: u16, segment: PathBuf, pos: u64, reason: String },
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Io(e) => write!(f, "{e}"),
            ScanError::Read(e) => write!(f, "{e}"),
            ScanError::Corrupt { shard, segment, pos, reason } => write!(
                f,
                "corruption in the middle of the log: shard {shard}, segment {}, byte offset {pos}: {reason}",
                segment.display()
            ),
        }
    }
}

impl From<ReadFault> for ScanError {
    fn from(e: ReadFault) -> Self {
        ScanError::Read(e)
    }
}

pub fn segment_name(first_offset: u64) -> String {
    format!("{first_offset:020}.log")
}

pub fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, ScanError> {
    let rd = std::fs::read_dir(dir).map_err(|e| ScanError::Io(format!("read {}: {e}", dir.display())))?;
    let mut v = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| ScanError::Io(e.to_string()))?;
        let name = ent.file_name().to_string_lossy().to_string();
        if let Some(num) = name.strip_suffix(".log") {
            if let Ok(n) = num.parse::<u64>() {
                v.push((n, ent.path()));
            }
        }
    }
    v.sort();
    debug_assert!(v.is_sorted(), "segments listed out of order");
    Ok(v)
}

/// Scans the shard directory. Does not modify anything.
pub fn scan(shard: u16, dir: &Path) -> Result<ShardScan, ScanError> {
    scan_with(shard, dir, &mut |_| {})
}

/// `scan`, handing the records of every valid batch (verified, in offset order) to
/// `visit` as they are read: state derived from the log is rebuilt in the same pass.
pub fn scan_with(shard: u16, dir: &Path, visit: &mut dyn FnMut(&[u8])) -> Result<ShardScan, ScanError> {
    scan_files(shard, &list_segments(dir)?, visit)
}

/// The scan of `files` (a shard's segments from some point on, ascending): the log is
/// taken to start at the first one's offset. A start scans only the segments after the
/// last sealed one it trusts (`boot`).
pub fn scan_files(shard: u16, files: &[(u64, PathBuf)], visit: &mut dyn FnMut(&[u8])) -> Result<ShardScan, ScanError> {
    let mut out = ShardScan {
        shard,
        segments: Vec::new(),
        next_offset: 0,
        records: 0,
        epochs: Vec::new(),
        torn: None,
        damage: None,
    };
    if let Some((first, _)) = files.first() {
        out.next_offset = *first;
    }
    // (segment index in `files`, position) of the first invalid block, if any.
    let mut end: Option<(usize, u64)> = None;
    let mut stale_name = false;
    for (i, (first, path)) in files.iter().enumerate() {
        let mut r = SegReader::open(path).map_err(ScanError::Io)?;
        let len = r.file_len();
        let mut seg = SegmentInfo {
            path: path.clone(),
            first_offset: *first,
            len,
            batches: Vec::new(),
            digest: Digest::default(),
        };
        if *first != out.next_offset {
            // A segment must start where the previous one ended. An all-zero one is a
            // roll-over interrupted by a crash; anything else is damage.
            if !r.zero_from(0)? {
                return Err(ScanError::Corrupt {
                    shard,
                    segment: path.clone(),
                    pos: 0,
                    reason: format!("segment name says offset {first} but the log continues at {}", out.next_offset),
                });
            }
            end = Some((i, 0));
            stale_name = true;
            out.segments.push(seg);
            break;
        }
        if let Some(p) = scan_batches(shard, &mut r, &mut seg, &mut out, visit, i + 1 < files.len())? {
            end = Some((i, p));
            out.damage = damage::classify(&mut r, path, p, out.next_offset)?;
        }
        out.segments.push(seg);
        if end.is_some() {
            break;
        }
    }
    if let Some((i, pos)) = end {
        out.torn = check_tail(shard, files, i, pos)?;
        // Segments after the end hold nothing valid (checked above): not part of the log.
        out.segments.truncate(i + 1);
        if stale_name {
            // An all-zero segment whose name does not continue the log: remove it too.
            let stale = out.segments.pop().expect("segment i exists").path;
            let t = out.torn.get_or_insert(Torn {
                segment: stale.clone(),
                pos: 0,
                dirty_end: 0,
                empty_segments: Vec::new(),
            });
            t.empty_segments.insert(0, stale);
        }
    }
    check_scan(&out);
    Ok(out)
}

/// The scan's postconditions, from what it verified: its segments continue one another
/// gap-free, each batch starts where the one before ended, and the record count is the
/// span of offsets. Per batch, run once per scan.
fn check_scan(out: &ShardScan) {
    let mut next = out.first_offset();
    for seg in &out.segments {
        assert_eq!(
            seg.first_offset,
            next,
            "shard {}: segment {} does not continue the log",
            out.shard,
            seg.path.display()
        );
        for b in &seg.batches {
            assert_eq!(
                b.first_offset,
                next,
                "shard {}: batch at byte {} of {} leaves a gap",
                out.shard,
                b.pos,
                seg.path.display()
            );
            next += b.count as u64;
        }
        assert!(seg.end_pos().is_multiple_of(BLOCK), "shard {}: {} ends off a block", out.shard, seg.path.display());
    }
    assert_eq!(
        next, out.next_offset,
        "shard {}: the batches end at {next}, the scan at {}",
        out.shard, out.next_offset
    );
    assert_eq!(
        out.records,
        out.next_offset - out.first_offset(),
        "shard {}: {} records counted between offsets {} and {}",
        out.shard,
        out.records,
        out.first_offset(),
        out.next_offset
    );
    // Epoch changes are noted in offset order, inside the log.
    for w in out.epochs.windows(2) {
        assert!(w[0].1 < w[1].1, "shard {}: epoch changes noted out of offset order: {w:?}", out.shard);
    }
    if let Some(&(_, at)) = out.epochs.last() {
        assert!(at < out.next_offset, "shard {}: epoch change at {at}, past the end {}", out.shard, out.next_offset);
    }
}

/// Reads one segment's batches from byte 0 while each continues the log (`out`'s next
/// offset): each verified, its records handed to `visit` and noted in `seg` and `out`.
/// Returns where the valid log ends in this segment, or None where it ends cleanly (the
/// rest is zeros, and when `more` another segment continues the log).
fn scan_batches(
    shard: u16,
    r: &mut SegReader,
    seg: &mut SegmentInfo,
    out: &mut ShardScan,
    visit: &mut dyn FnMut(&[u8]),
    more: bool,
) -> Result<Option<u64>, ScanError> {
    let len = seg.len;
    let mut pos = 0u64;
    assert!(seg.batches.is_empty(), "segment {} scanned twice", seg.path.display());
    while pos + batch::BATCH_HEADER_LEN as u64 <= len {
        let at = r.get(pos, batch::BATCH_HEADER_LEN + batch::MAX_BATCH_BYTES)?;
        let Some(h) = batch::decode(at).filter(|h| h.first_offset == out.next_offset) else {
            if more && r.zero_from(pos)? {
                return Ok(None); // the clean end of a full segment
            }
            return Ok(Some(pos));
        };
        // A decoded header's records lie within the bytes read (`batch::header`).
        debug_assert!(at.len() >= batch::BATCH_HEADER_LEN + h.records_len as usize);
        let recs = &at[batch::BATCH_HEADER_LEN..batch::BATCH_HEADER_LEN + h.records_len as usize];
        let last_epoch = record::verify_run(recs, h.first_offset, h.count).map_err(|e| ScanError::Corrupt {
            shard,
            segment: seg.path.clone(),
            pos,
            reason: format!("batch CRC valid but records invalid: {e}"),
        })?;
        note_epochs(&mut out.epochs, recs, h.count, last_epoch);
        visit(recs);
        seg.digest.update(recs);
        seg.batches.push(BatchLoc {
            first_offset: h.first_offset,
            count: h.count,
            pos,
            records_len: h.records_len,
            crc: batch::stored_crc(at),
        });
        out.next_offset += h.count as u64;
        out.records += h.count as u64;
        let next = pos + batch::span(h.records_len as usize);
        assert!(next > pos && next.is_multiple_of(BLOCK), "a batch spans whole blocks after its start");
        pos = next;
    }
    // Bytes too short to hold a batch header (e.g. a file cut inside the last one).
    if pos < len && !r.zero_from(pos)? {
        return Ok(Some(pos));
    }
    Ok(None)
}

/// Records the epochs seen in a run of records (cheap: only when the epoch changes).
fn note_epochs(epochs: &mut Vec<(u32, u64)>, recs: &[u8], count: u32, last_epoch: u32) {
    if count == 0 || epochs.last().map(|e| e.0) == Some(last_epoch) && first_epoch(recs) == last_epoch {
        return;
    }
    for r in record::Records::new(recs).flatten() {
        if epochs.last().map(|e| e.0) != Some(r.epoch) {
            debug_assert!(epochs.last().is_none_or(|e| e.1 < r.offset), "epoch change at {} noted twice", r.offset);
            epochs.push((r.epoch, r.offset));
        }
    }
}

fn first_epoch(recs: &[u8]) -> u32 {
    u32::from_le_bytes(recs[16..20].try_into().unwrap())
}

fn is_zero(b: &[u8]) -> bool {
    b.iter().all(|x| *x == 0)
}

/// After the end at (segment i, pos): any valid batch later means mid-log corruption.
/// Otherwise returns the dirty range to zero, if any.
fn check_tail(shard: u16, files: &[(u64, PathBuf)], i: usize, pos: u64) -> Result<Option<Torn>, ScanError> {
    assert!(i < files.len() && pos.is_multiple_of(BLOCK), "the end of the log at segment {i}, byte {pos}");
    let mut torn = Torn { segment: files[i].1.clone(), pos, dirty_end: pos, empty_segments: Vec::new() };
    for (j, (_, path)) in files.iter().enumerate().skip(i) {
        let mut r = SegReader::open(path).map_err(ScanError::Io)?;
        let mut p = r.next_data(if j == i { pos } else { 0 });
        let mut nonzero = false;
        while p < r.file_len() {
            let block = r.get(p, BLOCK as usize)?;
            let n = block.len() as u64;
            if !is_zero(block) {
                nonzero = true;
                if batch::decode(r.get(p, batch::BATCH_HEADER_LEN + batch::MAX_BATCH_BYTES)?).is_some() {
                    return Err(ScanError::Corrupt {
                        shard,
                        segment: files[i].1.clone(),
                        pos,
                        reason: format!(
                            "invalid data here, but a valid batch follows in {} at byte {p}",
                            path.display()
                        ),
                    });
                }
                if j == i {
                    torn.dirty_end = p + n;
                }
            }
            p = r.next_data(p + BLOCK);
        }
        if j > i && !nonzero {
            torn.empty_segments.push(path.clone());
        } else if j > i {
            return Err(ScanError::Corrupt {
                shard,
                segment: path.clone(),
                pos: 0,
                reason: "segment after the end of the log holds non-zero bytes but no valid batch".into(),
            });
        }
    }
    assert!(torn.dirty_end >= torn.pos, "torn range {}..{} runs backwards", torn.pos, torn.dirty_end);
    let dirty = torn.dirty_end > torn.pos || !torn.empty_segments.is_empty();
    Ok(dirty.then_some(torn))
}

/// Makes a scanned shard writable again: zeroes the torn bytes, removes empty trailing
/// segments, and syncs. Returns a line describing what it did.
pub fn repair(t: &Torn) -> Result<String, String> {
    use std::os::unix::fs::FileExt;
    // Only the scan makes a `Torn`: it starts on a block boundary, never past its end.
    assert!(
        t.pos.is_multiple_of(BLOCK) && t.dirty_end >= t.pos,
        "torn range {}..{} of {}",
        t.pos,
        t.dirty_end,
        t.segment.display()
    );
    if t.dirty_end > t.pos {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&t.segment)
            .map_err(|e| format!("open {}: {e}", t.segment.display()))?;
        let zeros = vec![0u8; (t.dirty_end - t.pos) as usize];
        f.write_all_at(&zeros, t.pos).map_err(|e| format!("zero torn tail of {}: {e}", t.segment.display()))?;
        f.sync_data().map_err(|e| format!("fdatasync {}: {e}", t.segment.display()))?;
    }
    for p in &t.empty_segments {
        std::fs::remove_file(p).map_err(|e| format!("remove {}: {e}", p.display()))?;
    }
    if let Some(dir) = t.segment.parent() {
        sync_dir(dir)?;
    }
    Ok(format!(
        "truncated torn tail: segment {} bytes {}..{} zeroed, {} empty segment(s) removed",
        t.segment.display(),
        t.pos,
        t.dirty_end,
        t.empty_segments.len()
    ))
}

pub fn sync_dir(dir: &Path) -> Result<(), String> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("fsync directory {}: {e}", dir.display()))
}
