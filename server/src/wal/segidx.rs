//! The index file of a sealed segment: `<first_offset:020>.idx` beside its `.log`.
//!
//! A segment is sealed when the writer moves on to the next one; it never changes again
//! (only retention deletes it, and a follower's cut may zero its end). Its index file says
//! what a boot scan of it would find — where each batch lies, the offsets and epochs it
//! holds, a digest of its record bytes, the stream events in it — so that a start trusts
//! it instead of reading every byte. A start trusts an index only when its checksum holds
//! and it agrees with the segment on disk: its name, the next segment's name (the log
//! continues where the index says it ends) and the last batch it names, read back and
//! checked. Anything else is rebuilt by scanning that one segment: never trusted blindly,
//! never skipped. Old bytes a start no longer reads are re-read by the scrubber.
//!
//! Layout (little-endian; format.md §9):
//!
//! ```text
//! magic "CLSIX001" · first_offset u64 · next_offset u64 · end_pos u64 · digest u64
//! last batch: crc u32 · records_len u32
//! runs u32 · runs_len u32 · runs_crc u32                        (60 bytes so far)
//! run entries: runs_len bytes, runs × run entry (below)         (from byte 60)
//! epochs: n u16 · n × { epoch u32 · first_offset u64 }
//! batches: n u32 · n × { rel u32 · block u32 }
//! crc u32 (CRC-32/IEEE of every byte before it but the run entries)
//! run entry: name_len u8 · name · run u32 · first_version u64 · count u32
//!            · ptrs u8 · ptrs × { segment u64 · pos u32 · first_version u64 } · count × rel u32
//! ```
//!
//! `runs_crc` is the CRC-32/IEEE of the run entries alone: a start reads the 60 bytes of
//! header and what follows the runs (epochs, batches: the part it needs), a stream read
//! reads one run entry; neither reads the runs of every stream.
//!
//! A run entry holds one stream's events in the segment (versions `first_version..`, at
//! `first_offset + rel`), its number among the stream's runs (0 for its first segment), and
//! skip pointers to earlier runs of the stream (`ptrs[j]`: the newest earlier run whose
//! number is a multiple of 2^j, as segment and byte position of its entry), so that the
//! run holding any version is found in a few reads (`streams/`). Runs start at byte 48,
//! whatever the segment's batches and epochs, so a run's position is known when the
//! segment is sealed, before its file is written.
//!
//! Written as `<name>.tmp`, fsynced, renamed, the directory fsynced (`write`).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::batch::{self, BLOCK};
use super::batchindex::SegmentIndex;
use super::recovery::sync_dir;
use crate::le::Reader;

const MAGIC: &[u8; 8] = b"CLSIX001";

pub fn file_name(first: u64) -> String {
    format!("{first:020}.idx")
}

/// Where a stream's run of events in a sealed segment is described: the segment (its
/// first offset), the byte position of the run's entry in the segment's index file, and
/// the version of the run's first event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunRef {
    pub seg: u64,
    pub pos: u32,
    pub first_version: u64,
}

/// The fixed part of an index file before its stream runs.
pub const RUNS_AT: usize = 60;
/// Bytes of a run entry before its name, pointers and offsets... and of each pointer.
const PTR_LEN: usize = 20;

/// One run entry as read (`decode_run`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub name: Box<str>,
    pub run: u32,
    pub first_version: u64,
    pub count: u32,
    pub ptrs: Vec<RunRef>,
    /// Offsets of the events, relative to the segment's first offset.
    pub rels: Vec<u32>,
}

/// Appends a run entry to `out`.
pub fn encode_run(out: &mut Vec<u8>, name: &str, run: u32, first_version: u64, ptrs: &[RunRef], rels: &[u32]) {
    assert!(!name.is_empty() && name.len() <= 255 && !rels.is_empty() && ptrs.len() <= u8::MAX as usize);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&run.to_le_bytes());
    out.extend_from_slice(&first_version.to_le_bytes());
    out.extend_from_slice(&(rels.len() as u32).to_le_bytes());
    out.push(ptrs.len() as u8);
    for p in ptrs {
        out.extend_from_slice(&p.seg.to_le_bytes());
        out.extend_from_slice(&p.pos.to_le_bytes());
        out.extend_from_slice(&p.first_version.to_le_bytes());
    }
    for r in rels {
        out.extend_from_slice(&r.to_le_bytes());
    }
}

