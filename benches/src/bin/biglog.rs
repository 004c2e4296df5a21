//! `corelog-biglog`: writes a real corelog data directory at disk speed, without a
//! network, through the server's own shard: one pinned glommio executor per shard opens
//! it with `node::open_shard` (the start-up a `corelog serve` does: lock, boot, recovery
//! of a torn tail) and hands it runs of encoded records exactly as a follower hands it
//! the leader's batches (`wait_stage_space`, `check_replicated`, `stage_replicated`).
//! The shard's commit loop writes them, rolls segments and writes each sealed segment's
//! index file and a checkpoint, as it does when serving; `settle` waits for all of it.
//! A billion-record log is then minutes of disk time, not hours of appends.
//!
//! What it writes, per shard `s` (so that a test or a reader can check any record):
//! - the record at offset `o` has a payload of `--payload-bytes` bytes: byte `i` is byte
//!   `i` of `o` little-endian for `i < 8`, else `(i * 31) as u8 ^ s as u8` ([`payload`]);
//! - with `--stream-every N`, the records with `(o + 1) % N == 0` are events: the k-th
//!   such offset (`k = (o + 1) / N - 1`) goes to the `k mod m`-th of the m streams among
//!   `stream-0 .. stream-<K-1>` (`--streams K`) that hash to this shard
//!   (`codec::stream_shard`), at that stream's next version;
//! - with `--producer-every P`, the records with `o % P == 0` carry the producer
//!   extension of producer `(o / P) mod --producers` of this shard ([`producer_id`]), at
//!   its next sequence.
//!
//! With `--append` it continues an existing data directory from each shard's end (the
//! server's recovery first: a torn tail left by a kill is cut), taking every stream's
//! and producer's next version and sequence from the shard's own index. Memory besides
//! the shard's: one run buffer per shard (the shard stages at most
//! `shard::MAX_STAGED_BYTES`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use corelog_client::codec::{stream_shard, MAX_PAYLOAD};
use corelog_client::record::{self, Ext, ProducerSeq, StreamPos};
use corelog_server::node::{self, Place, ServeConfig};
use corelog_server::wal::batch::{BATCH_HEADER_LEN, MAX_BATCH_BYTES, MAX_BATCH_RECORDS};
use glommio::{LocalExecutorBuilder, Placement};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "corelog-biglog",
    about = "Writes a corelog data directory at disk speed through the server's shard code"
)]
struct Args {
    /// The data directory (created; with --append, continued).
    #[arg(long)]
    data_dir: PathBuf,
    /// Shards (default: the CPUs this process may run on; with --append, the directory's).
    #[arg(long)]
    shards: Option<u16>,
    /// Records to write in all shards together (with --append: to add), split evenly.
    #[arg(long)]
    records: u64,
    /// Payload bytes per record (≤ 65,536).
    #[arg(long, default_value_t = 16)]
    payload_bytes: usize,
    /// Every N-th offset of a shard is a stream event (0: none).
    #[arg(long, default_value_t = 0)]
    stream_every: u64,
    /// Stream names `stream-0 .. stream-<K-1>`, each on the shard its name hashes to.
    #[arg(long, default_value_t = 1000)]
    streams: u32,
    /// Every N-th offset of a shard carries an idempotent producer's id and sequence (0: none).
    #[arg(long, default_value_t = 0)]
    producer_every: u64,
    /// Producers per shard, taking turns.
    #[arg(long, default_value_t = 4)]
    producers: u32,
    /// Segment size (as `corelog serve --segment-bytes`).
    #[arg(long, default_value_t = 256 << 20)]
    segment_bytes: u64,
    /// Record bytes per batch (default: a batch of its header and records fills 1 MiB).
    #[arg(long, default_value_t = MAX_BATCH_BYTES - BATCH_HEADER_LEN)]
    batch_bytes: usize,
    /// Continue an existing data directory (without it, one that holds shards is refused).
    #[arg(long)]
    append: bool,
}

/// The payload of the record at `offset` of `shard` (see the module docs).
pub fn payload(shard: u16, offset: u64, out: &mut [u8]) {
    let key = offset.to_le_bytes();
    for (i, b) in out.iter_mut().enumerate() {
        *b = if i < 8 { key[i] } else { (i as u8).wrapping_mul(31) ^ shard as u8 };
    }
}

/// The id of producer `k` of `shard` ("biglog" in the high bytes).
pub fn producer_id(shard: u16, k: u32) -> u64 {
    0x6269_676c_6f67_0000 | ((shard as u64 & 0xff) << 8) | (k as u64 & 0xff)
}

/// Records and record bytes written so far, over all shards (for the progress line).
#[derive(Default)]
struct Progress {
    records: AtomicU64,
    bytes: AtomicU64,
    failed: AtomicBool,
    /// Shards finished (written or failed).
    done: AtomicUsize,
}

fn main() {
    let args = Args::parse();
    corelog_server::logging::init(corelog_server::logging::Format::Text);
    if let Err(e) = run(args) {
        eprintln!("corelog-biglog: {e}");
        std::process::exit(1);
    }
}

