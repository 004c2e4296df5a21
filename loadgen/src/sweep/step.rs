//! One run of one step: spawn the children, wait until all are connected, start them
//! together, sample CPU at the measured window's edges, collect and merge their results,
//! cool down, and cross-check the acknowledged writes against the servers' counters.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::children::Children;
use super::{cross_check, SweepConfig, CHILD_GRACE};
use crate::merge;
use crate::procstat;
use crate::result::sweep::{CrossCheck, StepRun};
use crate::result::RunResult;
use crate::run::{instant_of_unix, unix_now};
use crate::scrape::{self, NodeCounters};

pub(super) fn run_step(cfg: &SweepConfig, n: usize, rep: usize, tag: &str) -> Result<StepRun, String> {
    let before_leader = counters(&cfg.leader_metrics)?;
    let before_follower = counters(&cfg.follower_metrics)?;
    let mut kids = Children::spawn(cfg, n, rep, tag)?;
    let connected_at_ready = kids.await_ready(cfg, tag)?;
    // One shared start a little ahead, so every child reads it before it is due.
    let start_unix = unix_now() + 0.25 + 0.02 * kids.len() as f64;
    crate::log!("{tag}: {connected_at_ready}/{n} connected; all start at UNIX {start_unix:.3}");
    kids.send_start(start_unix, tag)?;
    let pids = kids.pids();
    let (cpu0, cpu1, hook) = measure_window(cfg, n, &pids, start_unix, tag, before_leader.is_some())?;
    let cpu_total = kids.await_exit(cfg, tag)?;
    if let Some(h) = hook {
        await_hook(h);
    }
    let results = kids.results(tag, &cpu_total)?;
    let totals = Totals::of(&results)?;
    if !cfg.cooldown.is_zero() {
        crate::log!("{tag}: cool-down {:?}, then cross-check", cfg.cooldown);
        std::thread::sleep(cfg.cooldown);
    }
    let crosscheck = match before_leader {
        Some(b) => Some(check_counters(cfg, b, before_follower, &totals)?),
        None => None,
    };
    let window_s = cfg.duration.as_secs_f64();
    let hist = &totals.hist;
    Ok(StepRun {
        connections: n,
        rep,
        procs: kids.len(),
        rate: cfg.rate,
        connected: results.iter().map(|r| r.connected).sum(),
        connect_failures: results.iter().map(|r| r.connect_failures).sum(),
        connect_s: results.iter().map(|r| r.connect_s).fold(0.0, f64::max),
        late_start_ms: results.iter().map(|r| r.late_start_ms).fold(0.0, f64::max),
        window_s,
        acked: totals.acked,
        acked_total: totals.acked_total,
        acked_per_s: totals.acked as f64 / window_s,
        p50_us: hist.value_at_quantile(0.50),
        p95_us: hist.value_at_quantile(0.95),
        p99_us: hist.value_at_quantile(0.99),
        p999_us: hist.value_at_quantile(0.999),
        max_us: hist.max(),
        errors: totals.errors,
        error_codes: totals.error_codes,
        timeouts: totals.timeouts,
        server_cpu_s: if cfg.server_pids.is_empty() { None } else { Some(cpu1.server - cpu0.server) },
        loadgen_cpu_s: cpu1.loadgen - cpu0.loadgen,
        loadgen_cpu_total_s: results.iter().map(|r| r.cpu_s).sum(),
        machine_cpu_s: cpu1.machine - cpu0.machine,
        softirq_cpu_s: cpu1.softirq - cpu0.softirq,
        crosscheck,
        histogram_v2_hex: merge::to_hex(hist),
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

/// CPU seconds at one edge of the measured window.
struct CpuSample {
    /// The given server processes.
    server: f64,
    /// The load-generator children.
    loadgen: f64,
    /// The whole machine's busy seconds, and their softirq part.
    machine: f64,
    softirq: f64,
}

impl CpuSample {
    fn take(cfg: &SweepConfig, pids: &[u32]) -> CpuSample {
        let server = procstat::sum_cpu_seconds(&cfg.server_pids);
        let loadgen = procstat::sum_cpu_seconds(pids);
        let (machine, softirq) = procstat::machine_cpu();
        CpuSample { server, loadgen, machine, softirq }
    }
}

/// Sleeps through the warm-up and the measured window of children `pids` started at
/// `start_unix`: samples CPU at the window's edges, starts --hook-window at its start,
/// and logs progress. Returns both samples and the hook, still running.
fn measure_window(
    cfg: &SweepConfig,
    n: usize,
    pids: &[u32],
    start_unix: f64,
    tag: &str,
    leader_metrics: bool,
) -> Result<(CpuSample, CpuSample, Option<Child>), String> {
    let start = instant_of_unix(start_unix);
    let window_from = start + cfg.warmup;
    let window_to = window_from + cfg.duration;
    sleep_until(window_from);
    let cpu0 = CpuSample::take(cfg, pids);
    let hook = match &cfg.hook_window {
        Some(cmd) => Some(start_hook(cfg, cmd, n, pids)?),
        None => None,
    };
    log_progress(cfg, tag, window_from, window_to, leader_metrics);
    sleep_until(window_to);
    let cpu1 = CpuSample::take(cfg, pids);
    Ok((cpu0, cpu1, hook))
}

fn start_hook(cfg: &SweepConfig, cmd: &str, n: usize, pids: &[u32]) -> Result<Child, String> {
    Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("CORELOG_STEP_CONNECTIONS", n.to_string())
        .env("CORELOG_WINDOW_S", format!("{}", cfg.duration.as_secs_f64()))
        .env("CORELOG_LOADGEN_PIDS", pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
        .env("CORELOG_SERVER_PIDS", cfg.server_pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
        .spawn()
        .map_err(|e| format!("hook: {e}"))
}

/// Progress during the window, every 2 s until it ends: the leader's acknowledged
/// appends per second when its metrics are given.
fn log_progress(cfg: &SweepConfig, tag: &str, window_from: Instant, window_to: Instant, leader_metrics: bool) {
    let first = if leader_metrics { scrape::node_counters(&cfg.leader_metrics).ok() } else { None };
    let mut last = (Instant::now(), first);
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
}

/// Gives the hook CHILD_GRACE to finish after the children, then kills it.
fn await_hook(mut h: Child) {
    let until = Instant::now() + CHILD_GRACE;
    while matches!(h.try_wait(), Ok(None)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    if matches!(h.try_wait(), Ok(None)) {
        let _ = h.kill();
        let _ = h.wait();
    }
}

/// The children's results added up: the exact merge of their histograms and the sums
/// of their counts.
struct Totals {
    hist: Histogram<u64>,
    error_codes: BTreeMap<String, u64>,
    acked: u64,
    acked_total: u64,
    errors: u64,
    timeouts: u64,
}

impl Totals {
    fn of(results: &[RunResult]) -> Result<Totals, String> {
        let hist = merge::merge_hex(results.iter().map(|r| r.histogram_v2_hex.as_str()))?;
        let mut error_codes: BTreeMap<String, u64> = BTreeMap::new();
        for r in results {
            for (c, v) in &r.error_codes {
                *error_codes.entry(c.clone()).or_default() += v;
            }
        }
        Ok(Totals {
            hist,
            error_codes,
            acked: results.iter().map(|r| r.acked).sum(),
            acked_total: results.iter().map(|r| r.acked_total).sum(),
            errors: results.iter().map(|r| r.errors).sum(),
            timeouts: results.iter().map(|r| r.timeouts).sum(),
        })
    }
}

/// Reads the servers' counters again and checks what they gained since `before_leader`
/// and `before_follower` against what the children acknowledged.
fn check_counters(
    cfg: &SweepConfig,
    before_leader: NodeCounters,
    before_follower: Option<NodeCounters>,
    totals: &Totals,
) -> Result<CrossCheck, String> {
    let a = counters(&cfg.leader_metrics)?.expect("given");
    let follower = match (before_follower, counters(&cfg.follower_metrics)?) {
        (Some(fb), Some(fa)) => Some(fa.committed.saturating_sub(fb.committed)),
        _ => None,
    };
    Ok(cross_check(
        totals.acked_total,
        a.appends - before_leader.appends,
        a.committed - before_leader.committed,
        follower,
        totals.timeouts + totals.errors,
    ))
}
