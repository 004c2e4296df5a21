//! Scrubbing: re-reading a shard's sealed segments at a bounded rate to find bit rot.
//!
//! A start trusts a sealed segment's index file after checking only its checksum, the
//! segment's name, the next segment's name and its last batch (`boot.rs`): every other
//! byte of a sealed segment is read by nothing but client reads. So that damage there is
//! still found while it can be repaired from the peer, each shard re-reads its sealed
//! segments (every one but the one being written), oldest first, round and round, with
//! Direct I/O reads of at most [`CHUNK`] bytes (the device's bytes, not a cached copy),
//! paced to `--scrub-mib-per-s` shared by the node's shards. Each segment is checked
//! as the boot scan checks it — every batch frame and CRC, every record's CRC and offset,
//! batches back to back from byte 0 up to the next segment's first offset, zeros after
//! the last one — and against its index file: the batch positions, `next_offset`,
//! `end_pos`, the last batch and the digest of the record bytes ([`SegCheck`], sans I/O).
//!
//! Damage is logged (ERROR, naming shard, segment, byte and offsets), counted once
//! (`corelog_scrub_damage_total`), shown while known (`corelog_scrub_damaged`, `/health`
//! says `scrub=damaged`) and never served: a read of a damaged batch fails, since every
//! record's CRC is checked as it is decoded (`Log::read`, `Log::read_offsets`) and a
//! batch header that is not the one the log's index expects is refused (`Log::fetch`).
//! Damage is not repaired here: the operator rebuilds the shard from the peer
//! (docs/operations.md §7.3).
//!
//! A segment that retention deletes, or that a follower's cut changes, while it is being
//! read is skipped, never reported: it is reported only when, after its last read, the
//! log still holds it as a sealed segment and its file is the one that was read
//! (same inode, same modification and change times).

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelog_client::record;

use crate::shard::Shard;
use crate::wal::batch::{self, BATCH_HEADER_LEN, BLOCK, MAX_BATCH_BYTES};
use crate::wal::segidx::{self, Digest, SegIdx};

/// `--scrub-mib-per-s` by default, for the whole node: 12 MiB/s re-reads 1 TB in a day
/// (12 × 2^20 B × 86,400 s ≈ 1.09 × 10^12 B), a small share of an NVMe device's reads.
pub const DEFAULT_MIB_PER_S: f64 = 12.0;
/// Bytes one read takes at most (one batch is at most 1 MiB + a block: two reads).
pub const CHUNK: usize = 1024 * 1024;
/// How long after the node is ready the first read comes: the start's own reads and the
/// first clients go first.
pub const START_AFTER: Duration = Duration::from_secs(1);
/// How often a shard without sealed segments looks again.
const IDLE: Duration = Duration::from_secs(1);
/// Damaged spots itemised per segment; beyond it the rest of the segment is one report.
const MAX_FINDINGS: usize = 32;

/// Bytes per second one shard reads, from the node's rate and shard count; None: off.
pub fn shard_bytes_per_s(node_mib_per_s: f64, shard_count: u16) -> Option<u64> {
    if node_mib_per_s.is_nan() || node_mib_per_s <= 0.0 || shard_count == 0 {
        return None;
    }
    let b = node_mib_per_s * (1u64 << 20) as f64 / shard_count as f64;
    Some((b as u64).max(1))
}

/// Paces reads to a rate: a read may start once the previous ones' bytes have had their
/// time at the rate. Time spent idle (or reading slowly) earns no credit, so the
/// scrubber never bursts above the rate to catch up.
#[derive(Debug)]
pub struct Pacer {
    bytes_per_s: u64,
    next: Option<Instant>,
}

impl Pacer {
    pub fn new(bytes_per_s: u64) -> Pacer {
        assert!(bytes_per_s > 0);
        Pacer { bytes_per_s, next: None }
    }

    /// How long to wait, from `now`, before a read of `bytes`.
    pub fn take(&mut self, bytes: u64, now: Instant) -> Duration {
        let start = self.next.map_or(now, |n| n.max(now));
        let cost_ns = (bytes as u128 * 1_000_000_000 / self.bytes_per_s as u128).min(u64::MAX as u128) as u64;
        self.next = Some(start + Duration::from_nanos(cost_ns));
        start - now
    }
}

