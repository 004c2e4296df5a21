//! One load-generating process: `cores` pinned glommio executors, each holding its share
//! of the connections. Closed loop (each connection one append in flight) or open loop
//! (`rate` appends/s in total, latency measured from the intended send time, so a stall
//! shows up in the percentiles instead of hiding in fewer samples).
//!
//! Several processes run one step together (`sweep`): each connects, says `READY` on
//! stdout and waits for a shared start time (an absolute UNIX timestamp) so that all
//! measured windows cover the same wall-clock interval; see [`StartGate`].

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use corelog_client::codec::{
    self, decode_frame, ErrorCode, Hint, Leadership, Request, Response, Role, FALLBACK_VERSION, LEADERSHIP_VERSION,
    PROTOCOL_VERSION,
};
use corelog_client::leadership::{Seen, Target, PROBE_ID};
use corelog_server::net::tls_io::{self, Reader, Writer};
use glommio::net::TcpStream;
use glommio::{LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;

use corelog_server::watchdog::Watchdog;

/// Connections one executor opens concurrently (the server's accept backlog is 4096).
const CONNECT_CONCURRENCY: usize = 256;
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
    /// Executor k is pinned to the ((first_cpu + k) mod n)-th of the process's n allowed CPUs ([`corelog_server::cpus`]); None: not pinned.
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

struct Local {
    hist: RefCell<Histogram<u64>>,
    acked: Cell<u64>,
    acked_total: Cell<u64>,
    errors: RefCell<Vec<(u16, u64)>>,
    timeouts: Cell<u64>,
    unknown: Cell<u64>,
    reconnects: Cell<u64>,
    /// Stream names per (shard, shard count), made on first use.
    names: RefCell<StreamNames>,
    /// Failover: what answers showed about leadership, shared by this executor's
    /// connections.
    seen: RefCell<Seen>,
}

/// Stream names by (shard, shard count).
type StreamNames = std::collections::HashMap<(u16, u16), Rc<Vec<String>>>;

impl Local {
    /// The names among `s0..s{n-1}` that live on `home.0` of `home.1` shards.
    fn names(&self, n: u32, home: (u16, u16)) -> Rc<Vec<String>> {
        let mut m = self.names.borrow_mut();
        m.entry(home)
            .or_insert_with(|| {
                let all = (0..n).map(|k| format!("s{k}"));
                Rc::new(all.filter(|s| codec::stream_shard(s.as_bytes(), home.1.max(1)) == home.0).collect())
            })
            .clone()
    }
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
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
    let cpus = corelog_server::cpus::allowed();
    let began = Instant::now();
    let mut joins = Vec::new();
    for core in 0..cfg.cores {
        let (cfg, g) = (cfg.clone(), g.clone());
        let share = cfg.connections / cfg.cores + usize::from(core < cfg.connections % cfg.cores);
        let first = core * (cfg.connections / cfg.cores) + core.min(cfg.connections % cfg.cores);
        let placement = match cfg.first_cpu {
            Some(f) => Placement::Fixed(corelog_server::cpus::pick(&cpus, f + core)),
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

struct ExecResult {
    hist: Histogram<u64>,
    acked: u64,
    acked_total: u64,
    errors: Vec<(u16, u64)>,
    timeouts: u64,
    unknown: u64,
    reconnects: u64,
}

async fn executor(cfg: RunConfig, g: Arc<Global>, first: usize, share: usize) -> ExecResult {
    let local = Rc::new(Local {
        hist: RefCell::new(new_hist()),
        acked: Cell::new(0),
        acked_total: Cell::new(0),
        errors: Default::default(),
        timeouts: Cell::new(0),
        unknown: Cell::new(0),
        reconnects: Cell::new(0),
        names: Default::default(),
        seen: Default::default(),
    });
    let conns: Rc<RefCell<Vec<Link>>> = Rc::default();
    // Connect in waves of CONNECT_CONCURRENCY.
    let connect_until = Instant::now() + cfg.connect_deadline;
    let mut idx = first;
    while idx < first + share {
        let wave: Vec<_> = (idx..(idx + CONNECT_CONCURRENCY).min(first + share))
            .map(|i| {
                let (cfg, g, conns, local) = (cfg.clone(), g.clone(), conns.clone(), local.clone());
                glommio::spawn_local(async move {
                    if Instant::now() > connect_until {
                        g.connect_failures.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    match connect(&cfg, i, 0, &local.seen).await {
                        Ok((r, w, alt, hello)) => {
                            g.connected.fetch_add(1, Ordering::Relaxed);
                            let (home, role, epoch) = (hello.home, hello.role, hello.epoch);
                            let leases = hello.version >= LEADERSHIP_VERSION;
                            conns.borrow_mut().push(Link { r, w, i, alt, home, role, epoch, leases });
                        }
                        Err(e) => {
                            if g.connect_failures.fetch_add(1, Ordering::Relaxed) < 3 {
                                crate::log!("connection {i}: {e}");
                            }
                        }
                    }
                })
            })
            .collect();
        idx += wave.len();
        for t in wave {
            t.await;
        }
    }
    g.finished_connecting.fetch_add(1, Ordering::AcqRel);
    while !g.go.load(Ordering::Acquire) {
        glommio::timer::sleep(Duration::from_millis(2)).await;
    }
    let start = g.start.lock().unwrap().expect("set before go");
    let measure_from = start + cfg.warmup;
    let measure_to = measure_from + cfg.duration;
    let n_total = cfg.connections.max(1);
    let tasks: Vec<_> = conns
        .borrow_mut()
        .drain(..)
        .map(|conn| {
            let (cfg, local, i) = (cfg.clone(), local.clone(), conn.i);
            // Open loop: connection i sends every n_total/rate seconds, phase-shifted.
            let schedule = cfg.rate.map(|rate| {
                let interval = Duration::from_secs_f64(n_total as f64 / rate);
                (interval, start + interval.mul_f64(i as f64 / n_total as f64))
            });
            glommio::spawn_local(drive(conn, cfg, local, schedule, measure_from, measure_to))
        })
        .collect();
    // A connection whose window is over stays open until this executor's last answer is
    // in, and until twice the slowest answer has passed since the window's end (at most
    // LINGER_MAX): closing thousands of connections costs the server CPU, and the appends
    // of other connections (and of other load-generator processes, whose windows end at
    // the same time) still in flight would pay for it — a tail of the benchmark's own
    // making.
    let mut open = Vec::with_capacity(share);
    for t in tasks {
        open.extend(t.await);
    }
    let slowest = Duration::from_micros(local.hist.borrow().max());
    let linger_to = measure_to + (slowest * 2).min(cfg.timeout).min(LINGER_MAX);
    if let Some(left) = linger_to.checked_duration_since(Instant::now()) {
        glommio::timer::sleep(left).await;
    }
    drop(open);
    let errors = local.errors.borrow().clone();
    let hist = local.hist.borrow().clone();
    ExecResult {
        hist,
        acked: local.acked.get(),
        acked_total: local.acked_total.get(),
        errors,
        timeouts: local.timeouts.get(),
        unknown: local.unknown.get(),
        reconnects: local.reconnects.get(),
    }
}

/// The longest a process keeps its connections open after its window (a failover run's
/// slowest answer can take seconds).
const LINGER_MAX: Duration = Duration::from_secs(5);

/// A failover connect that has not completed in this long moves on to the next node
/// (a lease, once a node has advertised one: `Seen::connect_timeout`).
const FAILOVER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Failover back-off: from 20 ms, doubling, at most 100 ms (or a refusal's retry hint).
const BACKOFF_START: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(100);

/// What a `HelloOk` said that a connection keeps.
struct HelloInfo {
    /// (shard, shard count).
    home: (u16, u16),
    role: Role,
    epoch: u32,
    leadership: Option<Leadership>,
    /// The protocol version the connection was opened with.
    version: u16,
}

/// Opens connection `i`: to its target, or (failover) to the first alternative from
/// index `from` on that accepts and may carry appends (`Seen::usable`; suspects only when
/// every alternative is one). Returns the index of the target it reached.
async fn connect(
    cfg: &RunConfig,
    i: usize,
    from: usize,
    seen: &RefCell<Seen>,
) -> Result<(Reader, Writer, usize, HelloInfo), String> {
    let n = cfg.targets.len();
    if !cfg.failover {
        return connect_to(cfg, cfg.targets[i % n], i).await.map(|(r, w, h)| (r, w, i % n, h));
    }
    let mut errs = Vec::new();
    let now = Instant::now();
    let order: Vec<usize> = (0..n).map(|k| (from + k) % n).collect();
    let fresh: Vec<usize> =
        order.iter().copied().filter(|&t| !seen.borrow().is_suspect(&cfg.targets[t].to_string(), now)).collect();
    for t in if fresh.is_empty() { order } else { fresh } {
        let addr = cfg.targets[t].to_string();
        let limit = seen.borrow().connect_timeout(FAILOVER_CONNECT_TIMEOUT);
        let attempt = glommio::timer::timeout(limit, async {
            connect_to(cfg, cfg.targets[t], i)
                .await
                .map_err(|e| glommio::GlommioError::IoError(std::io::Error::other(e)))
        });
        match attempt.await {
            Ok((r, w, h)) => match seen.borrow_mut().usable(&addr, h.role, h.epoch, h.leadership, Instant::now()) {
                Ok(()) => return Ok((r, w, t, h)),
                Err(why) => errs.push(why),
            },
            Err(glommio::GlommioError::TimedOut(_)) => {
                let mut s = seen.borrow_mut();
                if s.lease.is_some() {
                    let epoch = s.epoch;
                    s.suspect(&addr, epoch, Instant::now());
                }
                errs.push(format!("{addr}: no HelloOk within {limit:?}"));
            }
            Err(e) => errs.push(format!("{addr}: {e}")),
        }
    }
    Err(errs.join("; "))
}

/// Connects and says Hello; returns the streams and what the `HelloOk` said.
/// Opens connection `i` to `target` with this build's protocol version, and once more
/// with `FALLBACK_VERSION` when the server refuses that with `BadVersion` (a server older
/// than this load generator: docs/operations.md §15).
async fn connect_to(cfg: &RunConfig, target: SocketAddr, i: usize) -> Result<(Reader, Writer, HelloInfo), String> {
    match connect_with(cfg, target, i, PROTOCOL_VERSION).await {
        Err(Refused::BadVersion(_)) => connect_with(cfg, target, i, FALLBACK_VERSION).await,
        r => r,
    }
    .map_err(|e| match e {
        Refused::BadVersion(m) | Refused::Other(m) => m,
    })
}

/// Why a connection did not open: the server refused its `Hello` version, or anything else.
enum Refused {
    BadVersion(String),
    Other(String),
}

impl From<String> for Refused {
    fn from(m: String) -> Refused {
        Refused::Other(m)
    }
}

impl From<&str> for Refused {
    fn from(m: &str) -> Refused {
        Refused::Other(m.to_string())
    }
}

async fn connect_with(
    cfg: &RunConfig,
    target: SocketAddr,
    i: usize,
    version: u16,
) -> Result<(Reader, Writer, HelloInfo), Refused> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sk = Socket::new(Domain::for_address(target), Type::STREAM, Some(Protocol::TCP)).map_err(|e| e.to_string())?;
    if let IpAddr::V4(ip) = target.ip() {
        if ip.is_loopback() && (cfg.source_ips > 1 || cfg.source_ip_base > 1) {
            // One source address reaches only ~28k ports of one destination: spread.
            let last = cfg.source_ip_base as usize + i % cfg.source_ips.max(1) as usize;
            let src = Ipv4Addr::new(127, 0, 0, last.clamp(1, 254) as u8);
            let one: libc::c_int = 1;
            // SAFETY: valid fd and option value.
            unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&sk),
                    libc::IPPROTO_IP,
                    libc::IP_BIND_ADDRESS_NO_PORT,
                    &one as *const _ as *const libc::c_void,
                    std::mem::size_of_val(&one) as libc::socklen_t,
                )
            };
            sk.bind(&SocketAddr::new(IpAddr::V4(src), 0).into()).map_err(|e| format!("bind {src}: {e}"))?;
        }
    }
    sk.set_nodelay(true).map_err(|e| e.to_string())?;
    sk.set_nonblocking(true).map_err(|e| e.to_string())?;
    match sk.connect(&target.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(format!("connect {target}: {e}").into()),
    }
    // The first write (ClientHello or Hello) waits for the connection to complete.
    // SAFETY: we hand the connected-or-connecting socket's fd over to glommio.
    let sock = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(sk)) };
    let tls = match &cfg.tls {
        Some(c) => {
            let name = rustls::pki_types::ServerName::try_from(cfg.server_name.clone()).map_err(|e| e.to_string())?;
            Some(rustls::Connection::Client(rustls::ClientConnection::new(c.clone(), name).map_err(|e| e.to_string())?))
        }
        None => None,
    };
    let (mut r, mut w) = tls_io::establish(sock, tls).await.map_err(|e| format!("handshake: {e}"))?;
    let mut hello = Vec::new();
    Request::Hello { version }.encode(0, &mut hello);
    w.write(&hello).await.map_err(|e| e.to_string())?;
    loop {
        if let Some((f, used)) = decode_frame(r.data()).map_err(|e| e.to_string())? {
            let hello = match Response::parse(&f).map_err(|e| e.to_string())? {
                Response::HelloOk { shard, shard_count, role, epoch, leadership, .. } => {
                    HelloInfo { home: (shard, shard_count), role, epoch, leadership, version }
                }
                Response::Error { code, message } if code == ErrorCode::BadVersion as u16 => {
                    return Err(Refused::BadVersion(format!("server refused: {code} {message}")))
                }
                Response::Error { code, message } | Response::Refusal { code, message, .. } => {
                    return Err(format!("server refused: {code} {message}").into())
                }
                _ => return Err(format!("unexpected opcode 0x{:02x} to Hello", f.op).into()),
            };
            r.consume(used);
            return Ok((r, w, hello));
        }
        if !r.fill().await.map_err(|e| e.to_string())? {
            return Err("server closed the connection".into());
        }
    }
}

