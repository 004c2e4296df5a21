//! `corelog-loadgen sweep`: steps of connection counts (default 1k, 4k, 9k, 18k, 36k).
//!
//! Each step spawns ceil(connections / --max-conns-per-process) children of this very
//! binary (`run --start-at stdin --json FILE`): one file descriptor per connection and a
//! hard limit of 20,000 per process make one process unable to hold 36,000. Each child
//! connects its share, prints `READY`, and waits; once all are ready the sweep sends them
//! one absolute UNIX start time, so every child's warm-up and measured window cover the
//! same wall-clock interval. The sweep samples CPU seconds of the servers and of its
//! children at the window's edges, collects the children's JSON, merges their histograms
//! exactly ([`crate::merge`]), cools down, and cross-checks the acknowledged writes
//! against the leader's and follower's counters.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::merge;
use crate::procstat;
use crate::result::RunResult;
use crate::run::{instant_of_unix, unix_now};
use crate::scrape::{self, NodeCounters};

/// Most load-generating children of one step (bounds the fan-out; 36k at 9k each is 4).
pub const MAX_PROCS: usize = 32;
/// Extra time allowed for children beyond their own deadlines before they are killed.
const CHILD_GRACE: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct SweepConfig {
    /// This binary, re-invoked as `run` for each child.
    pub exe: PathBuf,
    /// Comma-separated client addresses (connection i goes to target i % n).
    pub targets: String,
    pub steps: Vec<usize>,
    pub warmup: Duration,
    pub duration: Duration,
    pub cooldown: Duration,
    /// Open loop: appends/s in total over all connections; None: closed loop.
    pub rate: Option<f64>,
    pub max_conns_per_proc: usize,
    pub repeat: usize,
    pub server_pids: Vec<u32>,
    pub leader_metrics: Vec<SocketAddr>,
    pub follower_metrics: Vec<SocketAddr>,
    /// TLS and protocol flags handed to every child unchanged.
    pub child_args: Vec<String>,
    pub source_ips: u8,
    pub connect_deadline: Duration,
    pub timeout: Duration,
    /// Where children write their JSON.
    pub work_dir: PathBuf,
    /// Run with `sh -c` when a measured window starts (e.g. `perf record`), with
    /// CORELOG_STEP_CONNECTIONS, CORELOG_WINDOW_S, CORELOG_LOADGEN_PIDS and
    /// CORELOG_SERVER_PIDS in its environment. Waited for after the step.
    pub hook_window: Option<String>,
    pub name: String,
}

/// The cross-check of one run: what the servers gained against what was acknowledged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CrossCheck {
    /// Acknowledgements the load generators received (whole run, warm-up included).
    pub acked_total: u64,
    /// Leader `corelog_appends_total` gained (acknowledged by the server).
    pub leader_appends: u64,
    /// Leader `corelog_committed_offset` gained (records on both nodes per the leader).
    pub leader_committed: u64,
    /// Follower `corelog_committed_offset` gained (records durable on the follower).
    pub follower_committed: Option<u64>,
    pub ok: bool,
    pub note: String,
}

/// One run of one step (a step repeats --repeat times).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRun {
    pub connections: usize,
    pub rep: usize,
    pub procs: usize,
    pub rate: Option<f64>,
    pub connected: u64,
    pub connect_failures: u64,
    /// Slowest child's time to establish all its connections (s).
    pub connect_s: f64,
    pub late_start_ms: f64,
    pub window_s: f64,
    pub acked: u64,
    pub acked_total: u64,
    pub acked_per_s: f64,
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub errors: u64,
    pub error_codes: BTreeMap<String, u64>,
    pub timeouts: u64,
    /// CPU seconds the given server processes used during the measured window.
    pub server_cpu_s: Option<f64>,
    /// CPU seconds the load-generator children used during the measured window.
    pub loadgen_cpu_s: f64,
    /// CPU seconds the children used in all (connecting included).
    pub loadgen_cpu_total_s: f64,
    /// Busy CPU seconds of the whole machine during the window (/proc/stat): what is
    /// above server + load generators was used by other processes (noise).
    pub machine_cpu_s: f64,
    /// Softirq CPU seconds of the machine during the window (inside machine_cpu_s, and
    /// here also inside the processes' own CPU seconds).
    pub softirq_cpu_s: f64,
    pub crosscheck: Option<CrossCheck>,
    pub histogram_v2_hex: String,
}

