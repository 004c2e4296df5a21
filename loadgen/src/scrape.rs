//! The server counters the sweep cross-checks against: one plain HTTP/1.0 GET of
//! `/metrics` per process, summing a metric's samples over its shard labels.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `GET /metrics` from one server process.
pub fn fetch(addr: SocketAddr) -> Result<String, String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(3)).map_err(|e| format!("metrics {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").map_err(|e| format!("metrics {addr}: {e}"))?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(|e| format!("metrics {addr}: {e}"))?;
    match body.split_once("\r\n\r\n") {
        Some((head, rest)) if head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200") => {
            Ok(rest.to_string())
        }
        _ => Err(format!("metrics {addr}: unexpected answer {:?}", body.lines().next().unwrap_or(""))),
    }
}

/// Sum of every sample of `name` (any labels) in a Prometheus text exposition.
pub fn sum_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with('{') || r.starts_with(' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Counters of one node (one or several processes) at one instant.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct NodeCounters {
    /// Sum of `corelog_appends_total` (acknowledged appends).
    pub appends: u64,
    /// Sum of `corelog_committed_offset` (records committed, offsets start at 0).
    pub committed: u64,
}

pub fn node_counters(addrs: &[SocketAddr]) -> Result<NodeCounters, String> {
    let mut c = NodeCounters::default();
    for a in addrs {
        let t = fetch(*a)?;
        c.appends += sum_metric(&t, "corelog_appends_total").round() as u64;
        c.committed += sum_metric(&t, "corelog_committed_offset").round() as u64;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sums_over_labels() {
        let t = "# TYPE corelog_appends_total counter\ncorelog_appends_total{shard=\"0\"} 5\ncorelog_appends_total{shard=\"1\"} 7\ncorelog_appends_total_x 100\ncorelog_committed_offset{shard=\"0\"} 1.5e3\n";
        assert_eq!(super::sum_metric(t, "corelog_appends_total"), 12.0);
        assert_eq!(super::sum_metric(t, "corelog_committed_offset"), 1500.0);
    }
}
