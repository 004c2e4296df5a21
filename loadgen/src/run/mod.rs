//! One load-generating process: `cores` pinned glommio executors, each holding its share
//! of the connections. Closed loop (each connection one append in flight) or open loop
//! (`rate` appends/s in total, latency measured from the intended send time, so a stall
//! shows up in the percentiles instead of hiding in fewer samples).
//!
//! Several processes run one step together (`sweep`): each connects, says `READY` on
//! stdout and waits for a shared start time (an absolute UNIX timestamp) so that all
//! measured windows cover the same wall-clock interval; see [`StartGate`].
//!
//! Here: the process (its executors, the start gate, the sum of their counts). Below:
//! `executor` (one executor's connections), `drive` (one connection's appends), `answer`
//! (the answer to one append) and `link` (opening a connection, and reconnecting).

mod answer;
mod drive;
mod executor;
mod link;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use glommio::{LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;

use executor::executor;

/// Highest latency the histograms track (values above are clamped), in µs.
pub const HIST_MAX_US: u64 = 120_000_000;

pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("static bounds")
}

/// When the clock starts once every connection is up.
#[derive(Clone, Copy, Debug)]
pub enum StartGate {
    /// As soon as this process has connected.
    Now,
    /// At this absolute UNIX time (seconds); at once if already past.
    At(f64),
    /// Print `READY <connected> <failures>` on stdout, then read the UNIX start time
    /// (seconds, a float) as one line from stdin. Used by `sweep` for its children.
    Stdin,
}

/// Seconds since the UNIX epoch, now.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// The `Instant` that corresponds to the UNIX time `at` (clamped to now if past).
pub fn instant_of_unix(at: f64) -> Instant {
    let now_i = Instant::now();
    let ahead = at - unix_now();
    if ahead > 0.0 {
        now_i + Duration::from_secs_f64(ahead)
    } else {
        now_i
    }
}

#[derive(Clone)]
pub struct RunConfig {
    /// Connection i goes to `targets[i % len]` (with `failover`: see there).
    pub targets: Vec<SocketAddr>,
    /// The targets are nodes of one cluster (alternatives): each connection uses the
    /// first that accepts, and a connection lost or refused (`NotLeader`, `Unavailable`,
    /// `Fenced`, ...) reconnects by the leadership rules of docs/protocol.md §6.3 (the
    /// client library's `leadership::Seen`, one per executor): to the node `NotLeader`
    /// names unless stale or silent, to the same node when no leader holds a live lease,
    /// else to the next one, after the refusal's retry hint or a back-off of 20 ms
    /// doubling to 100 ms; a connection to a leader that advertises a lease is probed
    /// after half a lease of silence and abandoned after a whole one. An append whose
    /// answer was lost with its connection (or abandoned) counts as `unknown` (it may or
    /// may not be in the log); none is re-sent.
    pub failover: bool,
    pub connections: usize,
    pub cores: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub payload_bytes: usize,
    /// Open loop: total appends/s; None = closed loop.
    pub rate: Option<f64>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub server_name: String,
    pub source_ips: u8,
    /// Source addresses are 127.0.0.(source_ip_base + i % source_ips).
    pub source_ip_base: u8,
    /// Executor k is pinned to the ((first_cpu + k) mod n)-th of the process's n allowed CPUs ([`corelog_runtime::cpus`]); None: not pinned.
    pub first_cpu: Option<usize>,
    pub timeout: Duration,
    pub connect_deadline: Duration,
    pub gate: StartGate,
    /// io_uring submission depth per ring. The kernel sizes a ring's cancel hash table
    /// from it (2^clamp(log2(2 × depth) − 5, 1, 8) buckets): glommio cancels a timer on
    /// nearly every park, and each cancel scans one bucket of all armed socket polls, so
    /// 9,000 connections on a 128-deep ring (8 buckets) cost ~15% of the CPU in
    /// `io_poll_find`; 4096 gives the maximum of 256 buckets.
    pub ring_depth: usize,
    /// Send `Append2` with a producer per connection (a new producer id after any error
    /// or reconnection: nothing is re-sent, so a sequence is never reused).
    pub idempotent: bool,
    /// Append to this many streams (`Append2` naming a stream, expected version any):
    /// names `s0`, `s1`, …; a connection appends to those of the shard it is on. 0: none.
    pub streams: u32,
    /// Pick each append's stream at random (else round-robin per connection).
    pub stream_random: bool,
}

#[derive(Default)]
pub struct Outcome {
    /// Latencies of the appends sent (or, open loop, due) inside the window, in µs.
    pub hist: Option<Histogram<u64>>,
    /// Appends acknowledged inside the window.
    pub acked: u64,
    /// Appends acknowledged during the whole run (warm-up and tail included): what the
    /// server's logs must have gained, for the cross-check.
    pub acked_total: u64,
    pub errors: u64,
    pub error_codes: Vec<(u16, u64)>,
    pub timeouts: u64,
    /// Failover mode, whole run: appends sent whose connection was lost before the
    /// answer (outcome unknown).
    pub unknown: u64,
    /// Failover mode: connections re-established on another (or the same) node.
    pub reconnects: u64,
    pub connect_failures: u64,
    pub connected: u64,
    pub window: Duration,
    /// Seconds from start to the last connection established.
    pub connect_s: f64,
    /// How late this process started its clock after the shared start time (ms).
    pub late_start_ms: f64,
    /// The UNIX time the clock started.
    pub start_unix: f64,
}

