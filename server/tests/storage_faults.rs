//! Damage to the last batch of a stopped node's log, against real processes. A batch
//! written whole and changed afterwards may have been acknowledged: a standalone node
//! (or a static leader) refuses to start and names it, `corelog admin accept-loss` is the
//! explicit way to give it up, and a follower cuts it and fetches it again from its
//! leader (marked needs-repair until it has). A torn write (never acknowledged) is cut:
//! durability.rs. The device-level faults (EIO, ENOSPC, dropped writes) run in the VM:
//! tests/vm/.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use corelog_client::Client;

const BIN: &str = env!("CARGO_BIN_EXE_corelog");

/// One append at a time: one batch each. Returns the payloads, checking each offset.
fn append_each(addr: &str, first: u64, n: usize, tag: &str) -> Vec<Vec<u8>> {
    runtime().block_on(async {
        let c = Client::connect(addr, &client_config(None)).await.unwrap();
        let mut v = Vec::new();
        for i in 0..n {
            let p = format!("{tag}-{i}-{}", "x".repeat(40)).into_bytes();
            assert_eq!(c.append(&p).await.unwrap().offset, first + i as u64);
            v.push(p);
        }
        v
    })
}

fn segment0(data: &Path) -> PathBuf {
    data.join("shard-0").join(format!("{:020}.log", 0))
}

/// The segment holding the last batch of the first shard (in shard order) that wrote
/// any: a load bounded by time, not count, may roll past segment 0 (the faster the node,
/// the sooner), and a load's connections all land on one shard when their SYNs were all
/// sent from one CPU (SO_INCOMING_CPU placement; CI once saw shard 0 get none).
fn last_segment(data: &Path) -> PathBuf {
    let mut shards: Vec<PathBuf> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("shard-")))
        .collect();
    shards.sort();
    for shard in shards {
        let mut segs: Vec<PathBuf> = std::fs::read_dir(&shard)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        segs.sort();
        if let Some(seg) = segs.into_iter().rev().find(|s| batch_at_end(s).is_some()) {
            return seg;
        }
    }
    panic!("no shard of {} holds a batch", data.display())
}

/// Byte position of the last batch in a segment (batches start on 4 KiB blocks).
fn batch_at_end(seg: &Path) -> Option<u64> {
    let bytes = std::fs::read(seg).unwrap();
    (0..bytes.len() / 4096).rev().map(|b| b * 4096).find(|p| bytes[*p..*p + 4] == *b"CLGB").map(|p| p as u64)
}

fn last_batch(seg: &Path) -> u64 {
    batch_at_end(seg).unwrap_or_else(|| panic!("no batch in {}", seg.display()))
}

#[derive(Clone, Copy, Debug)]
enum Harm {
    /// One bit of a record (its payload) flipped.
    RecordBit,
    /// The batch header's record count changed.
    HeaderCount,
    /// The file cut inside the batch header.
    Cut,
}

fn harm(seg: &Path, pos: u64, how: Harm) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(seg).unwrap();
    match how {
        Harm::RecordBit => {
            let mut b = [0u8; 1];
            f.read_exact_at(&mut b, pos + 60).unwrap();
            f.write_all_at(&[b[0] ^ 0x08], pos + 60).unwrap();
        }
        Harm::HeaderCount => f.write_all_at(&[9], pos + 16).unwrap(),
        Harm::Cut => f.set_len(pos + 20).unwrap(),
    }
}

fn admin_accept_loss(data: &Path) -> (bool, String) {
    let o = Command::new(BIN).args(["admin", "accept-loss", "--shard", "0", "--data-dir"]).arg(data).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.success(), text)
}

