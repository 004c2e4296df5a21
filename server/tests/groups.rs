//! Consumer groups against a real pair, speaking the frames by hand (protocol version 4,
//! docs/protocol.md §11):
//!
//! - two members of one group split the buckets; every event under the prefix reaches
//!   one of them, each stream's in order, nothing else; a member that leaves hands its
//!   buckets over and the other resumes them from the committed positions;
//! - a commit of an old generation is refused `StaleGeneration` and the connection goes
//!   on; a join with another prefix is refused; names starting with `$` are reserved;
//! - the group's commits survive kill -9 and restart of the leader: a member joining
//!   after it starts from them.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use corelog_client::codec::{decode_frame, GroupReq, GroupResp, Request, Response};
use corelog_client::{Client, ClientConfig, Expect};

/// One member's connection, frames by hand.
struct Member {
    s: TcpStream,
    buf: Vec<u8>,
    req: u64,
    gen: u64,
    buckets: Vec<(u16, u64)>,
}

/// What a member read: (offset, stream, version, payload).
type Got = Vec<(u64, String, u64, Vec<u8>)>;

impl Member {
    fn join(port: u16, group: &str, member: &str, prefix: &str) -> Member {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut m = Member { s, buf: Vec::new(), req: 1, gen: 0, buckets: Vec::new() };
        m.send(Request::Hello { version: 4 });
        let hello = m.next();
        assert!(matches!(hello, Ok(Response::HelloOk { .. })) || hello.is_ok(), "{hello:?}");
        m.send(Request::Group(GroupReq::Join { group, member, prefix, k: 0 }));
        m
    }

    fn send(&mut self, r: Request<'_>) {
        let mut f = Vec::new();
        self.req += 1;
        r.encode(self.req, &mut f);
        self.s.write_all(&f).unwrap();
    }

    /// The next frame, as a debug string or its error (code, message).
    fn next(&mut self) -> Result<Response<'static>, (u16, String)> {
        loop {
            if let Some((f, used)) = decode_frame(&self.buf).unwrap() {
                let r = match Response::parse(&f).unwrap() {
                    Response::Error { code, message } => Err((code, message.to_string())),
                    Response::Group(GroupResp::Assigned { gen, buckets, .. }) => {
                        self.gen = gen;
                        self.buckets = buckets.clone();
                        Ok(Response::Group(GroupResp::Assigned { gen, shard_count: 0, k: 0, buckets }))
                    }
                    Response::Group(GroupResp::Records { gen, next_offset, count, records }) => {
                        let records: &'static [u8] = Box::leak(records.to_vec().into_boxed_slice());
                        Ok(Response::Group(GroupResp::Records { gen, next_offset, count, records }))
                    }
                    Response::Group(GroupResp::Committed { gen, next, offset }) => {
                        Ok(Response::Group(GroupResp::Committed { gen, next, offset }))
                    }
                    Response::HelloOk { .. } => Ok(Response::Trimmed { shard: 0, first_offset: 0 }),
                    r => panic!("unexpected frame {r:?}"),
                };
                self.buf.drain(..used);
                return r;
            }
            let mut chunk = [0u8; 65536];
            let k = self.s.read(&mut chunk).expect("a frame before the read timeout");
            if k == 0 {
                return Err((0, "closed".into()));
            }
            self.buf.extend_from_slice(&chunk[..k]);
        }
    }

    /// Reads records until `until` says stop; returns the last next_offset seen.
    fn read_until(&mut self, got: &mut Got, until: impl Fn(&Got) -> bool) -> u64 {
        let mut next = 0;
        while !until(got) {
            match self.next() {
                Ok(Response::Group(GroupResp::Records { next_offset, records, .. })) => {
                    let mut p = 0;
                    while p < records.len() {
                        let (r, n) = corelog_client::record::decode(&records[p..]).unwrap();
                        let s = r.stream.expect("group records carry a stream");
                        got.push((r.offset, s.name.to_string(), s.version, r.payload.to_vec()));
                        p += n;
                    }
                    next = next_offset;
                }
                Ok(Response::Group(GroupResp::Assigned { .. })) => {}
                other => panic!("while reading records (after {}): {other:?}", got.len()),
            }
        }
        next
    }

    fn commit(&mut self, next: u64) -> Result<u64, (u16, String)> {
        self.send(Request::Group(GroupReq::Commit { gen: self.gen, next }));
        loop {
            match self.next()? {
                Response::Group(GroupResp::Committed { offset, .. }) => return Ok(offset),
                Response::Group(GroupResp::Records { .. }) | Response::Group(GroupResp::Assigned { .. }) => {}
                r => panic!("while committing: {r:?}"),
            }
        }
    }

    /// Waits for an assignment of a generation above `gen`.
    fn assigned_after(&mut self, gen: u64) {
        while self.gen <= gen {
            self.next().expect("an assignment");
        }
    }
}

