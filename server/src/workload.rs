//! A history-recording closed-loop workload and its checker: used by the failover tests,
//! `benches/failover.sh`, `corelog workload` and `corelog quickstart --failover`.
//!
//! Each connection task (its own [`Client`] over all the cluster's addresses, following
//! leadership) keeps one append in flight. Payloads are unique and self-describing:
//! `TAG-CONN-SEQ-` padded with `.` to the payload size. Every operation is recorded with
//! its invocation and completion time (µs since the run's start, monotonic) and its
//! outcome: ok at (shard, offset), failed (refused, nothing written: [`Outcome::NotWritten`])
//! or unknown (may or may not be in the log). After a failed or unknown outcome the task
//! waits a little (10 ms doubling to 200 ms) and goes on with the NEXT payload on the same
//! client (which has left the failed connection and keeps what it learned about
//! leadership): nothing is ever sent twice.
//!
//! [`check`] compares the history with the log read back from the surviving node
//! ([`read_all`]): every ok is stored at its position with identical bytes; no two oks
//! share a position; no payload of the run is stored twice, and none that no operation
//! sent; no failed one is stored; unknown ones may or may not be (counted). It also
//! reports the write-unavailability window: the largest gap between consecutive ok
//! completions, over all connections.
//!
//! [`History::write`] writes a line format (below) that `tools/porcupine` reads to check
//! linearizability per shard ([`porcupine`]):
//!
//! ```text
//! # comment
//! tag TAG
//! op CONN SEQ INVOKE_US DONE_US PAYLOAD ok SHARD OFFSET
//! op CONN SEQ INVOKE_US DONE_US PAYLOAD failed REASON…
//! op CONN SEQ INVOKE_US DONE_US PAYLOAD unknown REASON…
//! shard S start B len L      (read-back: the run's first record in S is at B, of L)
//! found CONN SEQ S OFFSET     (read-back: an unknown op is stored there)
//! foreign S OFFSET            (read-back: another writer's record, at or after B)
//! ```
//!
//! PAYLOAD is the payload itself when it is printable ASCII without spaces (always, for
//! the workload's own), else `hex:` and its bytes in hex.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelog_client::{Client, ClientConfig, Outcome, Position, Record, Role};

/// How long in-flight appends may still finish once the run is over, before they are
/// abandoned (and recorded as unknown).
const GRACE: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(200);

#[derive(Clone)]
pub struct Config {
    /// Client addresses of the cluster's nodes (`host:port`).
    pub addrs: Vec<String>,
    pub client: ClientConfig,
    /// Closed-loop connections (one append in flight each).
    pub connections: usize,
    /// Upper bound of the run; [`Background::finish`] ends it earlier.
    pub duration: Duration,
    pub payload_bytes: usize,
    /// Prefix of every payload: letters, digits and `_` (tells runs apart in one log).
    pub tag: String,
}

