//! Client-side subcommands on the `corelog` binary (in the spirit of rpk): append, read,
//! tail. They use the `corelog-client` library on a small tokio runtime.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use corelog_client::{Client, ClientConfig, Expect, Producer, Subscription, Tail};

#[derive(clap::Args, Debug, Clone)]
pub struct ConnArgs {
    /// Node client address (host:port), or several separated by commas: appends follow
    /// the leader among them (docs/protocol.md §6); reads use the first that answers.
    #[arg(long, default_value = "127.0.0.1:9400")]
    pub addr: String,
    /// CA that signed the server certificate.
    #[arg(long, default_value = "certs/ca.pem")]
    pub ca: PathBuf,
    /// Client certificate (PEM).
    #[arg(long, default_value = "certs/client.pem")]
    pub cert: PathBuf,
    /// Client private key (PEM).
    #[arg(long, default_value = "certs/client.key")]
    pub key: PathBuf,
    /// Name to verify in the server certificate.
    #[arg(long, default_value = "localhost")]
    pub server_name: String,
    /// Plaintext (only against a server started with --insecure).
    #[arg(long)]
    pub insecure: bool,
}

impl ConnArgs {
    pub fn config(&self) -> Result<ClientConfig, String> {
        if self.insecure {
            return Ok(ClientConfig::insecure());
        }
        ClientConfig::mtls(&self.ca, &self.cert, &self.key, &self.server_name).map_err(|e| e.to_string())
    }
}

/// A single-threaded tokio runtime for a command's client.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

/// Idempotent appends from the command line (docs/operations.md §11).
#[derive(clap::Args, Debug, Clone)]
pub struct IdemArgs {
    /// Send as an idempotent producer (protocol `Append2`): appends whose outcome is
    /// unknown are sent again, never stored twice. The producer id and the next sequence
    /// are printed on stderr, so a later `--producer ID --seq N` can continue or re-send.
    #[arg(long)]
    pub idempotent: bool,
    /// Producer id (decimal or 0x-hex) to continue; implies --idempotent.
    #[arg(long, value_parser = parse_u64)]
    pub producer: Option<u64>,
    /// First sequence to use with --producer (default 0). Re-sending a sequence already
    /// written prints its original position followed by `duplicate`.
    #[arg(long, requires = "producer")]
    pub seq: Option<u64>,
    /// Shard the producer's appends go to (its state lives there).
    #[arg(long, default_value_t = 0)]
    pub shard: u16,
}

/// Stream appends from the command line (docs/operations.md §12).
#[derive(clap::Args, Debug, Clone)]
pub struct StreamArgs {
    /// Append to this stream (1 to 255 bytes of UTF-8); its shard is picked by the name.
    #[arg(long)]
    pub stream: Option<String>,
    /// The stream's version the first event expects: `any`, `none` (no event yet) or a
    /// number (the version of its last event). Each later event of the same command
    /// expects the one before it (`any` stays `any`).
    #[arg(long, default_value = "any", requires = "stream")]
    pub expect: Expect,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s:?}: {e}"))
}

/// The expectation of the event after one written at `version`.
fn expect_next(e: Expect, version: Option<u64>) -> Expect {
    match (e, version) {
        (Expect::Any, _) | (_, None) => Expect::Any,
        (_, Some(v)) => Expect::Exact(v),
    }
}

/// Appends in flight at once for plain appends and stream appends expecting `any`
/// (`append -` with a fast producer on stdin): enough to keep a replicated pair's group
/// commit busy from one connection, small enough that a failure leaves few answers to
/// wait for. Appends whose expectation depends on the one before go one at a time.
pub const APPEND_WINDOW: usize = 256;

