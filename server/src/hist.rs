//! Fixed-bucket Prometheus histograms: one relaxed atomic add per bucket hit plus one for
//! the sum, nothing allocated per sample and nothing kept between scrapes (the
//! `metrics` crate's histograms keep every sample until the next scrape: unbounded while
//! nobody scrapes). Rendered after the recorder's text on `/metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Seconds: 50 µs … 10 s.
pub const SECONDS: &[f64] = &[
    50e-6, 100e-6, 200e-6, 300e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3, 200e-3, 500e-3, 1.0, 2.0,
    5.0, 10.0,
];
/// Records per batch.
pub const RECORDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0];
/// Bytes per batch: 256 B … 2 MiB.
pub const BYTES: &[f64] = &[256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 524288.0, 1048576.0, 2097152.0];

pub struct Hist {
    name: &'static str,
    labels: String,
    bounds: &'static [f64],
    /// Per bucket (not cumulative); the last is above every bound.
    counts: Box<[AtomicU64]>,
    /// Sum of the samples × `SCALE`.
    sum: AtomicU64,
}

/// Sums are kept in units of 1e-9 (nanoseconds for seconds): exact enough, and an
/// integer add.
const SCALE: f64 = 1e9;

static ALL: Mutex<Vec<Arc<Hist>>> = Mutex::new(Vec::new());

impl Hist {
    /// A histogram registered for `/metrics`; `labels` like `shard="0"`.
    pub fn register(name: &'static str, labels: String, bounds: &'static [f64]) -> Arc<Hist> {
        assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{name}: bounds must ascend");
        let h = Arc::new(Hist {
            name,
            labels,
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        });
        ALL.lock().unwrap_or_else(|e| e.into_inner()).push(h.clone());
        h
    }

    pub fn record(&self, v: f64) {
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add((v.max(0.0) * SCALE) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String) {
        let sep = if self.labels.is_empty() { "" } else { "," };
        let mut acc = 0;
        for (i, c) in self.counts.iter().enumerate() {
            acc += c.load(Ordering::Relaxed);
            let le = self.bounds.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{}_bucket{{{}{sep}le=\"{le}\"}} {acc}", self.name, self.labels);
        }
        let sum = self.sum.load(Ordering::Relaxed) as f64 / SCALE;
        let braces = if self.labels.is_empty() { String::new() } else { format!("{{{}}}", self.labels) };
        let _ = writeln!(out, "{}_sum{braces} {sum}", self.name);
        let _ = writeln!(out, "{}_count{braces} {acc}", self.name);
    }
}

/// Every registered histogram in the Prometheus text format, grouped by name.
pub fn render_all(out: &mut String) {
    let all = ALL.lock().unwrap_or_else(|e| e.into_inner());
    let mut names: Vec<&'static str> = all.iter().map(|h| h.name).collect();
    names.sort_unstable();
    names.dedup();
    for n in names {
        let _ = writeln!(out, "# TYPE {n} histogram");
        for h in all.iter().filter(|h| h.name == n) {
            h.render(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_sum_counts() {
        let h = Hist::register("test_hist_seconds", "shard=\"9\"".into(), &[0.001, 0.01]);
        for v in [0.0005, 0.001, 0.005, 5.0] {
            h.record(v);
        }
        let mut out = String::new();
        h.render(&mut out);
        assert!(out.contains("test_hist_seconds_bucket{shard=\"9\",le=\"0.001\"} 2\n"), "{out}");
        assert!(out.contains("test_hist_seconds_bucket{shard=\"9\",le=\"0.01\"} 3\n"), "{out}");
        assert!(out.contains("test_hist_seconds_bucket{shard=\"9\",le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("test_hist_seconds_count{shard=\"9\"} 4\n"), "{out}");
        assert!(out.contains("test_hist_seconds_sum{shard=\"9\"} 5.0065\n"), "{out}");
        let mut all = String::new();
        render_all(&mut all);
        assert_eq!(all.matches("# TYPE test_hist_seconds histogram").count(), 1);
    }
}