#[test]
fn damage_to_the_last_acknowledged_batch_is_refused_never_cut_silently() {
    for how in [Harm::RecordBit, Harm::HeaderCount, Harm::Cut] {
        let dir = TempDir::new("damage-solo");
        let data = dir.path().join("data");
        let mut node = Node::standalone("standalone", &data, None, &["--shard-count", "1"]).started();
        let payloads = append_each(&node.addr(), 0, 5, "acked");
        node.kill9();
        let seg = last_segment(&data);
        let pos = last_batch(&seg);
        harm(&seg, pos, how);

        let (code, out) = inspect(&data);
        assert_eq!(code, 2, "{how:?}: inspect must call it damage, not a torn tail: {out}");
        assert!(out.contains("DAMAGED") && out.contains(&format!("byte offset {pos}")), "{how:?}: {out}");
        assert!(out.contains("offsets 4") || out.contains("offsets from 4"), "{how:?}: {out}");

        node.spawn();
        let exit = node.wait_exit(Duration::from_secs(30));
        let log = node.log_text();
        assert!(exit.is_some() && exit != Some(0), "{how:?}: a node with damaged acknowledged data started:\n{log}");
        assert!(log.contains("refusing to start") && log.contains("admin accept-loss"), "{how:?}: {log}");
        assert!(!log.contains("truncated torn tail"), "{how:?}: {log}");
        // Still refused on a second try: nothing was cut meanwhile.
        node.spawn();
        assert!(node.wait_exit(Duration::from_secs(30)).is_some_and(|c| c != 0), "{how:?}");
        let (code, out) = inspect(&data);
        assert_eq!(code, 2, "{how:?}: {out}");
        println!("{how:?}: refused twice, inspect says: {}", out.lines().find(|l| l.contains("DAMAGED")).unwrap());

        // The operator gives the batch up explicitly; the node then serves the rest.
        let (ok, said) = admin_accept_loss(&data);
        assert!(ok && said.contains("handed out again"), "{how:?}: {said}");
        assert_eq!(inspect(&data).0, 0, "{how:?}");
        node.start();
        let recs = runtime().block_on(read_all(&node.addr(), &client_config(None), 0));
        assert_eq!(recs.len(), 4, "{how:?}");
        for (r, p) in recs.iter().zip(&payloads) {
            assert_eq!(&r.payload, p, "{how:?}");
        }
        append_each(&node.addr(), 4, 1, "after");
        node.kill9();
        let (ok, said) = admin_accept_loss(&data);
        assert!(!ok && said.contains("nothing to accept"), "{said}");
    }
}

#[test]
fn a_follower_with_a_damaged_last_batch_fetches_it_again_from_its_leader() {
    for how in [Harm::RecordBit, Harm::HeaderCount] {
        let (_dir, mut p) = started_pair_in("damage-follower", &["--shard-count", "1"]);
        let mut payloads = append_each(&p.leader.addr(), 0, 20, "acked");
        wait_caught_up(&p, Duration::from_secs(20));
        p.follower.kill9();
        let seg = last_segment(&p.follower.data);
        let pos = last_batch(&seg);
        harm(&seg, pos, how);
        assert_eq!(inspect(&p.follower.data).0, 2, "{how:?}");

        p.follower.start();
        wait_log(&p.follower, "fetched again from the leader");
        wait_log(&p.follower, "repaired:");
        payloads.extend(append_each(&p.leader.addr(), 20, 5, "later"));
        wait_caught_up(&p, Duration::from_secs(20));
        let recs = runtime().block_on(read_all(&p.leader.addr(), &client_config(None), 0));
        assert_eq!(recs.iter().map(|r| r.payload.clone()).collect::<Vec<_>>(), payloads, "{how:?}");
        // Both inspect clean (the mark is gone) and hold the same records.
        let same = p.kill_and_compare();
        println!("{how:?}: follower repaired from its leader: {same:?}");
    }
}

