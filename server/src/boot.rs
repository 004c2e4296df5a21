//! The start of one shard's storage: which files to trust, which bytes to read.
//!
//! A start reads what the log's length does not change: the index file of every sealed
//! segment (`wal::segidx`, each checked against its segment's name, the next segment's
//! name and its last batch, read back), the newest checkpoint (`checkpoint`), and the
//! segments from that checkpoint on, scanned record by record as before (the last
//! segment, normally; a crash between a roll and its checkpoint adds the one before).
//! The derived state starts from the checkpoint and the stream runs of the segment
//! indexes, and is fed the scanned records.
//!
//! Nothing is trusted blindly: a missing or damaged segment index is rebuilt by scanning
//! that segment (and written back); a segment that does not scan as a whole sealed
//! segment ends the trusted part there; a checkpoint that does not decode or does not
//! agree with the segment indexes below it is passed over for an older one, and with
//! none the start scans every segment from the log's first (what every start did
//! before segment indexes existed, and what `corelog inspect` always does).

use std::path::{Path, PathBuf};

use crate::checkpoint::{self, Checkpoint};
use crate::index::LogIndex;
use crate::snapshot;
use crate::wal::recovery::{self, list_segments, ShardScan};
use crate::wal::segidx::{self, SegIdx, StreamRun};

/// What a start found and how.
pub struct Boot {
    /// The derived state of every record of the log.
    pub index: LogIndex,
    /// The sealed segments below the tail, from their index files.
    pub sealed: Vec<SegIdx>,
    /// The scan of the segments from the checkpoint on (torn tail or damage included).
    pub tail: ShardScan,
    /// Segment indexes rebuilt by a scan, and why.
    pub rebuilt: Vec<String>,
    /// The checkpoint the derived state started from (None: the log's first segment).
    pub checkpoint: Option<u64>,
}

impl Boot {
    pub fn records(&self) -> u64 {
        self.sealed.iter().map(SegIdx::records).sum::<u64>() + self.tail.records
    }

    pub fn segments(&self) -> usize {
        self.sealed.len() + self.tail.segments.len()
    }

    /// The start's log line: what it read.
    pub fn how(&self) -> String {
        let scanned: u64 = self.tail.segments.iter().map(|s| s.end_pos()).sum();
        match self.checkpoint {
            Some(c) => format!(
                "{} sealed segment(s) from their index files, checkpoint at offset {c}, {} segment(s) scanned ({} bytes)",
                self.sealed.len(),
                self.tail.segments.len(),
                scanned
            ),
            None => format!("no checkpoint: {} segment(s) scanned ({scanned} bytes)", self.tail.segments.len()),
        }
    }
}