/// One response frame, as the driver needs it.
enum Answer {
    /// `Appended` / `Appended2`.
    Appended,
    /// An error frame (its hint, on a version-3 connection that carries one).
    Refused { code: u16, message: String, hint: Option<Hint> },
    /// The answer to a probe.
    Probe { role: Role, epoch: u32, leadership: Option<Leadership> },
    /// Anything else (an opcode not expected here).
    Other,
}

/// Reads one response frame.
async fn next(r: &mut Reader) -> Result<Answer, String> {
    loop {
        if let Some((f, used)) = decode_frame(r.data()).map_err(|e| e.to_string())? {
            let a = match Response::parse(&f) {
                Ok(Response::Appended { .. } | Response::Appended2 { .. }) => Answer::Appended,
                Ok(Response::Error { code, message }) => {
                    Answer::Refused { code, message: message.to_string(), hint: None }
                }
                Ok(Response::Refusal { code, message, hint }) => {
                    Answer::Refused { code, message: message.to_string(), hint: Some(hint) }
                }
                Ok(Response::WrongVersion { message, .. }) => Answer::Refused {
                    code: ErrorCode::WrongExpectedVersion as u16,
                    message: message.to_string(),
                    hint: None,
                },
                Ok(Response::HelloOk { role, epoch, leadership, .. }) if f.req_id == PROBE_ID => {
                    Answer::Probe { role, epoch, leadership }
                }
                Ok(_) => Answer::Other,
                Err(e) => return Err(e.to_string()),
            };
            r.consume(used);
            return Ok(a);
        }
        if !r.fill().await.map_err(|e| e.to_string())? {
            return Err("server closed the connection".into());
        }
    }
}