/// Appends each payload (or each stdin line with `-`, read as it arrives); prints `shard
/// offset` per event as soon as it is acknowledged, in input order, followed by the
/// stream version with --stream. Stops at the first failure (after the answers of what
/// was already sent).
pub fn append(conn: &ConnArgs, idem: &IdemArgs, stream: &StreamArgs, payloads: &[String]) -> Result<(), String> {
    if let Some(name) = &stream.stream {
        corelog_client::record::check_stream_name(name.as_bytes())?;
    }
    if idem.idempotent || idem.producer.is_some() {
        return append_idempotent(conn, idem, stream, payloads);
    }
    let cfg = conn.config()?;
    tokio::task::LocalSet::new().block_on(&runtime(), async {
        let c = Client::connect(&conn.addr, &cfg).await.map_err(|e| e.to_string())?;
        let window = if stream.stream.is_some() && stream.expect != Expect::Any { 1 } else { APPEND_WINDOW };
        let expect = std::cell::Cell::new(stream.expect);
        let mut out = std::io::stdout().lock();
        pipeline(
            payload_lines(payloads),
            window,
            |line| {
                let (c, name, expect) = (c.clone(), stream.stream.clone(), expect.get());
                tokio::task::spawn_local(async move {
                    match name {
                        None => c.append(line.as_bytes()).await.map(|p| (p, None)),
                        Some(n) => {
                            c.append_to(&n, expect, line.as_bytes()).await.map(|a| (a.position, Some(a.version)))
                        }
                    }
                    .map_err(|e| e.to_string())
                })
            },
            |(pos, version)| {
                expect.set(expect_next(expect.get(), version));
                let v = version.map(|v| format!(" {v}")).unwrap_or_default();
                writeln!(out, "{} {}{v}", pos.shard, pos.offset).map_err(|e| e.to_string())
            },
        )
        .await
    })
}