#[test]
fn a_leader_with_a_damaged_last_batch_refuses_and_is_repaired_from_its_follower() {
    let (_dir, mut p) = started_pair_in("damage-leader", &["--shard-count", "1"]);
    let payloads = append_each(&p.leader.addr(), 0, 20, "acked");
    wait_caught_up(&p, Duration::from_secs(20));
    p.leader.kill9();
    p.follower.kill9();
    let seg = last_segment(&p.leader.data);
    harm(&seg, last_batch(&seg), Harm::RecordBit);

    p.leader.spawn();
    assert!(p.leader.wait_exit(Duration::from_secs(30)).is_some_and(|c| c != 0), "{}", p.leader.log_text());
    let log = p.leader.log_text();
    assert!(log.contains("refusing to start") && log.contains("admin promote"), "{log}");

    // What the message says: promote the follower, the damaged node follows it.
    let Pair { mut leader, mut follower } = promoted(&p, &["--shard-count", "1"]);
    follower.start();
    leader.start();
    wait_log(&follower, "fetched again from the leader");
    wait_log(&follower, "repaired:");
    let recs = runtime().block_on(read_all(&leader.addr(), &client_config(None), 0));
    assert_eq!(recs.iter().map(|r| r.payload.clone()).collect::<Vec<_>>(), payloads);
    append_each(&leader.addr(), 20, 3, "later");
    Pair { leader, follower }.caught_up_and_compared(Duration::from_secs(20));
    drop(p);
}

#[test]
fn a_marked_shard_does_not_lead_until_it_has_caught_up() {
    // A follower cut its damaged batch and was stopped before it caught up: the mark
    // keeps it from starting as leader or standalone.
    let (_dir, mut p) = started_pair_in("damage-mark", &["--shard-count", "1"]);
    append_each(&p.leader.addr(), 0, 5, "acked");
    wait_caught_up(&p, Duration::from_secs(20));
    p.leader.kill9();
    p.follower.kill9();
    let seg = last_segment(&p.follower.data);
    harm(&seg, last_batch(&seg), Harm::RecordBit);
    p.follower.start(); // no leader: it cuts, marks, and waits
    wait_log(&p.follower, "fetched again from the leader");
    p.follower.kill9();
    let (code, out) = inspect(&p.follower.data);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("NEEDS REPAIR") && out.contains("from offset 4"), "{out}");
    let (fd, fp) = (&p.follower.data, p.follower.ports);
    let mut solo = Node::serving("marked-standalone", Mode::Standalone, fd, fp, &["--shard-count", "1"]);
    solo.spawn();
    assert!(solo.wait_exit(Duration::from_secs(30)).is_some_and(|c| c != 0), "{}", solo.log_text());
    assert!(solo.log_text().contains("marked needs-repair"), "{}", solo.log_text());
    // Following its leader again clears the mark.
    p.leader.start();
    p.follower.start();
    wait_log(&p.follower, "repaired:");
    wait_caught_up(&p, Duration::from_secs(20));
    p.kill_and_compare();
}

#[test]
fn coordinator_a_damaged_leader_does_not_lead_and_is_repaired_by_its_peer() {
    let Some((mut c, leader, other, load)) =
        common::coord_run::cluster_under_load("damage_coordinator", "d", 2_000, "before the stop")
    else {
        return;
    };
    let h = load.finish();
    c.nodes[leader].kill9();
    c.nodes[other].kill9();
    let seg = last_segment(&c.nodes[leader].data);
    let pos = last_batch(&seg);
    harm(&seg, pos, Harm::RecordBit);
    assert_eq!(inspect(&c.nodes[leader].data).0, 2);

    // Both back, the damaged one first: it must not lead with the batch cut.
    c.nodes[leader].spawn();
    c.nodes[other].spawn();
    assert_eq!(c.wait_pair(Duration::from_secs(60)), other, "the damaged node leads:\n{}", c.logs());
    wait_log(&c.nodes[leader], "fetched again from the leader");
    wait_log(&c.nodes[leader], "repaired:");
    let log = c.nodes[leader].log_text();
    assert!(log.contains("cannot lead") || log.contains("marked needs-repair"), "{log}");
    let r = c.verify(other, &h);
    c.wait_same_log(leader, other, Duration::from_secs(60));
    let path: Vec<&str> = log
        .lines()
        .filter(|l| {
            ["damaged", "re-executing", "needs-repair", "repaired", "following", "leading"]
                .iter()
                .any(|k| l.contains(k))
        })
        .collect();
    println!(
        "coordinator: damaged leader at byte {pos} of {} repaired from its peer; {} acknowledged appends read back; its log:\n{}",
        seg.display(),
        r.ok,
        path.join("\n")
    );
}

