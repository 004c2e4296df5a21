//! Running the workload: closed-loop connections, each operation recorded with its
//! times and outcome.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelog_client::{Client, ClientConfig, Outcome, Position};

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

pub(crate) fn payload(tag: &str, conn: u32, seq: u64, size: usize) -> Vec<u8> {
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