fn run(mut args: Args) -> Result<(), String> {
    check(&args)?;
    std::fs::create_dir_all(&args.data_dir).map_err(|e| format!("create {}: {e}", args.data_dir.display()))?;
    corelog_server::wal::probe::check_direct_io(&args.data_dir)?;
    let cpus = corelog_server::cpus::allowed();
    let present = corelog_server::control::list_shards(&args.data_dir)?;
    let shards = match (args.append, present.len(), args.shards) {
        (false, 0, s) => s.unwrap_or(cpus.len().min(u16::MAX as usize) as u16),
        (false, n, _) => {
            return Err(format!("{} already holds {n} shard(s): pass --append to continue it", args.data_dir.display()))
        }
        (true, 0, s) => s.unwrap_or(cpus.len().min(u16::MAX as usize) as u16),
        (true, n, s) => {
            if s.is_some_and(|s| s as usize != n) || present != (0..n as u16).collect::<Vec<_>>() {
                return Err(format!("{} holds shards {present:?}, not 0..{}", args.data_dir.display(), s.unwrap_or(0)));
            }
            n as u16
        }
    };
    args.shards = Some(shards);
    corelog_server::net::fds::raise(); // a shard keeps its segment files open
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let mut joins = Vec::new();
    for id in 0..shards {
        let quota = args.records / shards as u64 + u64::from((id as u64) < args.records % shards as u64);
        let (args, progress) = (args.clone(), progress.clone());
        let ex = LocalExecutorBuilder::new(Placement::Fixed(corelog_server::cpus::pick(&cpus, id as usize)))
            .name(&format!("biglog-{id}"))
            .io_memory(512 * 1024)
            .ring_depth(4096)
            // The writer encodes between the commit loop's writes: a short time slice lets
            // the executor reap a finished write and submit the next one soon.
            .preempt_timer(Duration::from_millis(1))
            .spawn(move || async move {
                let r = write_shard(id, shards, quota, &args, &progress).await;
                if r.is_err() {
                    progress.failed.store(true, Ordering::Relaxed);
                }
                progress.done.fetch_add(1, Ordering::Relaxed);
                r
            })
            .map_err(|e| format!("start the executor of shard {id}: {e}"))?;
        joins.push(ex);
    }
    report_until_done(&progress, started, || progress.done.load(Ordering::Relaxed) == shards as usize);
    let mut errors = Vec::new();
    for (id, j) in joins.into_iter().enumerate() {
        match j.join() {
            Ok(Ok(line)) => eprintln!("{line}"),
            Ok(Err(e)) => errors.push(format!("shard {id}: {e}")),
            Err(e) => errors.push(format!("shard {id}: executor failed: {e:?}")),
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    let secs = started.elapsed().as_secs_f64();
    let (records, bytes) = (progress.records.load(Ordering::Relaxed), progress.bytes.load(Ordering::Relaxed));
    println!(
        "wrote {records} records ({bytes} record bytes, {shards} shard(s)) in {secs:.1} s: {:.0} records/s, {:.1} MB/s",
        records as f64 / secs,
        bytes as f64 / secs / 1e6
    );
    Ok(())
}

fn check(a: &Args) -> Result<(), String> {
    if a.payload_bytes > MAX_PAYLOAD {
        return Err(format!("--payload-bytes {} is above {}", a.payload_bytes, MAX_PAYLOAD));
    }
    let largest = record::RECORD_HEADER_LEN + record::MAX_EXT_LEN + a.payload_bytes;
    if a.batch_bytes < largest || a.batch_bytes > MAX_BATCH_BYTES {
        return Err(format!("--batch-bytes must lie in {largest}..={MAX_BATCH_BYTES}"));
    }
    if a.shards == Some(0) || (a.producer_every > 0 && !(1..=256).contains(&a.producers)) {
        return Err("--shards must be above 0 and --producers in 1..=256".into());
    }
    if a.stream_every > 0 && a.streams == 0 {
        return Err("--stream-every needs --streams above 0".into());
    }
    Ok(())
}

/// Prints records and MB/s on stderr at most once a second until `done`.
fn report_until_done(p: &Progress, started: Instant, done: impl Fn() -> bool) {
    let (mut last_at, mut last_bytes) = (started, 0u64);
    while !done() {
        std::thread::sleep(Duration::from_millis(100));
        if last_at.elapsed() < Duration::from_secs(1) || p.failed.load(Ordering::Relaxed) {
            continue;
        }
        let (records, bytes) = (p.records.load(Ordering::Relaxed), p.bytes.load(Ordering::Relaxed));
        let mbs = (bytes - last_bytes) as f64 / last_at.elapsed().as_secs_f64() / 1e6;
        eprintln!("{:>7.1} s  {records} records  {mbs:.1} MB/s", started.elapsed().as_secs_f64());
        (last_at, last_bytes) = (Instant::now(), bytes);
    }
}

/// What picks each record's extensions on one shard, and the versions and sequences
/// they continue from.
struct Extensions {
    stream_every: u64,
    /// The names of this shard's streams and each one's next version.
    streams: Vec<(String, u64)>,
    producer_every: u64,
    /// (id, next sequence) of this shard's producers.
    producers: Vec<(u64, u64)>,
}

/// Which producer and which stream (indexes into `Extensions`) a record goes to.
#[derive(Clone, Copy)]
struct Pick {
    producer: Option<usize>,
    stream: Option<usize>,
}

impl Extensions {
    fn new(id: u16, shards: u16, a: &Args, shard: &corelog_server::shard::Shard) -> Extensions {
        let names: Vec<String> = match a.stream_every {
            0 => Vec::new(),
            _ => (0..a.streams)
                .map(|i| format!("stream-{i}"))
                .filter(|n| stream_shard(n.as_bytes(), shards) == id)
                .collect(),
        };
        let ids: Vec<u64> = match a.producer_every {
            0 => Vec::new(),
            _ => (0..a.producers).map(|k| producer_id(id, k)).collect(),
        };
        shard.with_index(|ix| {
            let saved = ix.producers.saved();
            let next_seq = |p: u64| saved.iter().find(|s| s.id == p).map_or(0, |s| s.next_seq);
            Extensions {
                stream_every: a.stream_every,
                streams: names
                    .into_iter()
                    .map(|n| {
                        let v = ix.streams.current(&n).map_or(0, |v| v + 1);
                        (n, v)
                    })
                    .collect(),
                producer_every: a.producer_every,
                producers: ids.into_iter().map(|p| (p, next_seq(p))).collect(),
            }
        })
    }

    fn pick(&self, offset: u64) -> Pick {
        let producer = (self.producer_every > 0 && offset.is_multiple_of(self.producer_every))
            .then(|| ((offset / self.producer_every) % self.producers.len() as u64) as usize);
        let stream =
            (self.stream_every > 0 && !self.streams.is_empty() && (offset + 1).is_multiple_of(self.stream_every))
                .then(|| (((offset + 1) / self.stream_every - 1) % self.streams.len() as u64) as usize);
        Pick { producer, stream }
    }

    /// The extensions of a picked record.
    fn ext(&self, p: Pick) -> Ext<'_> {
        Ext {
            producer: p.producer.map(|k| ProducerSeq { id: self.producers[k].0, seq: self.producers[k].1 }),
            stream: p.stream.map(|k| StreamPos { name: &self.streams[k].0, version: self.streams[k].1 }),
        }
    }

    /// The picked record was written: its producer's sequence and stream's version move on.
    fn advance(&mut self, p: Pick) {
        if let Some(k) = p.producer {
            self.producers[k].1 += 1;
        }
        if let Some(k) = p.stream {
            self.streams[k].1 += 1;
        }
    }
}

/// Opens shard `id` as `corelog serve` would, writes `quota` records through it and
/// waits until they, the last seal's index and its checkpoint are durable. Returns the
/// shard's start-up line and where it ended.
async fn write_shard(id: u16, shards: u16, quota: u64, a: &Args, p: &Progress) -> Result<String, String> {
    let cfg = ServeConfig::offline(a.data_dir.clone(), shards, a.segment_bytes);
    let (shard, line) = node::open_shard(Place::alone(id), &cfg).await?;
    eprintln!("{line}");
    let epoch = shard.epoch();
    let mut ext = Extensions::new(id, shards, a, &shard);
    let mut payload_buf = vec![0u8; a.payload_bytes];
    let mut run: Vec<u8> = Vec::with_capacity(a.batch_bytes);
    let mut next = shard.log().next_offset();
    let end = next + quota;
    while next < end {
        let (first, mut count) = (next, 0u32);
        run.clear();
        while next < end && count < MAX_BATCH_RECORDS {
            let pick = ext.pick(next);
            let e = ext.ext(pick);
            if run.len() + record::RECORD_HEADER_LEN + e.len() + a.payload_bytes > a.batch_bytes {
                break;
            }
            payload(id, next, &mut payload_buf);
            record::encode_ex(next, epoch, e, &payload_buf, &mut run);
            ext.advance(pick);
            (next, count) = (next + 1, count + 1);
            if count % 1024 == 0 {
                glommio::yield_if_needed().await;
            }
        }
        shard.wait_stage_space(run.len()).await;
        shard.check_replicated(&run)?;
        shard.stage_replicated(first, count, &run);
        p.records.fetch_add(count as u64, Ordering::Relaxed);
        p.bytes.fetch_add(run.len() as u64, Ordering::Relaxed);
        glommio::yield_if_needed().await;
    }
    shard.settle(end).await;
    Ok(format!("shard {id}: next offset {}, {} segment file(s)", shard.log().next_offset(), segments(&shard)))
}

fn segments(shard: &corelog_server::shard::Shard) -> usize {
    std::fs::read_dir(shard.log().dir())
        .map(|rd| rd.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".log")).count())
        .unwrap_or(0)
}
