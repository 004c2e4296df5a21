//! The README's first commands, end to end: `corelog quickstart` (static leader and
//! follower, load, cross-check) and `corelog quickstart --failover` (etcd, coordinator
//! mode, the leader SIGKILLed mid-run), each checked by what it prints and its exit code.

mod common;

use std::process::Command;

use common::{skip, BIN};

/// A base port whose quickstart ports (+0, +100, +200, +300, +400, +401, +500, +501)
/// are free now, below the ephemeral range.
fn base_port(salt: u16) -> u16 {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    (0..200u16)
        .map(|i| 11_000 + ((std::process::id() as u16 % 50) * 7 + salt * 3 + i) % 400)
        .find(|&b| [0, 100, 200, 300, 400, 401, 500, 501].iter().all(|d| free(b + d)))
        .expect("no free quickstart port base")
}

fn quickstart(args: &[&str], port: u16) -> (bool, String) {
    let dir = common::TempDir::new(&format!("quickstart_{port}"));
    let o = Command::new(BIN)
        .arg("quickstart")
        .args(args)
        .args(["--port", &port.to_string(), "--dir"])
        .arg(dir.path())
        .output()
        .expect("run corelog quickstart");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.success(), text)
}

#[test]
fn quickstart_runs_a_pair_and_cross_checks_it() {
    let (ok, out) = quickstart(&["--connections", "50", "--seconds", "2"], base_port(0));
    assert!(ok, "{out}");
    assert!(out.contains("quickstart: cross-check OK"), "{out}");
    assert!(out.contains("quickstart: stopped leader") && out.contains("quickstart: stopped follower"), "{out}");
}

#[test]
fn quickstart_failover_kills_the_leader_and_loses_nothing() {
    if !Command::new("etcd").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return skip("quickstart_failover", "etcd not installed: apt-get install etcd-server");
    }
    let (ok, out) = quickstart(&["--failover", "--connections", "100", "--seconds", "4"], base_port(1));
    assert!(ok, "{out}");
    let resumed = out.lines().find(|l| l.starts_with("quickstart: failover: writes resumed after ")).expect(&out);
    assert!(out.contains("quickstart: cross-check OK") && out.contains("rejoined as follower"), "{out}");
    for p in ["etcd", "a", "b"] {
        assert!(out.contains(&format!("quickstart: stopped {p} (pid")), "{p} not stopped:\n{out}");
    }
    eprintln!("{resumed}");
}
