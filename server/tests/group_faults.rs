//! Consumer groups under faults, with real processes (issue 36's acceptance): a
//! coordinator-mode pair (etcd), stream appends under a prefix recorded by the test
//! (every acknowledged position and payload), and members that are `corelog tail
//! --group --trace` processes printing every assignment, delivery and acknowledged
//! commit. During the run members are killed -9 and added, and the leader is killed -9
//! (a failover) and restarted. Then the history is checked:
//!
//! - every acknowledged event under the prefix was delivered to some member, with the
//!   payload that was acknowledged, at the position that was acknowledged;
//! - within one member's generation each stream's events arrive in version order;
//! - an event delivered more than once was never covered by an acknowledged commit of a
//!   member that had it before (a commit covers what was delivered to that member below
//!   its `next`, in that generation): duplicates are only what was not yet committed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::coord::cluster;
use common::*;
use corelog_client::{Client, ClientConfig, Expect};

const PREFIX: &str = "ev-";
const STREAMS: u64 = 24;
/// The appender stops after this many attempts whatever happens (a bounded load).
const MAX_APPENDS: u64 = 200_000;

/// (shard, offset) → (stream, version, payload) of every acknowledged append.
type Acked = Arc<Mutex<BTreeMap<(u16, u64), (String, u64, Vec<u8>)>>>;

/// Appends `e<k>` to `ev-<k mod STREAMS>` (and, every fifth, to a stream outside the
/// prefix) until `stop`, following the leader; records what was acknowledged.
fn appender(addrs: String, cfg: ClientConfig, stop: Arc<AtomicBool>, acked: Acked, failed: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = runtime();
        rt.block_on(async {
            let c = Client::connect(&addrs, &cfg).await.expect("the appender connects");
            for k in 0..MAX_APPENDS {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let name = if k % 5 == 4 { format!("other-{}", k % 3) } else { format!("{PREFIX}{}", k % STREAMS) };
                let payload = format!("e{k}").into_bytes();
                match c.append_to(&name, Expect::Any, &payload).await {
                    Ok(a) if name.starts_with(PREFIX) => {
                        let at = (a.position.shard, a.position.offset);
                        assert!(acked.lock().unwrap().insert(at, (name, a.version, payload)).is_none(), "{at:?} twice");
                    }
                    Ok(_) => {}
                    Err(_) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        });
    })
}

/// One member process and the file its trace goes to.
struct Member {
    child: Child,
    trace: PathBuf,
}

fn member(addrs: &str, certs: &Path, dir: &Path, i: usize) -> Member {
    let trace = dir.join(format!("member-{i}.trace"));
    let out = std::fs::File::create(&trace).unwrap();
    let err = std::fs::File::create(dir.join(format!("member-{i}.err"))).unwrap();
    let child = Command::new(BIN)
        .args(["tail", "--group", "g1", "--member", &format!("m{i}"), "--prefix", PREFIX, "--trace", "--addr", addrs])
        .args(client_tls_args(certs, "client"))
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("a member starts");
    Member { child, trace }
}

impl Member {
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One delivery: (member, shard, gen, offset, stream, version, payload).
#[derive(Clone, Debug)]
struct Delivery {
    member: usize,
    shard: u16,
    gen: u64,
    offset: u64,
    stream: String,
    version: u64,
    payload: Vec<u8>,
}

/// What the traces hold: deliveries, and acknowledged commits (member, shard, gen) → the
/// highest `next`.
fn read_traces(members: &[Member]) -> (Vec<Delivery>, BTreeMap<(usize, u16, u64), u64>) {
    let (mut ds, mut cs) = (Vec::new(), BTreeMap::new());
    for (m, mem) in members.iter().enumerate() {
        let text = std::fs::read_to_string(&mem.trace).unwrap_or_default();
        // A killed member may have cut its last line short: only whole lines count.
        let whole = text.rfind('\n').map_or("", |i| &text[..i]);
        for line in whole.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f[0] {
                "D" => ds.push(Delivery {
                    member: m,
                    shard: f[1].parse().unwrap(),
                    gen: f[2].parse().unwrap(),
                    offset: f[3].parse().unwrap(),
                    stream: f[4].to_string(),
                    version: f[5].parse().unwrap(),
                    payload: (0..f[6].len()).step_by(2).map(|i| u8::from_str_radix(&f[6][i..i + 2], 16).unwrap()).collect(),
                }),
                "C" => {
                    let key = (m, f[1].parse().unwrap(), f[2].parse().unwrap());
                    let next: u64 = f[3].parse().unwrap();
                    let at = cs.entry(key).or_insert(next);
                    *at = next.max(*at);
                }
                "A" | "S" => {}
                other => panic!("member {m}: unknown trace line {other:?}: {line}"),
            }
        }
    }
    (ds, cs)
}

