//! Human-readable results: the terminal table of one `run`, and the sweep's terminal
//! table and Markdown. (JSON is the serde form of [`crate::result::RunResult`] and
//! [`crate::result::sweep::SweepReport`]; the plot is [`crate::svg`].)

use crate::result::sweep::{StepSummary, SweepReport};
use crate::result::RunResult;

pub fn fmt_us(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else if us >= 1000 {
        format!("{:.2} ms", us as f64 / 1000.0)
    } else {
        format!("{us} µs")
    }
}

/// 12345.6 → "12,346".
pub fn fmt_int(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

pub fn run_header() -> String {
    format!(
        "{:>11} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>8}",
        "connections", "acked/s", "p50", "p95", "p99", "p99.9", "max", "errors", "timeouts"
    )
}

pub fn run_row(r: &RunResult) -> String {
    format!(
        "{:>11} {:>12.0} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>8}",
        r.connections,
        r.acked as f64 / r.window_s,
        fmt_us(r.p50_us),
        fmt_us(r.p95_us),
        fmt_us(r.p99_us),
        fmt_us(r.p999_us),
        fmt_us(r.max_us),
        r.errors,
        r.timeouts + r.connect_failures
    )
}

fn cpu(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

fn check(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "ok",
        Some(false) => "FAILED",
        None => "-",
    }
}

const COLS: [&str; 18] = [
    "connections",
    "procs",
    "acked/s",
    "p50",
    "p95",
    "p99",
    "p99.9",
    "max",
    "errors",
    "timeouts",
    "ET@1ms",
    "ET@10ms",
    "srv CPU s",
    "lg CPU s",
    "all CPU s",
    "softirq s",
    "connect s",
    "x-check",
];

fn cells(s: &StepSummary) -> [String; 18] {
    [
        s.connections.to_string(),
        s.procs.to_string(),
        fmt_int(s.acked_per_s),
        fmt_us(s.p50_us),
        fmt_us(s.p95_us),
        fmt_us(s.p99_us),
        fmt_us(s.p999_us),
        fmt_us(s.max_us),
        s.errors.to_string(),
        (s.timeouts + s.connect_failures).to_string(),
        fmt_int(s.et_1ms),
        fmt_int(s.et_10ms),
        cpu(s.server_cpu_s),
        format!("{:.1}", s.loadgen_cpu_s),
        format!("{:.1}", s.machine_cpu_s),
        format!("{:.1}", s.softirq_cpu_s),
        format!("{:.1}", s.connect_s),
        check(s.crosscheck_ok).to_string(),
    ]
}

fn mode_line(r: &SweepReport) -> String {
    let mode = match r.rate {
        Some(rate) => {
            format!("open loop at {} appends/s in total (latency from the intended send time)", fmt_int(rate))
        }
        None => "closed loop, one append in flight per connection".into(),
    };
    format!(
        "{mode}; {} CPUs; warm-up {} s, window {} s, cool-down {} s; {} run(s) per step (throughput: min, latency: max); ≤ {} connections per load-generator process; targets {}",
        r.cpus, r.warmup_s, r.duration_s, r.cooldown_s, r.repeat, r.max_conns_per_process, r.targets
    )
}

/// The terminal table.
pub fn sweep_table(r: &SweepReport) -> String {
    let rows: Vec<[String; 18]> = r.steps.iter().map(cells).collect();
    let widths: Vec<usize> = (0..COLS.len())
        .map(|i| rows.iter().map(|c| c[i].chars().count()).chain([COLS[i].len()]).max().unwrap_or(0))
        .collect();
    let line = |c: &[String]| c.iter().zip(&widths).map(|(v, w)| format!("{v:>w$}")).collect::<Vec<_>>().join("  ");
    let mut out = format!("sweep {}: {}\n", r.name, mode_line(r));
    out += &line(&COLS.map(String::from));
    out.push('\n');
    for c in &rows {
        out += &line(c);
        out.push('\n');
    }
    out += &crosscheck_lines(r);
    out
}

fn crosscheck_lines(r: &SweepReport) -> String {
    let mut out = String::new();
    for run in &r.runs {
        if let Some(c) = &run.crosscheck {
            out += &format!(
                "cross-check {} conns run {}: {} — {}\n",
                run.connections,
                run.rep + 1,
                if c.ok { "ok" } else { "FAILED" },
                c.note
            );
        }
    }
    match r.crosscheck_ok {
        Some(true) => {
            out +=
                &format!("cross-check: PASSED for every run ({} acked writes in all)\n", fmt_int(r.acked_total as f64))
        }
        Some(false) => out += "cross-check: FAILED (see above)\n",
        None => out += "cross-check: not done (no --leader-metrics given)\n",
    }
    out
}

/// The Markdown section (table, cross-check, notes on the columns).
pub fn sweep_markdown(r: &SweepReport, svg_name: Option<&str>) -> String {
    let mut out = format!("### Sweep `{}`\n\n{}.\n\n", r.name, mode_line(r));
    out += &format!("| {} |\n", COLS.join(" | "));
    out += &format!("|{}\n", "---:|".repeat(COLS.len()));
    for s in &r.steps {
        out += &format!("| {} |\n", cells(s).join(" | "));
    }
    out += "\n";
    if let Some(svg) = svg_name {
        out += &format!("![throughput and latency against connections]({svg})\n\n");
    }
    out += "Cross-check (acknowledged writes against the servers' counters, after each step's cool-down):\n\n";
    for l in crosscheck_lines(r).lines() {
        out += &format!("- {l}\n");
    }
    out += "\nColumns: acked/s = acknowledged appends in the measured window ÷ window; p50…max from \
            the exact merge of every load-generator process's hdrhistogram; errors = error frames; \
            timeouts = no answer within the timeout, lost connections and failed connects; \
            ET@T = Effective Throughput = acked/s × T ÷ p50; srv/lg CPU s = CPU seconds (user+system, \
            /proc/PID/stat) of the server processes / load-generator processes during the window, all CPU s = busy \
            CPU seconds of the whole machine in the window (wall time × CPUs less idle: /proc/uptime, \
            /proc/stat; the rest is other processes), \
            out of cpus × window available, softirq s = its softirq part (loopback TCP receive \
            work; here it is also inside the CPU of whichever process was running); \
            connect s = time to open every mTLS connection.\n";
    out
}

pub fn sweep_json(r: &SweepReport) -> String {
    serde_json::to_string_pretty(r).expect("plain data serializes")
}
