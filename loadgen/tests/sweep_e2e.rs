//! `corelog-loadgen sweep` end to end against a real standalone `corelog` (mTLS): two
//! small steps split over several load-generator processes with a shared start time,
//! histograms merged, CPU sampled, and every acknowledgement cross-checked against the
//! server's `corelog_appends_total`. Skips (with a reason) if the server is not built.

mod common;

use std::process::Command;

use common::{client_tls, server_bin, start_server};

use corelog_loadgen::result::sweep::SweepReport;

#[test]
fn sweep_over_several_processes_cross_checks_exactly() {
    let Some(bin) = server_bin() else {
        common::skip(
            "sweep_over_several_processes_cross_checks_exactly",
            "no corelog server binary next to the load generator (run `cargo build --release` first)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let (server, port, metrics) = start_server(&bin, dir.path());
    let out = dir.path().join("out");
    let status = Command::new(env!("CARGO_BIN_EXE_corelog-loadgen"))
        .arg("sweep")
        .args(["--target", &format!("127.0.0.1:{port}")])
        .args(["--steps", "20,45", "--max-conns-per-process", "16"])
        .args(["--warmup", "300ms", "--duration", "1s", "--cooldown", "300ms"])
        .args(["--server-pids", &server.0.id().to_string()])
        .args(["--leader-metrics", &format!("127.0.0.1:{metrics}")])
        .args(client_tls(&certs))
        .arg("--out")
        .arg(&out)
        .args(["--name", "e2e"])
        .status()
        .unwrap();
    drop(server);
    assert!(status.success(), "sweep failed: {status}");
    let rep: SweepReport = serde_json::from_str(&std::fs::read_to_string(out.join("e2e.json")).unwrap()).unwrap();
    assert_eq!(rep.steps.len(), 2);
    assert_eq!((rep.steps[0].procs, rep.steps[1].procs), (2, 3), "20 and 45 connections at ≤ 16 per process");
    for r in &rep.runs {
        assert_eq!(r.connected, r.connections as u64);
        assert!(r.acked > 0 && r.acked_total >= r.acked);
        assert_eq!(r.errors + r.timeouts + r.connect_failures, 0);
        let c = r.crosscheck.as_ref().expect("cross-check done");
        assert!(c.ok, "{}", c.note);
        assert_eq!(c.leader_appends, r.acked_total, "exact: every acknowledgement counted once");
        // The merged histogram holds exactly the window's acknowledged appends.
        let h = corelog_loadgen::merge::from_hex(&r.histogram_v2_hex).unwrap();
        assert_eq!(h.len(), r.acked);
        assert!(r.server_cpu_s.unwrap() > 0.0 && r.loadgen_cpu_s > 0.0);
        assert!(r.late_start_ms < 100.0, "children missed the shared start by {} ms", r.late_start_ms);
    }
    assert_eq!(rep.crosscheck_ok, Some(true));
    for f in ["e2e.md", "e2e.svg"] {
        let s = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(s.len() > 200, "{f} too short");
    }
    assert!(std::fs::read_to_string(out.join("e2e.svg")).unwrap().starts_with("<svg"));
}
