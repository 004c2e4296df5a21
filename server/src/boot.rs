//! The start of one shard's storage: which files to trust, which bytes to read.
//!
//! A start reads what the log's length does not change: the index file of every sealed
//! segment (`wal::segidx`, each checked against its segment's name, the next segment's
//! name and its last batch, read back), the newest checkpoint (`checkpoint`), and the
//! segments from that checkpoint on, scanned record by record (the last segment,
//! normally). The derived state is the checkpoint's — stream versions with their runs'
//! skip pointers, producers' windows, epochs — fed the scanned records.
//!
//! Nothing is trusted blindly. Sealed segments are trusted from the first on, as far as
//! their index files check out; a segment after that is scanned, and if it is whole its
//! index file is written anew, as is every later one (their runs' pointers lead into the
//! rebuilt file). A checkpoint is used only when every segment below it is trusted and it
//! agrees with their index files (epochs); else an older one, else none: the derived state
//! is then rebuilt from the log's first segment (the runs of trusted index files, the
//! records for the producers' windows), which is what a start did before index files
//! existed, and a checkpoint is written for the next start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::checkpoint;
use crate::index::LogIndex;
use crate::snapshot;
use crate::wal::recovery::{self, list_segments, ShardScan};
use crate::wal::segidx::{self, SegIdx};

/// What a start found and how.
pub struct Boot {
    /// The derived state of every record of the log.
    pub index: LogIndex,
    /// The sealed segments below the tail, from their index files (trusted or rebuilt).
    pub sealed: Vec<SegIdx>,
    /// The scan of the last segment(s) (torn tail or damage included).
    pub tail: ShardScan,
    /// Segment indexes rebuilt by a scan, and why.
    pub rebuilt: Vec<String>,
    /// The checkpoint the derived state started from (None: the log's first segment).
    pub checkpoint: Option<u64>,
    /// Sealed segments whose records were read (after the checkpoint, or all without one).
    pub replayed: usize,
    /// Time spent before the tail scan (index files, checkpoint, sealed segments read
    /// again) and in it: what an operator compares with the log's size.
    pub took: (Duration, Duration),
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
        let from = match self.checkpoint {
            Some(c) => format!("checkpoint at offset {c}"),
            None => "no checkpoint".to_string(),
        };
        format!(
            "{} sealed segment(s) from their index files, {from}, {} sealed segment(s) read again, {} segment(s) scanned ({scanned} bytes); {} streams, {} ms before the tail, {} ms in it",
            self.sealed.len(),
            self.replayed,
            self.tail.segments.len(),
            self.index.streams.len(),
            self.took.0.as_millis(),
            self.took.1.as_millis(),
        )
    }
}

