//! A sweep's results: each run of a step, each step over its repetitions, the whole
//! sweep, and the cross-check of a run against the servers' counters. Plain data that
//! [`crate::sweep`] fills in and [`crate::report`] and [`crate::svg`] show; its JSON is
//! what `sweep --json` writes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_throughput_formula() {
        assert_eq!(effective_throughput(30_000.0, 1_000.0, 100_000), 300.0);
        assert_eq!(effective_throughput(30_000.0, 10_000.0, 100_000), 3_000.0);
    }
}