/// A step over its repetitions: throughput the minimum, latencies the maximum.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepSummary {
    pub connections: usize,
    pub runs: usize,
    pub procs: usize,
    pub acked_per_s: f64,
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub connect_failures: u64,
    pub connect_s: f64,
    /// Effective Throughput: acked/s × target ÷ p50.
    pub et_1ms: f64,
    pub et_10ms: f64,
    pub server_cpu_s: Option<f64>,
    pub loadgen_cpu_s: f64,
    /// Busy CPU seconds of the machine during the window (max over runs).
    pub machine_cpu_s: f64,
    /// Softirq share of machine_cpu_s (max over runs).
    pub softirq_cpu_s: f64,
    pub window_s: f64,
    /// None when no metrics were given; Some(true) when every run's cross-check passed.
    pub crosscheck_ok: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepReport {
    pub name: String,
    pub mode: String,
    pub rate: Option<f64>,
    pub started_unix: f64,
    pub cpus: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub cooldown_s: f64,
    pub repeat: usize,
    pub max_conns_per_process: usize,
    pub targets: String,
    pub steps: Vec<StepSummary>,
    pub runs: Vec<StepRun>,
    /// Sum of `acked_total` over every run: what the logs must hold from this sweep.
    pub acked_total: u64,
    pub crosscheck_ok: Option<bool>,
}

pub fn effective_throughput(per_s: f64, target_us: f64, p50_us: u64) -> f64 {
    if p50_us == 0 {
        return 0.0;
    }
    per_s * target_us / p50_us as f64
}

pub fn summarize(connections: usize, runs: &[&StepRun]) -> StepSummary {
    assert!(!runs.is_empty());
    let min_tput = runs.iter().map(|r| r.acked_per_s).fold(f64::INFINITY, f64::min);
    let maxu = |f: fn(&StepRun) -> u64| runs.iter().map(|r| f(r)).max().unwrap_or(0);
    let p50 = maxu(|r| r.p50_us);
    let checks: Vec<bool> = runs.iter().filter_map(|r| r.crosscheck.as_ref().map(|c| c.ok)).collect();
    StepSummary {
        connections,
        runs: runs.len(),
        procs: runs[0].procs,
        acked_per_s: min_tput,
        p50_us: p50,
        p95_us: maxu(|r| r.p95_us),
        p99_us: maxu(|r| r.p99_us),
        p999_us: maxu(|r| r.p999_us),
        max_us: maxu(|r| r.max_us),
        errors: runs.iter().map(|r| r.errors).sum(),
        timeouts: runs.iter().map(|r| r.timeouts).sum(),
        connect_failures: runs.iter().map(|r| r.connect_failures).sum(),
        connect_s: runs.iter().map(|r| r.connect_s).fold(0.0, f64::max),
        et_1ms: effective_throughput(min_tput, 1_000.0, p50),
        et_10ms: effective_throughput(min_tput, 10_000.0, p50),
        server_cpu_s: runs
            .iter()
            .map(|r| r.server_cpu_s)
            .collect::<Option<Vec<f64>>>()
            .map(|v| v.into_iter().fold(0.0, f64::max)),
        loadgen_cpu_s: runs.iter().map(|r| r.loadgen_cpu_s).fold(0.0, f64::max),
        machine_cpu_s: runs.iter().map(|r| r.machine_cpu_s).fold(0.0, f64::max),
        softirq_cpu_s: runs.iter().map(|r| r.softirq_cpu_s).fold(0.0, f64::max),
        window_s: runs[0].window_s,
        crosscheck_ok: if checks.is_empty() { None } else { Some(checks.iter().all(|b| *b)) },
    }
}

