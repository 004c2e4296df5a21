//! `corelog admin backup`: a copy of a running node's log in a data directory of its own,
//! taken over the client port while the node serves (docs/operations.md §16).
//!
//! Per shard, a reader thread asks the node for its committed records (`Read`, 1 MiB at a
//! time) and a glommio executor hands them to a shard opened on the backup directory
//! exactly as a follower hands it its leader's batches (`check_replicated`,
//! `stage_replicated`): the backup is written by the server's own code, so its segments,
//! index files, checkpoints and stream/producer state are what a follower of the node
//! would hold, record for record (offsets, epochs, CRCs as the node stored them).
//!
//! - **Consistent**: a node hands out committed records only, in offset order, so the
//!   copy is a prefix of the shard's log. A shard's copy ends where a read first came back
//!   short of its budget (the committed end at that moment): every append acknowledged
//!   before the backup started is below it.
//! - **Incremental and resumable**: the shard opened on the directory recovers it as a
//!   start does (a torn tail from a killed backup is cut) and the copy goes on from its
//!   end. Before going on, the copy's last record is compared with the node's record at
//!   that offset, byte for byte: a directory holding another log is refused.
//! - **Bounded**: at most `QUEUE` runs of at most `codec::MAX_READ_BYTES` wait between the
//!   reader and the writer of a shard; the shard stages at most `shard::MAX_STAGED_BYTES`.
//!
//! - **Trimmed logs**: a shard whose log starts at offset `F` (retention deleted what was
//!   below) is copied from `F` with the node's index snapshot at `F` (`IndexSnapshot`:
//!   stream versions and producer windows of the deleted records), written into the
//!   backup before its log as a follower seeded by its leader does (`replica::seed`).
//!   A backup that ends below the node's first offset is refused: it can no longer be
//!   continued, only started again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelog_client::codec::MAX_READ_BYTES;
use corelog_client::record::{self, MAX_EXT_LEN, RECORD_HEADER_LEN};
use corelog_client::{Client, ClientConfig, Error};
use glommio::{LocalExecutorBuilder, Placement, PoolPlacement};

use crate::control;
use crate::node::{self, Place, ServeConfig};
use crate::wal::batch::{MAX_BATCH_BYTES, MAX_BATCH_RECORDS};

/// Runs a reader may read ahead of its shard's writer.
const QUEUE: usize = 4;
/// The largest record: a read that came back with less than this left of its budget may
/// have been cut by the budget, not by the committed end.
const MAX_RECORD: usize = RECORD_HEADER_LEN + MAX_EXT_LEN + corelog_client::codec::MAX_PAYLOAD;
/// How often progress is printed.
const REPORT_EVERY: Duration = Duration::from_secs(2);

/// What a shard's reader tells its writer.
enum ToWriter {
    /// The node's epoch for the shard (every record's is at or below it), and its first
    /// offset with the index snapshot there when it is above 0.
    Start {
        epoch: u32,
        seed: Option<(u64, Vec<u8>)>,
    },
    /// Checked records `first..first + count`.
    Run {
        first: u64,
        count: u32,
        bytes: Vec<u8>,
    },
    /// Caught up: the copy ends at this offset.
    End(u64),
    Failed(String),
}

/// What a shard's writer tells its reader once the directory is open: where the copy
/// ends now, and its last record's bytes.
type Resume = Result<(u64, Option<Vec<u8>>), String>;

#[derive(Default)]
struct Progress {
    records: AtomicU64,
    bytes: AtomicU64,
    at: AtomicU64,
    done: AtomicBool,
}

/// Marks a shard's writer done however it ends (the progress report waits for all).
struct Done(Arc<Progress>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.done.store(true, Ordering::Relaxed);
    }
}

/// One shard's copy, as the writer saw it.
pub struct ShardCopy {
    pub shard: u16,
    /// The copy's first offset (above 0 for a log retention trimmed).
    pub first: u64,
    /// Where the copy stood before this run, and where it ends now.
    pub from: u64,
    pub next: u64,
    pub epoch: u32,
    /// Record bytes copied by this run.
    pub bytes: u64,
}