fn append(rt: &tokio::runtime::Runtime, addr: &str, from: u64, n: u64) {
    let cfg = ClientConfig::insecure();
    rt.block_on(async {
        let c = Client::connect(addr, &cfg).await.unwrap();
        for k in from..from + n {
            let name = if k % 4 == 0 { format!("other-{}", k % 3) } else { format!("acct-{}", k % 7) };
            c.append_to(&name, Expect::Any, format!("k{k}").as_bytes()).await.unwrap();
        }
    });
}

/// Each stream's events in version order, from what members got (duplicates kept).
fn by_stream(got: &Got) -> BTreeMap<String, Vec<u64>> {
    let mut m: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (_, s, v, _) in got {
        m.entry(s.clone()).or_default().push(*v);
    }
    m
}

#[test]
fn two_members_share_a_prefix_and_hand_over_at_the_committed_position() {
    let (_dir, mut p) = started_pair_in("groups_two", &["--shard-count", "1"]);
    let rt = runtime();
    let addr = p.leader.addr();
    let port = p.leader.ports.client;
    append(&rt, &addr, 0, 400); // 300 acct- events over 7 streams, 100 others
    let mut a = Member::join(port, "billing", "a", "acct-");
    let mut got_a = Got::new();
    a.read_until(&mut got_a, |g| g.len() >= 300);
    assert_eq!(a.buckets.len(), 4, "alone, a owns every bucket");
    // Every acct- event once, each stream in version order, payloads as appended.
    let streams = by_stream(&got_a);
    assert_eq!(streams.len(), 7);
    for (name, versions) in &streams {
        assert!(versions.windows(2).all(|w| w[1] == w[0] + 1) && versions[0] == 0, "{name}: {versions:?}");
    }
    assert!(got_a.iter().all(|(_, s, _, pl)| s.starts_with("acct-") && pl.starts_with(b"k")));
    let end = got_a.iter().map(|g| g.0).max().unwrap() + 1;
    a.commit(end).expect("a commits");
    // b joins: a new generation splits the buckets; a's commit of the old one is refused.
    let gen1 = a.gen;
    let mut b = Member::join(port, "billing", "b", "acct-");
    b.assigned_after(0);
    a.assigned_after(gen1);
    assert_eq!((a.buckets.len(), b.buckets.len()), (2, 2), "{:?} {:?}", a.buckets, b.buckets);
    assert!(a.buckets.iter().chain(&b.buckets).all(|&(_, n)| n == end), "both start at a's commit");
    a.send(Request::Group(GroupReq::Commit { gen: gen1, next: end }));
    let stale = loop {
        match a.next() {
            Err(e) => break e,
            Ok(r) => assert!(matches!(r, Response::Group(_)), "{r:?}"),
        }
    };
    assert_eq!(stale.0, 25, "StaleGeneration: {}", stale.1);
    // New events reach exactly one member each (by bucket).
    append(&rt, &addr, 400, 200);
    // Each member gets the events of its buckets (FNV-1a-64 of the name mod 4).
    let bucket = |name: &str| {
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
        (h % 4) as u16
    };
    let owns = |m: &Member, name: &str| m.buckets.iter().any(|&(b, _)| b == bucket(name));
    let names: Vec<String> = (400..600u64).filter(|k| k % 4 != 0).map(|k| format!("acct-{}", k % 7)).collect();
    let (want_a, want_b) = (names.iter().filter(|n| owns(&a, n)).count(), names.iter().filter(|n| owns(&b, n)).count());
    assert_eq!(want_a + want_b, 150, "every bucket is a's or b's");
    let (mut new_a, mut new_b) = (Got::new(), Got::new());
    a.read_until(&mut new_a, |g| g.len() >= want_a);
    b.read_until(&mut new_b, |g| g.len() >= want_b);
    assert!(new_a.iter().all(|g| owns(&a, &g.1)) && new_b.iter().all(|g| owns(&b, &g.1)));
    assert!(want_a > 0 && want_b > 0, "both have work: {want_a} {want_b}");
    // b commits part of its events and leaves: a gets b's buckets from b's commit.
    let half = new_b[new_b.len() / 2].0;
    b.commit(half).expect("b commits");
    let gen2 = a.gen;
    drop(b);
    a.assigned_after(gen2);
    assert_eq!(a.buckets.len(), 4);
    // Every bucket restarts at its last commit: a's own (at `end`: a did not commit its
    // new events) and b's (at `half`), merged in offset order; nothing below them.
    let mut want: Got = new_a.iter().chain(new_b.iter().filter(|g| g.0 >= half)).cloned().collect();
    want.sort();
    let mut again = Got::new();
    a.read_until(&mut again, |g| g.len() >= want.len());
    assert_eq!(again, want, "each bucket again from its commit, and nothing before it");
    // The commits survive kill -9 and restart of the leader.
    let last = again.last().unwrap().0 + 1;
    a.commit(last).expect("a commits all");
    // Killed while `a` is connected: the generation folded at restart names a's session
    // as the owner of every bucket. The same member id joining again is a new session: it
    // gets a new generation, never the folded one.
    let gen_before = a.gen;
    p.leader.kill9();
    drop(a);
    p.leader.start();
    append(&rt, &addr, 600, 40);
    let mut c = Member::join(port, "billing", "a", "acct-");
    c.assigned_after(0);
    assert!(c.gen > gen_before, "after the restart: generation {} again (before: {gen_before})", c.gen);
    let mut after = Got::new();
    c.read_until(&mut after, |g| g.len() >= 30);
    assert!(after.iter().all(|g| g.0 >= last), "c starts at the last commit: {:?}", &after[..3]);
    assert!(c.buckets.iter().all(|&(_, n)| n == last), "{:?}", c.buckets);
    // Another prefix for the same group is refused; so is a reserved name.
    let mut d = Member::join(port, "billing", "d", "other-");
    let e = d.next().expect_err("another prefix");
    assert_eq!(e.0, 23, "{}", e.1);
    let mut e2 = Member::join(port, "g2", "e", "$g/");
    assert_eq!(e2.next().expect_err("a reserved prefix").0, 23);
}

