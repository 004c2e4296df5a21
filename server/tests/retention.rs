//! Retention (`--retain-bytes`, `admin trim`) against real processes:
//!
//! - a leader + follower with 4 MiB segments and `--retain-bytes` under a load of plain
//!   and stream appends: both nodes delete segments while the load runs; reads below a
//!   node's first offset get `OutOfRange` with it; every acknowledged record above it
//!   reads back at its position with its payload, and every stream from its first
//!   version held with its versions in line; after kill -9 of the leader, then of the
//!   follower, both recover the trimmed logs (stream versions go on from where they
//!   were) and `corelog inspect` understands the trimmed directories;
//! - `admin trim` on both nodes; a leader never deletes what its follower (stopped) has
//!   not confirmed, so the follower catches up after it; tails and prefix subscriptions
//!   below the first offset get `OutOfRange`; a retried idempotent append whose record
//!   was deleted is still answered with its original position, also after kill -9.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::pair::{wait_caught_up, Pair};
use common::*;
use corelog_client::{Client, ClientConfig, Error, Expect, Position, Record};

const SEGMENT: u64 = 4 << 20;
const STREAMS: usize = 24;

/// The node's first offset of `shard`: from the `OutOfRange` a read at 0 gets (0 if the
/// read succeeds).
fn first_offset(rt: &tokio::runtime::Runtime, addr: &str, shard: u16) -> u64 {
    rt.block_on(async {
        let c = Client::connect_shard(addr, shard, &ClientConfig::insecure()).await.unwrap();
        match c.read(shard, 0, 4096).await {
            Ok(_) => 0,
            Err(Error::OutOfRange { first, message }) => {
                assert!(message.contains("deleted by retention"), "{message}");
                first
            }
            Err(e) => panic!("read shard {shard} at 0: {e}"),
        }
    })
}

/// Every record of `shard` from `first` on, gap-free.
fn read_from(rt: &tokio::runtime::Runtime, addr: &str, shard: u16, first: u64) -> Vec<Record> {
    rt.block_on(async {
        let c = Client::connect_shard(addr, shard, &ClientConfig::insecure()).await.unwrap();
        let mut out: Vec<Record> = Vec::new();
        loop {
            let at = first + out.len() as u64;
            let recs = c.read(shard, at, 1 << 20).await.unwrap();
            if recs.is_empty() {
                return out;
            }
            for r in recs {
                assert_eq!(r.offset, first + out.len() as u64, "gap in shard {shard}");
                out.push(r);
            }
        }
    })
}

/// Checks one node: per shard, reads below the first offset are `OutOfRange`, every
/// acknowledged record at or above it is there with its payload (and stream version);
/// every stream reads back from its first version held, versions in line, each event
/// the one acknowledged. Returns (records deleted, records checked).
fn check_node(rt: &tokio::runtime::Runtime, addr: &str, told: &Told) -> (usize, usize) {
    let told = told.lock().unwrap();
    let (mut below, mut checked) = (0, 0);
    let mut firsts = [0u64; 2];
    for shard in 0..2u16 {
        let first = first_offset(rt, addr, shard);
        firsts[shard as usize] = first;
        let recs = read_from(rt, addr, shard, first);
        for (pos, (payload, s)) in told.iter().filter(|(p, _)| p.shard == shard) {
            if pos.offset < first {
                below += 1;
                continue;
            }
            let r = recs
                .get((pos.offset - first) as usize)
                .unwrap_or_else(|| panic!("{addr}: acknowledged {pos:?} missing above the first offset {first}"));
            assert_eq!(&r.payload, payload, "{addr}: payload at {pos:?}");
            assert_eq!(r.stream.as_ref().map(|v| (v.name.clone(), v.version)), *s, "{addr}: stream at {pos:?}");
            checked += 1;
        }
    }
    // Streams: from the first version held on, each acknowledged event in its place.
    let mut by_stream: HashMap<String, HashMap<u64, (Position, &Vec<u8>)>> = HashMap::new();
    for (pos, (payload, s)) in told.iter() {
        if let Some((name, v)) = s {
            by_stream.entry(name.clone()).or_default().insert(*v, (*pos, payload));
        }
    }
    rt.block_on(async {
        let c = Client::connect(addr, &ClientConfig::insecure()).await.unwrap();
        for (name, events) in &by_stream {
            let first = match c.read_stream(name, 0, 1).await {
                Ok(r) => {
                    assert_eq!(r.events.first().map(|e| e.offset), events.get(&0).map(|e| e.0.offset), "{name} v0");
                    0
                }
                Err(Error::OutOfRange { first, .. }) => first,
                Err(e) => panic!("{addr}: read_stream {name}: {e}"),
            };
            let mut v = first;
            loop {
                let r = c.read_stream(name, v, 1000).await.unwrap();
                for e in &r.events {
                    let sv = e.stream.as_ref().expect("a stream event").version;
                    assert_eq!(sv, v, "{addr}: {name}: versions in line");
                    let (pos, payload) = events.get(&v).unwrap_or_else(|| panic!("{name} v{v} never acknowledged"));
                    assert_eq!((e.offset, &e.payload), (pos.offset, *payload), "{addr}: {name} v{v}");
                    assert!(e.offset >= firsts[pos.shard as usize], "a deleted event was read");
                    v += 1;
                }
                if r.events.is_empty() || r.next_version >= r.end_version {
                    break;
                }
            }
            let last = events.keys().max().copied().unwrap();
            assert_eq!(v, last + 1, "{addr}: {name} read up to its last acknowledged version");
        }
    });
    (below, checked)
}