/// Opens one shard's storage for a start (after `snapshot::plan`'s clean-up of an
/// interrupted trim). Writes only rebuilt segment indexes and a checkpoint when the one
/// for the last segment is missing, and removes stale derived files.
pub fn open(shard: u16, dir: &Path, max_producers: usize) -> Result<Boot, String> {
    let t0 = Instant::now();
    let (_, first) = snapshot::apply(dir, snapshot::plan(dir)?, max_producers)?;
    let files = list_segments(dir).map_err(|e| e.to_string())?;
    remove_stale(dir, &files, first)?;
    let trusted = trust_sealed(shard, dir, &files)?;
    let (k, mut index, from) = match pick_checkpoint(shard, dir, &files, &trusted)? {
        Some((k, c)) => {
            (k, LogIndex { streams: c.streams, producers: restore(&c.producers, max_producers)? }, Some(c.offset))
        }
        None => (0, trim_state(dir, max_producers)?, None),
    };
    let mut sealed: Vec<SegIdx> = trusted;
    let mut rebuilt = Vec::new();
    let mut replayed = 0;
    // Sealed segments from the checkpoint on: runs from trusted index files, records
    // (producers, versions) read again; untrusted ones scanned and indexed anew.
    let mut i = k;
    while i + 1 < files.len() {
        let ((seg, path), next) = (&files[i], files[i + 1].0);
        if let Some(ix) = sealed.get_mut(i) {
            segidx::read_runs(dir, ix)?;
            index.streams.feed_sealed(*seg, &ix.stream_runs()?)?;
            ix.run_bytes = Vec::new();
            let mut bad = None;
            recovery::scan_files(shard, &files[i..=i], &mut |recs| index.producers.note_run(recs))
                .map_err(|e| e.to_string())
                .and_then(|s| {
                    if s.next_offset == next {
                        Ok(())
                    } else {
                        Err(format!("{} ends at {}", path.display(), s.next_offset))
                    }
                })
                .unwrap_or_else(|e| bad = Some(e));
            if let Some(e) = bad {
                return Err(format!("shard {shard}: reading {} again: {e}", path.display()));
            }
            replayed += 1;
            i += 1;
            continue;
        }
        // An untrusted sealed segment: every later index file is rebuilt too.
        sealed.truncate(i);
        index.streams.set_active_from(*seg);
        let mut bad = None;
        let Some(mut ix) = scan_sealed_with(shard, &files[i..=i], next, &mut |recs| {
            if bad.is_none() {
                bad = index.note_run(recs).err();
            }
        })?
        else {
            break; // not a whole sealed segment: the tail scan starts here and says why
        };
        if let Some(e) = bad {
            return Err(format!("shard {shard}: the log's stream versions are inconsistent ({e}); refusing to start"));
        }
        (ix.runs, ix.run_bytes) = index.streams.seal(*seg, next);
        (ix.runs_len, ix.runs_crc) = (ix.run_bytes.len() as u32, crc32fast::hash(&ix.run_bytes));
        if let Err(e) = segidx::write(dir, &ix) {
            log::warn!("shard {shard}: {e} (the next start scans {} again)", path.display());
        }
        ix.run_bytes = Vec::new();
        rebuilt.push(path.display().to_string());
        sealed.push(ix);
        i += 1;
    }
    sealed.truncate(i);
    let tail_from = files.get(i).map_or(first, |f| f.0);
    index.streams.set_active_from(tail_from);
    if from != Some(tail_from) && !files.is_empty() {
        // The next start finds a checkpoint here.
        let epochs: Vec<(u32, u64)> = merged_epochs(&sealed);
        let ckpt = checkpoint::encode(tail_from, index.streams.heads_job().write(), &index.producers.saved(), &epochs);
        match checkpoint::write(dir, tail_from, &ckpt.bytes).and_then(|_| checkpoint::remove(dir, |o| o < tail_from)) {
            Ok(_) => log::info!("shard {shard}: checkpoint written at offset {tail_from}"),
            Err(e) => log::warn!("shard {shard}: {e} (the next start reads more again)"),
        }
    }
    let t1 = Instant::now();
    let mut bad = None;
    let tail = recovery::scan_files(shard, &files[i.min(files.len())..], &mut |recs| {
        if bad.is_none() {
            bad = index.note_run(recs).err(); // one pass: checked as it is fed
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some(e) = bad {
        return Err(format!("shard {shard}: the log's stream versions are inconsistent ({e}); refusing to start"));
    }
    if sealed.is_empty() && k == 0 && !tail.segments.is_empty() && tail.first_offset() != first {
        return Err(format!(
            "shard {shard}: the log starts at {} but its index snapshot at {first}",
            tail.first_offset()
        ));
    }
    let took = (t1 - t0, t1.elapsed());
    check_heads_later(shard, &index)?;
    Ok(Boot { index, sealed, tail, rebuilt, checkpoint: from, replayed, took })
}

/// Has every page of the checkpoint's stream heads read and checked on a thread of its
/// own. Pages are checked when read; this reads each once, so that damage is found (and
/// the node stops) before it is asked for, not months later.
fn check_heads_later(shard: u16, index: &LogIndex) -> Result<(), String> {
    let Some(check) = index.streams.heads_checker() else { return Ok(()) };
    std::thread::Builder::new()
        .name(format!("heads-check-{shard}"))
        .spawn(check)
        .map(drop)
        .map_err(|e| format!("shard {shard}: a thread to check the checkpoint: {e}"))
}

/// The derived state of a shard directory as it is on disk now (a follower's log was cut
/// back at a rejoin: the state is rebuilt as a start would).
pub fn derive(shard: u16, dir: &Path, max_producers: usize) -> Result<LogIndex, String> {
    open(shard, dir, max_producers).map(|b| b.index)
}

fn restore(saved: &[crate::producers::Saved], max: usize) -> Result<crate::producers::Producers, String> {
    let mut t = crate::producers::Producers::new(max);
    for p in saved {
        t.restore(p.clone())?;
    }
    Ok(t)
}

/// The derived state at the log's first segment: empty, or the trim's index snapshot
/// (versions only: no event of it is held).
fn trim_state(dir: &Path, max_producers: usize) -> Result<LogIndex, String> {
    let (snap, _) = snapshot::apply(dir, snapshot::plan(dir)?, max_producers)?;
    let mut ix = LogIndex::new(max_producers);
    for (name, next) in snap.streams.next_versions() {
        ix.streams.restore(&name, next);
    }
    ix.producers = snap.producers;
    Ok(ix)
}

/// The epoch history the index files of `sealed` describe.
fn merged_epochs(sealed: &[SegIdx]) -> Vec<(u32, u64)> {
    let mut epochs: Vec<(u32, u64)> = Vec::new();
    for &(e, o) in sealed.iter().flat_map(|s| &s.epochs) {
        if epochs.last().map(|l| l.0) != Some(e) {
            epochs.push((e, o));
        }
    }
    epochs
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

/// The sealed segments (every one but the last) a start trusts, from the first on: each
/// by its index file. Stops at the first whose file is missing or does not check out,
/// saying why.
fn trust_sealed(shard: u16, dir: &Path, files: &[(u64, PathBuf)]) -> Result<Vec<SegIdx>, String> {
    let mut out = Vec::new();
    for i in 0..files.len().saturating_sub(1) {
        let ((first, path), next) = (&files[i], files[i + 1].0);
        let why = match segidx::read_meta(dir, *first) {
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
        log::info!(
            "shard {shard}: {} is not trusted ({why}): it and the {} segment(s) after it are scanned",
            path.display(),
            files.len() - 1 - i
        );
        break;
    }
    Ok(out)
}

/// A scan of one sealed segment on its own: its index (without stream runs) when it
/// holds batches back to back up to `next` and nothing after them (a torn tail, damage
/// or anything else: None).
pub fn scan_sealed(shard: u16, file: &[(u64, PathBuf)], next: u64) -> Result<Option<SegIdx>, String> {
    scan_sealed_with(shard, file, next, &mut |_| {})
}

fn scan_sealed_with(
    shard: u16,
    file: &[(u64, PathBuf)],
    next: u64,
    visit: &mut dyn FnMut(&[u8]),
) -> Result<Option<SegIdx>, String> {
    let scan = match recovery::scan_files(shard, file, visit) {
        Ok(s) => s,
        Err(recovery::ScanError::Corrupt { .. }) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if scan.torn.is_some() || scan.damage.is_some() || scan.next_offset != next || scan.segments.len() != 1 {
        return Ok(None);
    }
    SegIdx::from_scan(&scan.segments[0], next, &scan.epochs, (0, Vec::new())).map(Some)
}

/// The newest checkpoint that decodes, sits at the start of a segment all of whose
/// predecessors are trusted, and agrees with their epochs: (how many sealed segments lie
/// below it, it).
fn pick_checkpoint(
    shard: u16,
    dir: &Path,
    files: &[(u64, PathBuf)],
    trusted: &[SegIdx],
) -> Result<Option<(usize, checkpoint::Checkpoint)>, String> {
    for (offset, path) in checkpoint::list(dir)?.into_iter().rev() {
        let Some(k) = files.iter().position(|(f, _)| *f == offset).filter(|k| *k <= trusted.len()) else {
            continue;
        };
        match checkpoint::read(&path, offset) {
            Ok(c) if c.epochs == merged_epochs(&trusted[..k]) => return Ok(Some((k, c))),
            Ok(c) => log::warn!(
                "shard {shard}: checkpoint at offset {offset} has the epochs {:?}, the segment index files {:?}; not used",
                c.epochs,
                merged_epochs(&trusted[..k])
            ),
            Err(e) => log::warn!("shard {shard}: {e}; trying an older checkpoint"),
        }
    }
    Ok(None)
}
