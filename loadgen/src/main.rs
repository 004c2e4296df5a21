//! `corelog-loadgen`: thread-per-core load generator for corelog.
//!
//! - `run`: one process, one step (closed or open loop), table or JSON.
//! - `sweep`: steps of connection counts over several coordinated `run` processes,
//!   merged histograms, CPU accounting, cross-check, table/JSON/Markdown/SVG.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use corelog_loadgen::{log, parse_addrs, parse_counts, parse_duration, procstat, report, result, run, svg, sweep};

#[derive(Parser)]
#[command(name = "corelog-loadgen", version, about = "Load generator for corelog")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One step: N connections for a duration; prints acked writes/s and percentiles.
    Run(RunArgs),
    /// Steps of connection counts over several coordinated load-generator processes.
    Sweep(SweepArgs),
}

/// Flags shared by `run` and `sweep` (handed on to the sweep's children).
#[derive(clap::Args, Clone)]
struct Common {
    #[arg(long, default_value_t = 11)]
    payload_bytes: usize,
    #[arg(long, default_value = "certs/ca.pem")]
    ca: PathBuf,
    #[arg(long, default_value = "certs/client.pem")]
    cert: PathBuf,
    #[arg(long, default_value = "certs/client.key")]
    key: PathBuf,
    #[arg(long, default_value = "localhost")]
    server_name: String,
    #[arg(long)]
    insecure: bool,
    /// Spread connections over this many loopback source addresses (127.0.0.x).
    #[arg(long, default_value_t = 8)]
    source_ips: u8,
    /// A response slower than this counts as a timeout (the connection is dropped).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    timeout: Duration,
    /// Give up connecting after this long.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    connect_deadline: Duration,
    /// io_uring depth per ring (sizes the kernel's cancel hash table; see run/).
    #[arg(long, default_value_t = 4096)]
    ring_depth: usize,
    /// Idempotent appends (`Append2` with a producer id per connection and a sequence per
    /// append), to measure what the server's deduplication costs.
    #[arg(long)]
    idempotent: bool,
    /// Append to this many streams (names s0, s1, …; expected version any): each
    /// connection appends to the streams of the shard it is connected to. 0: plain appends.
    #[arg(long, default_value_t = 0)]
    streams: u32,
    /// How each append picks its stream among its shard's.
    #[arg(long, value_enum, default_value = "round-robin")]
    stream_pick: StreamPick,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StreamPick {
    RoundRobin,
    Random,
}

impl Common {
    /// The flags a sweep passes to its children verbatim.
    fn child_args(&self) -> Vec<String> {
        let mut v = vec![
            "--payload-bytes".into(),
            self.payload_bytes.to_string(),
            "--ca".into(),
            self.ca.display().to_string(),
            "--cert".into(),
            self.cert.display().to_string(),
            "--key".into(),
            self.key.display().to_string(),
            "--server-name".into(),
            self.server_name.clone(),
            "--ring-depth".into(),
            self.ring_depth.to_string(),
        ];
        if self.insecure {
            v.push("--insecure".into());
        }
        if self.idempotent {
            v.push("--idempotent".into());
        }
        if self.streams > 0 {
            v.extend(["--streams".into(), self.streams.to_string()]);
            if self.stream_pick == StreamPick::Random {
                v.extend(["--stream-pick".into(), "random".into()]);
            }
        }
        v
    }
}

#[derive(clap::Args)]
struct RunArgs {
    /// Client address(es), comma-separated: connection i goes to the (i mod n)-th.
    #[arg(long, default_value = "127.0.0.1:9400")]
    target: String,
    /// Instead of --target: the nodes of one cluster, comma-separated alternatives (`A,B`).
    /// Each connection uses the first that accepts and may take appends; a connection
    /// lost, refused (NotLeader, Unavailable, Fenced, ...) or silent past the nodes'
    /// lease reconnects by the client's leadership rules (docs/protocol.md §6.3: to the
    /// node NotLeader names unless stale or silent, never to a former leader). Appends
    /// whose answer was lost are reported as `unknown`.
    #[arg(long, conflicts_with = "target")]
    addr: Option<String>,
    #[arg(long, default_value_t = 100)]
    connections: usize,
    /// Measured window, e.g. 10s, 500ms. Connections stay open after it until twice the
    /// slowest answer has passed (at most 5 s), so that closing them does not slow the
    /// appends of other connections and processes still in flight.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Unmeasured warm-up before the window.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    warmup: Duration,
    /// Executors (default: one per CPU).
    #[arg(long)]
    cores: Option<usize>,
    /// Pin executor k to the ((first-cpu + k) mod n)-th of the n CPUs this process may run on (its affinity mask, e.g. from taskset; default 0)
    #[arg(long, default_value_t = 0)]
    first_cpu: usize,
    /// Do not pin the executors to CPUs.
    #[arg(long)]
    unpinned: bool,
    /// Open loop at this many appends/s in total (default: closed loop).
    #[arg(long)]
    rate: Option<f64>,
    /// Source addresses start at 127.0.0.<base>.
    #[arg(long, default_value_t = 1)]
    source_ip_base: u8,
    /// Start the clock at this absolute UNIX time (seconds), or `stdin`: print
    /// `READY <connected> <failed>` once connected and read the time from stdin.
    #[arg(long)]
    start_at: Option<String>,
    /// Prefix of progress lines on stderr.
    #[arg(long)]
    label: Option<String>,
    /// No table on stdout (a sweep child).
    #[arg(long)]
    quiet: bool,
    /// Also write the result (with the V2 histogram) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args)]
struct SweepArgs {
    /// Client address(es), comma-separated: connection i goes to the (i mod n)-th.
    #[arg(long, default_value = "127.0.0.1:9400")]
    target: String,
    /// Connection counts, e.g. 1k,4k,9k,18k,36k (`--connections` is an alias).
    #[arg(long, alias = "connections", default_value = "1k,4k,9k,18k,36k")]
    steps: String,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    warmup: Duration,
    /// Measured window per step.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    duration: Duration,
    /// Pause after each step (connections close, counters settle) before the cross-check.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    cooldown: Duration,
    /// Open loop at this many appends/s in total (every step); default closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Connections per load-generator process (each connection is one file descriptor;
    /// the limit is 20,000 per process).
    #[arg(long, default_value_t = 9000)]
    max_conns_per_process: usize,
    /// Runs per step: the report keeps the minimum throughput and maximum latencies.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Server process ids whose CPU seconds are measured over each window.
    #[arg(long, value_delimiter = ',')]
    server_pids: Vec<u32>,
    /// Metrics addresses of the leader's processes (cross-check of acknowledged writes).
    #[arg(long, default_value = "")]
    leader_metrics: String,
    /// Metrics addresses of the follower's processes (records it holds).
    #[arg(long, default_value = "")]
    follower_metrics: String,
    /// Write sweep.json, sweep.md and sweep.svg (and the children's JSON) here.
    #[arg(long, default_value = "sweep-out")]
    out: PathBuf,
    /// Also write the sweep's JSON report to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Name of this sweep in the reports (and prefix of the output files).
    #[arg(long, default_value = "sweep")]
    name: String,
    /// Shell command run when each measured window starts (e.g. a profiler); it sees
    /// CORELOG_STEP_CONNECTIONS, CORELOG_WINDOW_S, CORELOG_LOADGEN_PIDS, CORELOG_SERVER_PIDS.
    #[arg(long)]
    hook_window: Option<String>,
    #[command(flatten)]
    common: Common,
}

fn main() {
    let cli = Cli::parse();
    // Each connection is a file descriptor; a stock shell's soft limit is 1,024 (children
    // of `sweep` inherit the raised one).
    let _ = corelog_runtime::fds::raise();
    let r = match cli.cmd {
        Cmd::Run(a) => run_step(a),
        Cmd::Sweep(a) => run_sweep(a),
    };
    match r {
        Ok(0) => {}
        Ok(code) => std::process::exit(code),
        Err(e) => {
            log!("error: {e}");
            std::process::exit(1);
        }
    }
}

/// Refuses a run whose connections cannot all be open at once under this process's
/// open-file limit (already raised to the hard one), saying what to change.
fn check_open_files(connections: usize) -> Result<(), String> {
    let l = corelog_runtime::fds::raise();
    let need = connections + corelog_runtime::fds::PROCESS_FDS;
    if need as u64 > l.soft {
        return Err(format!(
            "--connections {connections} needs about {need} open files, but this process may open {} (hard limit {}): raise the hard limit (`ulimit -n`), or spread the connections over several processes (`sweep --max-conns-per-process`)",
            l.soft, l.hard
        ));
    }
    Ok(())
}

fn run_step(a: RunArgs) -> Result<i32, String> {
    if let Some(l) = &a.label {
        let _ = corelog_loadgen::LOG_LABEL.set(l.clone());
    }
    let failover = a.addr.is_some();
    let target: Vec<SocketAddr> = parse_addrs(a.addr.as_deref().unwrap_or(&a.target))?;
    if target.is_empty() {
        return Err("--target needs at least one address".into());
    }
    if a.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    check_open_files(a.connections)?;
    let c = &a.common;
    if c.payload_bytes > corelog_client::codec::MAX_PAYLOAD {
        return Err(format!("--payload-bytes above the protocol maximum {}", corelog_client::codec::MAX_PAYLOAD));
    }
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err("--rate must be positive".into());
        }
    }
    let gate = match a.start_at.as_deref() {
        None => run::StartGate::Now,
        Some("stdin") => run::StartGate::Stdin,
        Some(t) => {
            run::StartGate::At(t.parse().map_err(|_| format!("--start-at {t:?}: a UNIX time in seconds or `stdin`"))?)
        }
    };
    let tls = if c.insecure {
        None
    } else {
        Some(Arc::new(corelog_client::tls::client_config(&c.ca, Some((&c.cert, &c.key)))?))
    };
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let cores = a.cores.unwrap_or(ncpu).clamp(1, a.connections);
    let cfg = run::RunConfig {
        targets: target.clone(),
        failover,
        connections: a.connections,
        cores,
        warmup: a.warmup,
        duration: a.duration,
        payload_bytes: c.payload_bytes,
        rate: a.rate,
        tls,
        server_name: c.server_name.clone(),
        source_ips: c.source_ips.max(1),
        source_ip_base: a.source_ip_base.max(1),
        first_cpu: if a.unpinned { None } else { Some(a.first_cpu) },
        timeout: c.timeout,
        connect_deadline: c.connect_deadline,
        gate,
        ring_depth: c.ring_depth,
        idempotent: c.idempotent,
        streams: c.streams,
        stream_random: c.stream_pick == StreamPick::Random,
    };
    let mode = match a.rate {
        Some(r) => format!("open loop at {r} appends/s"),
        None => "closed loop, one append in flight per connection".into(),
    };
    let mode = if c.idempotent { format!("{mode}, idempotent") } else { mode };
    let mode = if c.streams > 0 { format!("{mode}, {} streams", c.streams) } else { mode };
    let to = if failover { "the first reachable of" } else { "" };
    log!(
        "{} connections to {to}{:?} ({mode}), {} executors, warm-up {:?}, window {:?}",
        a.connections,
        target,
        cores,
        a.warmup,
        a.duration
    );
    let out = run::run(cfg)?;
    let r = result::RunResult::of(a.connections, a.rate, &out, procstat::self_cpu_seconds());
    if !a.quiet {
        println!("{}", report::run_header());
        println!("{}", report::run_row(&r));
        if !out.error_codes.is_empty() {
            println!("error codes: {:?}", out.error_codes);
        }
        if failover {
            println!(
                "failover: {} appends unknown (connection lost before the answer: may or may not be in the log), {} reconnects",
                out.unknown, out.reconnects
            );
        }
    }
    if let Some(p) = a.json {
        std::fs::write(&p, r.to_json() + "\n").map_err(|e| format!("write {}: {e}", p.display()))?;
    }
    if out.connected < a.connections as u64 {
        return Err(format!("only {} of {} connections established", out.connected, a.connections));
    }
    Ok(0)
}