fn segments(data: &std::path::Path) -> usize {
    (0..2)
        .map(|s| {
            std::fs::read_dir(data.join(format!("shard-{s}")))
                .map(|d| d.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".log")).count())
                .unwrap_or(0)
        })
        .sum()
}

fn compare(p: &Pair) -> String {
    let o =
        Command::new(BIN).args(["inspect", "--compare"]).arg(&p.leader.data).arg(&p.follower.data).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "inspect --compare:\n{out}");
    out
}

fn assert_inspect_trimmed(data: &std::path::Path) {
    let (code, out) = inspect(data);
    assert_eq!(code, 0, "inspect {}:\n{out}", data.display());
    assert!(out.contains("trimmed: offsets below"), "inspect does not report the trim:\n{out}");
}

#[test]
fn retention_deletes_segments_on_both_nodes_under_load_and_restarts_recover() {
    let retain = (3 * SEGMENT).to_string();
    let (_dir, mut p) = started_pair_in("retention-load", &["--shard-count", "2", "--retain-bytes", &retain]);
    let rt = runtime();
    let told: Told = Default::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = stream_load(&rt, &p.leader.addr(), 16, STREAMS, &told, &stop);
    // Bounded: both nodes must have deleted segments of both shards while appends go on.
    let deadline = Instant::now() + Duration::from_secs(120);
    let trimmed = |n: &Node| n.metric_sum("corelog_trimmed_segments_total");
    while trimmed(&p.leader) < 4.0 || trimmed(&p.follower) < 4.0 {
        assert!(
            Instant::now() < deadline,
            "no trims within 120 s:\n{}\n{}",
            p.leader.log_text(),
            p.follower.log_text()
        );
        assert!(load.iter().all(|h| !h.is_finished()), "the load stopped");
        // Bounded on disk while it runs: the retained bytes, the segment being written,
        // and what the second-long check interval lets pile up.
        assert!(segments(&p.leader.data) <= 2 * 8, "leader holds {} segments", segments(&p.leader.data));
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in load {
        rt.block_on(h).unwrap();
    }
    wait_caught_up(&p, Duration::from_secs(30));
    // Once caught up, each node trims down to its setting (3 segments per shard) within
    // a few checks, then nothing changes while no append comes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while segments(&p.leader.data) > 6 || segments(&p.follower.data) > 6 {
        assert!(Instant::now() < deadline, "retention did not settle at 3 segments per shard");
        std::thread::sleep(Duration::from_millis(50));
    }
    let n = told.lock().unwrap().len();
    let (below, checked) = check_node(&rt, &p.leader.addr(), &told);
    assert!(below > 0 && checked > 0, "below {below}, checked {checked} of {n}");
    let (fbelow, fchecked) = check_node(&rt, &p.follower.addr(), &told);
    assert!(fbelow > 0 && fchecked > 0);
    eprintln!(
        "{n} appends acknowledged; leader: {below} deleted, {checked} read back; follower: {fbelow} / {fchecked}"
    );
    compare(&p);

    // kill -9 and restart, leader first, then the follower: both recover the trimmed
    // logs; stream versions go on from where they were.
    p.leader.kill9();
    assert_inspect_trimmed(&p.leader.data);
    p.leader.start();
    // A restarted leader shows readers only what its follower confirmed again (it
    // cannot tell acknowledged records from an unreplicated suffix): reads wait for
    // the follower to rejoin.
    wait_caught_up(&p, Duration::from_secs(30));
    check_node(&rt, &p.leader.addr(), &told);
    p.follower.kill9();
    assert_inspect_trimmed(&p.follower.data);
    p.follower.start();
    let (name, last) = {
        let t = told.lock().unwrap();
        t.values().filter_map(|(_, s)| s.clone()).max_by_key(|s| s.1).unwrap()
    };
    let a = rt
        .block_on(async {
            let c = Client::connect(&p.leader.addr(), &ClientConfig::insecure()).await?;
            c.append_to(&name, Expect::Exact(last), b"after the restarts").await
        })
        .unwrap();
    assert_eq!(a.version, last + 1, "{name}: the version after {last}");
    told.lock().unwrap().insert(a.position, (b"after the restarts".to_vec(), Some((name, a.version))));
    wait_caught_up(&p, Duration::from_secs(30));
    check_node(&rt, &p.follower.addr(), &told);
    compare(&p);
    p.leader.kill9();
    p.follower.kill9();
}