/// Why an append got no answer.
enum NoAnswer {
    /// Nothing within the run's `--timeout`.
    Timeout,
    /// The connection broke.
    Broken,
    /// Given up: silent for a whole lease, or a probe showed the node no longer leads
    /// with a live lease (`Seen::usable`); the node is a suspect now.
    Abandoned,
}

/// The answer to the append just sent on `c`. Failover mode, against a leader that
/// advertises a lease: probed after half a lease of silence (a `Hello` answered at once
/// by a live node), abandoned after a whole one (docs/protocol.md §6.3). The read is
/// never dropped half-way: the probe is written while it waits.
async fn answer(
    c: &mut Link,
    cfg: &RunConfig,
    seen: &RefCell<Seen>,
    watchdog: &mut Watchdog,
) -> Result<Answer, NoAnswer> {
    let sent = Instant::now();
    // The plain read unless failover against a leasing leader: this is every append's
    // path, and the load generator shares the CPUs with the servers it measures.
    let limits = if cfg.failover && c.leases {
        let s = seen.borrow();
        s.probe_after().zip(s.silent_limit())
    } else {
        None
    };
    let Some((probe_after, silent)) = limits else {
        return match watchdog.within(sent, cfg.timeout, next(&mut c.r)).await {
            Some(Ok(a)) => Ok(a),
            Some(Err(_)) => Err(NoAnswer::Broken),
            None => Err(NoAnswer::Timeout),
        };
    };
    let addr = cfg.targets[c.alt % cfg.targets.len()].to_string();
    let mut heard = sent;
    let mut probed = false;
    loop {
        let read = next(&mut c.r);
        let mut read = std::pin::pin!(read);
        loop {
            let due = if probed { heard + silent } else { heard + probe_after };
            let limit = due.min(sent + cfg.timeout).saturating_duration_since(sent);
            match watchdog.within(sent, limit, read.as_mut()).await {
                Some(Ok(Answer::Probe { role, epoch, leadership })) => {
                    if seen.borrow_mut().usable(&addr, role, epoch, leadership, Instant::now()).is_err() {
                        return Err(NoAnswer::Abandoned);
                    }
                    (heard, probed) = (Instant::now(), false);
                    break; // read the next frame
                }
                Some(Ok(a)) => return Ok(a),
                Some(Err(_)) => return Err(NoAnswer::Broken),
                None if Instant::now() >= sent + cfg.timeout => return Err(NoAnswer::Timeout),
                None if probed => {
                    seen.borrow_mut().suspect(&addr, c.epoch, Instant::now());
                    return Err(NoAnswer::Abandoned);
                }
                None => {
                    let mut probe = Vec::new();
                    Request::Hello { version: PROTOCOL_VERSION }.encode(PROBE_ID, &mut probe);
                    if c.w.write(&probe).await.is_err() {
                        return Err(NoAnswer::Broken);
                    }
                    probed = true;
                }
            }
        }
    }
}

