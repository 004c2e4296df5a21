//! A rolling upgrade, and the downgrade back, of a coordinator-mode pair (etcd) under a
//! recorded load (issue 33, docs/operations.md §15). Both nodes start on the previous
//! release's binary (`.ci/old-binary`: the pinned tree, built from its vendored sources);
//! one node at a time is stopped with SIGTERM and started on the other binary: the
//! follower is upgraded, leadership moves to it (the leader's stop: the upgraded follower
//! takes the term), the former leader is upgraded; then the same back to the old binary.
//! This tree's client appends throughout (it falls back to protocol version 2 on the old
//! nodes). At the end every acknowledged append reads back at its position with its
//! payload, no failed one is in the log, epochs are in order (and Porcupine, where `go`
//! is), and the two logs are identical (`corelog inspect`).
//!
//! The old binary: `CORELOG_OLD_BIN`, else `target/old/<PINNED>/bin/corelog`. Where
//! neither exists the test prints SKIP (a failure in CI, where .ci/test builds it).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::coord::{cluster_on, epoch, health, Cluster};
use common::pair::assert_same_logs;

/// The pinned tree of `.ci/old-binary` (its `PINNED=` line).
fn pinned() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/old-binary");
    let text = std::fs::read_to_string(&script).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    let line = text.lines().find_map(|l| l.strip_prefix("PINNED="));
    line.expect("a PINNED= line in .ci/old-binary").trim().to_string()
}

fn old_binary(test: &str) -> Option<String> {
    let path = match std::env::var_os("CORELOG_OLD_BIN") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../target/old/{}/bin/corelog", pinned())),
    };
    if path.exists() {
        return Some(path.display().to_string());
    }
    let why = format!("no previous release's binary at {} (build it: .ci/old-binary)", path.display());
    common::skip(test, &why);
    None
}

/// Stops node `i` with SIGTERM (its graceful shutdown: what it took is answered) and
/// starts it on `program`.
fn restart_on(c: &mut Cluster, i: usize, program: &str) {
    common::signal(&c.nodes[i], libc::SIGTERM);
    let code = c.nodes[i].wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{} did not stop cleanly:\n{}", c.nodes[i].name, c.logs());
    c.nodes[i].program = program.into();
    c.nodes[i].spawn();
}

#[test]
fn a_coordinator_pair_is_upgraded_and_downgraded_one_node_at_a_time_under_load() {
    let test = "rolling_upgrade";
    let Some(old) = old_binary(test) else { return };
    let new = common::BIN.to_string();
    // The old binary is the previous release, not this tree's under another name.
    let help = |bin: &str| {
        String::from_utf8_lossy(&std::process::Command::new(bin).args(["serve", "--help"]).output().unwrap().stdout)
            .into_owned()
    };
    assert!(
        !help(&old).contains("--authz") && help(&new).contains("--authz"),
        "{old} is not the pinned older tree's binary"
    );
    let Some(mut c) = cluster_on(test, &old) else { return };
    let mut leader = c.wait_pair(Duration::from_secs(60));
    let load = c.load_of("rust", "upgrade", 16);
    load.run_for(Duration::from_secs(1), 200, "both nodes on the old binary");
    // (the node restarted, by its role then; the binary it is started on)
    let steps = [("follower", &new), ("leader", &new), ("follower", &old), ("leader", &old)];
    for (role, program) in steps {
        let e = epoch(&health(&c.nodes[leader]));
        let i = if role == "leader" { leader } else { 1 - leader };
        eprintln!("upgrade: {role} {} ({}) → {program}", c.nodes[i].name, c.nodes[i].program);
        restart_on(&mut c, i, program);
        leader = if role == "leader" {
            // The follower takes the term; the stopped leader rejoins as its follower.
            let now = c.wait_pair_in(Duration::from_secs(60), |n| n > e);
            assert_eq!(now, 1 - i, "the follower did not take over from the stopped leader");
            now
        } else {
            let now = c.wait_pair_in(Duration::from_secs(60), |n| n == e);
            assert_eq!(now, leader, "the leader changed while its follower restarted");
            now
        };
        load.run_for(Duration::from_secs(1), 200, &format!("after the {role}'s restart on {program}"));
    }
    let h = load.finish();
    let leader = c.wait_pair(Duration::from_secs(60));
    let r = c.verify(leader, &h);
    assert!(r.ok >= 1000, "too few acknowledged appends to say anything: {r}");
    c.wait_same_log(1 - leader, leader, Duration::from_secs(30));
    for i in [1 - leader, leader] {
        common::signal(&c.nodes[i], libc::SIGTERM);
        assert_eq!(c.nodes[i].wait_exit(Duration::from_secs(30)), Some(0), "{}", c.logs());
    }
    let shards = assert_same_logs(&c.nodes[0].data, &c.nodes[1].data);
    eprintln!("rolling upgrade and downgrade: {r}; both logs identical: {shards:?}");
}