/// Runs `start` on each line (a task on the current `LocalSet`) with at most `window`
/// running, and `done` on each result in
/// input order as soon as it and those before it are in. After the first failure no new
/// line starts; the ones running are waited for, then the failure is returned.
async fn pipeline<T: 'static>(
    mut lines: tokio::sync::mpsc::Receiver<Result<String, String>>,
    window: usize,
    mut start: impl FnMut(String) -> tokio::task::JoinHandle<Result<T, String>>,
    mut done: impl FnMut(T) -> Result<(), String>,
) -> Result<(), String> {
    let mut running = std::collections::VecDeque::new();
    let (mut failed, mut eof) = (None::<String>, false);
    loop {
        tokio::select! {
            biased;
            r = async { running.front_mut().expect("checked non-empty").await }, if !running.is_empty() => {
                running.pop_front();
                let r: Result<Result<T, String>, tokio::task::JoinError> = r;
                match r.map_err(|e| e.to_string()).and_then(|r| r) {
                    Ok(v) if failed.is_none() => {
                        if let Err(e) = done(v) {
                            failed = Some(e);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            l = lines.recv(), if running.len() < window && failed.is_none() && !eof => match l {
                Some(Ok(line)) => running.push_back(start(line)),
                Some(Err(e)) => failed = Some(format!("stdin: {e}")),
                None => eof = true,
            },
            else => break,
        }
    }
    failed.map_or(Ok(()), Err)
}

/// The payloads given, or stdin's lines for `-`, as they come (a thread reads them).
fn payload_lines(payloads: &[String]) -> tokio::sync::mpsc::Receiver<Result<String, String>> {
    let (tx, rx) = tokio::sync::mpsc::channel(APPEND_WINDOW);
    let payloads = payloads.to_vec();
    std::thread::spawn(move || {
        if payloads.len() == 1 && payloads[0] == "-" {
            for l in std::io::stdin().lock().lines() {
                let stop = l.is_err();
                if tx.blocking_send(l.map_err(|e| e.to_string())).is_err() || stop {
                    return;
                }
            }
        } else {
            for p in payloads {
                if tx.blocking_send(Ok(p)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

fn append_idempotent(conn: &ConnArgs, idem: &IdemArgs, stream: &StreamArgs, payloads: &[String]) -> Result<(), String> {
    let cfg = conn.config()?;
    tokio::task::LocalSet::new().block_on(&runtime(), async {
        let shard = match &stream.stream {
            None => idem.shard,
            Some(name) => {
                let c = Client::connect(&conn.addr, &cfg).await.map_err(|e| e.to_string())?;
                let count = c.info().await.shard_count.max(1);
                corelog_client::codec::stream_shard(name.as_bytes(), count)
            }
        };
        let p = match idem.producer {
            Some(id) => Producer::resume(&conn.addr, &cfg, shard, id, idem.seq.unwrap_or(0)).await,
            None => Producer::connect(&conn.addr, &cfg, shard).await,
        }
        .map_err(|e| e.to_string())?;
        let p = std::sync::Arc::new(p);
        let mut out = std::io::stdout().lock();
        let next = std::cell::Cell::new(idem.seq.unwrap_or(0));
        let expect = std::cell::Cell::new(stream.expect);
        // One at a time: the next sequence printed at the end is then exact.
        let result = pipeline(
            payload_lines(payloads),
            1,
            |line| {
                let (p, name, at, expect) = (p.clone(), stream.stream.clone(), next.get(), expect.get());
                tokio::task::spawn_local(async move {
                    match name {
                        None => p.append(line.as_bytes()).await,
                        Some(n) => p.append_to(&n, expect, line.as_bytes()).await,
                    }
                    .map_err(|e| format!("sequence {at}: {e}"))
                })
            },
            |a| {
                next.set(a.sequence + 1);
                expect.set(expect_next(expect.get(), a.version));
                let dup = if a.duplicate { " duplicate" } else { "" };
                let v = a.version.map(|v| format!(" {v}")).unwrap_or_default();
                writeln!(out, "{} {}{v}{dup}", a.position.shard, a.position.offset).map_err(|e| e.to_string())
            },
        )
        .await;
        eprintln!("producer {:#018x} shard {}: next sequence {}", p.id(), p.shard(), next.get());
        result
    })
}

pub(crate) fn print_record(out: &mut impl Write, offset: u64, payload: &[u8], hex: bool) -> Result<(), String> {
    let r = if hex {
        let h: String = payload.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(out, "{offset}\t{h}")
    } else {
        writeln!(out, "{offset}\t{}", String::from_utf8_lossy(payload))
    };
    r.map_err(|e| e.to_string())
}

/// Reads committed records of one shard: `offset<TAB>payload` per line.
pub fn read(conn: &ConnArgs, shard: u16, from: u64, limit: u64, hex: bool) -> Result<(), String> {
    let cfg = conn.config()?;
    runtime().block_on(async {
        let c = Client::connect_shard(&conn.addr, shard, &cfg).await.map_err(|e| e.to_string())?;
        let mut out = std::io::stdout().lock();
        let (mut at, mut n) = (from, 0u64);
        while n < limit {
            let recs = c.read(shard, at, 1 << 20).await.map_err(|e| e.to_string())?;
            if recs.is_empty() {
                break;
            }
            for r in recs.iter().take((limit - n) as usize) {
                print_record(&mut out, r.offset, &r.payload, hex)?;
                n += 1;
                at = r.offset + 1;
            }
        }
        Ok(())
    })
}

/// `admin trim`: asks each node in `--addr` in turn to delete its segments of `shard`
/// below `before`; prints `<addr> shard <S> first offset <F>` per node. Any node that
/// cannot be reached or refuses is an error (after trying the others).
pub fn trim(conn: &ConnArgs, shard: u16, before: u64) -> Result<(), String> {
    let cfg = conn.config()?;
    runtime().block_on(async {
        let mut errs = Vec::new();
        for a in conn.addr.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            let r = async {
                let c = Client::connect_shard(a, shard, &cfg).await?;
                c.trim(shard, before).await
            }
            .await;
            match r {
                Ok(first) => println!("{a} shard {shard} first offset {first}"),
                Err(e) => errs.push(format!("{a}: {e}")),
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    })
}

/// `admin backup`: copies the node's log into `to`; prints each shard's copy and a total.
pub fn backup(conn: &ConnArgs, to: &Path, segment_bytes: u64, max_mb_s: f64) -> Result<(), String> {
    check_segment_bytes(segment_bytes)?;
    if !(max_mb_s >= 0.0 && max_mb_s.is_finite()) {
        return Err(format!("--max-mb-per-s {max_mb_s}: a rate of 0 (no limit) or more"));
    }
    let cfg = conn.config()?;
    let started = std::time::Instant::now();
    let copies = corelog_server::backup::run(&conn.addr, &cfg, to, segment_bytes, max_mb_s)?;
    let (mut copied, mut bytes) = (0, 0);
    for c in &copies {
        println!("shard {} offsets {}..{} (copied {}..{}) epoch {}", c.shard, c.first, c.next, c.from, c.next, c.epoch);
        copied += c.next - c.from;
        bytes += c.bytes;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "backup of {} in {}: {copied} records ({:.1} MB) copied in {secs:.1} s, {:.1} MB/s",
        conn.addr,
        to.display(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / secs.max(1e-9)
    );
    Ok(())
}

/// `--segment-bytes`: a multiple of 4096 from 4 MiB to what a batch index addresses.
pub fn check_segment_bytes(n: u64) -> Result<(), String> {
    let max = corelog_server::wal::batchindex::MAX_SEGMENT_BYTES;
    if !n.is_multiple_of(4096) || n < 4 * 1024 * 1024 || n > max {
        return Err(format!(
            "--segment-bytes must be a multiple of 4096, at least 4 MiB and at most {} GiB",
            max >> 30
        ));
    }
    Ok(())
}

/// Reads committed events of one stream: `version<TAB>offset<TAB>payload` per line.
pub fn read_stream(conn: &ConnArgs, name: &str, from: u64, limit: u64, hex: bool) -> Result<(), String> {
    corelog_client::record::check_stream_name(name.as_bytes())?;
    let cfg = conn.config()?;
    runtime().block_on(async {
        let c = Client::connect(&conn.addr, &cfg).await.map_err(|e| e.to_string())?;
        let mut out = std::io::stdout().lock();
        let (mut at, mut n) = (from, 0u64);
        while n < limit {
            let want = (limit - n).min(corelog_client::codec::MAX_READ_COUNT as u64) as u32;
            let r = c.read_stream(name, at, want).await.map_err(|e| e.to_string())?;
            for e in &r.events {
                let v = e.stream.as_ref().map_or(at, |s| s.version);
                write!(out, "{v}\t").map_err(|e| e.to_string())?;
                print_record(&mut out, e.offset, &e.payload, hex)?;
                n += 1;
            }
            if r.events.is_empty() || r.next_version >= r.end_version {
                break;
            }
            at = r.next_version;
        }
        Ok(())
    })
}

/// Follows one shard live; stops after `count` records when given.
pub fn tail(conn: &ConnArgs, shard: u16, from: u64, count: Option<u64>, hex: bool) -> Result<(), String> {
    let cfg = conn.config()?;
    runtime().block_on(async {
        let mut t = Tail::start(&conn.addr, &cfg, shard, from).await.map_err(|e| e.to_string())?;
        let mut out = std::io::stdout();
        let mut n = 0;
        while count.is_none_or(|c| n < c) {
            match t.next().await.map_err(|e| e.to_string())? {
                Some(r) => {
                    print_record(&mut out.lock(), r.offset, &r.payload, hex)?;
                    let _ = out.flush();
                    n += 1;
                }
                None => break,
            }
        }
        Ok(())
    })
}

/// What `corelog tail --stream | --prefix` follows.
pub enum Follow {
    Stream(String, u64),
    Prefix(String),
}

/// Follows a stream or a prefix (a subscription); stops after `count` events when given.
pub fn subscribe(conn: &ConnArgs, what: Follow, count: Option<u64>, hex: bool) -> Result<(), String> {
    let cfg = conn.config()?;
    runtime().block_on(async {
        let mut sub = match &what {
            Follow::Stream(name, v) => Subscription::stream(&conn.addr, &cfg, name, *v).await,
            Follow::Prefix(p) => Subscription::prefix(&conn.addr, &cfg, p, &Default::default()).await,
        }
        .map_err(|e| e.to_string())?;
        let mut out = std::io::stdout();
        let mut n = 0;
        while count.is_none_or(|c| n < c) {
            let Some(e) = sub.next().await.map_err(|e| e.to_string())? else { break };
            let s = e.record.stream.as_ref().ok_or("an event without a stream")?;
            let mut o = out.lock();
            let head = match what {
                Follow::Stream(..) => format!("{}\t", s.version),
                Follow::Prefix(_) => format!("{}\t{}\t{}\t", e.shard, e.record.offset, s.name),
            };
            write!(o, "{head}").map_err(|e| e.to_string())?;
            match what {
                Follow::Stream(..) => print_record(&mut o, e.record.offset, &e.record.payload, hex)?,
                Follow::Prefix(_) => print_record(&mut o, s.version, &e.record.payload, hex)?,
            }
            drop(o);
            let _ = out.flush();
            n += 1;
        }
        Ok(())
    })
}
