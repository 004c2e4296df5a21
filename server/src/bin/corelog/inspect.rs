//! `corelog inspect <data-dir>`: offline verification of every batch and record CRC.
//! Prints, per shard: record count, first/last offset, segments, epoch, a digest of all
//! record bytes (equal on two nodes holding the same records), and any torn tail.
//! Exit code: 0 sound, 1 torn tail present (a restart truncates it), 2 corruption,
//! damage to a possibly acknowledged batch, a repair mark, or a read error.
//! `--compare A B` compares two nodes' data dirs record by record (see `compare`).

use std::path::Path;

use corelog_client::record::{self, RecordRef};

use corelog_server::streams::{self, Streams};
use corelog_server::wal::recovery::{self, ScanError};
use corelog_server::wal::{self, segidx};
use corelog_server::{checkpoint, control, index, snapshot};

pub fn run(data_dir: &Path) -> i32 {
    let shards = match control::list_shards(data_dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("corelog inspect: {e}");
            return 2;
        }
    };
    if shards.is_empty() {
        eprintln!("corelog inspect: {} holds no shard directory", data_dir.display());
        return 2;
    }
    let mut code = 0;
    for id in shards {
        let dir = control::shard_dir(data_dir, id);
        let (trimmed, base) = match trim_state(&dir) {
            Ok(t) => t,
            Err(e) => {
                println!("shard {id}: ERROR: {e}");
                code = 2;
                continue;
            }
        };
        // The index (stream versions) must continue the snapshot's, record by record.
        let (mut index, from) = base;
        let mut bad = None;
        let mut derived = Derived::new(&dir, (from > 0).then_some(&index));
        let scanned = recovery::scan_with(id, &dir, &mut |recs| {
            let below = record::peek(recs).is_ok_and(|(o, _, _)| o < from); // an unfinished trim
            if !below {
                derived.feed(recs);
            }
            if bad.is_none() && !below {
                bad = index.note_run(recs).err();
            }
        });
        if let Some(t) = trimmed {
            println!("shard {id}: {t}");
        }
        if let Some(e) = bad {
            println!("shard {id}: INCONSISTENT: the stream versions do not follow each other: {e}");
            code = 2;
        }
        match scanned {
            Ok(s) => code = code.max(report_scan(id, &dir, &s, &mut derived)),
            Err(e @ ScanError::Corrupt { .. }) => {
                println!("shard {id}: CORRUPT: {e}");
                code = 2;
            }
            Err(e) => {
                println!("shard {id}: ERROR: {e}");
                code = 2;
            }
        }
    }
    code
}

/// Prints one shard's scan: its records, epoch and digest, the derived state checked
/// against the index files and checkpoints, and any mark, damage or torn tail. Returns
/// the exit code it calls for (0 clean, 1 a torn tail the next start cuts, 2 damage).
fn report_scan(id: u16, dir: &Path, s: &recovery::ShardScan, derived: &mut Derived) -> i32 {
    let mut code = 0;
    let last = if s.records > 0 { format!("{}", s.next_offset - 1) } else { "-".into() };
    let epoch = control::read_epoch(dir).map(|e| e.to_string()).unwrap_or_else(|e| e);
    let digest = match digest(s) {
        Ok(d) => format!("{d:016x}"),
        Err(e) => {
            code = 2;
            e
        }
    };
    println!(
        "shard {id}: records {} first {} last {last} next {} segments {} epoch {epoch} digest {digest}",
        s.records,
        s.first_offset(),
        s.next_offset,
        s.segments.len()
    );
    for line in derived.check(s) {
        println!("shard {id}: {line}");
        if line.starts_with("INDEX MISMATCH") {
            code = 2;
        }
    }
    match control::read_repair_mark(dir) {
        Ok(Some(m)) => {
            println!("shard {id}: NEEDS REPAIR: may lack acknowledged records from offset {m} (it follows until caught up with a leader)");
            code = 2;
        }
        Ok(None) => {}
        Err(e) => {
            println!("shard {id}: ERROR: {e}");
            code = 2;
        }
    }
    if let Some(d) = &s.damage {
        println!(
            "shard {id}: DAMAGED: {d}; it may have been acknowledged: a follower fetches it again from its leader, a leader or standalone node refuses to start (docs/operations.md, Storage faults)"
        );
        code = 2;
    } else if let Some(t) = &s.torn {
        println!(
            "shard {id}: TORN TAIL in {} at byte {} ({} dirty bytes, {} empty segment(s)); the next start truncates it",
            t.segment.display(),
            t.pos,
            t.dirty_end - t.pos,
            t.empty_segments.len()
        );
        code = code.max(1);
    }
    code
}

