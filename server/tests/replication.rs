//! Leader → follower replication against real processes: both logs identical, follower
//! crash, leader crash + promotion + fencing + rejoin, large catch-up, refused links.

mod common;

use std::time::{Duration, Instant};

use common::*;
use corelog_client::{Client, ClientConfig, Error, ErrorCode, Position};

#[test]
fn every_acked_write_is_on_both_disks_byte_identical() {
    let (dir, certs) = dir_with_certs("repl-both");
    let p = started_pair(&dir, Some(&certs), &[]);
    let cfg = client_config(Some(&certs));
    let rt = runtime();
    let acked = Acked::default();
    assert_eq!(rt.block_on(load(&p.leader.addr(), &cfg, 40, 250, "r", &acked)), 0);
    // Reads from the follower return the acked records too.
    let shards: Vec<_> = (0..2).map(|s| rt.block_on(read_all(&p.follower.addr(), &cfg, s))).collect();
    verify_acked(&acked, &shards);
    // An append sent to the follower is redirected to the leader by the client.
    let pos = rt
        .block_on(async { Client::connect(&p.follower.addr(), &cfg).await.unwrap().append(b"via follower").await })
        .unwrap();
    acked.lock().unwrap().insert(pos, b"via follower".to_vec());
    let s = p.caught_up_and_compared(Duration::from_secs(10));
    let records: u64 = s.iter().map(|x| x.0).sum();
    assert_eq!(records as usize, acked.lock().unwrap().len(), "records on disk == acked appends");
}

/// A started pair whose acknowledgements time out after 2 s, under a background load
/// (`load_until`) that has had `acks` appends acknowledged.
struct Loaded {
    dir: TempDir,
    p: Pair,
    cfg: ClientConfig,
    rt: tokio::runtime::Runtime,
    acked: Acked,
    loader: tokio::task::JoinHandle<usize>,
}

/// `Loaded`, in a fresh directory `name`, the load's appends tagged `tag`.
fn loaded(name: &str, tag: &str, acks: usize) -> Loaded {
    let (dir, p) = started_pair_in(name, &["--ack-timeout-ms", "2000"]);
    let (cfg, rt, acked) = (client_config(None), runtime(), Acked::default());
    let loader = load_until(&rt, &p.leader.addr(), &cfg, tag, &acked, acks);
    Loaded { dir, p, cfg, rt, acked, loader }
}

#[test]
fn follower_kill9_stops_acks_until_it_is_back_and_caught_up() {
    let Loaded { dir: _dir, mut p, cfg, rt, acked, loader } = loaded("repl-fkill", "f", 2000);
    p.follower.kill9();
    // The follower's log as it died. An append is acknowledged only once the follower
    // has it, so nothing at or past that end may be acknowledged while it is down (acks
    // released before the kill may still land: they are below it). Each connection's
    // append in flight fails with ReplicationTimeout (2 s) and ends its load: once all
    // 20 have, no further ack can come.
    let fend = log_ends(&p.follower.data);
    assert_eq!(rt.block_on(loader).unwrap(), 20, "every connection ends on its timed-out append");
    let late: Vec<Position> =
        acked.lock().unwrap().keys().filter(|p| p.offset >= fend[p.shard as usize]).copied().collect();
    assert!(late.is_empty(), "acknowledged past the stopped follower's end {fend:?}: {late:?}");
    let n_down = acked.lock().unwrap().len();
    p.follower.start();
    // Acks resume once it is back (it catches up first).
    let loader = load_until(&rt, &p.leader.addr(), &cfg, "g", &acked, n_down + 2000);
    p.leader.kill9();
    assert_eq!(rt.block_on(loader).unwrap(), 20);
    p.leader.start();
    wait_caught_up(&p, Duration::from_secs(20));
    let lshards: Vec<_> = (0..2).map(|s| rt.block_on(read_all(&p.leader.addr(), &cfg, s))).collect();
    let fshards: Vec<_> = (0..2).map(|s| rt.block_on(read_all(&p.follower.addr(), &cfg, s))).collect();
    verify_acked(&acked, &lshards);
    verify_acked(&acked, &fshards);
    p.kill_and_compare();
}