/// Splits `n` connections over `procs` processes as evenly as possible.
pub fn split(n: usize, procs: usize) -> Vec<usize> {
    (0..procs).map(|k| n / procs + usize::from(k < n % procs)).collect()
}

pub fn procs_for(n: usize, max_per_proc: usize) -> usize {
    n.div_ceil(max_per_proc.max(1)).clamp(1, MAX_PROCS)
}

pub fn sweep(cfg: &SweepConfig) -> Result<SweepReport, String> {
    if cfg.steps.is_empty() {
        return Err("no steps".into());
    }
    for &n in &cfg.steps {
        if n.div_ceil(cfg.max_conns_per_proc.max(1)) > MAX_PROCS {
            return Err(format!(
                "{n} connections need more than {MAX_PROCS} processes at --max-conns-per-process {}",
                cfg.max_conns_per_proc
            ));
        }
    }
    std::fs::create_dir_all(&cfg.work_dir).map_err(|e| format!("create {}: {e}", cfg.work_dir.display()))?;
    let started_unix = unix_now();
    let mut runs = Vec::new();
    let total = cfg.steps.len();
    for (si, &n) in cfg.steps.iter().enumerate() {
        for rep in 0..cfg.repeat.max(1) {
            let tag = format!("[{}/{total}] {n} conns, run {}/{}", si + 1, rep + 1, cfg.repeat.max(1));
            let r = run_step(cfg, n, rep, &tag)?;
            crate::log!(
                "{tag}: {:.0} acked/s, p50 {} p99 {} max {}, errors {}, timeouts {}, connect failures {}{}",
                r.acked_per_s,
                crate::report::fmt_us(r.p50_us),
                crate::report::fmt_us(r.p99_us),
                crate::report::fmt_us(r.max_us),
                r.errors,
                r.timeouts,
                r.connect_failures,
                match &r.crosscheck {
                    Some(c) => format!(", cross-check {}: {}", if c.ok { "ok" } else { "FAILED" }, c.note),
                    None => String::new(),
                }
            );
            runs.push(r);
        }
    }
    let steps: Vec<StepSummary> = cfg
        .steps
        .iter()
        .enumerate()
        .map(|(si, &n)| {
            let rs: Vec<&StepRun> = runs.iter().skip(si * cfg.repeat.max(1)).take(cfg.repeat.max(1)).collect();
            summarize(n, &rs)
        })
        .collect();
    let checks: Vec<bool> = steps.iter().filter_map(|s| s.crosscheck_ok).collect();
    Ok(SweepReport {
        name: cfg.name.clone(),
        mode: if cfg.rate.is_some() { "open".into() } else { "closed".into() },
        rate: cfg.rate,
        started_unix,
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        warmup_s: cfg.warmup.as_secs_f64(),
        duration_s: cfg.duration.as_secs_f64(),
        cooldown_s: cfg.cooldown.as_secs_f64(),
        repeat: cfg.repeat.max(1),
        max_conns_per_process: cfg.max_conns_per_proc,
        targets: cfg.targets.clone(),
        acked_total: runs.iter().map(|r| r.acked_total).sum(),
        steps,
        runs,
        crosscheck_ok: if checks.is_empty() { None } else { Some(checks.iter().all(|b| *b)) },
    })
}