/// Decodes the run entry at the front of `b`: the run, and the entry's length. The
/// offsets are read only up to `max_rels` (all of them with `u32::MAX`; the entry's length
/// is then still whole).
pub fn decode_run(b: &[u8], max_rels: u32) -> Result<(Run, usize), String> {
    let mut r = Reader(b);
    let n = r.u8()? as usize;
    let name = std::str::from_utf8(r.take(n)?).map_err(|_| "a stream name is not UTF-8")?;
    let (run, first_version, count) = (r.u32()?, r.u64()?, r.u32()?);
    let np = r.u8()? as usize;
    let mut ptrs = Vec::with_capacity(np);
    for _ in 0..np {
        ptrs.push(RunRef { seg: r.u64()?, pos: r.u32()?, first_version: r.u64()? });
    }
    if name.is_empty() || count == 0 || ptrs.iter().any(|p| p.first_version >= first_version) {
        return Err(format!("run of stream {name:?}: empty, or pointers not to earlier versions"));
    }
    let head = 1 + n + 16 + 1 + np * PTR_LEN;
    let take = count.min(max_rels) as usize;
    let rels = (0..take).map(|_| r.u32()).collect::<Result<Vec<u32>, _>>()?;
    if !rels.windows(2).all(|w| w[0] < w[1]) {
        return Err(format!("run of stream {name:?}: offsets out of order"));
    }
    Ok((Run { name: name.into(), run, first_version, count, ptrs, rels }, head + 4 * count as usize))
}

/// The bytes of a run entry up to its offsets (to read the first `len` bytes of it and
/// know whether they hold the pointers): what `decode_run` needs before any offset.
pub fn run_head_len(name_len: usize, ptrs: usize) -> usize {
    1 + name_len + 16 + 1 + ptrs * PTR_LEN
}

/// Everything a sealed segment's index says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegIdx {
    pub first_offset: u64,
    /// The offset after its last record: the next segment's first.
    pub next_offset: u64,
    /// The byte after its last batch (its padding included).
    pub end_pos: u64,
    /// `Digest` of its record bytes in offset order.
    pub digest: u64,
    /// The CRC field and records length of its last batch (none in an empty segment).
    pub last_crc: u32,
    pub last_records_len: u32,
    /// (epoch, first offset written under it) for each epoch its records carry, the
    /// first entry at `first_offset`.
    pub epochs: Vec<(u32, u64)>,
    pub batches: SegmentIndex,
    /// The stream runs: their count and their entries back to back (from byte `RUNS_AT`
    /// of the file on). `run_bytes` is empty when only the rest was read (`read_meta`);
    /// `runs_len` and `runs_crc` say what they are then.
    pub runs: u32,
    pub run_bytes: Vec<u8>,
    pub runs_len: u32,
    pub runs_crc: u32,
}

pub use super::digest::Digest;

/// The entries of an epoch history (ascending `(epoch, first offset)`) that describe the
/// offsets `first..next`: the epoch in force at `first` (from `first`), then each change.
pub fn epochs_within(all: &[(u32, u64)], first: u64, next: u64) -> Vec<(u32, u64)> {
    if next <= first {
        return Vec::new();
    }
    let from = all.partition_point(|(_, o)| *o <= first).saturating_sub(1);
    let mut v: Vec<(u32, u64)> = all[from..].iter().copied().take_while(|(_, o)| *o < next).collect();
    if let Some(e) = v.first_mut() {
        e.1 = first;
    }
    v
}