/// Retention deletes whole sealed segments: a group's state must not go with them. After
/// the log moves to a new segment the server writes the group's state again there; the
/// segments below are trimmed on both nodes, the leader restarts, and a member that
/// joins starts at the commit made before.
#[test]
fn a_groups_commits_outlive_the_trim_of_the_segments_that_held_them() {
    let (_dir, mut p) = started_pair_in("groups_trim", &["--shard-count", "1", "--segment-bytes", "4194304"]);
    let rt = runtime();
    let (addr, port) = (p.leader.addr(), p.leader.ports.client);
    append(&rt, &addr, 0, 100);
    let mut a = Member::join(port, "keep", "a", "acct-");
    let mut got = Got::new();
    a.read_until(&mut got, |g| g.len() >= 75);
    let end = got.iter().map(|g| g.0).max().unwrap() + 1;
    a.commit(end).expect("a commits");
    drop(a);
    // 6 MiB of other events: the log rolls past its first segment.
    let cfg = ClientConfig::insecure();
    let last = rt.block_on(async {
        let c = std::sync::Arc::new(Client::connect(&addr, &cfg).await.unwrap());
        let tasks: Vec<_> = (0..8)
            .map(|t| {
                let c = c.clone();
                tokio::spawn(async move {
                    let mut last = 0;
                    for _ in 0..768 {
                        let a = c.append_to(&format!("other-{t}"), Expect::Any, &vec![b'x'; 1024]).await.unwrap();
                        last = last.max(a.position.offset);
                    }
                    last
                })
            })
            .collect();
        let mut last = 0;
        for t in tasks {
            last = last.max(t.await.unwrap());
        }
        last
    });
    // The group's state, written again in the segment that holds `last` (or a later one):
    // the trim below `last` keeps that segment. Segment files are named by first offset.
    let starts: Vec<u64> = std::fs::read_dir(p.leader.data.join("shard-0"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
        .collect();
    let kept = starts.into_iter().filter(|&s| s <= last).max().unwrap();
    assert!(kept > end, "the log rolled past the group's first state (segment at {kept})");
    wait_until("the group's state written again", Duration::from_secs(20), || {
        let recs = rt.block_on(read_all(&addr, &cfg, 0));
        recs.iter().any(|r| r.offset >= kept && r.stream.as_ref().is_some_and(|s| s.name == "$g/keep/0"))
    });
    for node in [&p.leader, &p.follower] {
        let out = std::process::Command::new(BIN)
            .args([
                "admin",
                "trim",
                "--insecure",
                "--addr",
                &node.addr(),
                "--shard",
                "0",
                "--before",
                &last.to_string(),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        let first: u64 = said.split_whitespace().last().and_then(|f| f.parse().ok()).expect(&said);
        assert!(first > end, "the segments holding the group's first state and commit are gone: {said}");
    }
    p.leader.kill9();
    p.leader.start();
    let mut c = Member::join(port, "keep", "c", "acct-");
    c.assigned_after(0);
    assert!(c.buckets.iter().all(|&(_, n)| n == end), "c starts at a's commit {end}: {:?}", c.buckets);
}

/// `--group-session-ms`: a member that sends nothing (a frozen process) loses its session
/// after that long: its connection ends with `StaleGeneration`, and a member that joins
/// then gets every bucket.
#[test]
fn a_silent_member_loses_its_session_after_group_session_ms() {
    let (_dir, p) = started_pair_in("groups_session", &["--shard-count", "1", "--group-session-ms", "300"]);
    let port = p.leader.ports.client;
    let t0 = std::time::Instant::now();
    let mut a = Member::join(port, "s", "a", "acct-");
    a.assigned_after(0);
    assert_eq!(a.buckets.len(), 4);
    let end = loop {
        match a.next() {
            Err(e) => break e,
            Ok(r) => assert!(matches!(r, Response::Group(_)), "{r:?}"),
        }
    };
    let after = t0.elapsed();
    assert_eq!(end.0, 25, "{}", end.1);
    assert!(end.1.contains("session ended"), "{}", end.1);
    assert!(after >= Duration::from_millis(300) && after < Duration::from_secs(5), "ended after {after:?}");
    let mut b = Member::join(port, "s", "b", "acct-");
    b.assigned_after(a.gen);
    assert_eq!(b.buckets.len(), 4, "{:?}", b.buckets);
}