/// One load connection: its streams, its index, and which target it is on.
struct Link {
    r: Reader,
    w: Writer,
    i: usize,
    alt: usize,
    /// (shard, shard count) from the server's `HelloOk`.
    home: (u16, u16),
    /// The role and epoch its `HelloOk` said.
    role: Role,
    epoch: u32,
    /// Its node tells leases (protocol version 3): probes may be sent on it.
    leases: bool,
}

/// Failover: replaces `c` with a connection to the alternative `from` (or the next
/// ones), after `wait` (a refusal's retry hint) or else `backoff` (doubled, up to
/// 100 ms); false once `until` has passed.
async fn reconnect(
    c: &mut Link,
    from: usize,
    cfg: &RunConfig,
    seen: &RefCell<Seen>,
    (wait, backoff): (Option<Duration>, &mut Duration),
    until: Instant,
) -> bool {
    loop {
        // A hint (a take-over under way) paces every retry: the node is restarting, and a
        // refused connection is cheap.
        match wait {
            Some(w) => glommio::timer::sleep(w).await,
            None => {
                glommio::timer::sleep(*backoff).await;
                *backoff = (*backoff * 2).min(BACKOFF_MAX);
            }
        }
        if Instant::now() >= until {
            return false;
        }
        if let Ok((r, w, alt, hello)) = connect(cfg, c.i, from, seen).await {
            let leases = hello.version >= LEADERSHIP_VERSION;
            *c = Link { r, w, i: c.i, alt, home: hello.home, role: hello.role, epoch: hello.epoch, leases };
            return true;
        }
    }
}