fn corelog(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(BIN).args(args).output().unwrap();
    (o.status.success(), String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string())
}

/// Appends `n` 4 KiB payloads to shard 0 of `addr` (its direct port).
fn fill(rt: &tokio::runtime::Runtime, addr: &str, n: usize) -> Vec<Position> {
    rt.block_on(async {
        let c = Client::connect_shard(addr, 0, &ClientConfig::insecure()).await.unwrap();
        let mut out = Vec::new();
        for i in 0..n {
            let payload = vec![b'0' + (i % 10) as u8; 4096];
            out.push(c.append(&payload).await.unwrap());
        }
        out
    })
}

#[test]
fn admin_trim_keeps_what_the_follower_needs_and_answers_out_of_range() {
    let (_dir, mut p) = started_pair_in("retention-admin", &["--shard-count", "2"]);
    let rt = runtime();
    let (l, f) = (p.leader.addr(), p.follower.addr());
    // An idempotent append to shard 0 (its direct port), answered again after its
    // record is deleted.
    let idem = ["append", "--insecure", "--addr", &l, "--shard", "0", "--producer", "0x5eed", "--seq", "0", "x"];
    let (ok, first_answer, err) = corelog(&idem);
    assert!(ok && first_answer.starts_with("0 0"), "{first_answer}{err}");
    let positions = fill(&rt, &l, 3000); // ~12 MiB of blocks: three segments and more
    assert!(positions.iter().all(|p| p.shard == 0));
    wait_caught_up(&p, Duration::from_secs(30));
    let both = format!("{l},{f}");
    let before = positions[2500].offset.to_string();
    let (ok, out, err) =
        corelog(&["admin", "trim", "--insecure", "--addr", &both, "--shard", "0", "--before", &before]);
    assert!(ok, "admin trim: {out}{err}");
    let firsts: Vec<u64> = out.lines().map(|l| l.rsplit(' ').next().unwrap().parse().unwrap()).collect();
    assert_eq!(firsts.len(), 2, "{out}");
    for (addr, first) in [(&l, firsts[0]), (&f, firsts[1])] {
        assert!(first > 0 && first <= positions[2500].offset, "{addr}: first {first}");
        assert_eq!(first_offset(&rt, addr, 0), first);
    }
    // Below the first offset: OutOfRange for reads, tails and prefix subscriptions.
    let (ok, _, err) = corelog(&["read", "--insecure", "--addr", &l, "--shard", "0", "--from", "0"]);
    assert!(!ok && err.contains("OutOfRange") && err.contains(&format!("first still held is {}", firsts[0])), "{err}");
    let (ok, _, err) = corelog(&["tail", "--insecure", "--addr", &l, "--shard", "0", "--from", "1", "--count", "1"]);
    assert!(!ok && err.contains("OutOfRange"), "tail: {err}");
    rt.block_on(async {
        let c = Client::connect_shard(&l, 0, &ClientConfig::insecure()).await.unwrap();
        let recs = c.read(0, firsts[0], 1 << 20).await.unwrap();
        assert_eq!(recs.first().map(|r| r.offset), Some(firsts[0]), "the first offset reads");
    });
    // The retried idempotent append: its original position, also after kill -9.
    let retry = || corelog(&idem);
    let (ok, out, err) = retry();
    assert!(ok && out.starts_with(first_answer.trim()) && out.contains("duplicate"), "{out}{err}");
    p.leader.kill9();
    p.leader.start();
    let (ok, out, err) = retry();
    assert!(ok && out.starts_with(first_answer.trim()) && out.contains("duplicate"), "after restart: {out}{err}");

    // The follower stops; the leader takes more and is asked to delete everything: it
    // keeps what the follower has not confirmed, so the follower catches up after.
    p.follower.kill9();
    let f_end = inspect(&p.follower.data).1;
    // Written on the leader, not acknowledged (no follower): the appends wait.
    let end0 = p.leader.metric_sum("corelog_log_end_offset");
    let pending: Vec<_> = (0..4)
        .map(|_| {
            let l = l.clone();
            rt.spawn(async move {
                let c = Arc::new(Client::connect_shard(&l, 0, &ClientConfig::insecure()).await.unwrap());
                let appends: Vec<_> = (0..500)
                    .map(|_| {
                        let c = c.clone();
                        tokio::spawn(async move { c.append(&[b'z'; 4096]).await.is_ok() })
                    })
                    .collect();
                for a in appends {
                    a.await.unwrap();
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while p.leader.metric_sum("corelog_log_end_offset") < end0 + 2000.0 {
        assert!(Instant::now() < deadline, "the leader did not write the appends");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ok, out, err) =
        corelog(&["admin", "trim", "--insecure", "--addr", &l, "--shard", "0", "--before", &u64::MAX.to_string()]);
    assert!(ok, "{out}{err}");
    let lfirst: u64 = out.trim().rsplit(' ').next().unwrap().parse().unwrap();
    let f_next: u64 = f_end
        .lines()
        .find(|x| x.starts_with("shard 0: records"))
        .and_then(|x| x.split_whitespace().skip_while(|w| *w != "next").nth(1))
        .unwrap()
        .parse()
        .unwrap();
    assert!(lfirst <= f_next, "the leader deleted {lfirst} > the follower's end {f_next}");
    p.follower.start();
    wait_caught_up(&p, Duration::from_secs(30));
    for h in pending {
        rt.block_on(h).unwrap(); // acknowledged once the follower caught up, or timed out
    }
    let recs = read_from(&rt, &f, 0, first_offset(&rt, &f, 0));
    let end = read_from(&rt, &l, 0, first_offset(&rt, &l, 0)).last().map(|r| r.offset);
    assert_eq!(recs.last().map(|r| r.offset), end, "the follower caught up to the leader's end");
    compare(&p);
    p.leader.kill9();
    p.follower.kill9();
}

#[test]
fn retain_hours_deletes_segments_by_age() {
    let dir = TempDir::new("retention-age");
    let ports = ports();
    let data = dir.path().join("node");
    // 0.0005 h = 1.8 s since a segment's last write.
    let args =
        Node::args(Mode::Standalone, &data, ports, None, "", &["--shard-count", "1", "--retain-hours", "0.0005"]);
    let mut n = Node::new("standalone", data, ports, args);
    n.start();
    let rt = runtime();
    let t = Instant::now(); // no segment was written before this
    let written = fill(&rt, &n.addr(), 2500); // ~10 MiB of blocks: three segments
    let deadline = t + Duration::from_secs(60);
    while n.metric_sum("corelog_trimmed_segments_total") < 2.0 {
        assert!(Instant::now() < deadline, "no segment deleted by age:\n{}", n.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(t.elapsed() >= Duration::from_millis(1800), "deleted after {:?}, before its age", t.elapsed());
    let first = first_offset(&rt, &n.addr(), 0);
    assert!(first > 0);
    let recs = read_from(&rt, &n.addr(), 0, first);
    assert_eq!(recs.last().map(|r| r.offset), written.last().map(|p| p.offset), "the active segment stays");
    n.kill9();
}
