//! Certificate rotation without a restart (net/reload.rs), with a real node: its
//! certificate, key and client CA files are replaced by a new set (a new CA); new
//! connections then need the new set and connections made before keep working; a key
//! that does not match its certificate is refused (the previous set stays); SIGHUP forces
//! a reload and does not stop the node. Replication uses the same reload path: the pair
//! test replaces both nodes' files and a new replication link is made with them.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use corelog_client::Client;

fn copy_set(from: &Path, to: &Path, names: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for n in names {
        for ext in ["pem", "key"] {
            let _ = std::fs::copy(from.join(format!("{n}.{ext}")), to.join(format!("{n}.{ext}")));
        }
    }
    std::fs::copy(from.join("ca.pem"), to.join("ca.pem")).unwrap();
}

/// Polls the node's `corelog_tls_reloads_total{result=…}` until it reaches `n` (10 s).
fn wait_reloads(node: &Node, result: &str, n: f64) {
    let name = format!("corelog_tls_reloads_total{{result=\"{result}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.metric_sum(&name) < n {
        assert!(Instant::now() < deadline, "{name} below {n} after 10 s:\n{}", node.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn replaced_certificate_files_are_used_by_new_connections_without_a_restart() {
    let dir = TempDir::new("tls_reload");
    let (old, new) = (certs(&dir.path().join("old")), certs(&dir.path().join("new")));
    let live = dir.path().join("live");
    copy_set(&old, &live, &["server"]);
    let p = ports();
    let args = Node::args(Mode::Standalone, &dir.path().join("data"), p, Some(&live), "server", &[]);
    let mut node = Node::new("standalone", dir.path().join("data"), p, args);
    node.start();
    let rt = runtime();
    let addr = node.addr();
    let connect = |set: &Path| rt.block_on(Client::connect(&addr, &client_config(Some(set))));
    let before = connect(&old).expect("the old set before the rotation");
    rt.block_on(before.append(b"before")).unwrap();

    copy_set(&new, &live, &["server"]);
    wait_reloads(&node, "ok", 1.0);
    // The counter moves just before the line is written.
    wait_log(&node, "TLS certificates reloaded (files changed)");
    let after = connect(&new).expect("the new set after the rotation");
    rt.block_on(after.append(b"after")).unwrap();
    assert!(connect(&old).and_then(|c| rt.block_on(c.append(b"x"))).is_err(), "the old CA's client still accepted");
    rt.block_on(before.append(b"still open")).expect("a connection made before the rotation keeps working");

    // A key that does not match its certificate: refused, the new set stays in use.
    std::fs::copy(old.join("server.key"), live.join("server.key")).unwrap();
    wait_reloads(&node, "error", 1.0);
    wait_log(&node, "TLS reload refused, keeping the previous certificates");
    rt.block_on(connect(&new).unwrap().append(b"after a refused reload")).unwrap();

    // SIGHUP: an immediate reload attempt (the files are mended first), the node lives on.
    std::fs::copy(new.join("server.key"), live.join("server.key")).unwrap();
    let ok = node.metric_sum("corelog_tls_reloads_total{result=\"ok\"}");
    signal(&node, libc::SIGHUP);
    wait_reloads(&node, "ok", ok + 1.0);
    assert!(node.is_running(), "SIGHUP stopped the node");
    rt.block_on(connect(&new).unwrap().append(b"after SIGHUP")).unwrap();
}

#[test]
fn a_replicated_pair_reconnects_with_rotated_certificates() {
    let dir = TempDir::new("tls_reload_pair");
    let (old, new) = (certs(&dir.path().join("old")), certs(&dir.path().join("new")));
    let live = dir.path().join("live");
    copy_set(&old, &live, &["server", "follower"]);
    let (lp, fp) = (ports(), ports());
    let (ld, fd) = (dir.path().join("leader"), dir.path().join("follower"));
    let fargs = Node::args(Mode::Follower { leader_client: lp.client }, &fd, fp, Some(&live), "follower", &[]);
    let largs = Node::args(Mode::Leader { follower_repl: fp.repl }, &ld, lp, Some(&live), "server", &[]);
    let (mut follower, mut leader) = (Node::new("follower", fd, fp, fargs), Node::new("leader", ld, lp, largs));
    follower.start();
    leader.start();
    let rt = runtime();
    let c = rt.block_on(Client::connect(&leader.addr(), &client_config(Some(&old)))).unwrap();
    rt.block_on(c.append(b"old")).unwrap();
    // Both nodes' files replaced by the new CA's set; both reload.
    copy_set(&new, &live, &["server", "follower"]);
    wait_reloads(&leader, "ok", 1.0);
    wait_reloads(&follower, "ok", 1.0);
    // Restarting the follower breaks the link: the leader dials again with the new set,
    // and the follower accepts it with the new CA (an old-set link would be refused).
    follower.kill9();
    follower.start();
    let c = rt.block_on(Client::connect(&leader.addr(), &client_config(Some(&new)))).unwrap();
    rt.block_on(c.append(b"new")).expect("acknowledged (both fsyncs) over links made with the new certificates");
}