/// One damaged spot of a sealed segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte position in the segment: the batch's, where no batch is, or where non-zero
    /// bytes follow the last batch.
    pub pos: u64,
    /// The offsets it holds (`first..end`); None where it holds no record (after the last
    /// batch, the index file).
    pub offsets: Option<(u64, u64)>,
    pub what: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.offsets {
            Some((a, b)) => write!(f, "byte {} (offsets {a}..={}): {}", self.pos, b.saturating_sub(1), self.what),
            None => write!(f, "byte {} (no record): {}", self.pos, self.what),
        }
    }
}

/// What the bytes at a batch position are.
enum Verdict {
    /// Not all fed yet.
    More,
    /// A valid batch: its record count, span, CRC field and records length.
    Whole { count: u64, span: u64, crc: u32, records_len: u32 },
    /// Damaged (what is wrong): the next batch may still be found by the index.
    Bad(String),
    /// The file ends inside or before it: nothing more to find.
    Cut(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading batches.
    Batches,
    /// After the last batch: zeros up to the file's end.
    Tail,
    /// Nothing more to check.
    Done,
}

/// The check of one sealed segment, fed its bytes in order from byte 0 (no I/O).
pub struct SegCheck {
    first: u64,
    /// The next segment's first offset: where this one's records must end.
    next: u64,
    /// Its index file, when there is one that names this segment and the next.
    idx: Option<SegIdx>,
    /// Bytes from file position `buf_at` on (never before `pos`).
    buf: Vec<u8>,
    buf_at: u64,
    /// Where the next batch (or, in the tail, the next unchecked byte) starts.
    pos: u64,
    expected: u64,
    /// Batches checked (and passed over after damage).
    bi: usize,
    digest: Digest,
    /// The digest and last batch are compared with the index only when every batch was whole.
    whole: bool,
    last: Option<(u32, u32)>,
    phase: Phase,
    found: Vec<Damage>,
}

impl SegCheck {
    /// The check of the segment starting at offset `first`, followed by one starting at
    /// `next`, with its index file if it has one.
    pub fn new(first: u64, next: u64, idx: Option<SegIdx>) -> SegCheck {
        let mut c = SegCheck {
            first,
            next,
            idx: None,
            buf: Vec::new(),
            buf_at: 0,
            pos: 0,
            expected: first,
            bi: 0,
            digest: Digest::default(),
            whole: true,
            last: None,
            phase: Phase::Batches,
            found: Vec::new(),
        };
        match idx {
            Some(ix) if ix.first_offset != first || ix.next_offset != next => c.found.push(Damage {
                pos: 0,
                offsets: None,
                what: format!(
                    "its index file says offsets {}..{}, the segments' names {first}..{next}",
                    ix.first_offset, ix.next_offset
                ),
            }),
            ix => c.idx = ix,
        }
        c
    }

    /// Whether the rest of the file need not be read.
    pub fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The next bytes of the segment.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.phase == Phase::Done {
            return;
        }
        self.drop_consumed();
        self.buf.extend_from_slice(bytes);
        self.run(false);
    }

    /// The file ended after the bytes fed: what was found.
    pub fn finish(mut self) -> Vec<Damage> {
        self.run(true);
        self.found
    }

    /// A read at `pos` failed: the rest of the segment cannot be checked.
    pub fn read_failed(&mut self, pos: u64, e: &std::io::Error) {
        let offsets = match self.phase {
            Phase::Batches => Some(self.covering(pos)),
            _ => None,
        };
        self.damage(pos, offsets, format!("read error: {e}"));
        self.phase = Phase::Done;
    }

    fn run(&mut self, eof: bool) {
        loop {
            let progressed = match self.phase {
                Phase::Batches => self.step_batch(eof),
                Phase::Tail => self.step_tail(eof),
                Phase::Done => false,
            };
            if !progressed {
                break;
            }
        }
        if self.phase == Phase::Done {
            self.buf = Vec::new();
        }
    }

    /// Drops the bytes before `pos` (once per piece fed: a batch at a time would move
    /// the rest of the buffer for every 4 KiB batch).
    fn drop_consumed(&mut self) {
        if self.pos > self.buf_at {
            let n = ((self.pos - self.buf_at) as usize).min(self.buf.len());
            self.buf.drain(..n);
            self.buf_at += n as u64;
        }
    }

