//! A small hand-written SVG plot of a sweep: acknowledged writes/s (left axis, linear)
//! and p50/p99 latency (right axis, logarithmic) against connections (logarithmic).

use std::fmt::Write;

use crate::report::fmt_int;
use crate::result::sweep::SweepReport;

/// The picture's size.
const W: f64 = 820.0;
const H: f64 = 460.0;
/// The plot area: its margins and what they leave of the picture's width and height.
const LEFT: f64 = 90.0;
const RIGHT: f64 = 90.0;
const PW: f64 = W - LEFT - RIGHT;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 70.0;
const PH: f64 = H - TOP - BOTTOM;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A "nice" axis maximum: 1, 2, 2.5 or 5 × 10^k at or above `v`.
fn nice_ceil(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

/// The latency axis's bottom and top decades (ms) for latencies `lat` (all above zero):
/// at least one decade; 1 to 10 ms when there are none (a sweep whose every step failed).
fn latency_decades(lat: &[f64]) -> (f64, f64) {
    let lo = lat.iter().cloned().fold(f64::INFINITY, f64::min);
    let lo = if lo.is_finite() { lo.max(0.01) } else { 1.0 };
    let lmin = 10f64.powf(lo.log10().floor());
    let lmax = 10f64.powf(lat.iter().cloned().fold(0.0, f64::max).max(lmin * 10.0).log10().ceil());
    assert!(lmin.is_finite() && lmax > lmin, "the latency axis spans whole decades");
    (lmin, lmax)
}

pub fn plot(r: &SweepReport) -> String {
    let sc = Scales::of(r);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    title(&mut s, r);
    frame_and_grid(&mut s, &sc);
    axis_titles(&mut s);
    series(&mut s, r, &sc);
    s.push_str("</svg>\n");
    s
}

/// Where values land on the plot: connections on a log scale across, acknowledged
/// writes/s (linear, left axis) and latency in ms (log over whole decades, right axis) up.
struct Scales {
    /// The connection counts of the steps.
    xs: Vec<f64>,
    /// log10 of the connections at the left and right edges.
    lx0: f64,
    lx1: f64,
    /// The top of the throughput axis.
    tmax: f64,
    /// The latency axis's bottom and top decades (ms).
    lmin: f64,
    lmax: f64,
}

impl Scales {
    fn of(r: &SweepReport) -> Scales {
        let xs: Vec<f64> = r.steps.iter().map(|s| s.connections as f64).collect();
        let (xmin, xmax) = (
            xs.iter().cloned().fold(f64::INFINITY, f64::min).max(1.0),
            xs.iter().cloned().fold(0.0, f64::max).max(1.0),
        );
        let (lx0, lx1) =
            if xmax > xmin { (xmin.log10(), xmax.log10()) } else { (xmin.log10() - 0.5, xmin.log10() + 0.5) };
        let pad = (lx1 - lx0) * 0.05;
        let tmax = nice_ceil(r.steps.iter().map(|s| s.acked_per_s).fold(0.0, f64::max) * 1.1);
        let lat: Vec<f64> = r
            .steps
            .iter()
            .flat_map(|s| [s.p50_us as f64 / 1000.0, s.p99_us as f64 / 1000.0])
            .filter(|v| *v > 0.0)
            .collect();
        let (lmin, lmax) = latency_decades(&lat);
        Scales { xs, lx0: lx0 - pad, lx1: lx1 + pad, tmax, lmin, lmax }
    }

    /// Connections across.
    fn x(&self, c: f64) -> f64 {
        LEFT + (c.max(1.0).log10() - self.lx0) / (self.lx1 - self.lx0) * PW
    }

    /// Acknowledged writes/s up.
    fn yt(&self, v: f64) -> f64 {
        TOP + PH - v / self.tmax * PH
    }

    /// Latency (ms) up.
    fn yl(&self, ms: f64) -> f64 {
        TOP + PH - (ms.max(self.lmin).log10() - self.lmin.log10()) / (self.lmax.log10() - self.lmin.log10()) * PH
    }
}

fn title(s: &mut String, r: &SweepReport) {
    let mode = match r.rate {
        Some(rate) => format!("open loop, {} appends/s", fmt_int(rate)),
        None => "closed loop, 1 append in flight per connection".into(),
    };
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        W / 2.0,
        esc(&format!("corelog sweep {} — {mode}", r.name))
    );
}