#[test]
fn a_group_delivers_every_acknowledged_event_through_member_kills_and_a_leader_failover() {
    let Some(mut c) = cluster("group_faults") else { return };
    let leader = c.wait_pair(Duration::from_secs(60));
    let addrs = c.addrs().join(",");
    let cfg = c.client().with_failover_timeout(Duration::from_secs(30));
    let (stop, acked, failed) = (Arc::new(AtomicBool::new(false)), Acked::default(), Arc::new(AtomicU64::new(0)));
    let load = appender(addrs.clone(), cfg, stop.clone(), acked.clone(), failed.clone());
    let dir = c.dir.path().to_path_buf();
    let mut members: Vec<Member> = (0..3).map(|i| member(&addrs, &c.certs, &dir, i)).collect();
    let acks = |n: usize| acked.lock().unwrap().len() >= n;
    wait_until("1,000 acknowledged appends", Duration::from_secs(60), || acks(1_000));
    members[0].kill9();
    members.push(member(&addrs, &c.certs, &dir, 3));
    wait_until("3,000 acknowledged appends", Duration::from_secs(60), || acks(3_000));
    c.nodes[leader].kill9();
    let other = 1 - leader;
    c.wait_health(Duration::from_secs(30), "the follower leading", |h| h[other].contains("role=leader"));
    let before = acked.lock().unwrap().len();
    wait_until("1,000 more acknowledged appends after the failover", Duration::from_secs(60), || acks(before + 1_000));
    c.nodes[leader].spawn();
    members[1].kill9();
    members.push(member(&addrs, &c.certs, &dir, 4));
    assert_eq!(c.wait_pair(Duration::from_secs(60)), other, "the restarted node took the lead back");
    let before = acked.lock().unwrap().len();
    wait_until("1,000 more acknowledged appends after the rejoin", Duration::from_secs(60), || acks(before + 1_000));
    stop.store(true, Ordering::SeqCst);
    load.join().expect("the appender ends");
    let acked = acked.lock().unwrap().clone();
    // Every acknowledged event reaches a live member (bounded wait), then the check.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (ds, cs) = loop {
        let (ds, cs) = read_traces(&members);
        let seen: BTreeSet<(u16, u64)> = ds.iter().map(|d| (d.shard, d.offset)).collect();
        let missing = acked.keys().filter(|k| !seen.contains(k)).count();
        if missing == 0 {
            break (ds, cs);
        }
        assert!(Instant::now() < deadline, "{missing} of {} acknowledged events never delivered; {}", acked.len(), c.logs());
        std::thread::sleep(Duration::from_millis(200));
    };
    for m in &mut members {
        m.kill9();
    }
    check(&acked, &ds, &cs);
    eprintln!(
        "group under faults: {} acknowledged events, {} appends failed or unknown, {} deliveries ({} duplicates), {} acknowledged commits",
        acked.len(),
        failed.load(Ordering::SeqCst),
        ds.len(),
        ds.len() - ds.iter().map(|d| (d.shard, d.offset)).collect::<BTreeSet<_>>().len(),
        cs.len()
    );
}

/// The history's checks (see the module docs).
fn check(acked: &BTreeMap<(u16, u64), (String, u64, Vec<u8>)>, ds: &[Delivery], cs: &BTreeMap<(usize, u16, u64), u64>) {
    let mut by_event: BTreeMap<(u16, u64), Vec<&Delivery>> = BTreeMap::new();
    for d in ds {
        assert!(d.stream.starts_with(PREFIX), "delivered outside the prefix: {d:?}");
        by_event.entry((d.shard, d.offset)).or_default().push(d);
    }
    for (at, (stream, version, payload)) in acked {
        let got = &by_event[at];
        for d in got {
            assert_eq!((&d.stream, d.version, &d.payload), (stream, *version, payload), "{at:?} delivered changed");
        }
    }
    // In order per stream within one member's generation.
    let mut last: BTreeMap<(usize, u64, &str), u64> = BTreeMap::new();
    for d in ds {
        if let Some(prev) = last.insert((d.member, d.gen, d.stream.as_str()), d.version) {
            assert!(d.version > prev, "member {} gen {}: {} v{} after v{prev}", d.member, d.gen, d.stream, d.version);
        }
    }
    // A duplicate was never committed before it was delivered again.
    for (at, got) in &by_event {
        let mut got = got.clone();
        got.sort_by_key(|d| d.gen);
        for (i, d) in got.iter().enumerate() {
            let committed = cs.get(&(d.member, d.shard, d.gen)).is_some_and(|&next| next > d.offset);
            let again = got[i + 1..].iter().find(|e| e.gen > d.gen);
            assert!(!(committed && again.is_some()), "{at:?}: committed by member {} in gen {}, delivered again: {again:?}", d.member, d.gen);
        }
    }
}