    /// The bytes from `pos` on that have been fed.
    fn here(&self) -> &[u8] {
        let skip = (self.pos - self.buf_at) as usize;
        self.buf.get(skip..).unwrap_or_default()
    }

    fn damage(&mut self, pos: u64, offsets: Option<(u64, u64)>, what: String) {
        if self.found.len() + 1 >= MAX_FINDINGS {
            self.found.push(Damage {
                pos,
                offsets: Some((offsets.map_or(self.expected, |o| o.0), self.next)),
                what: format!("{what}; and more damage: the rest of the segment is not checked this pass"),
            });
            self.phase = Phase::Done;
            return;
        }
        self.found.push(Damage { pos, offsets, what });
    }

    /// The offsets of the batch the index places at or before byte `pos` (without an
    /// index: from the next expected offset to the segment's end).
    fn covering(&self, pos: u64) -> (u64, u64) {
        let Some(ix) = &self.idx else { return (self.expected, self.next) };
        let i = (0..ix.batches.len()).rev().find(|&i| ix.batches.get(self.first, i).pos <= pos);
        match i {
            Some(i) => {
                let l = ix.batches.get(self.first, i);
                (l.first_offset, l.first_offset + l.count as u64)
            }
            None => (self.expected, self.next),
        }
    }

    /// Checks the batch at `pos` once its bytes are in; false when more are needed.
    fn step_batch(&mut self, eof: bool) -> bool {
        let end = match &self.idx {
            Some(ix) => self.bi == ix.batches.len(),
            None => self.expected == self.next,
        };
        if end {
            self.end_of_batches();
            return true;
        }
        let pos = self.pos;
        match self.judge(eof) {
            Verdict::More => return false,
            Verdict::Whole { count, span, crc, records_len } => {
                let skip = (self.pos - self.buf_at) as usize + BATCH_HEADER_LEN;
                self.digest.update(&self.buf[skip..skip + records_len as usize]);
                self.last = Some((crc, records_len));
                self.expected += count;
                self.pos += span;
                self.bi += 1;
            }
            Verdict::Cut(what) => {
                // The rest of the segment is missing.
                let from = self.covering(pos).0;
                self.damage(pos, Some((from, self.next)), what);
                self.phase = Phase::Done;
            }
            Verdict::Bad(what) => {
                self.whole = false;
                let offsets = self.covering(pos);
                self.damage(pos, Some(offsets), what);
                self.skip_batch();
            }
        }
        true
    }

    /// What lies at `pos`, as far as the bytes fed tell.
    fn judge(&self, eof: bool) -> Verdict {
        let (pos, a) = (self.pos, self.here());
        let cut = || {
            Verdict::Cut(format!(
                "the file ends at byte {} inside or before the batch at byte {pos}",
                pos + a.len() as u64
            ))
        };
        if a.len() < BATCH_HEADER_LEN {
            return if eof { cut() } else { Verdict::More };
        }
        if a[0..4] != batch::BATCH_MAGIC || a[4] != batch::BATCH_VERSION {
            return Verdict::Bad("no batch header here (magic or version)".into());
        }
        let records_len = u32::from_le_bytes(a[20..24].try_into().expect("4 bytes")) as usize;
        if records_len > MAX_BATCH_BYTES {
            return Verdict::Bad(format!(
                "the batch header claims {records_len} bytes of records (at most {MAX_BATCH_BYTES})"
            ));
        }
        match a.get(..BATCH_HEADER_LEN + records_len) {
            Some(whole) => self.check_batch(whole).unwrap_or_else(Verdict::Bad),
            None if eof => cut(),
            None => Verdict::More,
        }
    }

