//! A node replaced with an empty data directory, against real processes: a leader with
//! `--catch-up-mb-per-s 2` and a small in-memory ring holds a log of ~12 MB; the
//! follower's data directory is wiped and the follower started empty. The leader catches
//! it up from its segments no faster than the limit, says so in log lines (start, progress
//! with time left, end), on `/health` (`rebuilding`) and in metrics, and so does the
//! follower; the follower killed (-9) half-way, then the leader, the catch-up resumes from
//! the follower's end, not from zero; at the end both logs are identical and every
//! acknowledged append reads back from the new follower.
//!
//! In coordinator mode (etcd), the follower's data directory lost under load: the leader
//! acknowledges alone (degraded), the follower started empty is copied and taken back
//! into the in-sync set, every operation of the recorded history checks out against the
//! leader's log, and the rebuilt follower's log equals the leader's record for record.

mod common;

use std::time::{Duration, Instant};

use common::coord::run_for;
use common::coord_run::cluster_under_load;
use common::pair::{promoted, wait_caught_up, wait_log};
use common::*;
use corelog_client::ClientConfig;

const RATE_MB: f64 = 2.0;

#[test]
fn an_empty_follower_is_rebuilt_from_the_leader_paced_reported_and_resumed() {
    let rate = RATE_MB.to_string();
    let (_dir, mut p) = started_pair_in(
        "rebuild",
        &["--shard-count", "2", "--repl-memory-bytes", "65536", "--catch-up-mb-per-s", &rate],
    );
    let rt = runtime();
    let cfg = ClientConfig::insecure();
    let acked = Acked::default();
    // 8 connections × 600 appends of ~4 KiB: about 20 MB over the two shards, 5 s of
    // catch-up at the limit.
    let errors = rt.block_on(load_sized(&p.leader.addr(), &cfg, 8, 600, "r", 4096, &acked));
    assert_eq!(errors, 0);
    wait_caught_up(&p, Duration::from_secs(30));

    // The disk is lost: the follower comes back empty.
    p.follower.kill9();
    std::fs::remove_dir_all(&p.follower.data).unwrap();
    let started = Instant::now();
    p.follower.start();
    wait_log(&p.leader, "catching the follower up from the segments at offset 0");
    wait_until("rebuilding on /health", Duration::from_secs(10), || {
        p.leader.http("/health").is_ok_and(|h| h.contains("rebuilding"))
    });
    wait_log(&p.leader, "s left");
    assert!(p.leader.metric_sum("corelog_rebuild_remaining_bytes") > 0.0);
    // The follower reports its side too.
    wait_log(&p.follower, "catching up from the leader: at offset");
    wait_until("rebuilding on the follower's /health", Duration::from_secs(10), || {
        p.follower.http("/health").is_ok_and(|h| h.contains("rebuilding"))
    });

    // Killed half-way, it goes on from where its log ends.
    p.follower.kill9();
    let held = std::fs::read_dir(p.follower.data.join("shard-0")).unwrap().count();
    assert!(held > 0, "the follower wrote nothing before the kill");
    p.follower.start();
    let resumed = |n: &Node| {
        n.log_text()
            .lines()
            .filter(|l| {
                l.contains("catching the follower up from the segments at offset") && !l.contains("at offset 0 (")
            })
            .count()
    };
    wait_until("a catch-up resumed above offset 0", Duration::from_secs(20), || resumed(&p.leader) > 0);

    // The leader killed half-way too: restarted, it goes on from the follower's end.
    let before = resumed(&p.leader);
    p.leader.kill9();
    p.leader.start();
    wait_until("the restarted leader resuming above offset 0", Duration::from_secs(20), || resumed(&p.leader) > before);
    wait_log(&p.leader, "follower caught up from the segments");
    wait_caught_up(&p, Duration::from_secs(60));
    wait_log(&p.follower, "caught up with the leader's end when the link was made");
    let took = started.elapsed().as_secs_f64();
    wait_until("rebuilding gone from /health", Duration::from_secs(10), || {
        p.leader.http("/health").is_ok_and(|h| h.contains(" 200") && !h.contains("rebuilding"))
    });
    assert_eq!(p.leader.metric_sum("corelog_rebuild_remaining_bytes"), 0.0);

    // Paced: the restarted leader's catch-ups of a shard took at least what the rate
    // allows for the bytes it sent, less one read's worth each (each starts with a read).
    let shard_bytes: Vec<f64> = (0..2)
        .map(|s| {
            p.leader
                .http("/metrics")
                .unwrap()
                .lines()
                .find(|l| l.starts_with(&format!("corelog_rebuild_bytes_total{{shard=\"{s}\"}}")))
                .and_then(|l| l.split_whitespace().last()?.parse().ok())
                .unwrap_or(0.0)
        })
        .collect();
    let most = shard_bytes.iter().cloned().fold(0.0, f64::max);
    assert!(most > 4e6, "only {most} bytes sent from the segments of a shard: {shard_bytes:?}");
    let log = p.leader.log_text();
    let last_run = log.rsplit("---- start #").next().unwrap();
    let sessions = last_run.matches("catching the follower up from the segments at offset").count() as f64;
    let floor = (most - sessions * 1_048_576.0) / (RATE_MB * 1e6);
    assert!(took >= floor, "caught up in {took:.1} s, faster than {RATE_MB} MB/s allows ({floor:.1} s)");

    let shards: Vec<_> = (0..2).map(|s| rt.block_on(read_all(&p.follower.addr(), &cfg, s))).collect();
    verify_acked(&acked, &shards);
    p.kill_and_compare();
}