#[test]
fn a_leader_that_lost_durable_writes_cannot_cut_them_from_its_follower() {
    let (_dir, mut p) = started_pair_in("lost-writes", &["--shard-count", "1"]);
    let payloads = append_each(&p.leader.addr(), 0, 30, "acked");
    wait_caught_up(&p, Duration::from_secs(20));
    // The follower persists what the leader had made durable (at most once a second).
    let floor_file = p.follower.data.join("shard-0").join("leader-floor");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&floor_file).ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0) < 29 {
        assert!(std::time::Instant::now() < deadline, "no leader floor ≥ 29 in {}", floor_file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    p.leader.kill9();
    p.follower.kill9();
    // The leader's device dropped the last five acknowledged batches: they read as zeros,
    // which no single node can tell from a log that simply ends there.
    let seg = segment0(&p.leader.data);
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.write_all_at(&vec![0u8; 5 * 4096], 25 * 4096).unwrap();
    drop(f);
    let (code, out) = inspect(&p.leader.data);
    assert!(code == 0 && out.contains("records 25 "), "{out}");

    p.follower.start();
    p.leader.start();
    wait_log(&p.follower, "LOST WRITES: the leader's log ends at offset 25");
    let r =
        runtime().block_on(async { Client::connect(&p.leader.addr(), &client_config(None)).await?.append(b"x").await });
    assert!(r.is_err(), "the leader acknowledged an append over a refused link: {r:?}");
    wait_log(&p.leader, "FENCED");
    p.leader.kill9();
    p.follower.kill9();
    assert!(inspect(&p.follower.data).1.contains("records 30 "), "the follower's copy was cut");
    // The lossy node is marked: it refuses to lead again before it has the records back.
    assert!(inspect(&p.leader.data).1.contains("NEEDS REPAIR: may lack acknowledged records from offset 25"));
    p.leader.spawn();
    assert!(p.leader.wait_exit(Duration::from_secs(30)).is_some_and(|c| c != 0), "{}", p.leader.log_text());

    // The way out the message names: promote the follower, the other follows it.
    let Pair { mut leader, mut follower } = promoted(&p, &["--shard-count", "1"]);
    follower.start();
    leader.start();
    wait_log(&follower, "repaired:");
    append_each(&leader.addr(), 30, 2, "later");
    let recs = runtime().block_on(read_all(&leader.addr(), &client_config(None), 0));
    assert_eq!(recs[..30].iter().map(|r| r.payload.clone()).collect::<Vec<_>>(), payloads);
    Pair { leader, follower }.caught_up_and_compared(Duration::from_secs(20));
    drop(p);
}

/// `last_segment` finds the batch on whichever shard wrote one: here shard 0 has only a
/// zeroed segment (all of a load's connections went to shard 1, as CI once saw).
#[test]
fn the_damage_target_is_on_the_shard_that_wrote() {
    let dir = TempDir::new("last-segment");
    let data = dir.path();
    for s in ["shard-0", "shard-1"] {
        std::fs::create_dir_all(data.join(s)).unwrap();
    }
    std::fs::write(segment0(data), vec![0u8; 3 * 4096]).unwrap();
    let mut seg = vec![0u8; 3 * 4096];
    seg[4096..4100].copy_from_slice(b"CLGB");
    let written = data.join("shard-1").join(format!("{:020}.log", 0));
    std::fs::write(&written, &seg).unwrap();
    std::fs::write(data.join("shard-1").join(format!("{:020}.log", 7)), vec![0u8; 3 * 4096]).unwrap();
    assert_eq!(last_segment(data), written);
    assert_eq!(last_batch(&written), 4096);
}
