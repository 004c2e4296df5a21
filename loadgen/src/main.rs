//! `corelog-loadgen`: thread-per-core load generator for corelog.

mod report;
mod run;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

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
}

#[derive(clap::Args)]
struct RunArgs {
    #[arg(long, default_value = "127.0.0.1:9400")]
    target: SocketAddr,
    #[arg(long, default_value_t = 100)]
    connections: usize,
    /// Measured window, e.g. 10s, 500ms.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Unmeasured warm-up before the window.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    warmup: Duration,
    /// Executors (default: one per CPU).
    #[arg(long)]
    cores: Option<usize>,
    #[arg(long, default_value_t = 11)]
    payload_bytes: usize,
    /// Open loop at this many appends/s in total (default: closed loop).
    #[arg(long)]
    rate: Option<f64>,
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
    /// Spread connections over 127.0.0.1..=127.0.0.N when the target is loopback.
    #[arg(long, default_value_t = 8)]
    source_ips: u8,
    /// A response slower than this counts as a timeout (the connection is dropped).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    timeout: Duration,
    /// Give up connecting after this long.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    connect_deadline: Duration,
    /// Also write the result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.find(|c: char| c.is_ascii_alphabetic()).map(|i| s.split_at(i)).unwrap_or((s, "s"));
    let v: f64 = num.parse().map_err(|_| format!("bad duration {s:?} (e.g. 10s, 500ms)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m)")),
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("duration {s:?} must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn main() {
    let cli = Cli::parse();
    let Cmd::Run(a) = cli.cmd;
    if let Err(e) = run_step(a) {
        eprintln!("corelog-loadgen: error: {e}");
        std::process::exit(1);
    }
}

fn run_step(a: RunArgs) -> Result<(), String> {
    if a.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    if a.payload_bytes > corelog_client::codec::MAX_PAYLOAD {
        return Err(format!("--payload-bytes above the protocol maximum {}", corelog_client::codec::MAX_PAYLOAD));
    }
    let tls = if a.insecure {
        None
    } else {
        Some(Arc::new(corelog_client::tls::client_config(&a.ca, Some((&a.cert, &a.key)))?))
    };
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let cores = a.cores.unwrap_or(ncpu).clamp(1, a.connections);
    let cfg = run::RunConfig {
        target: a.target,
        connections: a.connections,
        cores,
        warmup: a.warmup,
        duration: a.duration,
        payload_bytes: a.payload_bytes,
        rate: a.rate,
        tls,
        server_name: a.server_name,
        source_ips: a.source_ips.max(1),
        timeout: a.timeout,
        connect_deadline: a.connect_deadline,
    };
    let mode = match a.rate {
        Some(r) => format!("open loop at {r} appends/s"),
        None => "closed loop, one append in flight per connection".into(),
    };
    eprintln!(
        "loadgen: {} connections to {} ({mode}), {} executors, warm-up {:?}, window {:?}",
        a.connections, a.target, cores, a.warmup, a.duration
    );
    let out = run::run(cfg)?;
    let s = report::Summary::of(a.connections, &out);
    println!("{}", report::header());
    println!("{}", report::row(&s));
    if !out.error_codes.is_empty() {
        println!("error codes: {:?}", out.error_codes);
    }
    if let Some(p) = a.json {
        std::fs::write(&p, report::json(&s, &out) + "\n").map_err(|e| format!("write {}: {e}", p.display()))?;
    }
    if out.connected < a.connections as u64 {
        return Err(format!("only {} of {} connections established", out.connected, a.connections));
    }
    Ok(())
}
