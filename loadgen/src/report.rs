//! Results: a terminal table row and a JSON object (with the serialized histogram, so
//! several processes' results merge exactly).

use hdrhistogram::serialization::{Serializer, V2Serializer};

use crate::run::Outcome;

pub struct Summary {
    pub connections: usize,
    pub window_s: f64,
    pub acked: u64,
    pub per_s: f64,
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub connect_failures: u64,
}

impl Summary {
    pub fn of(connections: usize, o: &Outcome) -> Summary {
        let h = o.hist.as_ref().expect("histogram");
        let w = o.window.as_secs_f64();
        Summary {
            connections,
            window_s: w,
            acked: o.acked,
            per_s: o.acked as f64 / w,
            p50_us: h.value_at_quantile(0.50),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            errors: o.errors,
            timeouts: o.timeouts,
            connect_failures: o.connect_failures,
        }
    }
}

pub fn fmt_us(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else if us >= 1000 {
        format!("{:.2} ms", us as f64 / 1000.0)
    } else {
        format!("{us} µs")
    }
}

pub fn header() -> String {
    format!(
        "{:>11} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>8}",
        "connections", "acked/s", "p50", "p95", "p99", "p99.9", "max", "errors", "timeouts"
    )
}

pub fn row(s: &Summary) -> String {
    format!(
        "{:>11} {:>12.0} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>8}",
        s.connections,
        s.per_s,
        fmt_us(s.p50_us),
        fmt_us(s.p95_us),
        fmt_us(s.p99_us),
        fmt_us(s.p999_us),
        fmt_us(s.max_us),
        s.errors,
        s.timeouts + s.connect_failures
    )
}

pub fn hist_hex(o: &Outcome) -> String {
    let mut buf = Vec::new();
    V2Serializer::new().serialize(o.hist.as_ref().expect("histogram"), &mut buf).expect("serialize to Vec");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn json(s: &Summary, o: &Outcome) -> String {
    let codes: Vec<String> = o.error_codes.iter().map(|(c, n)| format!("\"{c}\":{n}")).collect();
    format!(
        "{{\"connections\":{},\"connected\":{},\"window_s\":{},\"acked\":{},\"acked_per_s\":{:.1},\"p50_us\":{},\"p95_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"errors\":{},\"error_codes\":{{{}}},\"timeouts\":{},\"connect_failures\":{},\"histogram_v2_hex\":\"{}\"}}",
        s.connections,
        o.connected,
        s.window_s,
        s.acked,
        s.per_s,
        s.p50_us,
        s.p95_us,
        s.p99_us,
        s.p999_us,
        s.max_us,
        s.errors,
        codes.join(","),
        s.timeouts,
        s.connect_failures,
        hist_hex(o)
    )
}