/// The plot's frame, the throughput grid and labels (left), the latency decades (right)
/// and a line and label per step's connection count (below).
fn frame_and_grid(s: &mut String, sc: &Scales) {
    let _ = writeln!(s, r##"<rect x="{LEFT}" y="{TOP}" width="{PW}" height="{PH}" fill="none" stroke="#444"/>"##);
    for i in 0..=5 {
        let v = sc.tmax * i as f64 / 5.0;
        let y = sc.yt(v);
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##, LEFT + PW);
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#1f5fbf">{}</text>"##,
            LEFT - 6.0,
            y + 4.0,
            fmt_int(v)
        );
    }
    let mut d = sc.lmin;
    while d <= sc.lmax * 1.0001 {
        let y = sc.yl(d);
        let label = if d >= 1.0 { format!("{d:.0} ms") } else { format!("{d} ms") };
        let _ = writeln!(s, r##"<text x="{:.1}" y="{:.1}" fill="#b03030">{label}</text>"##, LEFT + PW + 6.0, y + 4.0);
        d *= 10.0;
    }
    for &c in &sc.xs {
        let px = sc.x(c);
        let _ = writeln!(s, r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#eee"/>"##, TOP + PH);
        let label = if c >= 1000.0 && (c % 1000.0) == 0.0 { format!("{}k", c / 1000.0) } else { fmt_int(c) };
        let _ = writeln!(s, r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#, TOP + PH + 18.0);
    }
}

fn axis_titles(s: &mut String) {
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">connections (log scale)</text>"#,
        LEFT + PW / 2.0,
        H - 28.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate(20,{:.1}) rotate(-90)" text-anchor="middle" fill="#1f5fbf">acknowledged writes/s</text>"##,
        TOP + PH / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate({:.1},{:.1}) rotate(90)" text-anchor="middle" fill="#b03030">latency (log scale)</text>"##,
        W - 22.0,
        TOP + PH / 2.0
    );
}

/// The three lines (throughput, p50, p99) with a dot per step, and their legend.
fn series(s: &mut String, r: &SweepReport, sc: &Scales) {
    type Series<'a> = (&'a str, &'a str, &'a str, Vec<(f64, f64)>);
    let series: [Series; 3] = [
        (
            "acked writes/s",
            "#1f5fbf",
            "",
            r.steps.iter().map(|st| (sc.x(st.connections as f64), sc.yt(st.acked_per_s))).collect(),
        ),
        (
            "p50",
            "#e08a00",
            "6,4",
            r.steps.iter().map(|st| (sc.x(st.connections as f64), sc.yl(st.p50_us as f64 / 1000.0))).collect(),
        ),
        (
            "p99",
            "#b03030",
            "2,3",
            r.steps.iter().map(|st| (sc.x(st.connections as f64), sc.yl(st.p99_us as f64 / 1000.0))).collect(),
        ),
    ];
    for (i, (name, color, dash, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2.5" stroke-dasharray="{dash}"/>"#,
            path.join(" ")
        );
        for (a, b) in pts {
            let _ = writeln!(s, r#"<circle cx="{a:.1}" cy="{b:.1}" r="3.5" fill="{color}"/>"#);
        }
        let lx = LEFT + 12.0 + i as f64 * 150.0;
        let ly = H - 8.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2.5" stroke-dasharray="{dash}"/>"#,
            ly - 4.0,
            lx + 28.0,
            ly - 4.0
        );
        let _ = writeln!(s, r#"<text x="{:.1}" y="{ly}">{}</text>"#, lx + 34.0, esc(name));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nice() {
        assert_eq!(super::nice_ceil(31_000.0), 50_000.0);
        assert_eq!(super::nice_ceil(19_000.0), 20_000.0);
        assert_eq!(super::nice_ceil(0.0), 1.0);
    }

    /// No latency above zero (every step failed) still gives a finite axis: the tick
    /// loop over its decades ends.
    #[test]
    fn latency_axis_without_latencies() {
        assert_eq!(super::latency_decades(&[]), (1.0, 10.0));
        let (lo, hi) = super::latency_decades(&[0.3, 42.0]);
        assert!((lo - 0.1).abs() < 1e-12 && (hi - 100.0).abs() < 1e-9, "{lo} {hi}");
    }
}