    /// Checks the batch at `pos` (`a` holds exactly its header and records): whole, or
    /// what is wrong.
    fn check_batch(&self, a: &[u8]) -> Result<Verdict, String> {
        if batch::header(a).is_none() {
            return Err("the batch header's flags or reserved bytes are not zero".into());
        }
        let Some(h) = batch::decode(a) else {
            // Say which record, if one: the batch CRC covers the records too.
            return Err(match record::Records::new(&a[BATCH_HEADER_LEN..]).find_map(Result::err) {
                Some(e) => format!("batch CRC mismatch; {e}"),
                None => "batch CRC mismatch; its records' own CRCs hold: the batch header is damaged".into(),
            });
        };
        if h.first_offset != self.expected {
            return Err(format!(
                "the batch holds offset {} where the log continues at {}",
                h.first_offset, self.expected
            ));
        }
        if h.first_offset + h.count as u64 > self.next {
            return Err(format!(
                "the batch holds offsets {}..{}, past the next segment's first offset {}",
                h.first_offset,
                h.first_offset + h.count as u64,
                self.next
            ));
        }
        let recs = &a[BATCH_HEADER_LEN..];
        record::verify_run(recs, h.first_offset, h.count)
            .map_err(|e| format!("batch CRC valid but records invalid: {e}"))?;
        let span = batch::span(h.records_len as usize);
        if let Some(ix) = &self.idx {
            let l = ix.batches.get(self.first, self.bi);
            if (l.pos, l.first_offset, l.count, l.span) != (self.pos, h.first_offset, h.count, span) {
                return Err(format!(
                    "disagrees with its index file, which puts batch {} at byte {} with offsets {}..{} in {} bytes; the segment has offsets {}..{} in {span} bytes there",
                    self.bi,
                    l.pos,
                    l.first_offset,
                    l.first_offset + l.count as u64,
                    l.span,
                    h.first_offset,
                    h.first_offset + h.count as u64,
                ));
            }
        }
        Ok(Verdict::Whole { count: h.count as u64, span, crc: batch::stored_crc(a), records_len: h.records_len })
    }

    /// After a damaged batch: on to the next batch the index knows of; without an index
    /// nothing after it can be placed.
    fn skip_batch(&mut self) {
        match &self.idx {
            Some(ix) if self.phase == Phase::Batches && self.bi + 1 < ix.batches.len() => {
                self.bi += 1;
                let l = ix.batches.get(self.first, self.bi);
                self.pos = l.pos;
                self.expected = l.first_offset;
            }
            Some(ix) if self.phase == Phase::Batches => {
                self.bi = ix.batches.len();
                self.pos = ix.end_pos;
                self.expected = self.next;
            }
            _ => self.phase = Phase::Done,
        }
    }

    /// Every batch is read: what the index says of them as a whole, then the tail.
    fn end_of_batches(&mut self) {
        let (pos, first, next) = (self.pos, self.first, self.next);
        let mut wrong = Vec::new();
        if let Some(ix) = self.idx.as_ref().filter(|_| self.whole) {
            if pos != ix.end_pos {
                wrong.push(format!("its batches end at byte {pos}, its index file says {}", ix.end_pos));
            }
            if self.digest.value() != ix.digest {
                wrong.push(format!(
                    "the digest of its records is {:016x}, its index file says {:016x}",
                    self.digest.value(),
                    ix.digest
                ));
            }
            if self.last.is_some_and(|l| l != (ix.last_crc, ix.last_records_len)) {
                wrong.push("its last batch is not the one its index file names".to_string());
            }
        }
        for w in wrong {
            self.damage(0, Some((first, next)), w);
        }
        if self.phase == Phase::Batches {
            self.phase = Phase::Tail;
        }
    }

    /// Zeros after the last batch, as the boot scan requires of a full segment.
    fn step_tail(&mut self, eof: bool) -> bool {
        let a = self.here();
        if let Some(i) = a.iter().position(|b| *b != 0) {
            let at = self.pos + i as u64;
            let block = at / BLOCK * BLOCK;
            let end = self.pos;
            self.damage(
                block,
                None,
                format!("non-zero bytes at byte {at}, after the segment's last batch (which ends at byte {end})"),
            );
            self.phase = Phase::Done;
            return false;
        }
        self.pos += a.len() as u64;
        if eof {
            self.phase = Phase::Done;
        }
        false
    }
}

/// Spawns the shard's scrubber unless the rate is 0.
pub fn spawn(shard: &Rc<Shard>, node_mib_per_s: f64, shard_count: u16) {
    if let Some(rate) = shard_bytes_per_s(node_mib_per_s, shard_count) {
        glommio::spawn_local(run(shard.clone(), rate)).detach();
    }
}

/// The damage known in one segment (by its first offset).
struct Known {
    first: u64,
    found: Vec<Damage>,
}

