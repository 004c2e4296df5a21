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
//!
//! Here: the loop over steps and repetitions, and the cross-check's verdict. Below:
//! `step` (one run of one step) and `children` (that run's processes).

mod children;
mod step;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::result::sweep::{summarize, CrossCheck, StepRun, StepSummary, SweepReport};
use crate::run::unix_now;

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
            let r = step::run_step(cfg, n, rep, &tag)?;
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
}