fn counters(addrs: &[SocketAddr]) -> Result<Option<NodeCounters>, String> {
    if addrs.is_empty() {
        return Ok(None);
    }
    scrape::node_counters(addrs).map(Some)
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

struct Kids {
    children: Vec<Child>,
}

impl Drop for Kids {
    fn drop(&mut self) {
        // Never leave a child behind on an error path.
        for c in &mut self.children {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn run_step(cfg: &SweepConfig, n: usize, rep: usize, tag: &str) -> Result<StepRun, String> {
    let procs = procs_for(n, cfg.max_conns_per_proc);
    let shares = split(n, procs);
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let cores_each = (ncpu / procs).max(1);
    let before_leader = counters(&cfg.leader_metrics)?;
    let before_follower = counters(&cfg.follower_metrics)?;
    crate::log!("{tag}: spawning {procs} load-generator process(es) of {shares:?} connections");
    let mut kids = Kids { children: Vec::new() };
    let (tx, rx) = mpsc::channel::<(usize, String)>();
    let mut json_paths = Vec::new();
    for (k, &share) in shares.iter().enumerate() {
        let json = cfg.work_dir.join(format!("step-{n}-rep-{rep}-proc-{k}.json"));
        let _ = std::fs::remove_file(&json);
        let mut c = Command::new(&cfg.exe);
        c.arg("run")
            .args(["--target", &cfg.targets])
            .args(["--connections", &share.to_string()])
            .args(["--warmup", &format!("{}ms", cfg.warmup.as_millis())])
            .args(["--duration", &format!("{}ms", cfg.duration.as_millis())])
            .args(["--cores", &cores_each.to_string()])
            .args(["--first-cpu", &((k * cores_each) % ncpu).to_string()])
            .args(["--source-ips", &cfg.source_ips.to_string()])
            .args(["--source-ip-base", &(1 + (k * cfg.source_ips as usize) % 250).to_string()])
            .args(["--connect-deadline", &format!("{}ms", cfg.connect_deadline.as_millis())])
            .args(["--timeout", &format!("{}ms", cfg.timeout.as_millis())])
            .args(["--start-at", "stdin"])
            .args(["--label", &format!("loadgen[{k}]")])
            .arg("--quiet")
            .arg("--json")
            .arg(&json)
            .args(&cfg.child_args);
        if let Some(rate) = cfg.rate {
            c.args(["--rate", &format!("{}", rate * share as f64 / n as f64)]);
        }
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = c.spawn().map_err(|e| format!("spawn {}: {e}", cfg.exe.display()))?;
        let out = child.stdout.take().expect("piped");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send((k, line)).is_err() {
                    break;
                }
            }
            let _ = tx.send((k, "EOF".into()));
        });
        kids.children.push(child);
        json_paths.push(json);
    }
    drop(tx);
    // Wait until every child is connected (or gave up).
    let connect_deadline = Instant::now() + cfg.connect_deadline + CHILD_GRACE;
    let mut ready = vec![false; procs];
    let mut connected_at_ready = 0u64;
    while ready.iter().any(|r| !r) {
        let left = connect_deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("{tag}: children not ready within {:?}", cfg.connect_deadline + CHILD_GRACE));
        }
        match rx.recv_timeout(left) {
            Ok((k, line)) if line.starts_with("READY") => {
                ready[k] = true;
                connected_at_ready += line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
            Ok((k, line)) if line == "EOF" => {
                let st = kids.children[k].wait().map(|s| s.to_string()).unwrap_or_default();
                return Err(format!("{tag}: load generator {k} exited before it was ready ({st})"));
            }
            Ok(_) => {}
            Err(_) => return Err(format!("{tag}: children not ready in time")),
        }
    }
    // One shared start a little ahead, so every child reads it before it is due.
    let start_unix = unix_now() + 0.25 + 0.02 * procs as f64;
    crate::log!("{tag}: {connected_at_ready}/{n} connected; all start at UNIX {start_unix:.3}");
    for c in &mut kids.children {
        let stdin = c.stdin.as_mut().expect("piped");
        writeln!(stdin, "{start_unix:.6}").map_err(|e| format!("{tag}: send start time: {e}"))?;
        stdin.flush().map_err(|e| format!("{tag}: send start time: {e}"))?;
    }
    let pids: Vec<u32> = kids.children.iter().map(|c| c.id()).collect();
    let start = instant_of_unix(start_unix);
    let window_from = start + cfg.warmup;
    let window_to = window_from + cfg.duration;
    sleep_until(window_from);
    let srv0 = procstat::sum_cpu_seconds(&cfg.server_pids);
    let lg0 = procstat::sum_cpu_seconds(&pids);
    let (m0, si0) = procstat::machine_cpu();
    let hook = match &cfg.hook_window {
        Some(cmd) => Some(
            Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .env("CORELOG_STEP_CONNECTIONS", n.to_string())
                .env("CORELOG_WINDOW_S", format!("{}", cfg.duration.as_secs_f64()))
                .env("CORELOG_LOADGEN_PIDS", pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
                .env("CORELOG_SERVER_PIDS", cfg.server_pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
                .spawn()
                .map_err(|e| format!("hook: {e}"))?,
        ),
        None => None,
    };
    // Progress during the window: the leader's acknowledged appends per second.
    let mut last = (Instant::now(), before_leader.and_then(|_| scrape::node_counters(&cfg.leader_metrics).ok()));
    while Instant::now() + Duration::from_millis(2100) < window_to {
        std::thread::sleep(Duration::from_secs(2));
        let el = window_from.elapsed().as_secs_f64();
        match (&last.1, counters(&cfg.leader_metrics).ok().flatten()) {
            (Some(prev), Some(now_c)) => {
                let dt = last.0.elapsed().as_secs_f64();
                crate::log!(
                    "{tag}: window {el:.0}/{:.0} s, leader acks {:.0}/s",
                    cfg.duration.as_secs_f64(),
                    (now_c.appends.saturating_sub(prev.appends)) as f64 / dt
                );
                last = (Instant::now(), Some(now_c));
            }
            _ => crate::log!("{tag}: window {el:.0}/{:.0} s", cfg.duration.as_secs_f64()),
        }
    }
    sleep_until(window_to);
    let srv1 = procstat::sum_cpu_seconds(&cfg.server_pids);
    let lg1 = procstat::sum_cpu_seconds(&pids);
    let (m1, si1) = procstat::machine_cpu();
    // Children finish their in-flight appends, write JSON and exit.
    let exit_deadline = Instant::now() + cfg.timeout + CHILD_GRACE;
    let mut lg_total = vec![0.0; procs];
    for (k, c) in kids.children.iter_mut().enumerate() {
        loop {
            if let Some(cpu) = procstat::cpu_seconds(c.id()) {
                lg_total[k] = cpu;
            }
            match c.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < exit_deadline => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                Err(e) => return Err(format!("{tag}: wait for load generator {k}: {e}")),
            }
        }
    }
    if let Some(mut h) = hook {
        let until = Instant::now() + CHILD_GRACE;
        while matches!(h.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        if matches!(h.try_wait(), Ok(None)) {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
    let mut results = Vec::new();
    for (k, p) in json_paths.iter().enumerate() {
        let s = std::fs::read_to_string(p)
            .map_err(|e| format!("{tag}: load generator {k} left no result {}: {e}", p.display()))?;
        let mut r = RunResult::from_json(s.trim())?;
        // The child's own count includes the time after the window; keep the larger.
        r.cpu_s = r.cpu_s.max(lg_total[k]);
        results.push(r);
    }
    let hist = merge::merge_hex(results.iter().map(|r| r.histogram_v2_hex.as_str()))?;
    let mut error_codes: BTreeMap<String, u64> = BTreeMap::new();
    for r in &results {
        for (c, v) in &r.error_codes {
            *error_codes.entry(c.clone()).or_default() += v;
        }
    }
    let acked: u64 = results.iter().map(|r| r.acked).sum();
    let acked_total: u64 = results.iter().map(|r| r.acked_total).sum();
    let errors: u64 = results.iter().map(|r| r.errors).sum();
    let timeouts: u64 = results.iter().map(|r| r.timeouts).sum();
    if !cfg.cooldown.is_zero() {
        crate::log!("{tag}: cool-down {:?}, then cross-check", cfg.cooldown);
        std::thread::sleep(cfg.cooldown);
    }
    let crosscheck = match before_leader {
        Some(b) => {
            let a = counters(&cfg.leader_metrics)?.expect("given");
            let follower = match (before_follower, counters(&cfg.follower_metrics)?) {
                (Some(fb), Some(fa)) => Some(fa.committed.saturating_sub(fb.committed)),
                _ => None,
            };
            Some(cross_check(
                acked_total,
                a.appends - b.appends,
                a.committed - b.committed,
                follower,
                timeouts + errors,
            ))
        }
        None => None,
    };
    let window_s = cfg.duration.as_secs_f64();
    Ok(StepRun {
        connections: n,
        rep,
        procs,
        rate: cfg.rate,
        connected: results.iter().map(|r| r.connected).sum(),
        connect_failures: results.iter().map(|r| r.connect_failures).sum(),
        connect_s: results.iter().map(|r| r.connect_s).fold(0.0, f64::max),
        late_start_ms: results.iter().map(|r| r.late_start_ms).fold(0.0, f64::max),
        window_s,
        acked,
        acked_total,
        acked_per_s: acked as f64 / window_s,
        p50_us: hist.value_at_quantile(0.50),
        p95_us: hist.value_at_quantile(0.95),
        p99_us: hist.value_at_quantile(0.99),
        p999_us: hist.value_at_quantile(0.999),
        max_us: hist.max(),
        errors,
        error_codes,
        timeouts,
        server_cpu_s: if cfg.server_pids.is_empty() { None } else { Some(srv1 - srv0) },
        loadgen_cpu_s: lg1 - lg0,
        loadgen_cpu_total_s: results.iter().map(|r| r.cpu_s).sum(),
        machine_cpu_s: m1 - m0,
        softirq_cpu_s: si1 - si0,
        crosscheck,
        histogram_v2_hex: merge::to_hex(&hist),
    })
}

/// Acked writes must equal what the leader acknowledged and what the follower holds.
/// An append whose answer never came (timeout, lost connection) or that failed with a
/// replication timeout may still be in the logs: such runs can only show `≥`.
pub fn cross_check(
    acked_total: u64,
    leader_appends: u64,
    leader_committed: u64,
    follower_committed: Option<u64>,
    in_doubt: u64,
) -> CrossCheck {
    let follower_same = follower_committed.is_none_or(|f| f == leader_committed);
    let exact = leader_appends == acked_total && leader_committed == acked_total && follower_same;
    let bounded = acked_total <= leader_appends
        && leader_appends <= leader_committed
        && leader_committed <= acked_total + in_doubt
        && follower_same;
    let follower = follower_committed.map(|f| format!(" = follower records {f}")).unwrap_or_default();
    let note = if exact {
        format!("acked {acked_total} = leader appends {leader_appends} = leader committed {leader_committed}{follower}")
    } else if bounded {
        format!(
            "acked {acked_total} <= leader appends {leader_appends} <= leader committed {leader_committed}{follower}; \
             the surplus is within the {in_doubt} append(s) whose answer never came"
        )
    } else {
        format!(
            "MISMATCH: acked {acked_total}, leader appends {leader_appends}, leader committed {leader_committed}, \
             follower records {}, in-doubt {in_doubt}",
            follower_committed.map(|f| f.to_string()).unwrap_or_else(|| "-".into())
        )
    };
    CrossCheck { acked_total, leader_appends, leader_committed, follower_committed, ok: exact || bounded, note }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_even_and_complete() {
        assert_eq!(split(36_000, 4), vec![9000; 4]);
        assert_eq!(split(10, 3), vec![4, 3, 3]);
        assert_eq!(procs_for(36_000, 9000), 4);
        assert_eq!(procs_for(1, 9000), 1);
        assert_eq!(procs_for(9001, 9000), 2);
    }

    #[test]
    fn cross_check_exact_and_mismatch() {
        assert!(cross_check(10, 10, 10, Some(10), 0).ok);
        assert!(!cross_check(10, 9, 10, Some(10), 0).ok);
        assert!(!cross_check(10, 10, 10, Some(9), 0).ok);
        // One timed-out append may be in the log without its ack.
        assert!(cross_check(10, 10, 11, Some(11), 1).ok);
        assert!(!cross_check(10, 10, 12, Some(12), 1).ok);
    }

    #[test]
    fn effective_throughput_formula() {
        assert_eq!(effective_throughput(30_000.0, 1_000.0, 100_000), 300.0);
        assert_eq!(effective_throughput(30_000.0, 10_000.0, 100_000), 3_000.0);
    }
}
