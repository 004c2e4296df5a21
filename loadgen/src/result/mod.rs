//! One load-generating process's result, as written by `run --json` and read back by
//! `sweep`. The latency histogram travels serialized (hdrhistogram V2, hex) so that the
//! sweep merges processes exactly instead of averaging their percentiles. A sweep's own
//! results, made of these, are in [`sweep`].

pub mod sweep;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::merge;
use crate::run::Outcome;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub connections: usize,
    pub connected: u64,
    pub connect_failures: u64,
    /// Open loop: appends/s this process was asked for; None: closed loop.
    pub rate: Option<f64>,
    pub window_s: f64,
    /// Acked appends sent (open loop: due) inside the window.
    pub acked: u64,
    /// Acked appends over the whole run (warm-up and tail included).
    pub acked_total: u64,
    pub errors: u64,
    pub error_codes: BTreeMap<String, u64>,
    /// Responses that did not come within --timeout (or connections lost mid-append).
    pub timeouts: u64,
    /// `--addr` (failover) runs: appends whose connection was lost before the answer
    /// (may or may not be in the log), and reconnections.
    #[serde(default)]
    pub unknown: u64,
    #[serde(default)]
    pub reconnects: u64,
    pub connect_s: f64,
    pub late_start_ms: f64,
    pub start_unix: f64,
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// CPU seconds (user + system) this process used in all, connecting included.
    pub cpu_s: f64,
    pub histogram_v2_hex: String,
}

impl RunResult {
    pub fn of(connections: usize, rate: Option<f64>, o: &Outcome, cpu_s: f64) -> RunResult {
        let h = o.hist.as_ref().expect("histogram");
        RunResult {
            connections,
            connected: o.connected,
            connect_failures: o.connect_failures,
            rate,
            window_s: o.window.as_secs_f64(),
            acked: o.acked,
            acked_total: o.acked_total,
            errors: o.errors,
            error_codes: o.error_codes.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
            timeouts: o.timeouts,
            unknown: o.unknown,
            reconnects: o.reconnects,
            connect_s: o.connect_s,
            late_start_ms: o.late_start_ms,
            start_unix: o.start_unix,
            p50_us: h.value_at_quantile(0.50),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            cpu_s,
            histogram_v2_hex: merge::to_hex(h),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plain data serializes")
    }

    pub fn from_json(s: &str) -> Result<RunResult, String> {
        serde_json::from_str(s).map_err(|e| format!("bad run result JSON: {e}"))
    }
}