/// The files a start trusts instead of the records (sealed segments' index files, the
/// newest checkpoint), checked against what the full scan finds: the index file a start
/// would write for each segment (its batches, digest, epochs, and the stream runs with
/// their skip pointers as the writer makes them, `Streams::seal`), and the derived state
/// at the checkpoint's offset. A trimmed log's runs point into deleted segments: there
/// only the runs' events and the checkpoint's versions are compared.
struct Derived {
    dir: std::path::PathBuf,
    /// First offsets of the segment files, ascending.
    starts: Vec<u64>,
    /// The stream index as a writer of this log would hold it, sealed at each segment's end.
    sim: Streams,
    /// Segments sealed in `sim` so far, and the runs each got (by its index in `starts`).
    sealed: usize,
    runs: Vec<Option<(u32, Vec<u8>)>>,
    /// The log was trimmed: pointers and run numbers are not comparable.
    trimmed: bool,
    checkpoint: Option<(u64, Result<checkpoint::Checkpoint, String>)>,
    /// The streams the simulation held at the checkpoint's offset.
    at_checkpoint: Option<Vec<streams::Head>>,
}

impl Derived {
    fn new(dir: &Path, trim: Option<&index::LogIndex>) -> Derived {
        let starts: Vec<u64> =
            recovery::list_segments(dir).map(|v| v.into_iter().map(|(f, _)| f).collect()).unwrap_or_default();
        let checkpoint = checkpoint::list(dir)
            .ok()
            .and_then(|v| v.into_iter().next_back())
            .map(|(o, p)| (o, checkpoint::read(&p, o).and_then(|c| c.verify().map(|()| c))));
        let mut sim = Streams::default();
        if let Some(t) = trim {
            for (n, v) in t.streams.next_versions() {
                sim.restore(&n, v);
            }
        }
        sim.set_active_from(starts.first().copied().unwrap_or(0));
        let runs = starts.iter().map(|_| None).collect();
        Derived {
            dir: dir.to_path_buf(),
            starts,
            sim,
            sealed: 0,
            runs,
            trimmed: trim.is_some(),
            checkpoint,
            at_checkpoint: None,
        }
    }

    /// Seals the simulated index at every segment end up to offset `at`.
    fn seal_up_to(&mut self, at: u64) {
        while let Some(&next) = self.starts.get(self.sealed + 1).filter(|&&n| n <= at) {
            let seg = self.starts[self.sealed];
            self.runs[self.sealed] = Some(self.sim.seal(seg, next));
            self.sealed += 1;
            if self.checkpoint.as_ref().is_some_and(|c| c.0 == next) {
                self.at_checkpoint = Some(self.sim.heads());
            }
        }
    }

    /// Called with each verified batch, in offset order.
    fn feed(&mut self, recs: &[u8]) {
        let Ok((first, _, _)) = record::peek(recs) else { return };
        self.seal_up_to(first);
        let mut at = 0;
        while at < recs.len() {
            let (offset, ext, n) = record::peek(&recs[at..]).expect("verified");
            if let Some(s) = ext.stream {
                if self.sim.note(s.name, s.version, offset).is_err() {
                    return; // versions out of line: the scan's own check reports it
                }
            }
            at += n;
        }
    }