/// Opens one shard's storage for a start (after `snapshot::plan`'s clean-up of an
/// interrupted trim). Writes only rebuilt segment indexes and removes stale derived files.
pub fn open(shard: u16, dir: &Path, max_producers: usize) -> Result<Boot, String> {
    let (_, first) = snapshot::apply(dir, snapshot::plan(dir)?, max_producers)?;
    let files = list_segments(dir).map_err(|e| e.to_string())?;
    remove_stale(dir, &files, first)?;
    let mut rebuilt = Vec::new();
    let sealed = trust_sealed(shard, dir, &files, &mut rebuilt)?;
    let picked = pick_checkpoint(dir, &files, &sealed)?;
    let (k, mut index, at) = match picked {
        Some((k, c)) => match from_checkpoint(&c, &sealed[..k], max_producers) {
            Ok(ix) => (k, ix, Some(c.offset)),
            Err(e) => {
                log::warn!(
                    "shard {shard}: checkpoint at offset {} disagrees with the segment indexes below it ({e}); scanning every segment",
                    c.offset
                );
                (0, trim_state(dir, max_producers)?, None)
            }
        },
        None => (0, trim_state(dir, max_producers)?, None),
    };
    let mut bad = None;
    let tail = recovery::scan_files(shard, &files[k..], &mut |recs| {
        if bad.is_none() {
            bad = index.note_run(recs).err(); // one pass: checked as it is fed
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some(e) = bad {
        return Err(format!("shard {shard}: the log's stream versions are inconsistent ({e}); refusing to start"));
    }
    if k == 0 && !tail.segments.is_empty() && tail.first_offset() != first {
        return Err(format!(
            "shard {shard}: the log starts at {} but its index snapshot at {first}",
            tail.first_offset()
        ));
    }
    let mut sealed = sealed;
    sealed.truncate(k);
    Ok(Boot { index, sealed, tail, rebuilt, checkpoint: at })
}

/// The derived state at the log's first segment: empty, or the trim's index snapshot.
fn trim_state(dir: &Path, max_producers: usize) -> Result<LogIndex, String> {
    Ok(snapshot::apply(dir, snapshot::plan(dir)?, max_producers)?.0)
}

/// Index files of segments that are gone, and checkpoints no segment starts at or below
/// the log's first offset: left by a retention or a cut that a crash interrupted.
fn remove_stale(dir: &Path, files: &[(u64, PathBuf)], first: u64) -> Result<(), String> {
    let is_segment = |o: u64| files.iter().any(|(f, _)| *f == o);
    let mut n = checkpoint::remove(dir, |o| o < first || !is_segment(o))?;
    let rd = std::fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    for ent in rd.flatten() {
        let name = ent.file_name().to_string_lossy().to_string();
        let stale = match name.strip_suffix(".idx").and_then(|n| n.parse::<u64>().ok()) {
            Some(o) => !is_segment(o),
            None => name.ends_with(".idx.tmp") || name.ends_with(".ckpt.tmp"),
        };
        if stale {
            std::fs::remove_file(ent.path()).map_err(|e| format!("remove {}: {e}", ent.path().display()))?;
            n += 1;
        }
    }
    if n > 0 {
        recovery::sync_dir(dir)?;
        log::info!("{}: removed {n} stale index or checkpoint file(s)", dir.display());
    }
    Ok(())
}

/// The sealed segments (every one but the last) that a start may trust, from the first
/// on: each by its index file, or by a scan of it alone that finds it whole (its index
/// is then written back). Stops at the first that is neither.
fn trust_sealed(
    shard: u16,
    dir: &Path,
    files: &[(u64, PathBuf)],
    rebuilt: &mut Vec<String>,
) -> Result<Vec<SegIdx>, String> {
    let mut out = Vec::new();
    for i in 0..files.len().saturating_sub(1) {
        let ((first, path), next) = (&files[i], files[i + 1].0);
        let why = match segidx::read(dir, *first) {
            Ok(Some(ix)) => match ix.agrees_with(path, *first, Some(next)) {
                Ok(()) => {
                    out.push(ix);
                    continue;
                }
                Err(e) => format!("{}: {e}", segidx::file_name(*first)),
            },
            Ok(None) => "no index file".to_string(),
            Err(e) => e,
        };
        let Some(ix) = scan_sealed(shard, &files[i..=i], next)? else {
            break; // not a whole sealed segment: the tail scan starts here and says why
        };
        if let Err(e) = segidx::write(dir, &ix) {
            log::warn!("shard {shard}: {e} (the next start scans {} again)", path.display());
        }
        rebuilt.push(format!("{} ({why})", path.display()));
        out.push(ix);
    }
    Ok(out)
}

/// A scan of one sealed segment on its own: its index when it holds batches back to back
/// up to `next` and nothing after them (a torn tail, damage or anything else: None).
pub fn scan_sealed(shard: u16, file: &[(u64, PathBuf)], next: u64) -> Result<Option<SegIdx>, String> {
    let mut runs = StreamRuns::default();
    let first = file[0].0;
    let scan = match recovery::scan_files(shard, file, &mut |recs| runs.note(first, recs)) {
        Ok(s) => s,
        Err(recovery::ScanError::Corrupt { .. }) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if scan.torn.is_some() || scan.damage.is_some() || scan.next_offset != next || scan.segments.len() != 1 {
        return Ok(None);
    }
    SegIdx::from_scan(&scan.segments[0], next, &scan.epochs, runs.finish()).map(Some)
}

/// The newest checkpoint that decodes and sits at the start of a segment all of whose
/// predecessors are trusted: (how many sealed segments lie below it, it).
fn pick_checkpoint(
    dir: &Path,
    files: &[(u64, PathBuf)],
    sealed: &[SegIdx],
) -> Result<Option<(usize, Checkpoint)>, String> {
    for (offset, path) in checkpoint::list(dir)?.into_iter().rev() {
        let Some(k) = files.iter().position(|(f, _)| *f == offset).filter(|k| *k <= sealed.len()) else {
            continue;
        };
        match checkpoint::read(&path, offset) {
            Ok(c) => return Ok(Some((k, c))),
            Err(e) => log::warn!("{e}; trying an older checkpoint"),
        }
    }
    Ok(None)
}

/// The derived state at a checkpoint: the stream runs of the sealed segments below it
/// fed in order, checked against the checkpoint's stream versions and epochs; the
/// producers' windows from the checkpoint.
fn from_checkpoint(c: &Checkpoint, below: &[SegIdx], max_producers: usize) -> Result<LogIndex, String> {
    let mut ix = LogIndex::new(max_producers);
    for s in below {
        for r in &s.streams {
            let offsets = r.rels.iter().map(|&rel| s.first_offset + rel as u64);
            ix.streams.feed_run(&r.name, r.first_version, offsets)?;
        }
    }
    let with_events = ix.streams.len();
    let mut matched = 0;
    for (name, next) in &c.streams {
        match ix.streams.current(name) {
            Some(v) if v + 1 == *next => matched += 1,
            Some(v) => {
                return Err(format!("stream {name:?}: the indexes end at version {v}, the checkpoint at {}", next - 1))
            }
            None => ix.streams.restore(name, *next),
        }
    }
    if matched != with_events {
        return Err(format!("{} stream(s) of the segment indexes are not in the checkpoint", with_events - matched));
    }
    let mut epochs: Vec<(u32, u64)> = Vec::new();
    for &(e, o) in below.iter().flat_map(|s| &s.epochs) {
        if epochs.last().map(|l| l.0) != Some(e) {
            epochs.push((e, o));
        }
    }
    if epochs != c.epochs {
        return Err(format!("epoch history {epochs:?} in the indexes, {:?} in the checkpoint", c.epochs));
    }
    for p in &c.producers {
        ix.producers.restore(p.clone())?;
    }
    Ok(ix)
}

/// The stream runs of one segment, collected from its records (a rebuild's scan).
#[derive(Default)]
pub struct StreamRuns(std::collections::HashMap<Box<str>, StreamRun>);

impl StreamRuns {
    /// Feeds verified records of the segment starting at offset `first`.
    pub fn note(&mut self, first: u64, records: &[u8]) {
        let mut at = 0;
        while at < records.len() {
            let (offset, ext, n) = corelog_client::record::peek(&records[at..]).expect("records were verified");
            if let Some(s) = ext.stream {
                let rel = u32::try_from(offset - first).expect("a segment's offsets fit in u32");
                self.0
                    .entry(s.name.into())
                    .or_insert_with(|| StreamRun { name: s.name.into(), first_version: s.version, rels: Vec::new() })
                    .rels
                    .push(rel);
            }
            at += n;
        }
    }

    pub fn finish(self) -> Vec<StreamRun> {
        self.0.into_values().collect()
    }
}