impl SegIdx {
    /// The index of a segment a scan found whole (its batches back to back from byte 0,
    /// the next segment starting at `next_offset`), given the scan's epoch history and
    /// the segment's stream runs.
    pub fn from_scan(
        seg: &super::recovery::SegmentInfo,
        next_offset: u64,
        epochs: &[(u32, u64)],
        (runs, run_bytes): (u32, Vec<u8>),
    ) -> Result<SegIdx, String> {
        let batches = SegmentIndex::from_scan(seg.first_offset, &seg.batches).map_err(|e| e.to_string())?;
        let (last_crc, last_records_len) = seg.batches.last().map_or((0, 0), |b| (b.crc, b.records_len));
        let ix = SegIdx {
            first_offset: seg.first_offset,
            next_offset,
            end_pos: seg.end_pos(),
            digest: seg.digest.value(),
            last_crc,
            last_records_len,
            epochs: epochs_within(epochs, seg.first_offset, next_offset),
            batches,
            runs_len: run_bytes.len() as u32,
            runs_crc: crc32fast::hash(&run_bytes),
            runs,
            run_bytes,
        };
        if ix.first_offset + ix.batches.end().0 as u64 != next_offset {
            return Err(format!(
                "its batches end at offset {}, not {next_offset}",
                ix.first_offset + ix.batches.end().0 as u64
            ));
        }
        Ok(ix)
    }

    pub fn records(&self) -> u64 {
        self.next_offset - self.first_offset
    }

    /// The position of its last batch (None: it holds none).
    pub fn last_batch_pos(&self) -> Option<u64> {
        let n = self.batches.len();
        (n > 0).then(|| self.batches.get(self.first_offset, n - 1).pos)
    }