    /// One line about the index files and the checkpoint: agreement, or what differs.
    fn check(&mut self, scan: &recovery::ShardScan) -> Vec<String> {
        self.seal_up_to(scan.next_offset);
        if self.checkpoint.as_ref().is_some_and(|c| c.0 == self.starts.first().copied().unwrap_or(0)) {
            self.at_checkpoint = Some(self.sim.heads());
        }
        let mut out = Vec::new();
        let (mut agree, mut files) = (0, 0);
        for (i, seg) in scan.segments.iter().enumerate() {
            let Some(next) = scan.segments.get(i + 1).map(|n| n.first_offset) else { break };
            let found = match segidx::read(&self.dir, seg.first_offset) {
                Ok(None) => continue,
                Ok(Some(ix)) => ix,
                Err(e) => {
                    out.push(format!("INDEX MISMATCH: {e}"));
                    continue;
                }
            };
            files += 1;
            let runs = self.runs.get_mut(i).and_then(Option::take).unwrap_or_default();
            let mismatch = match segidx::SegIdx::from_scan(seg, next, &scan.epochs, runs) {
                Ok(want) => differs(&found, &want, self.trimmed),
                Err(e) => Some(format!("the segment does not scan whole: {e}")),
            };
            match mismatch {
                None => agree += 1,
                Some(what) => out.push(format!("INDEX MISMATCH: {}: {what}", segidx::file_name(seg.first_offset))),
            }
        }
        let mut line = format!("segment index files: {agree} of {files} agree with their segments");
        match (self.checkpoint.take(), self.at_checkpoint.take()) {
            (None, _) => line += "; no checkpoint",
            (Some((o, Err(e))), _) => out.push(format!("INDEX MISMATCH: checkpoint at offset {o}: {e}")),
            (Some((o, Ok(_))), None) => {
                line += &format!("; checkpoint at offset {o} is past the log (ignored by a start)")
            }
            (Some((o, Ok(c))), Some(want)) => {
                let epochs: Vec<(u32, u64)> = scan.epochs.iter().copied().take_while(|e| e.1 < o).collect();
                let got = c.streams.heads();
                let same_streams = if self.trimmed {
                    got.iter().map(|h| (&h.0, h.1)).eq(want.iter().map(|h| (&h.0, h.1)))
                } else {
                    got == want
                };
                // A trimmed log shows an epoch from its first record on; the checkpoint
                // knows where the epoch really began.
                let same_epochs = match (self.trimmed, epochs.first()) {
                    (true, Some(&(_, first))) => clamp_epochs(&c.epochs, first) == epochs,
                    _ => c.epochs == epochs,
                };
                if !same_streams || !same_epochs {
                    out.push(format!("INDEX MISMATCH: checkpoint at offset {o} differs from the log below it"));
                } else {
                    line += &format!("; checkpoint at offset {o} agrees with the log below it");
                }
            }
        }
        out.insert(0, line);
        out
    }
}

/// What two indexes of one segment disagree on (None: nothing). Runs are compared by
/// stream (their order in the file is the writer's); pointers by run, not byte position,
/// and not at all in a trimmed log (`loose`).
fn differs(found: &segidx::SegIdx, want: &segidx::SegIdx, loose: bool) -> Option<String> {
    type RunKey = (Box<str>, u64, Vec<u32>, u32, Vec<u64>);
    let runs = |ix: &segidx::SegIdx| -> Option<Vec<RunKey>> {
        let mut v: Vec<_> = ix
            .stream_runs()
            .ok()?
            .into_iter()
            .map(|(_, r)| {
                let (run, ptrs) = if loose { (0, Vec::new()) } else { (r.run, r.ptrs.iter().map(|p| p.seg).collect()) };
                (r.name, r.first_version, r.rels, run, ptrs)
            })
            .collect();
        v.sort();
        Some(v)
    };
    let what = [
        ((found.first_offset, found.next_offset) != (want.first_offset, want.next_offset), "offsets"),
        (found.end_pos != want.end_pos || found.batches != want.batches, "batches"),
        (
            found.digest != want.digest
                || (found.last_crc, found.last_records_len) != (want.last_crc, want.last_records_len),
            "digest",
        ),
        (found.epochs != want.epochs, "epochs"),
        (runs(found).is_none() || runs(found) != runs(want), "stream runs"),
    ];
    let bad: Vec<&str> = what.iter().filter(|(d, _)| *d).map(|(_, w)| *w).collect();
    (!bad.is_empty()).then(|| format!("its {} differ from the segment's", bad.join(", ")))
}

/// Epoch starts as a log trimmed below `first` shows them: an epoch that began below it
/// starts at `first`, and of those only the newest is seen.
fn clamp_epochs(epochs: &[(u32, u64)], first: u64) -> Vec<(u32, u64)> {
    let below = epochs.iter().rposition(|e| e.1 <= first).unwrap_or(0);
    epochs.iter().skip(below).map(|&(e, o)| (e, o.max(first))).collect()
}

