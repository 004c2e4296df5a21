//! The replication handshake decides on facts: deterministic sequences (real processes)
//! in which a follower holds records its leader never wrote, and the leader restarts.
//! Each ends with a promotion of the follower and a read-back of every acknowledged
//! append, byte for byte, plus `corelog inspect --compare` of both data dirs.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use corelog_client::{Client, Position};

/// The sequence of the handshake bug: the follower holds a batch its leader never wrote
/// (shipped before the leader's own write, then the leader died); the leader restarts
/// and receives appends before the follower reconnects; the follower returns late.
/// Every append acknowledged after that must be on the follower at its position.
#[test]
fn a_batch_only_the_follower_has_is_cut_when_a_restarted_leader_takes_appends_first() {
    let dir = TempDir::new("hs-ghost");
    let one = ["--shard-count", "1"];
    let Pair { mut leader, mut follower } = started_pair(&dir, None, &one);
    let (ld, fd, fp) = (leader.data.clone(), follower.data.clone(), follower.ports);
    let rt = runtime();
    let cfg = client_config(None);
    let acked = Acked::default();
    assert_eq!(rt.block_on(load(&leader.addr(), &cfg, 4, 25, "common", &acked)), 0);
    leader.kill9();
    follower.kill9();

    // The follower's disk gets 5 records at offsets 100..105 in the leader's epoch that
    // the leader never wrote: the follower's data dir, run alone as a standalone node.
    let sp = ports();
    let mut ghost = Node::serving("ghost-writer", Mode::Standalone, &fd, sp, &one);
    ghost.start();
    let ghosts = Acked::default();
    assert_eq!(rt.block_on(load(&ghost.addr(), &cfg, 1, 5, "ghost", &ghosts)), 0);
    ghost.kill9();
    let ghost_offsets: Vec<u64> = ghosts.lock().unwrap().keys().map(|p| p.offset).collect();
    assert!(ghost_offsets.iter().all(|o| (100..105).contains(o)), "{ghost_offsets:?}");

    // The leader restarts first; 10 appends arrive while its follower is still away.
    leader.start();
    let early = Acked::default();
    let (addr, cfg2, early2) = (leader.addr(), cfg.clone(), early.clone());
    let pending = rt.spawn(async move {
        let mut tasks = Vec::new();
        for i in 0..10 {
            // One connection each: a connection's appends are taken one after another.
            let c = Client::connect(&addr, &cfg2).await.unwrap();
            let early = early2.clone();
            tasks.push(tokio::spawn(async move {
                let payload = format!("early-{i}").into_bytes();
                let pos = c.append(&payload).await?;
                early.lock().unwrap().insert(pos, payload);
                Ok::<Position, corelog_client::Error>(pos)
            }));
        }
        let mut errors = Vec::new();
        for t in tasks {
            if let Err(e) = t.await.unwrap() {
                errors.push(e.to_string());
            }
        }
        errors
    });
    // The leader has them: written locally (a leader that writes before its follower
    // accepted its epoch) or held until then (one that does not).
    wait_until("the leader to hold or write the 10 early appends", Duration::from_secs(10), || {
        leader.metric_sum("corelog_log_end_offset") >= 110.0 || leader.metric_sum("corelog_appends_held") >= 10.0
    });
    follower.start();
    let errors = rt.block_on(pending).unwrap();
    assert!(errors.is_empty(), "early appends failed: {errors:?}");
    acked.lock().unwrap().extend(early.lock().unwrap().drain());
    assert_eq!(rt.block_on(load(&leader.addr(), &cfg, 2, 10, "late", &acked)), 0);
    leader.kill9();
    follower.kill9();

    promote_and_verify(&fd, fp, &acked);
    let cmp = compare(&ld, &fd);
    assert_eq!(cmp.0, 0, "the two data dirs differ:\n{}", cmp.1);
    assert!(follower.log_text().contains("dropped records 100..105"), "{}", follower.log_text());
}

/// `corelog inspect --compare A B`: (exit code, stdout).
fn compare(a: &Path, b: &Path) -> (i32, String) {
    let o = std::process::Command::new(BIN).args(["inspect", "--compare"]).arg(a).arg(b).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).to_string())
}

/// Promotes the (stopped) follower, starts it as the only node, and reads back every
/// acknowledged append from it, payload for payload.
fn promote_and_verify(data: &Path, p: Ports, acked: &Acked) {
    promote(data, None);
    // As leader with no follower: reads are served up to the inherited history.
    let mut promoted = Node::serving("promoted", Mode::Leader { follower_repl: 1 }, data, p, &["--shard-count", "1"]);
    promoted.start();
    let rt = runtime();
    let shard0 = rt.block_on(read_all(&promoted.addr(), &client_config(None), 0));
    verify_acked(acked, &[shard0]);
    promoted.kill9();
}

/// A leader whose follower has not accepted its epoch writes nothing: appends are
/// answered `Unavailable` after `--ack-timeout-ms`, nothing reaches its log, and once
/// the follower joins the next append gets offset 0 (the offsets were handed out again).
#[test]
fn a_leader_without_an_accepting_follower_writes_nothing_and_answers_unavailable() {
    let dir = TempDir::new("hs-unavailable");
    let extra = ["--shard-count", "1", "--ack-timeout-ms", "300"];
    let Pair { mut leader, mut follower } = pair(&dir, None, &extra);
    leader.start();
    let rt = runtime();
    let cfg = client_config(None);
    let c = rt.block_on(Client::connect(&leader.addr(), &cfg)).unwrap();
    let pending: Vec<_> = (0..5)
        .map(|i| {
            let c = c.clone();
            rt.spawn(async move { c.append(format!("never-{i}").as_bytes()).await })
        })
        .collect();
    for p in pending {
        let e = rt.block_on(p).unwrap().expect_err("no follower accepted the epoch");
        assert_eq!(e.code(), Some(corelog_client::ErrorCode::Unavailable), "{e}");
    }
    assert_eq!(leader.metric_sum("corelog_log_end_offset"), 0.0);
    assert_eq!(leader.metric_sum("corelog_appends_held"), 0.0);
    follower.start();
    let pos = rt.block_on(c.append(b"first")).unwrap();
    assert_eq!(pos.offset, 0);
    leader.kill9();
    follower.kill9();
    let records = rt.block_on(async {
        let mut solo = Node::serving("solo", Mode::Standalone, &follower.data, ports(), &["--shard-count", "1"]);
        solo.start();
        let r = read_all(&solo.addr(), &cfg, 0).await;
        solo.kill9();
        r
    });
    assert_eq!(records.iter().map(|r| r.payload.clone()).collect::<Vec<_>>(), vec![b"first".to_vec()]);
}