/// State shared by the executors of this process.
struct Global {
    connected: AtomicUsize,
    finished_connecting: AtomicUsize,
    go: AtomicBool,
    start: Mutex<Option<Instant>>,
    connect_failures: AtomicU64,
}

pub fn run(cfg: RunConfig) -> Result<Outcome, String> {
    let g = Arc::new(Global {
        connected: AtomicUsize::new(0),
        finished_connecting: AtomicUsize::new(0),
        go: AtomicBool::new(false),
        start: Mutex::new(None),
        connect_failures: AtomicU64::new(0),
    });
    assert!(!cfg.targets.is_empty(), "at least one target");
    let cpus = corelog_runtime::cpus::allowed();
    let began = Instant::now();
    let mut joins = Vec::new();
    for core in 0..cfg.cores {
        let (cfg, g) = (cfg.clone(), g.clone());
        let share = cfg.connections / cfg.cores + usize::from(core < cfg.connections % cfg.cores);
        let first = core * (cfg.connections / cfg.cores) + core.min(cfg.connections % cfg.cores);
        let placement = match cfg.first_cpu {
            Some(f) => Placement::Fixed(corelog_runtime::cpus::pick(&cpus, f + core)),
            None => Placement::Unbound,
        };
        let h = LocalExecutorBuilder::new(placement)
            .name(&format!("loadgen-{core}"))
            .io_memory(128 * 1024)
            .ring_depth(cfg.ring_depth.max(8))
            .spawn(move || async move { executor(cfg, g, first, share).await })
            .map_err(|e| format!("start executor: {e}"))?;
        joins.push(h);
    }
    // Wait for every executor to finish connecting, then start the clock.
    let deadline = Instant::now() + cfg.connect_deadline + Duration::from_secs(5);
    let mut last_print = Instant::now();
    while g.finished_connecting.load(Ordering::Acquire) < cfg.cores && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        if last_print.elapsed() > Duration::from_secs(2) {
            crate::log!("connected {}/{}", g.connected.load(Ordering::Relaxed), cfg.connections);
            last_print = Instant::now();
        }
    }
    let connect_s = began.elapsed().as_secs_f64();
    let connected = g.connected.load(Ordering::Relaxed);
    let failures = g.connect_failures.load(Ordering::Relaxed);
    let (start, late_start_ms) = match cfg.gate {
        StartGate::Now => (Instant::now(), 0.0),
        StartGate::At(at) => {
            let late = (unix_now() - at).max(0.0) * 1000.0;
            if late > 0.0 {
                crate::log!("connected {late:.0} ms after the shared start time; starting late");
            }
            (instant_of_unix(at), late)
        }
        StartGate::Stdin => {
            use std::io::{BufRead, Write};
            println!("READY {connected} {failures}");
            std::io::stdout().flush().map_err(|e| format!("stdout: {e}"))?;
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map_err(|e| format!("stdin: {e}"))?;
            let at: f64 = line.trim().parse().map_err(|_| format!("bad start time {line:?} on stdin"))?;
            let late = (unix_now() - at).max(0.0) * 1000.0;
            (instant_of_unix(at), late)
        }
    };
    let start_unix = unix_now() + start.saturating_duration_since(Instant::now()).as_secs_f64();
    // Executors busy-wait on `go` with 2 ms sleeps: release them at the start instant.
    let now = Instant::now();
    if start > now {
        std::thread::sleep(start - now);
    }
    *g.start.lock().unwrap() = Some(start);
    g.go.store(true, Ordering::Release);
    let mut out = Outcome {
        hist: Some(new_hist()),
        window: cfg.duration,
        connect_s,
        late_start_ms,
        start_unix,
        ..Default::default()
    };
    let mut codes: std::collections::BTreeMap<u16, u64> = Default::default();
    for j in joins {
        let e = j.join().map_err(|e| format!("executor failed: {e}"))?;
        out.hist.as_mut().unwrap().add(&e.hist).map_err(|e| format!("merge: {e:?}"))?;
        out.acked += e.acked;
        out.acked_total += e.acked_total;
        out.timeouts += e.timeouts;
        out.unknown += e.unknown;
        out.reconnects += e.reconnects;
        for (c, n) in e.errors {
            *codes.entry(c).or_default() += n;
            out.errors += n;
        }
    }
    out.error_codes = codes.into_iter().collect();
    out.connect_failures = g.connect_failures.load(Ordering::Relaxed);
    out.connected = g.connected.load(Ordering::Relaxed) as u64;
    Ok(out)
}