/// Retention has deleted the leader's first segments: a follower started empty is seeded
/// with the leader's index snapshot, restarts at the leader's first offset and is caught
/// up from there (paced); killed -9 right after the seed, it comes back at that offset;
/// the leader killed -9 half-way through the catch-up, it goes on from the follower's
/// end. The follower's log then equals the leader's, and taking over, it continues a
/// stream whose first events only the snapshot remembers.
#[test]
fn an_empty_follower_of_a_trimmed_leader_is_seeded_with_its_snapshot_and_caught_up() {
    use corelog_client::codec::{ErrorCode, Expect};
    use corelog_client::Client;
    let dir = TempDir::new("rebuild_seed");
    let rate = RATE_MB.to_string();
    let extra = ["--shard-count", "1", "--repl-memory-bytes", "65536", "--catch-up-mb-per-s", &rate];
    let mut p = started_pair(&dir, None, &extra);
    let rt = runtime();
    let cfg = ClientConfig::insecure();
    let addr = p.leader.addr();
    let c = rt.block_on(Client::connect(&addr, &cfg)).unwrap();
    for s in 0..20 {
        rt.block_on(c.append_to(&format!("early-{s}"), Expect::NoStream, b"first event")).unwrap();
    }
    let acked = Acked::default();
    // About 12 MB of plain records: three 4 MiB segments behind the stream events.
    assert_eq!(rt.block_on(load_sized(&addr, &cfg, 4, 700, "s", 4096, &acked)), 0);
    wait_caught_up(&p, Duration::from_secs(30));
    let first = rt.block_on(c.trim(0, 1_400)).unwrap();
    assert!(first > 20, "the trim kept the first segment (first offset {first})");

    p.follower.kill9();
    std::fs::remove_dir_all(&p.follower.data).unwrap();
    p.follower.spawn();
    wait_log(&p.leader, &format!("seeding it with the index snapshot at {first}"));
    wait_log(&p.follower, &format!("seeded from the leader at offset {first}"));
    // Killed -9 at once: it comes back at `first` (or empty, and is seeded again).
    p.follower.kill9();
    p.follower.start();
    // The leader killed half-way through the catch-up: it goes on from the follower's end.
    wait_until("the restarted follower reporting its catch-up", Duration::from_secs(20), || {
        p.follower.log_text().rsplit("---- start #").next().unwrap().contains("catching up from the leader: at offset")
    });
    p.leader.kill9();
    p.leader.start();
    wait_caught_up(&p, Duration::from_secs(60));
    let log = p.follower.log_text();
    assert!(log.contains(&format!("from offset {first}")), "{log}");

    // Every acknowledged record at or above `first` reads back from the follower.
    let back = rt.block_on(read_from(&p.follower.addr(), &cfg, 0, first));
    assert_eq!(back.first().map(|r| r.offset), Some(first));
    let mut checked = 0;
    for (pos, payload) in acked.lock().unwrap().iter().filter(|(pos, _)| pos.offset >= first) {
        let r = back.get((pos.offset - first) as usize).unwrap_or_else(|| panic!("acked {pos:?} missing"));
        assert_eq!(&r.payload, payload, "acked {pos:?} differs");
        checked += 1;
    }
    assert!(checked > 1000, "only {checked} acknowledged records above the trim");
    p.kill_and_compare();

    // The seeded node takes over: the trimmed streams go on at version 1.
    let mut q = promoted(&p, &extra);
    q.follower.start();
    q.leader.start();
    let c = rt.block_on(Client::connect(&q.leader.addr(), &cfg)).unwrap();
    let e = rt.block_on(c.append_to("early-3", Expect::NoStream, b"again")).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::WrongExpectedVersion), "{e}");
    let next = rt.block_on(c.append_to("early-3", Expect::Exact(0), b"second event"));
    assert_eq!(next.map(|a| a.version).map_err(|e| e.to_string()), Ok(1));
}

#[test]
fn coordinator_mode_a_follower_that_lost_its_disk_is_rebuilt_while_the_leader_acknowledges_alone() {
    let Some((mut c, leader, follower, load)) =
        cluster_under_load("rebuild_coord", "r", 2_000, "before the disk is lost")
    else {
        return;
    };
    c.nodes[follower].kill9();
    std::fs::remove_dir_all(&c.nodes[follower].data).unwrap();
    c.wait_metric(leader, "corelog_degraded", Duration::from_secs(15), |v| v == 1.0);
    run_for(&load, Duration::ZERO, 500, "acknowledged alone while the follower is gone");
    c.rejoin(leader, follower);
    run_for(&load, Duration::ZERO, 200, "after the rebuild");
    let h = load.finish();
    let r = c.verify(leader, &h);
    c.wait_same_log(follower, leader, Duration::from_secs(60));
    let log = c.nodes[follower].log_text();
    assert!(log.rsplit("---- start #").next().unwrap().contains("from offset 0"), "started empty:\n{log}");
    eprintln!("rebuilt in coordinator mode: {} appends acknowledged in all", r.ok);
}