    /// The file's bytes. `run_bytes` must be there (not an index read with `read_meta`).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.run_bytes.len() + self.batches.len() * 8);
        out.extend_from_slice(MAGIC);
        for v in [self.first_offset, self.next_offset, self.end_pos, self.digest] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.last_crc.to_le_bytes());
        out.extend_from_slice(&self.last_records_len.to_le_bytes());
        out.extend_from_slice(&self.runs.to_le_bytes());
        out.extend_from_slice(&(self.run_bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&self.run_bytes).to_le_bytes());
        assert_eq!(out.len(), RUNS_AT);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&out);
        out.extend_from_slice(&self.run_bytes);
        let rest = out.len();
        assert!(self.epochs.len() <= u16::MAX as usize, "an epoch per 65,536 records at least");
        out.extend_from_slice(&(self.epochs.len() as u16).to_le_bytes());
        for (e, o) in &self.epochs {
            out.extend_from_slice(&e.to_le_bytes());
            out.extend_from_slice(&o.to_le_bytes());
        }
        out.extend_from_slice(&(self.batches.len() as u32).to_le_bytes());
        for (rel, block) in self.batches.entries() {
            out.extend_from_slice(&rel.to_le_bytes());
            out.extend_from_slice(&block.to_le_bytes());
        }
        crc.update(&out[rest..]);
        let crc = crc.finalize();
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Its stream runs, in file order, with the position of each entry in the file.
    pub fn stream_runs(&self) -> Result<Vec<(u32, Run)>, String> {
        let mut out = Vec::with_capacity(self.runs as usize);
        let mut at = 0usize;
        for _ in 0..self.runs {
            let (run, len) = decode_run(&self.run_bytes[at..], u32::MAX)?;
            if run.rels.last().is_some_and(|&l| l as u64 >= self.next_offset - self.first_offset) {
                return Err(format!("run of stream {:?}: events outside the segment", run.name));
            }
            out.push(((RUNS_AT + at) as u32, run));
            at += len;
        }
        if at != self.run_bytes.len() {
            return Err("bytes after the last stream run".into());
        }
        Ok(out)
    }

    /// Decodes and checks a whole index file's bytes on their own (both checksums,
    /// layout, every offset and block inside the segment, batches back to back, the
    /// stream runs): what it says about the segment is checked by `agrees_with`.
    pub fn decode(b: &[u8]) -> Result<SegIdx, String> {
        let (head, runs, rest) = split(b)?;
        let mut ix = SegIdx::decode_meta(head, rest)?;
        if runs.len() != ix.runs_len as usize || crc32fast::hash(runs) != ix.runs_crc {
            return Err("stream runs checksum mismatch".into());
        }
        ix.run_bytes = runs.to_vec();
        ix.stream_runs()?; // every run whole and inside the segment
        Ok(ix)
    }

    /// Decodes the header (`RUNS_AT` bytes) and the part after the run entries (with the
    /// file's last checksum, which covers both): everything but the run entries.
    fn decode_meta(head: &[u8], rest: &[u8]) -> Result<SegIdx, String> {
        let (body, crc) = rest.split_at(rest.len().checked_sub(4).ok_or("shorter than its checksum")?);
        let mut c = crc32fast::Hasher::new();
        c.update(head);
        c.update(body);
        if head.len() != RUNS_AT || c.finalize() != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err("checksum mismatch".into());
        }
        let mut r = Reader(head);
        if r.take(8)? != MAGIC {
            return Err("not a segment index (bad magic)".into());
        }
        let (first_offset, next_offset, end_pos, digest) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
        let (last_crc, last_records_len) = (r.u32()?, r.u32()?);
        let (runs, runs_len, runs_crc) = (r.u32()?, r.u32()?, r.u32()?);
        if next_offset < first_offset || end_pos % BLOCK != 0 {
            return Err(format!("offsets {first_offset}..{next_offset}, end byte {end_pos}: not a segment's"));
        }
        let mut r = Reader(body);
        let n = r.u16()? as usize;
        let mut epochs = Vec::with_capacity(n);
        for _ in 0..n {
            epochs.push((r.u32()?, r.u64()?));
        }
        let ordered = epochs.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1);
        let inside = epochs.iter().all(|(_, o)| (first_offset..next_offset).contains(o));
        if !ordered || !inside || epochs.first().map(|e| e.1) != (next_offset > first_offset).then_some(first_offset) {
            return Err(format!("epochs {epochs:?} do not describe offsets {first_offset}..{next_offset}"));
        }
        let n = r.u32()? as usize;
        let mut entries = Vec::with_capacity(n.min(body.len() / 8));
        for _ in 0..n {
            entries.push((r.u32()?, r.u32()?));
        }
        let batches = SegmentIndex::from_entries(&entries, next_offset - first_offset, end_pos / BLOCK)?;
        if r.rest() > 0 {
            return Err(format!("{} bytes after the last entry", r.rest()));
        }
        Ok(SegIdx {
            first_offset,
            next_offset,
            end_pos,
            digest,
            last_crc,
            last_records_len,
            epochs,
            batches,
            runs,
            run_bytes: Vec::new(),
            runs_len,
            runs_crc,
        })
    }

    /// Checks the index against its segment on disk without reading more than its last
    /// batch's header: the segment's name, the next segment's first offset (`next_first`,
    /// None for the last segment), and the last batch's header — read back (32 bytes),
    /// holding the offsets, count, length and CRC the index names. The scrubber re-reads
    /// the batches themselves.
    pub fn agrees_with(&self, path: &Path, named_first: u64, next_first: Option<u64>) -> Result<(), String> {
        if self.first_offset != named_first {
            return Err(format!("says offset {}, named {named_first}", self.first_offset));
        }
        if let Some(n) = next_first.filter(|n| *n != self.next_offset) {
            return Err(format!("says the log continues at {}, the next segment starts at {n}", self.next_offset));
        }
        let Some(pos) = self.last_batch_pos() else { return Ok(()) };
        let last = self.batches.get(self.first_offset, self.batches.len() - 1);
        let span = batch::span(self.last_records_len as usize);
        if pos + span != self.end_pos || span != last.span {
            return Err(format!("last batch at byte {pos} does not end at byte {}", self.end_pos));
        }
        // The header only (the batch CRC field names the bytes): a start reads no more of
        // a sealed segment; the scrubber re-reads all of it.
        let r = super::segread::SegReader::open(path)?;
        let mut at = [0u8; batch::BATCH_HEADER_LEN];
        r.read_at(pos, &mut at).map_err(|e| e.to_string())?;
        let at = &at[..];
        let h = batch::header_fields(at).ok_or_else(|| format!("no batch header at byte {pos}"))?;
        let want = (last.first_offset, last.count, self.last_records_len);
        if (h.first_offset, h.count, h.records_len) != want || batch::stored_crc(at) != self.last_crc {
            return Err(format!("the batch at byte {pos} is not the one the index names"));
        }
        Ok(())
    }
}

