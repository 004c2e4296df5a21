//! Reading a stream by version: the offsets of its events, from memory for the last
//! segment and from the sealed segments' index files for the rest (`streams/` says how
//! the runs are kept). The run holding a version is found by walking the stream's skip
//! pointers down from its newest run at each level: O(log runs) reads of run entries
//! (each one 1 KiB read, cached by the page cache), then one read of its offsets.

use std::io;

use crate::streams::Located;
use crate::wal::segidx::{Run, RunRef};
use crate::wal::Log;

/// What a read of a stream finds.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// Offsets of its events from the version asked (ascending, below the end asked), and
    /// how many of its events lie below that end.
    Events { offsets: Vec<u64>, end_version: u64 },
    /// The version asked is below the first one still held (retention): this one.
    Gone { first: u64 },
}

/// Which run a walk looks for.
#[derive(Clone, Copy)]
enum Key {
    /// The newest run whose first version is at most this.
    Version(u64),
    /// The newest run in a segment starting below this offset.
    Below(u64),
    /// The oldest run in a segment at or above this offset (the first still held).
    OldestFrom(u64),
}

impl Key {
    /// Whether the walk moves back past `r` (it is too new).
    fn past(self, r: &RunRef) -> bool {
        match self {
            Key::Version(v) => r.first_version > v,
            Key::Below(o) => r.seg >= o,
            Key::OldestFrom(o) => r.seg >= o,
        }
    }
}

/// The skip pointers of a node of the walk: from the stream's memory (the newest runs),
/// or from a run's entry (`levels above its pointers`: the stream's first run, unless the
/// node is that run).
fn pointers(l: &Located, run: Option<&Run>) -> Vec<Option<RunRef>> {
    let h = l.height();
    match run {
        None => (0..h).map(|j| l.level(j)).collect(),
        Some(r) if r.run == 0 => vec![None; h],
        Some(r) => (0..h).map(|j| r.ptrs.get(j).copied().or(l.first)).collect(),
    }
}

/// Walks down the levels: returns the last node moved to (None: the stream's memory)
/// and its pointers. Stops early with `Ok(None)` when the walk would enter a segment
/// retention deleted.
async fn walk(log: &Log, l: &Located, key: Key) -> io::Result<Option<(Option<(RunRef, Run)>, Vec<Option<RunRef>>)>> {
    let first_held = log.first_offset();
    let mut node: Option<(RunRef, Run)> = None;
    let mut ptrs = pointers(l, None);
    for j in (0..ptrs.len()).rev() {
        while let Some(p) = ptrs.get(j).copied().flatten().filter(|p| key.past(p)) {
            if p.seg < first_held {
                return Ok(None);
            }
            let run = log.read_run(p.seg, p.pos, 0, 0).await?;
            ptrs = pointers(l, Some(&run));
            node = Some((p, run));
        }
    }
    Ok(Some((node, ptrs)))
}

/// The first version of `l`'s events still held: of its oldest run in a segment
/// retention kept, else of its events in the last segment.
async fn first_held(log: &Log, l: &Located) -> io::Result<u64> {
    if l.runs == 0 {
        return Ok(l.active_from());
    }
    Ok(match walk(log, l, Key::OldestFrom(log.first_offset())).await? {
        Some((Some((r, _)), _)) => r.first_version,
        _ => l.active_from(),
    })
}

/// How many of `l`'s events lie below offset `end`.
async fn versions_below(log: &Log, l: &Located, end: u64) -> io::Result<u64> {
    if end >= log.last_segment_first() {
        return Ok(l.active_from() + l.active.partition_point(|&o| o < end) as u64);
    }
    match walk(log, l, Key::Below(end)).await? {
        Some((_, ptrs)) => match ptrs.first().copied().flatten() {
            Some(r) if r.seg >= log.first_offset() => {
                let run = log.read_run(r.seg, r.pos, 0, u32::MAX).await?;
                Ok(r.first_version + run.rels.partition_point(|&rel| r.seg + (rel as u64) < end) as u64)
            }
            // No run below `end` is held: every event held is at or above it.
            _ => first_held(log, l).await,
        },
        None => first_held(log, l).await,
    }
}

/// The offsets of the events of the stream `l` from version `from`, below offset `end`,
/// at most `max`.
pub async fn offsets(log: &Log, l: &Located, from: u64, end: u64, max: usize) -> io::Result<Found> {
    let end_version = versions_below(log, l, end).await?;
    let mut out = Vec::new();
    let mut v = from;
    while out.len() < max && v < end_version {
        if v >= l.active_from() {
            let i = (v - l.active_from()) as usize;
            out.extend(l.active[i..].iter().copied().take_while(|&o| o < end).take(max - out.len()));
            break;
        }
        let target = match walk(log, l, Key::Version(v)).await? {
            Some((_, ptrs)) => ptrs.first().copied().flatten(),
            None => None,
        };
        let Some(r) = target.filter(|r| r.seg >= log.first_offset()) else {
            return Ok(Found::Gone { first: first_held(log, l).await? });
        };
        let skip = (v - r.first_version) as u32;
        let run = match log.read_run(r.seg, r.pos, skip, (max - out.len()) as u32).await {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Found::Gone { first: first_held(log, l).await? })
            }
            r => r?,
        };
        let before = out.len();
        out.extend(run.rels.iter().map(|&rel| r.seg + rel as u64).take_while(|&o| o < end));
        v += (out.len() - before) as u64;
        if v < r.first_version + run.count as u64 {
            break; // stopped by `max` or `end` inside this run
        }
    }
    if from < end_version && out.is_empty() && from < l.active_from() {
        return Ok(Found::Gone { first: first_held(log, l).await? });
    }
    Ok(Found::Events { offsets: out, end_version })
}