impl Config {
    pub fn validate(&self) -> Result<(), String> {
        if self.tag.is_empty() || !self.tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("tag {:?}: letters, digits and '_' only", self.tag));
        }
        if self.addrs.is_empty() || self.addrs.iter().any(|a| a.is_empty() || a.contains(',')) {
            return Err(format!("addresses {:?}: one or more host:port", self.addrs));
        }
        if self.connections == 0 {
            return Err("at least one connection".into());
        }
        let longest = payload(&self.tag, self.connections as u32, u64::MAX, 0).len();
        if self.payload_bytes > corelog_client::codec::MAX_PAYLOAD {
            return Err(format!("payload size {} above {}", self.payload_bytes, corelog_client::codec::MAX_PAYLOAD));
        }
        if self.payload_bytes < longest {
            return Err(format!(
                "payload size {} below {longest} (the tag, connection and sequence)",
                self.payload_bytes
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    Ok(Position),
    /// Refused before it was taken: not in the log (the error).
    Failed(String),
    /// May or may not be in the log (why).
    Unknown(String),
}

#[derive(Clone, Debug)]
pub struct Op {
    pub conn: u32,
    pub seq: u64,
    pub payload: Vec<u8>,
    pub invoke_us: u64,
    pub done_us: u64,
    pub result: OpResult,
}

#[derive(Default, Debug)]
pub struct History {
    pub tag: String,
    /// By invocation time.
    pub ops: Vec<Op>,
}

fn payload(tag: &str, conn: u32, seq: u64, size: usize) -> Vec<u8> {
    let mut p = format!("{tag}-{conn}-{seq}-").into_bytes();
    p.resize(p.len().max(size), b'.');
    p
}

/// Counters of a running workload, readable while it runs.
#[derive(Default)]
pub struct Live {
    ok: AtomicU64,
    failed: AtomicU64,
    unknown: AtomicU64,
    /// µs since the start + 1 at which the run was told to stop; 0: not yet.
    stopped_at: AtomicU64,
}

impl Live {
    pub fn oks(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
    pub fn unknown(&self) -> u64 {
        self.unknown.load(Ordering::Relaxed)
    }
    fn stop(&self, now_us: u64) {
        let _ = self.stopped_at.compare_exchange(0, now_us + 1, Ordering::AcqRel, Ordering::Acquire);
    }
    fn stopped(&self) -> Option<u64> {
        match self.stopped_at.load(Ordering::Acquire) {
            0 => None,
            t => Some(t - 1),
        }
    }
}

fn us_since(t0: Instant, at: Instant) -> u64 {
    at.saturating_duration_since(t0).as_micros() as u64
}

/// Runs the workload (blocking, on a tokio runtime of its own) until `cfg.duration`
/// passed since `t0` or `live` was stopped; returns every operation.
pub fn run(cfg: &Config, live: &Arc<Live>, t0: Instant) -> History {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    let end_us = cfg.duration.as_micros() as u64;
    let ops = Arc::new(Mutex::new(Vec::new()));
    let addrs = cfg.addrs.join(",");
    rt.block_on(async {
        let mut tasks = Vec::new();
        for conn in 0..cfg.connections as u32 {
            let (cfg, live, ops, addrs) = (cfg.clone(), live.clone(), ops.clone(), addrs.clone());
            tasks.push(tokio::spawn(async move {
                let now = || us_since(t0, Instant::now());
                let over = || now() >= end_us || live.stopped().is_some();
                // Resolves once the run has been over for GRACE: in-flight appends are
                // abandoned then (bounded shutdown).
                let abandon = || async {
                    loop {
                        let over_since = live.stopped().unwrap_or(end_us).min(end_us);
                        if now() >= over_since + GRACE.as_micros() as u64 {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                };
                let mut client: Option<Client> = None;
                let mut backoff = BACKOFF_MIN;
                let mut mine = Vec::new();
                let mut seq = 0u64;
                while !over() {
                    let c = match &client {
                        Some(c) => c.clone(),
                        None => match Client::connect(&addrs, &cfg.client).await {
                            Ok(c) => client.insert(c).clone(),
                            Err(_) => {
                                tokio::time::sleep(backoff).await;
                                backoff = (backoff * 2).min(BACKOFF_MAX);
                                continue;
                            }
                        },
                    };
                    let p = payload(&cfg.tag, conn, seq, cfg.payload_bytes);
                    let invoke_us = now();
                    let r = tokio::select! {
                        r = c.append(&p) => r,
                        _ = abandon() => {
                            let why = format!("abandoned: no answer {GRACE:?} after the run ended");
                            mine.push(Op { conn, seq, payload: p, invoke_us, done_us: now(), result: OpResult::Unknown(why) });
                            live.unknown.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    };
                    let result = match r {
                        Ok(pos) => OpResult::Ok(pos),
                        Err(e) if e.outcome() == Outcome::NotWritten => OpResult::Failed(e.to_string()),
                        Err(e) => OpResult::Unknown(e.to_string()),
                    };
                    mine.push(Op { conn, seq, payload: p, invoke_us, done_us: now(), result: result.clone() });
                    seq += 1;
                    match result {
                        OpResult::Ok(_) => {
                            live.ok.fetch_add(1, Ordering::Relaxed);
                            backoff = BACKOFF_MIN;
                        }
                        bad => {
                            let n = if matches!(bad, OpResult::Failed(_)) { &live.failed } else { &live.unknown };
                            n.fetch_add(1, Ordering::Relaxed);
                            // The client has left the connection that failed; it keeps what
                            // it learned about leadership (docs/protocol.md §6.3).
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(BACKOFF_MAX);
                        }
                    }
                }
                ops.lock().unwrap().extend(mine);
            }));
        }
        for t in tasks {
            t.await.expect("workload task");
        }
    });
    let mut ops = std::mem::take(&mut *ops.lock().unwrap());
    ops.sort_by_key(|o| (o.invoke_us, o.conn, o.seq));
    History { tag: cfg.tag.clone(), ops }
}

/// A workload running in a thread of its own.
pub struct Background {
    pub live: Arc<Live>,
    pub t0: Instant,
    join: std::thread::JoinHandle<History>,
}

/// Starts [`run`] in a thread; `t0` is now.
pub fn spawn(cfg: Config) -> Result<Background, String> {
    cfg.validate()?;
    let live = Arc::new(Live::default());
    let t0 = Instant::now();
    let l = live.clone();
    let join = std::thread::Builder::new()
        .name("workload".into())
        .spawn(move || run(&cfg, &l, t0))
        .map_err(|e| format!("workload thread: {e}"))?;
    Ok(Background { live, t0, join })
}

impl Background {
    /// µs since the start, on the history's clock.
    pub fn now_us(&self) -> u64 {
        us_since(self.t0, Instant::now())
    }

    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }

    /// Polls (every 5 ms) until `cond(oks)` holds; false if `within` passed first or the
    /// run ended.
    pub fn wait_until(&self, within: Duration, cond: impl Fn(u64) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if cond(self.live.oks()) {
                return true;
            }
            if Instant::now() >= deadline || self.is_finished() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops the run (appends in flight may finish within 5 s) and returns its history.
    pub fn finish(self) -> History {
        self.live.stop(self.now_us());
        self.join.join().expect("workload thread")
    }
}

/// Every record of every shard of one node: shard → records, offsets 0, 1, 2, ….
pub type Logs = BTreeMap<u16, Vec<Record>>;

/// Reads every record of every shard from the node at `addr` (one address), through
/// each shard's direct port.
pub async fn read_all(addr: &str, cfg: &ClientConfig) -> Result<Logs, String> {
    let c = Client::connect(addr, cfg).await.map_err(|e| format!("connect {addr}: {e}"))?;
    let shards = c.info().await.shard_count;
    if shards == 0 {
        return Err(format!("{addr}: no shard count (connection lost)"));
    }
    let mut logs = Logs::new();
    for shard in 0..shards {
        let c = Client::connect_shard(addr, shard, cfg).await.map_err(|e| format!("{addr} shard {shard}: {e}"))?;
        let mut v: Vec<Record> = Vec::new();
        loop {
            let from = v.len() as u64;
            let recs =
                c.read(shard, from, 1 << 20).await.map_err(|e| format!("{addr} read shard {shard} at {from}: {e}"))?;
            if recs.is_empty() {
                break;
            }
            for r in recs {
                if r.offset != v.len() as u64 {
                    return Err(format!("{addr} shard {shard}: offset {} where {} was due", r.offset, v.len()));
                }
                v.push(r);
            }
        }
        logs.insert(shard, v);
    }
    Ok(logs)
}

/// Reads back from the node of `addrs` that says it leads, else from the first that
/// answers; returns its address and its logs.
pub async fn read_back(addrs: &[String], cfg: &ClientConfig) -> Result<(String, Logs), String> {
    let mut reachable = Vec::new();
    let mut errs = Vec::new();
    for a in addrs {
        match Client::connect(a, cfg).await {
            Ok(c) if c.info().await.role == Role::Leader => return Ok((a.clone(), read_all(a, cfg).await?)),
            Ok(_) => reachable.push(a.clone()),
            Err(e) => errs.push(format!("{a}: {e}")),
        }
    }
    match reachable.first() {
        Some(a) => Ok((a.clone(), read_all(a, cfg).await?)),
        None => Err(format!("no node reachable to read back: {}", errs.join("; "))),
    }
}

/// A stretch without acknowledgements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub from_us: u64,
    pub to_us: u64,
}

impl Gap {
    pub fn len(&self) -> Duration {
        Duration::from_micros(self.to_us - self.from_us)
    }
    pub fn is_empty(&self) -> bool {
        self.to_us == self.from_us
    }
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ms (from {:.3} s to {:.3} s after the start)",
            self.len().as_millis(),
            self.from_us as f64 / 1e6,
            self.to_us as f64 / 1e6
        )
    }
}

impl History {
    fn ok_done(&self) -> Vec<u64> {
        let mut d: Vec<u64> =
            self.ops.iter().filter(|o| matches!(o.result, OpResult::Ok(_))).map(|o| o.done_us).collect();
        d.sort_unstable();
        d
    }

    /// The write-unavailability window: the largest gap between consecutive ok
    /// completions (over all connections); None with fewer than two oks.
    pub fn unavailability(&self) -> Option<Gap> {
        self.ok_done().windows(2).map(|w| Gap { from_us: w[0], to_us: w[1] }).max_by_key(|g| (g.len(), g.from_us))
    }

    /// From the last ok completed at or before `at_us` to the first completed after it.
    pub fn gap_around(&self, at_us: u64) -> Option<Gap> {
        let d = self.ok_done();
        let i = d.partition_point(|&t| t <= at_us);
        (i > 0 && i < d.len()).then(|| Gap { from_us: d[i - 1], to_us: d[i] })
    }

    /// A change of leader at `at_us`, measured by epochs: from the last acknowledgement
    /// in the epoch that acknowledged last before `at_us` to the first acknowledgement in
    /// a newer epoch (epochs from the read-back `logs`, which must hold every ok). Unlike
    /// [`History::gap_around`], answers the old leader sent before it died but the
    /// client read only after `at_us` do not count as writes resumed. None: no ok before
    /// `at_us` or none in a newer epoch.
    pub fn takeover(&self, logs: &Logs, at_us: u64) -> Option<Gap> {
        let oks: Vec<(u64, u32)> = self
            .ops
            .iter()
            .filter_map(|o| match o.result {
                OpResult::Ok(p) => Some((o.done_us, logs.get(&p.shard)?.get(p.offset as usize)?.epoch)),
                _ => None,
            })
            .collect();
        let old = oks.iter().filter(|(t, _)| *t <= at_us).max_by_key(|(t, _)| *t)?.1;
        let from_us = oks.iter().filter(|(_, e)| *e <= old).map(|(t, _)| *t).max()?;
        let to_us = oks.iter().filter(|(_, e)| *e > old).map(|(t, _)| *t).min()?;
        Some(Gap { from_us, to_us: to_us.max(from_us) })
    }

    /// Oks invoked after `at_us`.
    pub fn oks_after(&self, at_us: u64) -> usize {
        self.ops.iter().filter(|o| matches!(o.result, OpResult::Ok(_)) && o.invoke_us > at_us).count()
    }

    /// The operations around `at_us` (± `n` by invocation time), one line each.
    pub fn around(&self, at_us: u64, n: usize) -> String {
        let i = self.ops.partition_point(|o| o.invoke_us < at_us);
        let (lo, hi) = (i.saturating_sub(n), (i + n).min(self.ops.len()));
        self.ops[lo..hi].iter().map(|o| format!("    {}\n", op_line(o))).collect()
    }

    /// Writes the history (see the module docs); with `logs` (the read-back), the
    /// `shard`, `found` and `foreign` lines too.
    pub fn write(&self, path: &Path, logs: Option<&Logs>) -> std::io::Result<()> {
        let mut s = String::from(
            "# corelog workload history v1: op CONN SEQ INVOKE_US DONE_US PAYLOAD (ok SHARD OFFSET | failed REASON | unknown REASON)\n",
        );
        let _ = writeln!(s, "tag {}", self.tag);
        for o in &self.ops {
            let _ = writeln!(s, "{}", op_line(o));
        }
        if let Some(logs) = logs {
            let prefix = format!("{}-", self.tag);
            let mut stored = HashMap::new();
            for (&shard, recs) in logs {
                let start = recs.iter().position(|r| r.payload.starts_with(prefix.as_bytes())).unwrap_or(recs.len());
                let _ = writeln!(s, "shard {shard} start {start} len {}", recs.len());
                for r in &recs[start..] {
                    if r.payload.starts_with(prefix.as_bytes()) {
                        stored.insert(r.payload.as_slice(), (shard, r.offset));
                    } else {
                        let _ = writeln!(s, "foreign {shard} {}", r.offset);
                    }
                }
            }
            for o in self.ops.iter().filter(|o| matches!(o.result, OpResult::Unknown(_))) {
                if let Some((shard, offset)) = stored.get(o.payload.as_slice()) {
                    let _ = writeln!(s, "found {} {} {shard} {offset}", o.conn, o.seq);
                }
            }
        }
        std::fs::write(path, s)
    }
}

fn payload_text(p: &[u8]) -> String {
    if !p.is_empty() && p.iter().all(|b| b.is_ascii_graphic()) {
        String::from_utf8_lossy(p).into_owned()
    } else {
        p.iter().fold(String::from("hex:"), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

fn op_line(o: &Op) -> String {
    let r = match &o.result {
        OpResult::Ok(p) => format!("ok {} {}", p.shard, p.offset),
        OpResult::Failed(e) => format!("failed {}", e.replace('\n', " ")),
        OpResult::Unknown(e) => format!("unknown {}", e.replace('\n', " ")),
    };
    format!("op {} {} {} {} {} {r}", o.conn, o.seq, o.invoke_us, o.done_us, payload_text(&o.payload))
}

/// What the checker found, when the history and the log agree.
#[derive(Debug, Clone)]
pub struct Report {
    pub ops: usize,
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
    /// Unknown ones found in the log.
    pub unknown_present: usize,
    /// Records of other writers after the run's first record (not checked).
    pub foreign: usize,
    /// The largest gap between consecutive ok completions.
    pub window: Option<Gap>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cross-check OK: {} operations: {} acknowledged, all read back at their positions; {} failed, none in the log; {} unknown, {} of them in the log; no payload stored twice",
            self.ops, self.ok, self.failed, self.unknown, self.unknown_present
        )?;
        if self.foreign > 0 {
            write!(f, "; {} records of other writers", self.foreign)?;
        }
        Ok(())
    }
}

/// Checks `h` against the logs read back from the surviving node (see the module docs).
/// Payloads starting with `TAG-` belong to the run. On a violation, the error names it,
/// the operation(s) involved and the history around them (± 5 operations by time).
pub fn check(h: &History, logs: &Logs) -> Result<Report, String> {
    let prefix = format!("{}-", h.tag);
    let by_payload: HashMap<&[u8], &Op> = h.ops.iter().map(|o| (o.payload.as_slice(), o)).collect();
    let context = |o: &Op| format!("    {}\n  history around it:\n{}", op_line(o), h.around(o.invoke_us, 5));
    let mut stored: HashMap<&[u8], Position> = HashMap::new();
    let mut foreign = 0;
    for (&shard, recs) in logs {
        let mut ours = false;
        for (i, r) in recs.iter().enumerate() {
            if r.offset != i as u64 {
                return Err(format!("the log of shard {shard} has offset {} where {i} was due", r.offset));
            }
            let pos = Position { shard, offset: r.offset };
            if !r.payload.starts_with(prefix.as_bytes()) {
                foreign += usize::from(ours);
                continue;
            }
            ours = true;
            let Some(o) = by_payload.get(r.payload.as_slice()) else {
                return Err(format!(
                    "PHANTOM: {pos:?} holds {:?}, a payload of this run that no operation sent",
                    payload_text(&r.payload)
                ));
            };
            if let Some(first) = stored.insert(&r.payload, pos) {
                return Err(format!("DUPLICATE: stored twice, at {first:?} and at {pos:?}:\n{}", context(o)));
            }
        }
    }
    let at = |pos: &Position| logs.get(&pos.shard).and_then(|r| r.get(pos.offset as usize)).map(|r| &r.payload);
    let mut r = Report { ops: h.ops.len(), ok: 0, failed: 0, unknown: 0, unknown_present: 0, foreign, window: None };
    let mut positions: HashMap<Position, &Op> = HashMap::new();
    for o in &h.ops {
        match &o.result {
            OpResult::Ok(pos) => {
                r.ok += 1;
                if let Some(other) = positions.insert(*pos, o) {
                    return Err(format!(
                        "TWO ACKS at {pos:?}:\n    {}\n{}",
                        op_line(other),
                        context(o).trim_start_matches('\n')
                    ));
                }
                match at(pos) {
                    Some(p) if *p == o.payload => {}
                    Some(p) => {
                        return Err(format!(
                            "LOST: acknowledged at {pos:?}, which holds {:?}:\n{}",
                            payload_text(p),
                            context(o)
                        ))
                    }
                    None => {
                        return Err(format!("LOST: acknowledged at {pos:?}, which is not in the log:\n{}", context(o)))
                    }
                }
            }
            OpResult::Failed(_) => {
                r.failed += 1;
                if let Some(pos) = stored.get(o.payload.as_slice()) {
                    return Err(format!("FAILED BUT WRITTEN: refused, yet stored at {pos:?}:\n{}", context(o)));
                }
            }
            OpResult::Unknown(_) => {
                r.unknown += 1;
                r.unknown_present += usize::from(stored.contains_key(o.payload.as_slice()));
            }
        }
    }
    r.window = h.unavailability();
    Ok(r)
}

/// Porcupine's verdict (`tools/porcupine`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linearizability {
    Linearizable(String),
    NotLinearizable(String),
    /// Its time limit passed.
    Inconclusive(String),
}

/// Whether `go` is on PATH.
pub fn go_available() -> bool {
    Command::new("go").arg("version").output().is_ok_and(|o| o.status.success())
}

/// `tools/porcupine` of this source tree (for tests and benches).
pub fn porcupine_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/porcupine")
}

/// Runs `go run . HISTORY` in `tool_dir` (tools/porcupine). Err: go missing, input
/// error, or the tool failed.
pub fn porcupine(tool_dir: &Path, history: &Path) -> Result<Linearizability, String> {
    let history = std::path::absolute(history).map_err(|e| format!("{}: {e}", history.display()))?;
    let o = Command::new("go")
        .args(["run", ".", "-timeout", "300s"])
        .arg(&history)
        .current_dir(tool_dir)
        .output()
        .map_err(|e| format!("go run in {}: {e}", tool_dir.display()))?;
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
    match o.status.code() {
        Some(0) => Ok(Linearizability::Linearizable(out)),
        Some(1) => Ok(Linearizability::NotLinearizable(out)),
        Some(3) => Ok(Linearizability::Inconclusive(out)),
        _ => Err(format!("porcupine ({}): {out} {err}", o.status)),
    }
}

/// `corelog workload`: run the workload against a cluster, read back, check.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    conn: crate::cli::ConnArgs,
    /// Closed-loop connections (one append in flight each).
    #[arg(long, default_value_t = 100)]
    connections: usize,
    /// Length of the run.
    #[arg(long, default_value_t = 10_000)]
    duration_ms: u64,
    #[arg(long, default_value_t = 64)]
    payload_bytes: usize,
    /// Payload prefix (letters, digits, '_'; default: w + seconds since the epoch).
    #[arg(long)]
    tag: Option<String>,
    /// Write the history (and the read-back's positions) here.
    #[arg(long)]
    history: Option<PathBuf>,
    /// How long one append may look for a leader that takes it.
    #[arg(long, default_value_t = 5_000)]
    failover_timeout_ms: u64,
    /// Also check linearizability with tools/porcupine in this directory (needs `go`
    /// and --history).
    #[arg(long, requires = "history")]
    porcupine: Option<PathBuf>,
}

pub fn main(a: Args) -> Result<(), String> {
    let tag = a.tag.unwrap_or_else(|| {
        format!("w{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs())
    });
    let client = a.conn.config()?.with_failover_timeout(Duration::from_millis(a.failover_timeout_ms));
    let cfg = Config {
        addrs: a.conn.addr.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        client: client.clone(),
        connections: a.connections,
        duration: Duration::from_millis(a.duration_ms),
        payload_bytes: a.payload_bytes,
        tag: tag.clone(),
    };
    println!(
        "workload: {} connections, {} ms, {}-byte payloads, tag {tag}, against {}",
        cfg.connections,
        a.duration_ms,
        cfg.payload_bytes,
        cfg.addrs.join(",")
    );
    cfg.validate()?;
    let live = Arc::new(Live::default());
    let h = run(&cfg, &live, Instant::now());
    println!(
        "workload: {} operations: {} ok, {} failed, {} unknown",
        h.ops.len(),
        live.oks(),
        live.failed(),
        live.unknown()
    );
    let addrs = cfg.addrs;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let read = rt.block_on(read_back(&addrs, &client));
    if let Some(p) = &a.history {
        h.write(p, read.as_ref().ok().map(|(_, l)| l)).map_err(|e| format!("{}: {e}", p.display()))?;
        println!("history written to {}", p.display());
    }
    let (from, logs) = read?;
    println!("read back {} records from {from}", logs.values().map(Vec::len).sum::<usize>());
    let report = check(&h, &logs);
    let window = h.unavailability().map_or("none (fewer than two acknowledgements)".into(), |g| g.to_string());
    match &report {
        Ok(r) => println!("{r}"),
        Err(e) => println!("cross-check FAILED: {e}"),
    }
    println!("unavailability window: {window}");
    if let (Some(dir), Some(hist)) = (&a.porcupine, &a.history) {
        if !go_available() {
            println!("porcupine: skipped (go not on PATH)");
        } else {
            match porcupine(dir, hist)? {
                Linearizability::Linearizable(s) | Linearizability::Inconclusive(s) => println!("{s}"),
                Linearizability::NotLinearizable(s) => {
                    println!("{s}");
                    return Err("the history is not linearizable".into());
                }
            }
        }
    }
    report.map(|_| ()).map_err(|_| "cross-check failed".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(conn: u32, seq: u64, t: u64, r: OpResult) -> Op {
        Op { conn, seq, payload: payload("t", conn, seq, 12), invoke_us: t, done_us: t + 10, result: r }
    }
    fn ok(shard: u16, offset: u64) -> OpResult {
        OpResult::Ok(Position { shard, offset })
    }
    fn failed() -> OpResult {
        OpResult::Failed("server error 5 NotLeader".into())
    }
    fn unknown() -> OpResult {
        OpResult::Unknown("connection closed before the answer".into())
    }
    fn hist(ops: &[&Op]) -> History {
        let mut ops: Vec<Op> = ops.iter().map(|o| (*o).clone()).collect();
        ops.sort_by_key(|o| o.invoke_us);
        History { tag: "t".into(), ops }
    }
    /// Logs holding these payloads, in this order, per shard.
    fn logs(shards: &[&[&[u8]]]) -> Logs {
        let mut l = Logs::new();
        for (s, recs) in shards.iter().enumerate() {
            let v = recs.iter().enumerate().map(|(i, p)| Record {
                offset: i as u64,
                epoch: 1,
                producer: None,
                stream: None,
                payload: p.to_vec(),
            });
            l.insert(s as u16, v.collect());
        }
        l
    }

    #[test]
    fn payloads_are_unique_padded_and_validated() {
        assert_eq!(payload("t", 3, 17, 12), b"t-3-17-.....".to_vec());
        assert_eq!(payload("tag", 3, 17, 0), b"tag-3-17-".to_vec());
        let cfg = |tag: &str, size| Config {
            addrs: vec!["127.0.0.1:1".into()],
            client: ClientConfig::insecure(),
            connections: 100,
            duration: Duration::from_secs(1),
            payload_bytes: size,
            tag: tag.into(),
        };
        assert!(cfg("run_1", 64).validate().is_ok());
        assert!(cfg("a-b", 64).validate().is_err(), "'-' would make one tag a prefix of another");
        assert!(cfg("t", 8).validate().is_err(), "too small for the sequence number");
        assert!(cfg("t", 1 << 20).validate().is_err());
    }

    #[test]
    fn a_consistent_history_passes_and_counts() {
        let a = op(0, 0, 0, ok(0, 1));
        let b = op(1, 0, 5, unknown()); // stored
        let c = op(0, 1, 20, failed());
        let d = op(1, 1, 30, ok(1, 0));
        let e = op(2, 0, 31, unknown()); // not stored
        let h = hist(&[&a, &b, &c, &d, &e]);
        let r = check(&h, &logs(&[&[b"other", &a.payload, &b.payload, b"other2"], &[&d.payload]])).unwrap();
        assert_eq!((r.ops, r.ok, r.failed, r.unknown, r.unknown_present, r.foreign), (5, 2, 1, 2, 1, 1));
        assert_eq!(r.window, Some(Gap { from_us: 10, to_us: 40 }));
        assert!(r.to_string().starts_with("cross-check OK"), "{r}");
    }

    #[test]
    fn a_lost_or_misplaced_ack_fails_with_its_context() {
        let a = op(0, 0, 0, ok(0, 0));
        let b = op(1, 0, 5, ok(0, 1));
        let h = hist(&[&a, &b]);
        let e = check(&h, &logs(&[&[&a.payload]])).unwrap_err();
        assert!(e.starts_with("LOST") && e.contains("not in the log") && e.contains("op 1 0 5 15 t-1-0-"), "{e}");
        let e = check(&h, &logs(&[&[&b.payload, &a.payload]])).unwrap_err();
        assert!(e.starts_with("LOST") && e.contains("history around it") && e.contains("op 0 0 0 10"), "{e}");
        let e = check(&h, &logs(&[&[&a.payload, b"t-1-0-......x"]])).unwrap_err();
        assert!(e.starts_with("PHANTOM"), "different bytes under the run's tag: {e}");
    }

    #[test]
    fn duplicates_written_failures_double_acks_and_gaps_fail() {
        let a = op(0, 0, 0, ok(0, 0));
        let f = op(1, 0, 5, failed());
        let u = op(2, 0, 6, unknown());
        let h = hist(&[&a, &f, &u]);
        assert!(check(&h, &logs(&[&[&a.payload]])).is_ok());
        let e = check(&h, &logs(&[&[&a.payload, &a.payload]])).unwrap_err();
        assert!(e.starts_with("DUPLICATE"), "{e}");
        let e = check(&h, &logs(&[&[&a.payload, &u.payload], &[&u.payload]])).unwrap_err();
        assert!(e.starts_with("DUPLICATE"), "an unknown one may be stored once, not twice: {e}");
        let e = check(&h, &logs(&[&[&a.payload], &[&f.payload]])).unwrap_err();
        assert!(e.starts_with("FAILED BUT WRITTEN"), "{e}");
        let twice = hist(&[&a, &op(3, 0, 9, ok(0, 0))]);
        assert!(check(&twice, &logs(&[&[&a.payload]])).unwrap_err().starts_with("TWO ACKS"));
        let mut gap = logs(&[&[&a.payload]]);
        gap.get_mut(&0).unwrap()[0].offset = 1;
        assert!(check(&h, &gap).unwrap_err().contains("where 0 was due"));
    }

    #[test]
    fn the_unavailability_window_is_the_largest_gap_between_oks() {
        // Two connections; oks complete at 10, 20, 35 | 400, 410 (failures in between).
        let ops = [
            op(0, 0, 0, ok(0, 0)),
            op(1, 0, 10, ok(0, 1)),
            op(0, 1, 25, ok(0, 2)),
            op(1, 1, 30, failed()),
            op(0, 2, 40, unknown()),
            op(1, 2, 390, ok(0, 3)),
            op(0, 3, 400, ok(0, 4)),
        ];
        let h = hist(&ops.iter().collect::<Vec<_>>());
        assert_eq!(h.unavailability(), Some(Gap { from_us: 35, to_us: 400 }));
        assert_eq!(h.gap_around(100), Some(Gap { from_us: 35, to_us: 400 }));
        assert_eq!(h.gap_around(5), None);
        assert_eq!(h.oks_after(35), 2);
        // Epochs: 1 for the first three records, 2 after. "Killed" at 30: the ok read at
        // 35 is still epoch 1; writes resumed at 400 (epoch 2's first).
        let mut l = logs(&[&[b"a", b"b", b"c", b"d", b"e"]]);
        l.get_mut(&0).unwrap().iter_mut().skip(3).for_each(|r| r.epoch = 2);
        assert_eq!(h.takeover(&l, 30), Some(Gap { from_us: 35, to_us: 400 }));
        assert_eq!(h.takeover(&l, 5), None, "nothing acknowledged before");
        assert_eq!(h.takeover(&logs(&[&[b"a", b"b", b"c", b"d", b"e"]]), 30), None, "no newer epoch");
        assert_eq!(hist(&[&ops[0]]).unavailability(), None);
    }

    fn written(h: &History, l: Option<&Logs>) -> (tempdir::Dir, String) {
        let d = tempdir::Dir::new();
        let p = d.0.join("h.txt");
        h.write(&p, l).unwrap();
        let s = std::fs::read_to_string(&p).unwrap();
        (d, s)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!("workload-{}-{}", std::process::id(), rand_suffix()));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        fn rand_suffix() -> u64 {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            N.fetch_add(1, Ordering::Relaxed)
        }
    }

    #[test]
    fn the_history_file_has_one_line_per_op_and_the_read_back() {
        let a = op(0, 0, 0, ok(0, 1));
        let u = op(1, 0, 5, unknown());
        let v = op(2, 0, 6, OpResult::Unknown("no answer\nwithin 1s".into()));
        let mut odd = op(3, 0, 7, failed());
        odd.payload = b"t-3-0 x".to_vec();
        let h = hist(&[&a, &u, &v, &odd]);
        let (_d, s) = written(&h, Some(&logs(&[&[b"old", &a.payload, &u.payload, b"foreign"], &[]])));
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[0].starts_with('#'));
        assert_eq!(lines[1], "tag t");
        assert_eq!(lines[2], "op 0 0 0 10 t-0-0-...... ok 0 1");
        assert_eq!(lines[3], "op 1 0 5 15 t-1-0-...... unknown connection closed before the answer");
        assert_eq!(lines[4], "op 2 0 6 16 t-2-0-...... unknown no answer within 1s");
        assert_eq!(lines[5], "op 3 0 7 17 hex:742d332d302078 failed server error 5 NotLeader");
        assert_eq!(&lines[6..], ["shard 0 start 1 len 4", "foreign 0 3", "shard 1 start 0 len 0", "found 1 0 0 2"]);
        let (_d, s) = written(&h, None);
        assert_eq!(s.lines().count(), 6);
    }

    /// Runs tools/porcupine on `h` (+ `l`); None where go is missing (a failure under
    /// CORELOG_NO_SKIP=1).
    fn porcupine_on(h: &History, l: &Logs) -> Option<Linearizability> {
        if !go_available() {
            assert!(std::env::var("CORELOG_NO_SKIP").as_deref() != Ok("1"), "go not on PATH and CORELOG_NO_SKIP=1");
            eprintln!("SKIP porcupine: go not on PATH");
            return None;
        }
        let (d, _) = written(h, Some(l));
        Some(porcupine(&porcupine_dir(), &d.0.join("h.txt")).unwrap())
    }

    #[test]
    fn porcupine_accepts_a_linearizable_history_and_rejects_a_real_time_inversion() {
        let a = op(0, 0, 0, ok(0, 0));
        let b = op(1, 0, 5, ok(0, 1)); // concurrent with a
        let u = op(2, 0, 6, unknown());
        let c = op(0, 1, 20, ok(0, 3));
        let l = logs(&[&[&a.payload, &b.payload, &u.payload, &c.payload]]);
        let h = hist(&[&a, &b, &u, &c]);
        assert!(check(&h, &l).is_ok());
        let Some(v) = porcupine_on(&h, &l) else { return };
        assert!(matches!(&v, Linearizability::Linearizable(s) if s.contains("linearizable")), "{v:?}");
        // c (offset 0) invoked after a (offset 3) completed: the log order contradicts
        // real time, though every ack reads back where it said.
        let (a, c) = (op(0, 0, 0, ok(0, 3)), op(0, 1, 20, ok(0, 0)));
        let l = logs(&[&[&c.payload, &b.payload, &u.payload, &a.payload]]);
        let h = hist(&[&a, &b, &u, &c]);
        assert!(check(&h, &l).is_ok(), "the read-back check cannot see this");
        let v = porcupine_on(&h, &l).unwrap();
        assert!(
            matches!(&v, Linearizability::NotLinearizable(s) if s.contains("before append conn 0 seq 1 (relative offset 0) was invoked at 20")),
            "{v:?}"
        );
    }
}