/// Copies every shard of the node at `addr` into `to` (created, or an earlier backup of
/// the same node continued). Progress on stderr every few seconds; returns each shard's
/// copy.
pub fn run(
    addr: &str,
    cfg: &ClientConfig,
    to: &Path,
    segment_bytes: u64,
    max_mb_s: f64,
) -> Result<Vec<ShardCopy>, String> {
    let shards = runtime()
        .block_on(async {
            let c = Client::connect(addr, cfg).await?;
            Ok::<_, Error>(c.info().await.shard_count)
        })
        .map_err(|e| format!("{addr}: {e}"))?;
    if shards == 0 {
        return Err(format!("{addr}: the node did not say how many shards it has"));
    }
    std::fs::create_dir_all(to).map_err(|e| format!("create {}: {e}", to.display()))?;
    let present = control::list_shards(to)?;
    if !present.is_empty() && present != (0..shards).collect::<Vec<_>>() {
        return Err(format!(
            "{} holds shards {present:?}; the node has {shards}: not a backup of this node",
            to.display()
        ));
    }
    crate::wal::probe::check_direct_io(to)?;
    corelog_runtime::fds::raise();
    let started = Instant::now();
    // Each shard's reader keeps to its share of the rate (bytes per second; 0: none).
    let rate = max_mb_s * 1e6 / shards as f64;
    let mut running = Vec::new();
    for id in 0..shards {
        let progress = Arc::new(Progress::default());
        let (to_writer, from_reader) = sync_channel::<ToWriter>(QUEUE);
        let (to_reader, from_writer) = sync_channel::<Resume>(1);
        let (a, c) = (addr.to_string(), cfg.clone());
        let p = progress.clone();
        let reader = std::thread::Builder::new()
            .name(format!("backup-read-{id}"))
            .spawn(move || read_shard(&a, &c, (id, rate), &to_writer, &from_writer, &p))
            .map_err(|e| format!("start the reader of shard {id}: {e}"))?;
        let scfg = ServeConfig::offline(to.to_path_buf(), shards, segment_bytes);
        let p = progress.clone();
        let rx = Arc::new(Mutex::new(from_reader));
        let writer = LocalExecutorBuilder::new(Placement::Unbound)
            .name(&format!("backup-{id}"))
            .io_memory(512 * 1024)
            // One blocking thread waits for the reader, the other seals segments.
            .blocking_thread_pool_placement(PoolPlacement::Unbound(2))
            .spawn(move || async move {
                let _done = Done(p.clone());
                write_shard(id, &scfg, rx, to_reader, &p).await
            })
            .map_err(|e| format!("start the writer of shard {id}: {e}"))?;
        running.push((id, progress, reader, writer));
    }
    report(&running.iter().map(|r| (r.0, r.1.clone())).collect::<Vec<_>>(), started);
    let (mut copies, mut errors) = (Vec::new(), Vec::new());
    for (id, _, reader, writer) in running {
        let w = writer.join().map_err(|e| format!("{e:?}")).and_then(|r| r);
        // The reader ends once its writer stops taking runs (its channel closes).
        let r = reader.join().map_err(|_| "reader panicked".to_string());
        match (w, r) {
            (Ok(c), Ok(())) => copies.push(c),
            (Err(e), _) | (_, Err(e)) => errors.push(format!("shard {id}: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(copies)
    } else {
        Err(errors.join("; "))
    }
}

/// Prints each shard's progress on stderr every `REPORT_EVERY` until all are done.
fn report(shards: &[(u16, Arc<Progress>)], started: Instant) {
    let mut last = (started, 0u64);
    while !shards.iter().all(|(_, p)| p.done.load(Ordering::Relaxed)) {
        std::thread::sleep(Duration::from_millis(50));
        if last.0.elapsed() < REPORT_EVERY {
            continue;
        }
        let bytes: u64 = shards.iter().map(|(_, p)| p.bytes.load(Ordering::Relaxed)).sum();
        let records: u64 = shards.iter().map(|(_, p)| p.records.load(Ordering::Relaxed)).sum();
        let rate = (bytes - last.1) as f64 / last.0.elapsed().as_secs_f64() / 1e6;
        let at: Vec<String> = shards.iter().map(|(id, p)| format!("{id}:{}", p.at.load(Ordering::Relaxed))).collect();
        eprintln!(
            "backup: {:.0} s, {records} records ({:.1} MB) copied, {rate:.1} MB/s; shard:next offset {}",
            started.elapsed().as_secs_f64(),
            bytes as f64 / 1e6,
            at.join(" ")
        );
        last = (Instant::now(), bytes);
    }
}

/// The reader of shard `id`: the node's epoch to the writer, the copy's end from it,
/// then committed runs until a read comes back short of its budget, at most `rate` bytes
/// a second on average (0: as fast as the node answers).
fn read_shard(
    addr: &str,
    cfg: &ClientConfig,
    (id, rate): (u16, f64),
    tx: &SyncSender<ToWriter>,
    resume: &Receiver<Resume>,
    p: &Progress,
) {
    let r = runtime().block_on(async {
        let c = Client::connect_shard(addr, id, cfg).await.map_err(|e| format!("{addr}: {e}"))?;
        let epoch = c.info().await.epoch;
        let (first, snap) = c
            .index_snapshot(id, crate::replica::seed::MAX_SEED_BYTES)
            .await
            .map_err(|e| format!("the node's index snapshot of shard {id}: {e}"))?;
        let seed = (first > 0).then_some((first, snap));
        tx.send(ToWriter::Start { epoch, seed }).map_err(|_| "the writer stopped")?;
        let (mut at, last) = resume.recv().map_err(|_| "the writer stopped".to_string())??;
        // `end`: where the copy ends, for the message.
        let read = |from: u64, max: u32, end: u64| {
            let c = &c;
            async move {
                c.read_raw(id, from, max).await.map_err(|e| match e {
                    Error::OutOfRange { first, .. } => format!(
                        "the node's log of shard {id} starts at offset {first} (retention trimmed it): \
                         this backup ends at {end} and cannot be continued; start a new one in an empty directory"
                    ),
                    e => format!("read at offset {from}: {e}"),
                })
            }
        };
        if let Some(mine) = last {
            let (n, theirs) = read(at - 1, 1, at).await?;
            let theirs = match record::decode(&theirs) {
                Ok((_, len)) if n > 0 => &theirs[..len],
                _ => &[][..],
            };
            if theirs != mine.as_slice() {
                return Err(format!(
                    "the backup's record at offset {} is not the node's: this directory holds another log",
                    at - 1
                ));
            }
        }
        let (began, mut read_bytes) = (tokio::time::Instant::now(), 0u64);
        loop {
            if rate > 0.0 {
                tokio::time::sleep_until(began + Duration::from_secs_f64(read_bytes as f64 / rate)).await;
            }
            let (count, bytes) = read(at, MAX_READ_BYTES, at).await?;
            read_bytes += bytes.len() as u64;
            let last_epoch = record::verify_run(&bytes, at, count).map_err(|e| format!("records from {at}: {e}"))?;
            if count > 0 && last_epoch > epoch {
                return Err(format!(
                    "a record below offset {} has epoch {last_epoch}, above the node's {epoch}",
                    at + count as u64
                ));
            }
            let short = bytes.len() + MAX_RECORD <= MAX_READ_BYTES as usize;
            for (first, n, run) in runs(&bytes, at, count) {
                tx.send(ToWriter::Run { first, count: n, bytes: run.to_vec() }).map_err(|_| "the writer stopped")?;
            }
            at += count as u64;
            p.at.store(at, Ordering::Relaxed);
            if count == 0 || short {
                return Ok(at);
            }
        }
    });
    let _ = tx.send(match r {
        Ok(end) => ToWriter::End(end),
        Err(e) => ToWriter::Failed(e),
    });
}

/// `count` checked records from `first` cut into runs a shard stages as one batch.
fn runs(bytes: &[u8], first: u64, count: u32) -> Vec<(u64, u32, &[u8])> {
    let (mut out, mut from, mut pos, mut n, mut at) = (Vec::new(), 0usize, 0usize, 0u32, first);
    for _ in 0..count {
        let len = record::peek(&bytes[pos..]).expect("verified").2;
        if n == MAX_BATCH_RECORDS || pos + len - from > MAX_BATCH_BYTES {
            out.push((at, n, &bytes[from..pos]));
            (from, at, n) = (pos, at + n as u64, 0);
        }
        pos += len;
        n += 1;
    }
    if n > 0 {
        out.push((at, n, &bytes[from..pos]));
    }
    out
}

/// The writer of shard `id`: opens the shard on the backup directory (its epoch raised to
/// the node's first), tells the reader where the copy ends, stages what it reads.
async fn write_shard(
    id: u16,
    cfg: &ServeConfig,
    rx: Arc<Mutex<Receiver<ToWriter>>>,
    resume: SyncSender<Resume>,
    p: &Progress,
) -> Result<ShardCopy, String> {
    let recv = || {
        let rx = rx.clone();
        glommio::executor().spawn_blocking(move || rx.lock().expect("one writer").recv().ok())
    };
    let (epoch, seed) = match recv().await {
        Some(ToWriter::Start { epoch, seed }) => (epoch, seed),
        Some(ToWriter::Failed(e)) => return Err(e),
        _ => return Err("the reader stopped".into()),
    };
    let opened = open(id, cfg, epoch, seed).await;
    let (shard, from) = match opened {
        Ok(x) => x,
        Err(e) => {
            let _ = resume.send(Err(e.clone()));
            return Err(e);
        }
    };
    let last = if from > shard.log().first_offset() {
        let (b, n) =
            shard.log().read(from - 1, from, 1).await.map_err(|e| format!("read the backup's last record: {e}"))?;
        assert_eq!(n, 1, "the log's last record");
        Some(b)
    } else {
        None
    };
    resume.send(Ok((from, last))).map_err(|_| "the reader stopped")?;
    loop {
        match recv().await {
            Some(ToWriter::Run { first, count, bytes }) => {
                shard.check_replicated(&bytes).map_err(|e| format!("records from {first}: {e}"))?;
                shard.wait_stage_space(bytes.len()).await;
                shard.stage_replicated(first, count, &bytes);
                p.records.fetch_add(count as u64, Ordering::Relaxed);
                p.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            Some(ToWriter::End(end)) => {
                shard.settle(end).await;
                assert_eq!(shard.log().next_offset(), end);
                let first = shard.log().first_offset();
                let bytes = p.bytes.load(Ordering::Relaxed);
                return Ok(ShardCopy { shard: id, first, from, next: end, epoch, bytes });
            }
            Some(ToWriter::Failed(e)) => return Err(e),
            Some(ToWriter::Start { .. }) | None => return Err("the reader stopped".into()),
        }
    }
}

/// The shard of the backup directory, recovered, with its epoch at least `epoch`; and
/// where its log ends. A new copy of a log that starts at `F` (`seed`) starts there with
/// the node's index snapshot.
async fn open(
    id: u16,
    cfg: &ServeConfig,
    epoch: u32,
    seed: Option<(u64, Vec<u8>)>,
) -> Result<(std::rc::Rc<crate::shard::Shard>, u64), String> {
    let dir: PathBuf = control::shard_dir(&cfg.data_dir, id);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    if control::read_epoch(&dir)? < epoch {
        control::write_epoch(&dir, epoch)?;
    }
    let fresh = crate::wal::recovery::list_segments(&dir).map_err(|e| e.to_string())?.is_empty();
    if let (true, Some((first, bytes))) = (fresh, seed) {
        crate::replica::seed::install(&dir, first, &bytes, cfg.segment_bytes)?;
    }
    let (shard, line) = node::open_shard(Place::alone(id), cfg).await?;
    log::info!("{line}");
    let next = shard.log().next_offset();
    Ok((shard, next))
}

/// A single-threaded tokio runtime for the backup's client.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cut_at_the_batch_bounds() {
        let mut bytes = Vec::new();
        let payload = vec![7u8; 60_000];
        for o in 10..60u64 {
            record::encode_ex(o, 3, record::Ext::default(), &payload, &mut bytes);
        }
        let rs = runs(&bytes, 10, 50);
        assert!(rs.len() > 1);
        let mut at = 10;
        for (first, n, run) in &rs {
            assert_eq!(*first, at);
            assert!(run.len() <= MAX_BATCH_BYTES && *n <= MAX_BATCH_RECORDS);
            record::verify_run(run, *first, *n).unwrap();
            at += *n as u64;
        }
        assert_eq!(at, 60);
        assert_eq!(rs.iter().map(|r| r.2.len()).sum::<usize>(), bytes.len());
    }
}