fn run_sweep(a: SweepArgs) -> Result<i32, String> {
    let _ = corelog_loadgen::LOG_LABEL.set("sweep".into());
    parse_addrs(&a.target)?;
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    std::fs::create_dir_all(&a.out).map_err(|e| format!("create {}: {e}", a.out.display()))?;
    let cfg = sweep::SweepConfig {
        exe,
        targets: a.target.clone(),
        steps: parse_counts(&a.steps)?,
        warmup: a.warmup,
        duration: a.duration,
        cooldown: a.cooldown,
        rate: a.rate,
        max_conns_per_proc: a.max_conns_per_process,
        repeat: a.repeat.max(1),
        server_pids: a.server_pids.clone(),
        leader_metrics: parse_addrs(&a.leader_metrics)?,
        follower_metrics: parse_addrs(&a.follower_metrics)?,
        child_args: a.common.child_args(),
        source_ips: a.common.source_ips.max(1),
        connect_deadline: a.common.connect_deadline,
        timeout: a.common.timeout,
        work_dir: a.out.join(format!("{}-runs", a.name)),
        hook_window: a.hook_window.clone(),
        name: a.name.clone(),
    };
    if a.duration.is_zero() {
        return Err("--duration must be positive".into());
    }
    let rep = sweep::sweep(&cfg)?;
    let base = a.out.join(&a.name);
    let svg_name = format!("{}.svg", a.name);
    let write = |ext: &str, body: String| {
        let p = base.with_extension(ext);
        std::fs::write(&p, body).map_err(|e| format!("write {}: {e}", p.display()))
    };
    write("json", report::sweep_json(&rep) + "\n")?;
    write("md", report::sweep_markdown(&rep, Some(&svg_name)))?;
    write("svg", svg::plot(&rep))?;
    if let Some(p) = &a.json {
        std::fs::write(p, report::sweep_json(&rep) + "\n").map_err(|e| format!("write {}: {e}", p.display()))?;
    }
    print!("{}", report::sweep_table(&rep));
    println!("wrote {0}.json, {0}.md, {0}.svg", base.display());
    let clean = rep.steps.iter().all(|s| s.errors == 0 && s.timeouts == 0 && s.connect_failures == 0);
    Ok(if clean && rep.crosscheck_ok != Some(false) { 0 } else { 2 })
}