/// Scrubs the shard's sealed segments, round and round, for the life of the process.
pub async fn run(shard: Rc<Shard>, bytes_per_s: u64) {
    let ctl = shard.cfg().ctl.clone();
    while !ctl.started() {
        if ctl.stopping() {
            return;
        }
        glommio::timer::sleep(Duration::from_millis(100)).await;
    }
    glommio::timer::sleep(START_AFTER).await;
    let id = shard.id();
    log::info!("shard {id}: scrubbing sealed segments at {:.1} MiB/s", bytes_per_s as f64 / (1u64 << 20) as f64);
    let mut pacer = Pacer::new(bytes_per_s);
    let mut known: Vec<Known> = Vec::new();
    let mut damaged = false;
    let mut last_err = String::new();
    loop {
        if ctl.stopping() {
            return;
        }
        let segs = shard.log().segment_paths();
        let mut checked = 0;
        for w in segs.windows(2) {
            let ((first, path), next) = (&w[0], w[1].0);
            match scrub_segment(&shard, &mut pacer, *first, path, next).await {
                Outcome::Checked(found) => {
                    checked += 1;
                    last_err.clear();
                    note(&shard, &mut known, *first, path, found);
                    set_damaged(&shard, &mut damaged, !known.is_empty());
                }
                Outcome::Skipped if ctl.stopping() => return,
                Outcome::Skipped => {}
                Outcome::Failed(e) if e != last_err => {
                    log::warn!("shard {id}: scrub: {e}; trying again next round");
                    last_err = e;
                }
                Outcome::Failed(_) => {}
            }
        }
        // Segments retention deleted take their damage with them.
        let held = shard.log().segment_paths();
        known.retain(|k| held.iter().any(|(f, _)| *f == k.first));
        set_damaged(&shard, &mut damaged, !known.is_empty());
        if checked == 0 {
            // No sealed segment, or none could be read: nothing paced this round.
            glommio::timer::sleep(IDLE).await;
            continue;
        }
        shard.metrics().scrub_passes.increment(1);
    }
}

/// What became of one sealed segment's check.
enum Outcome {
    /// Read to its end (or to damage that ends its check): what was found.
    Checked(Vec<Damage>),
    /// Deleted or changed while it was read (retention, a follower's cut), or the node is
    /// stopping: nothing to say about it.
    Skipped,
    /// It could not be opened.
    Failed(String),
}

/// Reports what a check of segment `first` found (each damaged spot once) and forgets
/// damage it no longer finds.
fn note(shard: &Shard, known: &mut Vec<Known>, first: u64, path: &Path, found: Vec<Damage>) {
    let id = shard.id();
    let i = known.iter().position(|k| k.first == first);
    if found.is_empty() {
        if let Some(i) = i {
            known.remove(i);
            log::info!("shard {id}: scrub: {} reads whole again", path.display());
        }
    } else {
        let before: &[Damage] = i.map_or(&[], |i| &known[i].found);
        for d in found.iter().filter(|d| !before.contains(d)) {
            shard.metrics().scrub_damage.increment(1);
            log::error!(
                "shard {id}: scrub: DAMAGED segment {} {d}; a read of these records fails on this node: rebuild the shard from its peer (docs/operations.md §7.3)",
                path.display()
            );
        }
        match i {
            Some(i) => known[i].found = found,
            None => known.push(Known { first, found }),
        }
    }
}

/// The gauge and `/health` follow whether any damage is known (`now`; `was` before).
fn set_damaged(shard: &Shard, was: &mut bool, now: bool) {
    if *was != now {
        *was = now;
        shard.metrics().scrub_damaged.set(if now { 1.0 } else { 0.0 });
        crate::metrics::scrub_damage_known(now);
    }
}

