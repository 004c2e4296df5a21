//! `corelog-loadgen run --idempotent` against a real server: every append is an
//! `Append2` with the connection's producer, acknowledged with `Appended2`; the server
//! remembers one producer per connection, writes every sequence once (no duplicates, no
//! refusals), and its log holds the appends acknowledged (plus at most one per connection
//! answered after the generator stopped reading). With `--streams`, the appends are spread
//! over the streams named, each read back in version order.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{server_bin, skip, start_server, Server};
use corelog_loadgen::result::RunResult;

fn metric(port: u16, name: &str) -> f64 {
    let body = corelog_server::probe::http_get(port, "/metrics").unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Client certificate flags for the load generator and the CLI.
fn tls(c: &mut Command, certs: &Path) {
    c.args(common::client_tls(certs));
}

/// A standalone server in a fresh temp dir, and a 1 s idempotent run against it with
/// `extra` flags; `None` when the server binary is not built (the test is skipped).
struct Ran {
    server: Option<Server>,
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    metrics: u16,
    result: RunResult,
}

fn idempotent_run(test: &str, extra: &[&str]) -> Option<Ran> {
    let Some(bin) = server_bin() else {
        skip(test, "the corelog binary is not built next to the load generator");
        return None;
    };
    let dir = std::env::temp_dir().join(format!("loadgen-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (server, port, metrics) = start_server(&bin, &dir);
    let json = dir.join("run.json");
    let mut run = Command::new(env!("CARGO_BIN_EXE_corelog-loadgen"));
    run.args(["run", "--target", &format!("127.0.0.1:{port}"), "--connections", "8", "--cores", "1"])
        .args(["--warmup", "200ms", "--duration", "1s", "--quiet", "--idempotent", "--source-ips", "1"])
        .args(extra)
        .arg("--json")
        .arg(&json);
    tls(&mut run, &dir.join("certs"));
    assert!(run.status().unwrap().success());
    let result: RunResult = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(result.acked > 0, "nothing acknowledged: {result:?}");
    assert_eq!((result.errors, result.timeouts), (0, 0), "{:?}", result.error_codes);
    Some(Ran { server: Some(server), dir, bin, port, metrics, result })
}

impl Drop for Ran {
    fn drop(&mut self) {
        drop(self.server.take()); // killed first, then its files removed
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn idempotent_runs_use_one_producer_per_connection_and_store_each_append_once() {
    let Some(r) = idempotent_run("idempotent_run", &[]) else { return };
    assert_eq!(metric(r.metrics, "corelog_producers"), 8.0, "one producer per connection");
    assert_eq!(metric(r.metrics, "corelog_append_duplicates_total"), 0.0);
    // Each connection may have had one append answered after the generator stopped
    // reading; nothing else is in the log.
    let end = metric(r.metrics, "corelog_log_end_offset") as u64;
    let acked = r.result.acked_total;
    assert!(end >= acked && end <= acked + 8, "log end {end}, acked {acked}");
}

/// `--streams N` with `--idempotent`: every append names one of `s0 … s{N-1}`; each
/// stream read back (`corelog read --stream`) holds versions 0, 1, 2, … without a gap,
/// and together they hold every record of the log.
#[test]
fn stream_runs_spread_appends_over_streams_in_version_order() {
    let Some(r) = idempotent_run("stream_run", &["--streams", "20", "--stream-pick", "random"]) else { return };
    assert_eq!(metric(r.metrics, "corelog_streams"), 20.0, "every stream got appends");
    let end = metric(r.metrics, "corelog_log_end_offset") as u64;
    let mut total = 0;
    for k in 0..20 {
        let mut read = Command::new(&r.bin);
        read.args(["read", "--addr", &format!("127.0.0.1:{}", r.port), "--stream", &format!("s{k}")]);
        tls(&mut read, &r.dir.join("certs"));
        let out = read.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let mut last_offset = None;
        for (v, line) in text.lines().enumerate() {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f[0], v.to_string(), "stream s{k}: versions in order, no gap");
            let offset: u64 = f[1].parse().unwrap();
            assert!(last_offset < Some(offset), "stream s{k}: offsets ascend");
            last_offset = Some(offset);
        }
        total += text.lines().count() as u64;
    }
    assert_eq!(total, end, "the streams hold every record of the log");
}
