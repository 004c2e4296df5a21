//! corelog-loadgen: a thread-per-core load generator for corelog, and the sweep that runs
//! several of them in step, merges their histograms exactly and reports.
//!
//! - [`run`]: one process, N glommio executors, closed or open loop (one step).
//! - [`result`]: one process's result as JSON, with its hdrhistogram serialized (V2), and
//!   a sweep's results (runs, steps, cross-checks) built from them.
//! - [`merge`]: decoding and exact merging of serialized histograms across processes.
//! - [`sweep`]: steps of connection counts; spawns `run` children with a shared start time.
//! - [`procstat`]: CPU seconds of a process from /proc/<pid>/stat.
//! - [`scrape`]: the server's Prometheus counters used for the cross-check.
//! - [`report`]: terminal table, Markdown, JSON and the SVG plot.

pub mod merge;
pub mod procstat;
pub mod report;
pub mod result;
pub mod run;
pub mod scrape;
pub mod svg;
pub mod sweep;

use std::sync::OnceLock;

/// Prefix of this process's progress lines on stderr (e.g. `loadgen[2]` in a sweep child).
pub static LOG_LABEL: OnceLock<String> = OnceLock::new();

pub fn log_label() -> &'static str {
    LOG_LABEL.get().map(String::as_str).unwrap_or("loadgen")
}

/// A progress line on stderr, prefixed with this process's label.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {
        eprintln!("{}: {}", $crate::log_label(), format!($($arg)*))
    };
}

/// Parses `10s`, `500ms`, `1.5m` (a bare number is seconds).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (num, unit) = s.find(|c: char| c.is_ascii_alphabetic()).map(|i| s.split_at(i)).unwrap_or((s, "s"));
    let v: f64 = num.parse().map_err(|_| format!("bad duration {s:?} (e.g. 10s, 500ms)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m)")),
    };
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(format!("duration {s:?} must not be negative"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// Parses `1k,4k,9000,18k,36k`.
pub fn parse_counts(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let p = p.trim().to_ascii_lowercase();
            let (num, mul) = match p.strip_suffix('k') {
                Some(n) => (n.to_string(), 1000.0),
                None => (p.clone(), 1.0),
            };
            let v: f64 = num.parse().map_err(|_| format!("bad count {p:?}"))?;
            let n = (v * mul).round();
            if !(1.0..=1e7).contains(&n) {
                return Err(format!("count {p:?} out of range"));
            }
            Ok(n as usize)
        })
        .collect()
}

/// Parses a comma-separated list of socket addresses.
pub fn parse_addrs(s: &str) -> Result<Vec<std::net::SocketAddr>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse().map_err(|_| format!("bad address {p:?} (host:port)")))
        .collect()
}