/// Checks one sealed segment: what it holds is reported only when, after its last read,
/// the log still holds it as a sealed segment and its file is the one that was read.
async fn scrub_segment(shard: &Rc<Shard>, pacer: &mut Pacer, first: u64, path: &Path, next: u64) -> Outcome {
    let log = shard.log();
    let sealed = || {
        let segs = log.segment_paths();
        segs.iter().position(|(f, _)| *f == first).is_some_and(|i| i + 1 < segs.len())
    };
    let Some(before) = identity(path).filter(|_| sealed()) else {
        return Outcome::Skipped;
    };
    let file = match glommio::io::DmaFile::open(path).await {
        Ok(f) => f,
        Err(_) if !sealed() => return Outcome::Skipped,
        Err(e) => return Outcome::Failed(format!("open {}: {e}", path.display())),
    };
    let dir = log.dir().to_path_buf();
    let idx = glommio::executor().spawn_blocking(move || segidx::read(&dir, first)).await;
    let mut pre = Vec::new();
    let idx = match idx {
        Ok(ix) => ix,
        Err(e) => {
            pre.push(Damage {
                pos: 0,
                offsets: None,
                what: format!("index file: {e}; the next start rebuilds it from the segment if the segment is whole"),
            });
            None
        }
    };
    let mut check = SegCheck::new(first, next, idx);
    let mut pos = 0u64;
    loop {
        let wait = pacer.take(CHUNK as u64, Instant::now());
        if !wait.is_zero() {
            glommio::timer::sleep(wait).await;
        }
        if shard.cfg().ctl.stopping() {
            let _ = file.close().await;
            return Outcome::Skipped;
        }
        match read(&file, path, pos).await {
            Ok(bytes) => {
                shard.metrics().scrub_bytes.increment(bytes.len() as u64);
                check.feed(&bytes);
                pos += bytes.len() as u64;
                if bytes.len() < CHUNK {
                    break;
                }
            }
            Err(e) => {
                check.read_failed(pos, &e);
                break;
            }
        }
        if check.done() {
            break;
        }
    }
    let _ = file.close().await;
    let mut found = pre;
    found.extend(check.finish());
    if sealed() && identity(path) == Some(before) {
        Outcome::Checked(found)
    } else {
        Outcome::Skipped
    }
}

/// Which file a path names and when it last changed: (inode, mtime ns, ctime ns, size).
fn identity(path: &Path) -> Option<(u64, i64, i64, i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec(), m.size()))
}

/// Up to `CHUNK` bytes at `pos` (fewer at the end of the file), read with Direct I/O.
async fn read(file: &glommio::io::DmaFile, path: &Path, pos: u64) -> std::io::Result<Vec<u8>> {
    match file.read_at_aligned(pos, CHUNK).await.map_err(std::io::Error::from) {
        Ok(r) => Ok(r.to_vec()),
        // Refused at submission (a device-mapper table without poll support, loaded under
        // the running node): a plain O_DIRECT pread, off the executor.
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            let path: PathBuf = path.to_path_buf();
            glommio::executor().spawn_blocking(move || read_plain(&path, pos)).await
        }
        Err(e) => Err(std::io::Error::new(e.kind(), format!("read {} at byte {pos}: {e}", path.display()))),
    }
}

