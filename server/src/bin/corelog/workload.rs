//! `corelog workload`: run the recorded workload against a cluster, read back, check
//! (the recorder and checker are the `corelog-history` crate).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelog_history::{check, go_available, porcupine, read_back, run, Config, Linearizability, Live};

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
