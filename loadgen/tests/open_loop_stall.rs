//! The open loop sees what the closed loop hides.
//!
//! A real `corelog` server (standalone, mTLS) is frozen for 100 ms with SIGSTOP/SIGCONT
//! in the middle of a measured window — the stall is the injected fault. The same stall
//! is injected into an open-loop run (fixed rate, latency from the intended send time)
//! and a closed-loop run (one append in flight per connection):
//!
//! - open loop: every append due during the stall waits for it, so ~10% of the window's
//!   appends see 0–100 ms and p99 is ≈ 90–100 ms;
//! - closed loop: each connection is simply blocked and sends nothing, so the stall costs
//!   one sample per connection; p99 stays at the usual sub-millisecond to few-ms level
//!   and only the max shows the stall (coordinated omission).
//!
//! Both runs also check the load generator's linger: connections stay open after the
//! window until twice the slowest answer has passed (here ≥ 180 ms, the stall being
//! the slowest), so closing them cannot delay answers still in flight elsewhere.
//!
//! The server binary is found next to the load generator (target/<profile>/corelog); the
//! test says why and passes without checking anything if it is not built.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{server_bin, start_server, Server};
use corelog_loadgen::result::RunResult;
use corelog_loadgen::run::{instant_of_unix, unix_now};

const STALL: Duration = Duration::from_millis(100);
const WARMUP_MS: u64 = 500;
const WINDOW_MS: u64 = 1000;
/// Where in the window the stall starts.
const STALL_AT_MS: u64 = 300;
const CONNECTIONS: usize = 8;
const RATE: f64 = 1000.0;

/// One run of the load generator with a 100 ms SIGSTOP of the server inside the window.
fn run_with_stall(dir: &Path, server: &Server, ports: (u16, u16), rate: Option<f64>, name: &str) -> RunResult {
    let (port, metrics) = ports;
    let certs = dir.join("certs");
    let json = dir.join(format!("{name}.json"));
    // Connecting 8 connections takes milliseconds; the shared start time leaves room.
    let start_unix = unix_now() + 2.0;
    // (`instant_of_unix` clamps a past time to now: convert while it is ahead.)
    let start = instant_of_unix(start_unix);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corelog-loadgen"));
    cmd.arg("run")
        .args(["--target", &format!("127.0.0.1:{port}")])
        .args(["--connections", &CONNECTIONS.to_string(), "--cores", "1", "--source-ips", "1"])
        .args(["--warmup", &format!("{WARMUP_MS}ms"), "--duration", &format!("{WINDOW_MS}ms")])
        .args(["--start-at", &format!("{start_unix:.6}"), "--quiet", "--label", name])
        .arg("--ca")
        .arg(certs.join("ca.pem"))
        .arg("--cert")
        .arg(certs.join("client.pem"))
        .arg("--key")
        .arg(certs.join("client.key"))
        .arg("--json")
        .arg(&json);
    if let Some(r) = rate {
        cmd.args(["--rate", &r.to_string()]);
    }
    let mut lg = cmd.spawn().unwrap();
    // The injected fault: freeze the whole server process for STALL.
    let stall_at = start + Duration::from_millis(WARMUP_MS + STALL_AT_MS);
    let now = Instant::now();
    assert!(stall_at > now);
    std::thread::sleep(stall_at - now);
    let pid = server.0.id() as i32;
    // SAFETY: kill(2) on our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    std::thread::sleep(STALL);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    // Linger: 90 ms after the window's end every connection is still open (the slowest
    // answer took ≥ 90 ms, so they stay ≥ 180 ms); without it they close at once.
    let window_end = start + Duration::from_millis(WARMUP_MS + WINDOW_MS);
    let mid_linger = window_end + Duration::from_millis(90);
    std::thread::sleep(mid_linger.saturating_duration_since(Instant::now()));
    let open_then = connections(metrics);
    let st = lg.wait().unwrap();
    let exited = Instant::now();
    assert!(st.success(), "{name}: load generator failed: {st}");
    let r = RunResult::from_json(std::fs::read_to_string(&json).unwrap().trim()).unwrap();
    eprintln!(
        "{name}: acked {} in {} s, p50 {} µs, p99 {} µs, p99.9 {} µs, max {} µs, errors {}, timeouts {}, late start {:.1} ms",
        r.acked, r.window_s, r.p50_us, r.p99_us, r.p999_us, r.max_us, r.errors, r.timeouts, r.late_start_ms
    );
    assert_eq!(r.errors + r.timeouts + r.connect_failures, 0, "{name}: errors");
    assert!(r.late_start_ms < 50.0, "{name}: started {} ms late; the stall missed its place", r.late_start_ms);
    assert!(r.max_us >= 90_000, "{name}: max {} µs: the stall did not hit this run", r.max_us);
    assert_eq!(open_then, CONNECTIONS as u64, "{name}: connections open 90 ms after the window");
    let linger = (Duration::from_micros(r.max_us) * 2).min(Duration::from_secs(5));
    assert!(
        exited + Duration::from_millis(10) >= window_end + linger,
        "{name}: exited {:?} after the window, before its linger of {linger:?}",
        exited.saturating_duration_since(window_end)
    );
    r
}

#[test]
fn open_loop_shows_a_100ms_stall_in_p99_that_closed_loop_hides() {
    let Some(bin) = server_bin() else {
        let why = format!(
            "no server binary next to {} (run `cargo build --release` first)",
            env!("CARGO_BIN_EXE_corelog-loadgen")
        );
        common::skip("open_loop_shows_a_100ms_stall_in_p99_that_closed_loop_hides", &why);
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (server, port, metrics) = start_server(&bin, dir.path());

    let open = run_with_stall(dir.path(), &server, (port, metrics), Some(RATE), "open");
    let closed = run_with_stall(dir.path(), &server, (port, metrics), None, "closed");

    // Open loop: ~1,000 appends due in the window, ~100 of them during the stall, waiting
    // 0..100 ms for it: the top 1% waited ≥ ~90 ms.
    assert!(open.acked as f64 >= RATE * WINDOW_MS as f64 / 1000.0 * 0.9, "open loop kept its rate: {}", open.acked);
    assert!(open.p99_us >= 80_000, "open-loop p99 {} µs must show the 100 ms stall", open.p99_us);
    assert!(open.max_us >= 95_000, "open-loop max {} µs", open.max_us);
    // Closed loop: the stall hit it too (max), but each connection lost only one sample.
    assert!(closed.max_us >= 90_000, "closed-loop max {} µs: the stall must have hit this run", closed.max_us);
    assert!(closed.acked >= 100 * CONNECTIONS as u64, "closed loop too slow to judge p99 ({} samples)", closed.acked);
    assert!(
        closed.p99_us < 50_000 && closed.p99_us * 2 < open.p99_us,
        "closed-loop p99 {} µs should hide the stall (open-loop p99 {} µs)",
        closed.p99_us,
        open.p99_us
    );
}

/// The server's open client connections (`corelog_connections`, all shards), from its
/// metrics port.
fn connections(metrics: u16) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let n: f64 = body
        .lines()
        .filter(|l| l.starts_with("corelog_connections{") || l.starts_with("corelog_connections "))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(body.contains("corelog_connections"), "no corelog_connections in:\n{body}");
    n as u64
}