#[test]
fn leader_kill9_promote_follower_old_leader_is_fenced_then_rejoins() {
    let Loaded { dir: _dir, mut p, cfg, rt, acked, loader } = loaded("repl-failover", "a", 3000);
    p.leader.kill9();
    rt.block_on(loader).unwrap();
    // Promote the follower (offline) and restart it as leader, pointing at the old one.
    p.follower.kill9();
    let out = promote(&p.follower.data, None);
    // The leader's start made epoch 2 (accepted by the follower); promotion makes 3.
    assert!(out.contains("epoch 3"), "{out}");
    let (old, new) = (p.leader.ports, p.follower.ports);
    let lead_old = Mode::Leader { follower_repl: old.repl };
    let mut new_leader = Node::serving("new-leader", lead_old, &p.follower.data, new, &["--ack-timeout-ms", "2000"]);
    new_leader.start();
    // Every acked write is readable from the new leader.
    let shards: Vec<_> = (0..2).map(|s| rt.block_on(read_all(&new_leader.addr(), &cfg, s))).collect();
    verify_acked(&acked, &shards);
    // The old leader comes back as leader by mistake: it is fenced and refuses appends.
    p.leader.start();
    let deadline = Instant::now() + Duration::from_secs(20);
    let fenced = loop {
        let r = rt.block_on(async { Client::connect(&p.leader.addr(), &cfg).await?.append(b"stale").await });
        match r {
            // A client reads the role in the node's hello and sends nothing to a fenced
            // node (protocol.md §6.3); an older client would be refused with `Fenced`.
            Err(e) if e.code() == Some(ErrorCode::Fenced) => break true,
            Err(Error::Unreachable(m)) if m.contains("is fenced") => break true,
            _ if Instant::now() > deadline => break false,
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    assert!(fenced, "old leader not fenced:\n{}", p.leader.log_text());
    assert!(p.leader.log_text().contains("FENCED"));
    // Restart it as a follower of the new leader: it truncates and catches up.
    p.leader.kill9();
    let follow_new = Mode::Follower { leader_client: new.client };
    let mut old_follower = Node::serving("old-as-follower", follow_new, &p.leader.data, old, &[]);
    old_follower.start();
    let acked_new = Acked::default();
    assert_eq!(rt.block_on(load(&new_leader.addr(), &cfg, 10, 100, "b", &acked_new)), 0);
    let mut pr = Pair { leader: new_leader, follower: old_follower };
    wait_caught_up(&pr, Duration::from_secs(20));
    let fshards: Vec<_> = (0..2).map(|s| rt.block_on(read_all(&pr.follower.addr(), &cfg, s))).collect();
    verify_acked(&acked, &fshards);
    verify_acked(&acked_new, &fshards);
    pr.kill_and_compare();
    drop(p);
}

#[test]
fn a_one_gigabyte_backlog_is_caught_up_and_logs_end_identical() {
    let gib: u64 = std::env::var("CORELOG_BACKLOG_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 30);
    let dir = TempDir::new("repl-backlog");
    let mut p = pair(&dir, None, &["--segment-bytes", &(256u64 << 20).to_string()]);
    // Build the backlog: the leader's data dir written as standalone (no follower).
    let segment_bytes = ["--segment-bytes", &(256u64 << 20).to_string()];
    let mut solo = Node::serving("solo", Mode::Standalone, &p.leader.data, p.leader.ports, &segment_bytes);
    solo.start();
    let rt = runtime();
    let payload = vec![0x42u8; 60 * 1024];
    let per_conn = (gib / payload.len() as u64).div_ceil(8);
    let t = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (addr, payload) = (solo.addr(), payload.clone());
            tasks.push(tokio::spawn(async move {
                let c = Client::connect(&addr, &client_config(None)).await.unwrap();
                for _ in 0..per_conn {
                    c.append(&payload).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    eprintln!("backlog: {} MiB written in {:?}", (8 * per_conn * payload.len() as u64) >> 20, t.elapsed());
    solo.kill9();
    p.follower.start();
    let t = Instant::now();
    p.leader.start();
    wait_caught_up(&p, Duration::from_secs(300));
    eprintln!("backlog: caught up in {:?}", t.elapsed());
    p.leader.kill9();
    p.follower.kill9();
    let s = p.kill_and_compare();
    assert_eq!(s.iter().map(|x| x.0).sum::<u64>(), 8 * per_conn);
}

#[test]
fn replication_links_with_a_wrong_certificate_shard_count_or_lower_epoch_are_refused() {
    let (dir, certs) = dir_with_certs("repl-refuse");
    let (_other, other_certs) = dir_with_certs("repl-refuse-other");
    // Wrong certificate: the leader presents a certificate from another CA.
    let (mut l, mut f) = link(&dir, "1", (Some(&other_certs), &[]), (Some(&certs), &[]));
    f.start();
    l.start();
    wait_log(&f, "TLS handshake failed");
    assert_eq!(f.metric_sum("corelog_committed_offset"), 0.0);
    l.kill9();
    f.kill9();
    // Different shard count.
    let (mut l, mut f) = link(&dir, "2", (None, &["--shard-count", "2"]), (None, &["--shard-count", "1"]));
    f.start();
    l.start();
    wait_log(&f, "does not match ours");
    wait_log(&l, "follower refused");
    l.kill9();
    f.kill9();
    // Lower epoch: the follower has been promoted twice (epoch 3); the leader starts at
    // epoch 2 (its first start bumps the initial 1).
    let (mut l, mut f) = link(&dir, "3", (None, &[]), (None, &[]));
    f.start();
    f.kill9();
    for _ in 0..2 {
        promote(&f.data, None);
    }
    f.start();
    l.start();
    wait_log(&f, "stale epoch 2");
    wait_log(&l, "FENCED");
}

/// A leader "l" (data `l{n}`) and its follower "f" (data `f{n}`) in `dir`, not started,
/// each with its own certificates (`server`, `follower`) and flags.
fn link(dir: &TempDir, n: &str, (lcerts, lextra): Side, (fcerts, fextra): Side) -> (Node, Node) {
    let (lp, fp) = (ports(), ports());
    let (ld, fd) = (dir.path().join(format!("l{n}")), dir.path().join(format!("f{n}")));
    let lead = Mode::Leader { follower_repl: fp.repl };
    let follow = Mode::Follower { leader_client: lp.client };
    (
        Node::new("l", ld.clone(), lp, Node::args(lead, &ld, lp, lcerts, "server", lextra)),
        Node::new("f", fd.clone(), fp, Node::args(follow, &fd, fp, fcerts, "follower", fextra)),
    )
}

/// A node's certificates (if any) and flags.
type Side<'a> = (Option<&'a std::path::Path>, &'a [&'a str]);

/// Appends on `n` without waiting for acknowledgements that cannot come (no follower):
/// the records become durable locally, the clients get ReplicationTimeout.
fn write_unacked(n: &Node, count: usize) {
    let rt = runtime();
    rt.block_on(async {
        let c = Client::connect(&n.addr(), &client_config(None)).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..count {
            let c = c.clone();
            tasks.push(tokio::spawn(async move { c.append(format!("unacked-{i}").as_bytes()).await }));
        }
        for t in tasks {
            let r = t.await.unwrap();
            assert_eq!(r.err().and_then(|e| e.code()), Some(ErrorCode::ReplicationTimeout));
        }
    });
}

#[test]
fn a_follower_with_records_from_an_epoch_the_leader_never_saw_is_cut_back() {
    let dir = TempDir::new("repl-diverge");
    let fast = ["--ack-timeout-ms", "300", "--shard-count", "1"];
    let Pair { leader: mut a, follower: mut b } = started_pair(&dir, None, &fast);
    let ((pa, da), (pb, db)) = ((a.ports, a.data.clone()), (b.ports, b.data.clone()));
    let (lead_a, follow_a) = (Mode::Leader { follower_repl: pb.repl }, Mode::Follower { leader_client: pa.client });
    let rt = runtime();
    let acked = Acked::default();
    assert_eq!(rt.block_on(load(&a.addr(), &client_config(None), 4, 25, "common", &acked)), 0);
    // B stops; A writes more at its epoch 2 that B never gets.
    b.kill9();
    write_unacked(&a, 10);
    a.kill9();
    // B is promoted to epoch 3 and, run alone (standalone, a single copy), writes
    // records at epoch 3 that A never sees. (As a replicated leader it could not: it
    // writes nothing before its follower has accepted its epoch.)
    promote(&db, None);
    let mut b_alone = Node::serving("b-alone", Mode::Standalone, &db, pb, &fast);
    b_alone.start();
    assert_eq!(rt.block_on(load(&b_alone.addr(), &client_config(None), 1, 7, "b-only", &Acked::default())), 0);
    b_alone.kill9();
    // A is promoted above every epoch used (4) and leads; B rejoins as its follower.
    promote(&da, Some("4"));
    let mut a_lead = Node::serving("a-lead", lead_a, &da, pa, &fast);
    let mut b_follow = Node::serving("b-follow", follow_a, &db, pb, &fast);
    b_follow.start();
    a_lead.start();
    assert_eq!(rt.block_on(load(&a_lead.addr(), &client_config(None), 2, 10, "after", &acked)), 0);
    let mut p = Pair { leader: a_lead, follower: b_follow };
    wait_caught_up(&p, Duration::from_secs(20));
    let s = p.kill_and_compare();
    // 100 common + 10 of A's epoch 2 + 20 at epoch 5; B's 7 epoch-3 records are gone.
    assert_eq!(s[0].0, 130, "{s:?}");
    assert!(p.follower.log_text().contains("dropped records"), "{}", p.follower.log_text());
    drop((a, b));
}

/// A frozen peer (SIGSTOP: its kernel still ACKs TCP, so only the application notices)
/// is detected within `--repl-timeout-ms` on both sides: the leader drops the link to a
/// frozen follower, the follower drops the link of a frozen leader; after SIGCONT the
/// link comes back and acknowledgements resume.
#[test]
fn a_frozen_peer_is_detected_within_the_replication_timeout() {
    let dir = TempDir::new("repl-liveness");
    let fast = ["--repl-timeout-ms", "1000", "--handshake-timeout-ms", "1000", "--shard-count", "1"];
    let p = started_pair(&dir, None, &fast);
    let rt = runtime();
    let cfg = client_config(None);
    let acked = Acked::default();
    assert_eq!(rt.block_on(load(&p.leader.addr(), &cfg, 2, 10, "before", &acked)), 0);
    signal(&p.follower, libc::SIGSTOP);
    wait_log(&p.leader, "follower silent for 1s: dropping the link");
    signal(&p.follower, libc::SIGCONT);
    assert_eq!(rt.block_on(load(&p.leader.addr(), &cfg, 2, 10, "after-follower", &acked)), 0);
    signal(&p.leader, libc::SIGSTOP);
    wait_log(&p.follower, "leader silent for 1s: dropping the link");
    signal(&p.leader, libc::SIGCONT);
    assert_eq!(rt.block_on(load(&p.leader.addr(), &cfg, 2, 10, "after-leader", &acked)), 0);
    wait_caught_up(&p, Duration::from_secs(20));
    let shards = vec![rt.block_on(read_all(&p.follower.addr(), &cfg, 0))];
    verify_acked(&acked, &shards);
}

/// Each shard's log end in a stopped node's data directory, by shard id (its record
/// count: nothing was trimmed, the log starts at offset 0).
fn log_ends(data: &std::path::Path) -> Vec<u64> {
    let (code, out) = inspect(data);
    assert_eq!(code, 0, "inspect {}:\n{out}", data.display());
    let ends: Vec<u64> = inspect_summary(&out).iter().map(|s| s.0).collect();
    assert_eq!(ends.len(), 2, "{out}");
    ends
}