fn read_plain(path: &Path, pos: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path)?;
    // O_DIRECT wants a block-aligned buffer: a block-aligned window of a larger one.
    let mut v = vec![0u8; CHUNK + BLOCK as usize];
    let skip = v.as_ptr().align_offset(BLOCK as usize);
    let buf = &mut v[skip..skip + CHUNK];
    let mut n = 0;
    while n < CHUNK {
        let k = f.read_at(&mut buf[n..], pos + n as u64).map_err(|e| {
            std::io::Error::new(e.kind(), format!("read {} at byte {}: {e}", path.display(), pos + n as u64))
        })?;
        if k == 0 {
            break;
        }
        n += k;
    }
    Ok(buf[..n].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_rate_covers_a_terabyte_a_day_shared_by_the_shards() {
        let node = shard_bytes_per_s(DEFAULT_MIB_PER_S, 1).unwrap();
        assert!(node as u128 * 86_400 >= 1_000_000_000_000, "{node} B/s");
        assert_eq!(shard_bytes_per_s(12.0, 4), Some(3 << 20));
        assert_eq!(shard_bytes_per_s(0.0, 4), None, "0 turns it off");
        assert_eq!(shard_bytes_per_s(f64::NAN, 4), None);
        assert_eq!(shard_bytes_per_s(1e-9, 4), Some(1), "never a rate of 0");
    }

    #[test]
    fn the_pacer_spaces_reads_at_the_rate_and_keeps_no_credit_from_idle_time() {
        let mib = 1u64 << 20;
        let mut p = Pacer::new(2 * mib); // 2 MiB/s: a MiB every 500 ms
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(p.take(mib, t0), Duration::ZERO, "the first read at once");
        assert_eq!(p.take(mib, t0), ms(500));
        assert_eq!(p.take(mib, t0 + ms(200)), ms(800), "the third after 1 s");
        // A read that comes late (slow device, idle) earns nothing: the next one still
        // waits a whole MiB's time after it.
        assert_eq!(p.take(mib, t0 + ms(5000)), Duration::ZERO);
        assert_eq!(p.take(mib, t0 + ms(5000)), ms(500));
        assert_eq!(p.take(mib / 2, t0 + ms(6000)), ms(0));
        assert_eq!(p.take(mib, t0 + ms(6000)), ms(250), "half a MiB takes 250 ms");
    }

    /// A sealed segment of `batches` batches of `per` records from offset `first`
    /// (records of 100 + i bytes), `len` bytes long: (bytes, each batch's position).
    fn segment(first: u64, batches: usize, per: u32, len: usize) -> (Vec<u8>, Vec<u64>) {
        let mut out = Vec::new();
        let mut at = Vec::new();
        let mut o = first;
        for _ in 0..batches {
            let mut recs = Vec::new();
            for _ in 0..per {
                record::encode(o, 1, &vec![(o % 251) as u8; 100 + (o % 7) as usize], &mut recs);
                o += 1;
            }
            let h = batch::BatchHeader {
                first_offset: o - per as u64,
                count: per,
                records_len: recs.len() as u32,
                epoch: 1,
            };
            let mut b = vec![0u8; batch::span(recs.len()) as usize];
            batch::encode_into(&h, &recs, &mut b);
            at.push(out.len() as u64);
            out.extend_from_slice(&b);
        }
        assert!(out.len() <= len);
        out.resize(len, 0);
        (out, at)
    }

    /// The index file a start would write for `bytes` (scanned from a file).
    fn index_of(bytes: &[u8], first: u64, next: u64) -> SegIdx {
        let dir = std::env::temp_dir().join(format!("scrub-unit-{}-{}", std::process::id(), rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(crate::wal::recovery::segment_name(first));
        std::fs::write(&path, bytes).unwrap();
        let ix = crate::boot::scan_sealed(0, &[(first, path)], next).unwrap().expect("a whole segment");
        std::fs::remove_dir_all(&dir).unwrap();
        ix
    }

    /// Feeds `bytes` in pieces of `step` bytes.
    fn check(bytes: &[u8], first: u64, next: u64, idx: Option<SegIdx>, step: usize) -> Vec<Damage> {
        let mut c = SegCheck::new(first, next, idx);
        for piece in bytes.chunks(step) {
            c.feed(piece);
            if c.done() {
                break;
            }
        }
        c.finish()
    }

    const LEN: usize = 64 * 4096;

    #[test]
    fn a_whole_segment_passes_with_and_without_its_index_in_any_pieces() {
        let (seg, _) = segment(1000, 20, 3, LEN);
        let ix = index_of(&seg, 1000, 1060);
        for step in [1, 77, 4096, 5000, 1 << 20] {
            assert_eq!(check(&seg, 1000, 1060, Some(ix.clone()), step), vec![], "step {step}");
            assert_eq!(check(&seg, 1000, 1060, None, step), vec![], "step {step}");
        }
    }

    #[test]
    fn a_flipped_record_byte_names_its_batch_and_the_batches_after_it_are_still_checked() {
        let (mut seg, at) = segment(1000, 20, 3, LEN);
        let ix = index_of(&seg, 1000, 1060);
        seg[at[7] as usize + 32 + 24 + 5] ^= 0x10; // a payload byte of offset 1021
        seg[at[12] as usize + 32 + 124 + 125 + 24 + 3] ^= 0x01; // a payload byte of 1038
        let found = check(&seg, 1000, 1060, Some(ix), 4096);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].pos, found[0].offsets), (at[7], Some((1021, 1024))));
        assert!(found[0].what.contains("batch CRC mismatch; CRC mismatch in record 1021"), "{}", found[0].what);
        assert_eq!((found[1].pos, found[1].offsets), (at[12], Some((1036, 1039))));
        assert!(found[1].what.contains("CRC mismatch in record 1038"), "{}", found[1].what);
        // Without the index nothing after the first damage can be placed.
        let found = check(&seg, 1000, 1060, None, 4096);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].pos, found[0].offsets), (at[7], Some((1021, 1060))));
    }

    #[test]
    fn damage_the_frame_checks_find_is_named() {
        let (seg, at) = segment(0, 10, 2, LEN);
        let ix = index_of(&seg, 0, 20);
        let cases: [(usize, u8, &str); 6] = [
            (0, 0xff, "magic"),
            (5, 1, "flags"),
            (9, 1, "the batch header is damaged"),
            (25, 1, "the batch header is damaged"),
            (29, 1, "the batch header is damaged"),
            (22, 0x40, "claims"),
        ];
        for (byte, xor, want) in cases {
            let mut s = seg.clone();
            s[at[4] as usize + byte] ^= xor;
            let found = check(&s, 0, 20, Some(ix.clone()), 3000);
            assert_eq!(found.len(), 1, "header byte {byte}: {found:?}");
            assert_eq!((found[0].pos, found[0].offsets), (at[4], Some((8, 10))), "header byte {byte}");
            assert!(found[0].what.contains(want), "header byte {byte}: {}", found[0].what);
        }
    }

    #[test]
    fn what_the_index_says_is_checked_and_so_is_the_tail() {
        let (seg, at) = segment(0, 10, 2, LEN);
        let ix = index_of(&seg, 0, 20);
        let mut wrong = ix.clone();
        wrong.digest ^= 1;
        let found = check(&seg, 0, 20, Some(wrong), 4096);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].what.contains("digest") && found[0].offsets == Some((0, 20)), "{found:?}");
        let found = check(&seg, 0, 21, Some(ix.clone()), 4096);
        assert!(found[0].what.contains("index file says offsets 0..20"), "{found:?}");
        // Without an index: the records end where the next segment begins.
        let found = check(&seg, 0, 21, None, 4096);
        assert!(found[0].what.contains("no batch header"), "{found:?}");
        assert_eq!(found[0].offsets, Some((20, 21)));
        let found = check(&seg, 0, 19, None, 4096);
        assert!(found[0].what.contains("past the next segment"), "{found:?}");
        // A non-zero byte after the last batch; a file cut inside a batch.
        let end = ix.end_pos as usize;
        let mut s = seg.clone();
        s[end + 5000] = 7;
        let found = check(&s, 0, 20, Some(ix.clone()), 4096);
        assert_eq!(found, vec![Damage { pos: (end + 4096) as u64, offsets: None, what: found[0].what.clone() }]);
        let cut = &seg[..at[9] as usize + 100];
        let found = check(cut, 0, 20, Some(ix.clone()), 4096);
        assert_eq!((found[0].pos, found[0].offsets), (at[9], Some((18, 20))), "{found:?}");
        assert!(found[0].what.contains("ends at byte"), "{found:?}");
    }

    #[test]
    fn damage_everywhere_is_itemised_up_to_a_bound_then_reported_as_one() {
        let (mut seg, at) = segment(0, 40, 1, LEN);
        let ix = index_of(&seg, 0, 40);
        seg[at[2] as usize..at[39] as usize + 4096].fill(0);
        let found = check(&seg, 0, 40, Some(ix), 1 << 20);
        assert_eq!(found.len(), MAX_FINDINGS, "{found:?}");
        assert_eq!((found[0].pos, found[0].offsets), (at[2], Some((2, 3))));
        let last = found.last().unwrap();
        assert_eq!((last.pos, last.offsets), (at[33], Some((33, 40))), "{last:?}");
        assert!(last.what.contains("and more damage"), "{last:?}");
    }

    #[test]
    fn a_read_error_ends_the_check_of_the_segment() {
        let (seg, at) = segment(0, 10, 2, LEN);
        let ix = index_of(&seg, 0, 20);
        let mut c = SegCheck::new(0, 20, Some(ix));
        c.feed(&seg[..at[3] as usize]);
        c.read_failed(at[3], &std::io::Error::other("Input/output error"));
        assert!(c.done());
        let found = c.finish();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].pos, found[0].offsets), (at[3], Some((6, 8))));
    }
}