/// A fresh producer for connection `i`: an id from the clock, the process and `i`.
fn new_producer(i: usize) -> codec::ProducerSeq {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(i);
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    codec::ProducerSeq { id: h.finish(), seq: 0 }
}

async fn drive(
    mut c: Link,
    cfg: RunConfig,
    local: Rc<Local>,
    schedule: Option<(Duration, Instant)>,
    measure_from: Instant,
    measure_to: Instant,
) -> Option<Link> {
    let payload = vec![b'x'; cfg.payload_bytes];
    let mut frame = Vec::with_capacity(payload.len() + 16);
    let mut req_id = 0u64;
    let mut producer = cfg.idempotent.then(|| new_producer(c.i));
    let mut intended = schedule.map(|s| s.1);
    let mut pick = (c.i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1; // round-robin index or xorshift state
    let mut backoff = BACKOFF_START;
    let mut watchdog = Watchdog::new();
    loop {
        let now = Instant::now();
        if now >= measure_to {
            break;
        }
        // Open loop: wait for the intended send time; latency counts from it.
        let t0 = match (schedule, intended) {
            (Some((interval, _)), Some(at)) => {
                if at > now {
                    glommio::timer::sleep(at - now).await;
                }
                intended = Some(at + interval);
                at
            }
            _ => now,
        };
        if t0 >= measure_to {
            break;
        }
        frame.clear();
        req_id += 1;
        let names = (cfg.streams > 0).then(|| local.names(cfg.streams, c.home));
        let stream = match &names {
            None => None,
            Some(n) if n.is_empty() => {
                crate::log!("connection {}: none of the {} streams lives on shard {}", c.i, cfg.streams, c.home.0);
                return None;
            }
            Some(n) => {
                pick = if cfg.stream_random { xorshift(pick) } else { pick.wrapping_add(1) };
                Some(codec::StreamReq::new(&n[(pick % n.len() as u64) as usize], codec::Expect::Any))
            }
        };
        match (producer.as_mut(), stream) {
            (None, None) => codec::encode_append(req_id, &payload, &mut frame),
            (p, stream) => {
                codec::encode_append2(req_id, p.as_deref().copied(), stream, &payload, &mut frame);
                if let Some(p) = p {
                    p.seq += 1;
                }
            }
        }
        // Failover: where to reconnect after this append (None: stay), and after how long
        // (a refusal's retry hint; else the back-off).
        let mut move_to: Option<usize> = None;
        let mut wait = None;
        let mut failed = false;
        if c.w.write(&frame).await.is_err() {
            if !cfg.failover {
                bump(&local.timeouts);
                return None;
            }
            bump(&local.unknown); // part of it may have left
            move_to = Some(c.alt + 1);
        } else {
            let res = answer(&mut c, &cfg, &local.seen, &mut watchdog).await;
            let done = Instant::now();
            match res {
                Ok(Answer::Appended) => {
                    backoff = BACKOFF_START;
                    bump(&local.acked_total);
                    if t0 >= measure_from {
                        let us = (done - t0).as_micros().clamp(1, HIST_MAX_US as u128) as u64;
                        local.hist.borrow_mut().record(us).expect("clamped to bounds");
                        bump(&local.acked);
                    }
                }
                Ok(Answer::Refused { code, message, hint }) => {
                    failed = true;
                    if t0 >= measure_from {
                        let mut e = local.errors.borrow_mut();
                        match e.iter_mut().find(|(c, _)| *c == code) {
                            Some(x) => x.1 += 1,
                            None => e.push((code, 1)),
                        }
                    }
                    if code != ErrorCode::ReplicationTimeout as u16 && code != ErrorCode::Overloaded as u16 {
                        if !cfg.failover {
                            return None;
                        }
                        wait = hint.filter(|h| h.retry_ms > 0).map(|h| Duration::from_millis(h.retry_ms as u64));
                        match after_refusal(&c, &cfg, &local.seen, (code, &message, hint)) {
                            Some(to) => move_to = Some(to),
                            // The same node again, on this connection, after the pause.
                            None => glommio::timer::sleep(wait.unwrap_or(backoff)).await,
                        }
                    }
                }
                Ok(Answer::Probe { .. } | Answer::Other) | Err(NoAnswer::Timeout) => {
                    bump(&local.timeouts);
                    if !cfg.failover {
                        return None;
                    }
                    move_to = Some(c.alt + 1);
                }
                Err(NoAnswer::Broken | NoAnswer::Abandoned) => {
                    // The connection broke, or was given up, before the answer.
                    if !cfg.failover {
                        bump(&local.timeouts);
                        return None;
                    }
                    // A follower's connection writes nothing (a node taking over closes it).
                    if c.role != Role::Follower {
                        bump(&local.unknown);
                    }
                    move_to = Some(c.alt + 1);
                }
            }
        }
        if producer.is_some() && (failed || move_to.is_some()) {
            producer = Some(new_producer(c.i));
        }
        if let Some(to) = move_to {
            if !reconnect(&mut c, to, &cfg, &local.seen, (wait, &mut backoff), measure_to).await {
                return None;
            }
            bump(&local.reconnects);
        }
    }
    Some(c)
}

/// Failover: the alternative to reconnect to after a refusal (`Seen::after_refusal`):
/// the leader named if it is one of the targets, or the next one; None: the same node,
/// on the same connection.
fn after_refusal(c: &Link, cfg: &RunConfig, seen: &RefCell<Seen>, refusal: (u16, &str, Option<Hint>)) -> Option<usize> {
    let (code, named, hint) = refusal;
    let n = cfg.targets.len();
    let at = cfg.targets[c.alt % n].to_string();
    let code = ErrorCode::from_u16(code);
    let named = if code == Some(ErrorCode::NotLeader) { named } else { "" };
    match seen.borrow_mut().after_refusal(&at, code, named, hint, Instant::now()) {
        Target::Named(a) => {
            let t = a.parse::<SocketAddr>().ok().and_then(|a| cfg.targets.iter().position(|t| *t == a));
            Some(t.unwrap_or(c.alt + 1))
        }
        Target::Stay => None,
        Target::Other => Some(c.alt + 1),
    }
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^ (x << 17)
}