/// An index file's header, run entries and the rest.
type Parts<'a> = (&'a [u8], &'a [u8], &'a [u8]);

/// Splits an index file into header, run entries and the rest (`runs_len` from the
/// header, unchecked but bounded by the file).
fn split(b: &[u8]) -> Result<Parts<'_>, String> {
    if b.len() < RUNS_AT + 4 {
        return Err("truncated".into());
    }
    let runs_len = u32::from_le_bytes(b[52..56].try_into().expect("4 bytes")) as usize;
    let end = (RUNS_AT + runs_len).min(b.len() - 4);
    Ok((&b[..RUNS_AT], &b[RUNS_AT..end], &b[end..]))
}

/// Reads `<first>.idx` in `dir` without its run entries (what a start needs): the
/// header, then everything after the runs (None: there is no such file).
pub fn read_meta(dir: &Path, first: u64) -> Result<Option<SegIdx>, String> {
    use std::os::unix::fs::FileExt;
    let path = dir.join(file_name(first));
    let f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("open {}: {e}", path.display())),
    };
    super::segread::no_readahead(&f);
    let read = || -> std::io::Result<Result<SegIdx, String>> {
        let len = f.metadata()?.len();
        let mut head = vec![0u8; RUNS_AT];
        if len < RUNS_AT as u64 + 4 {
            return Ok(Err("truncated".into()));
        }
        f.read_exact_at(&mut head, 0)?;
        let runs_len = u32::from_le_bytes(head[52..56].try_into().expect("4 bytes")) as u64;
        let from = RUNS_AT as u64 + runs_len;
        if from + 4 > len {
            return Ok(Err("truncated".into()));
        }
        let mut rest = vec![0u8; (len - from) as usize];
        f.read_exact_at(&mut rest, from)?;
        Ok(SegIdx::decode_meta(&head, &rest))
    };
    match read() {
        Ok(r) => r.map(Some).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) => Err(format!("read {}: {e}", path.display())),
    }
}

/// Reads the run entries of an index read with `read_meta`, checked against its
/// `runs_len` and `runs_crc`.
pub fn read_runs(dir: &Path, ix: &mut SegIdx) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let path = dir.join(file_name(ix.first_offset));
    let f = std::fs::File::open(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let mut b = vec![0u8; ix.runs_len as usize];
    f.read_exact_at(&mut b, RUNS_AT as u64).map_err(|e| format!("read {}: {e}", path.display()))?;
    if crc32fast::hash(&b) != ix.runs_crc {
        return Err(format!("{}: stream runs checksum mismatch", path.display()));
    }
    ix.run_bytes = b;
    ix.stream_runs().map(|_| ()).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes an index file durably (blocking: call it off the executor).
pub fn write(dir: &Path, ix: &SegIdx) -> Result<PathBuf, String> {
    let path = dir.join(file_name(ix.first_offset));
    let tmp = dir.join(format!("{}.tmp", file_name(ix.first_offset)));
    let bytes = ix.encode();
    let w = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    w().map_err(|e| format!("write {}: {e}", path.display()))?;
    sync_dir(dir)?;
    Ok(path)
}

/// Reads and decodes `<first>.idx` in `dir` (None: there is none).
pub fn read(dir: &Path, first: u64) -> Result<Option<SegIdx>, String> {
    let path = dir.join(file_name(first));
    match std::fs::read(&path) {
        Ok(b) => SegIdx::decode(&b).map(Some).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("read {}: {e}", path.display())),
    }
}