/// What retention left in a shard directory: a line about it (None: never trimmed) and
/// the index at the log's start (from the snapshot), with that start.
fn trim_state(dir: &Path) -> Result<(Option<String>, (index::LogIndex, u64)), String> {
    let p = snapshot::plan(dir)?;
    let Some((at, path)) = &p.snapshot else {
        let line = (!p.stale.is_empty())
            .then(|| format!("{} stale index snapshot(s), removed at the next start", p.stale.len()));
        return Ok((line, (index::LogIndex::versions_only(usize::MAX), 0)));
    };
    let b = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let (_, ix) = snapshot::decode(&b, usize::MAX).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut line = format!(
        "trimmed: offsets below {at} deleted by retention; index snapshot {} holds {} stream(s), {} producer(s)",
        snapshot::file_name(*at),
        ix.streams.len(),
        ix.producers.len()
    );
    if !p.unfinished.is_empty() {
        line += &format!(
            "; an interrupted trim left {} segment(s) below it (deleted at the next start)",
            p.unfinished.len()
        );
    }
    Ok((Some(line), (ix, *at)))
}

/// A 64-bit digest (two CRC-32s) over every record's bytes, in offset order.
fn digest(s: &recovery::ShardScan) -> Result<u64, String> {
    let mut a = crc32fast::Hasher::new();
    let mut b = crc32fast::Hasher::new_with_initial(0x5bd1_e995);
    let mut batches = BatchReader::new(s);
    while let Some(buf) = batches.next_batch()? {
        a.update(&buf);
        b.update(&buf);
    }
    Ok(((a.finalize() as u64) << 32) | b.finalize() as u64)
}

/// The records bytes of a scanned shard, one batch at a time, in offset order.
struct BatchReader<'a> {
    scan: &'a recovery::ShardScan,
    seg: usize,
    batch: usize,
    file: Option<std::fs::File>,
}

impl<'a> BatchReader<'a> {
    fn new(scan: &'a recovery::ShardScan) -> Self {
        BatchReader { scan, seg: 0, batch: 0, file: None }
    }

    fn next_batch(&mut self) -> Result<Option<Vec<u8>>, String> {
        use std::os::unix::fs::FileExt;
        loop {
            let Some(seg) = self.scan.segments.get(self.seg) else { return Ok(None) };
            let Some(bl) = seg.batches.get(self.batch) else {
                (self.seg, self.batch, self.file) = (self.seg + 1, 0, None);
                continue;
            };
            if self.file.is_none() {
                self.file =
                    Some(std::fs::File::open(&seg.path).map_err(|e| format!("open {}: {e}", seg.path.display()))?);
            }
            let mut buf = vec![0u8; bl.records_len as usize];
            let at = bl.pos + wal::batch::BATCH_HEADER_LEN as u64;
            self.file
                .as_ref()
                .expect("opened above")
                .read_exact_at(&mut buf, at)
                .map_err(|e| format!("read {} at byte {at}: {e}", seg.path.display()))?;
            self.batch += 1;
            return Ok(Some(buf));
        }
    }
}

/// One record at a time over a `BatchReader`.
struct RecordCursor<'a> {
    batches: BatchReader<'a>,
    buf: Vec<u8>,
    pos: usize,
}

impl<'a> RecordCursor<'a> {
    fn new(scan: &'a recovery::ShardScan) -> Self {
        RecordCursor { batches: BatchReader::new(scan), buf: Vec::new(), pos: 0 }
    }

    /// The next record and its encoded bytes (header + payload).
    fn next(&mut self) -> Result<Option<(RecordRef<'_>, &[u8])>, String> {
        while self.pos == self.buf.len() {
            match self.batches.next_batch()? {
                Some(b) => (self.buf, self.pos) = (b, 0),
                None => return Ok(None),
            }
        }
        let (r, n) = record::decode(&self.buf[self.pos..]).map_err(|e| format!("record after {}: {e}", self.pos))?;
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(Some((r, bytes)))
    }
}

/// How two copies of a shard compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Agreement {
    /// Byte-identical at every offset both hold, and they hold at least one in common
    /// (or both are empty): one is a prefix of the other, trims aside.
    Agree,
    /// No offset held by both (one is empty, or their ranges do not meet): nothing
    /// was compared, so nothing is known to agree.
    NothingInCommon,
    /// Some offset holds different records.
    Differ,
}

/// Exit status of `inspect --compare`: every shard agrees.
pub const COMPARE_AGREE: i32 = 0;
/// Some shard's copies hold different records at an offset.
pub const COMPARE_DIFFER: i32 = 1;
/// A log cannot be read, or the shard sets differ.
pub const COMPARE_ERROR: i32 = 2;
/// No shard differs, but on some shard the copies share no record.
pub const COMPARE_NOTHING_IN_COMMON: i32 = 3;

