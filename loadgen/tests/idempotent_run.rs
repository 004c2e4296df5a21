//! `corelog-loadgen run --idempotent` against a real server: every append is an
//! `Append2` with the connection's producer, acknowledged with `Appended2`; the server
//! remembers one producer per connection, writes every sequence once (no duplicates, no
//! refusals), and its log holds the appends acknowledged (plus at most one per connection
//! answered after the generator stopped reading). With `--streams`, the appends are spread
//! over the streams named, each read back in version order.

mod common;

use std::process::Command;

use common::{server_bin, skip, start_server};
use corelog_loadgen::result::RunResult;

fn metric(port: u16, name: &str) -> f64 {
    let body = corelog_server::quickstart::http_get(port, "/metrics").unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn idempotent_runs_use_one_producer_per_connection_and_store_each_append_once() {
    let Some(bin) = server_bin() else {
        return skip("idempotent_run", "the corelog binary is not built next to the load generator");
    };
    let dir = std::env::temp_dir().join(format!("loadgen-idem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (server, port, metrics) = start_server(&bin, &dir);
    let certs = dir.join("certs");
    let json = dir.join("run.json");
    let st = Command::new(env!("CARGO_BIN_EXE_corelog-loadgen"))
        .args(["run", "--target", &format!("127.0.0.1:{port}"), "--connections", "8", "--cores", "1"])
        .args(["--warmup", "200ms", "--duration", "1s", "--quiet", "--idempotent", "--source-ips", "1"])
        .arg("--ca")
        .arg(certs.join("ca.pem"))
        .arg("--cert")
        .arg(certs.join("client.pem"))
        .arg("--key")
        .arg(certs.join("client.key"))
        .arg("--json")
        .arg(&json)
        .status()
        .unwrap();
    assert!(st.success());
    let r: RunResult = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(r.acked > 0, "nothing acknowledged: {r:?}");
    assert_eq!((r.errors, r.timeouts), (0, 0), "{:?}", r.error_codes);
    assert_eq!(metric(metrics, "corelog_producers"), 8.0, "one producer per connection");
    assert_eq!(metric(metrics, "corelog_append_duplicates_total"), 0.0);
    // Each connection may have had one append answered after the generator stopped
    // reading; nothing else is in the log.
    let end = metric(metrics, "corelog_log_end_offset") as u64;
    assert!(end >= r.acked_total && end <= r.acked_total + 8, "log end {end}, acked {}", r.acked_total);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--streams N` with `--idempotent`: every append names one of `s0 … s{N-1}`; each
/// stream read back (`corelog read --stream`) holds versions 0, 1, 2, … without a gap,
/// and together they hold every record of the log.
#[test]
fn stream_runs_spread_appends_over_streams_in_version_order() {
    let Some(bin) = server_bin() else {
        return skip("stream_run", "the corelog binary is not built next to the load generator");
    };
    let dir = std::env::temp_dir().join(format!("loadgen-streams-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (server, port, metrics) = start_server(&bin, &dir);
    let certs = dir.join("certs");
    let tls = |c: &mut Command| {
        c.arg("--ca").arg(certs.join("ca.pem")).arg("--cert").arg(certs.join("client.pem"));
        c.arg("--key").arg(certs.join("client.key"));
    };
    let json = dir.join("run.json");
    let mut run = Command::new(env!("CARGO_BIN_EXE_corelog-loadgen"));
    run.args(["run", "--target", &format!("127.0.0.1:{port}"), "--connections", "8", "--cores", "1"])
        .args(["--warmup", "200ms", "--duration", "1s", "--quiet", "--idempotent", "--source-ips", "1"])
        .args(["--streams", "20", "--stream-pick", "random", "--json"])
        .arg(&json);
    tls(&mut run);
    assert!(run.status().unwrap().success());
    let r: RunResult = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(r.acked > 0, "nothing acknowledged: {r:?}");
    assert_eq!((r.errors, r.timeouts), (0, 0), "{:?}", r.error_codes);
    assert_eq!(metric(metrics, "corelog_streams"), 20.0, "every stream got appends");
    let end = metric(metrics, "corelog_log_end_offset") as u64;
    let mut total = 0;
    for k in 0..20 {
        let mut read = Command::new(&bin);
        read.args(["read", "--addr", &format!("127.0.0.1:{port}"), "--stream", &format!("s{k}")]);
        tls(&mut read);
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
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