/// `corelog inspect --compare A B`: walks both logs shard by shard, record by record,
/// and prints where they first differ. Exit status: `COMPARE_AGREE` when on every shard
/// the two logs hold byte-identical records at every offset both hold and share at least
/// one (or both are empty), `COMPARE_DIFFER` when some offset holds different records,
/// `COMPARE_NOTHING_IN_COMMON` when no shard differs but some shard's copies share no
/// record (one empty, or trimmed past the other's end), `COMPARE_ERROR` when a log
/// cannot be read or the shard sets differ. The worst shard decides, in that order
/// from error down.
pub fn compare(a: &Path, b: &Path) -> i32 {
    let (sa, sb) = match (control::list_shards(a), control::list_shards(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("corelog inspect: {e}");
            return COMPARE_ERROR;
        }
    };
    if sa != sb || sa.is_empty() {
        println!("shard sets differ or are empty: a {sa:?}, b {sb:?}");
        return COMPARE_ERROR;
    }
    let mut worst = Agreement::Agree;
    let mut error = false;
    for id in sa {
        match compare_shard(id, &control::shard_dir(a, id), &control::shard_dir(b, id)) {
            Ok((line, agreement)) => {
                println!("shard {id}: {line}");
                worst = worst.max(agreement);
            }
            Err(e) => {
                println!("shard {id}: ERROR: {e}");
                error = true;
            }
        }
    }
    match (error, worst) {
        (true, _) => COMPARE_ERROR,
        (false, Agreement::Differ) => COMPARE_DIFFER,
        (false, Agreement::NothingInCommon) => COMPARE_NOTHING_IN_COMMON,
        (false, Agreement::Agree) => COMPARE_AGREE,
    }
}

fn compare_shard(id: u16, a: &Path, b: &Path) -> Result<(String, Agreement), String> {
    let sa = recovery::scan(id, a).map_err(|e| format!("a: {e}"))?;
    let sb = recovery::scan(id, b).map_err(|e| format!("b: {e}"))?;
    let range = |s: &recovery::ShardScan| match s.records {
        0 => "no records".to_string(),
        n => format!("{n} records, offsets {}..{}", s.first_offset(), s.next_offset),
    };
    let sizes = format!("a: {}; b: {}", range(&sa), range(&sb));
    if sa.records == 0 && sb.records == 0 {
        return Ok((format!("both empty ({sizes})"), Agreement::Agree));
    }
    let (mut ca, mut cb) = (RecordCursor::new(&sa), RecordCursor::new(&sb));
    let (mut ra, mut rb) = (ca.next()?, cb.next()?);
    // Logs trimmed at different points: compare from the later start.
    while let (Some((x, _)), Some((y, _))) = (&ra, &rb) {
        if x.offset == y.offset {
            break;
        }
        if x.offset < y.offset {
            ra = ca.next()?;
        } else {
            rb = cb.next()?;
        }
    }
    let mut compared = 0u64;
    while let (Some((x, xb)), Some((y, yb))) = (&ra, &rb) {
        if xb != yb {
            let line = format!(
                "DIFFER at offset {}: a epoch {} crc {:08x} ({} bytes), b epoch {} crc {:08x} ({} bytes); {compared} identical records before it ({sizes})",
                x.offset,
                x.epoch,
                x.crc,
                x.payload.len(),
                y.epoch,
                y.crc,
                y.payload.len()
            );
            return Ok((line, Agreement::Differ));
        }
        compared += 1;
        let at = x.offset + 1;
        ra = ca.next()?;
        rb = cb.next()?;
        if ra.is_none() || rb.is_none() {
            return Ok((
                format!("identical below offset {at} ({compared} records compared; {sizes})"),
                Agreement::Agree,
            ));
        }
    }
    Ok((
        format!("NOTHING IN COMMON: no offset is held by both, nothing was compared ({sizes})"),
        Agreement::NothingInCommon,
    ))
}

#[cfg(test)]
mod tests {
    use super::clamp_epochs;

    #[test]
    fn a_trimmed_log_sees_the_epoch_of_its_first_record_from_there_on() {
        let e = [(1, 0), (2, 1322), (4, 9000)];
        assert_eq!(clamp_epochs(&e, 5280), vec![(2, 5280), (4, 9000)]);
        assert_eq!(clamp_epochs(&e, 1322), vec![(2, 1322), (4, 9000)]);
        assert_eq!(clamp_epochs(&e, 0), e.to_vec());
        assert_eq!(clamp_epochs(&e, 9500), vec![(4, 9500)]);
    }
}
