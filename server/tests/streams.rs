//! Streams with expected versions (protocol `Append2` stream fields, `ReadStream`)
//! against real processes:
//!
//! - many clients race `expected version N` on one stream: exactly one wins each version,
//!   the others get `WrongExpectedVersion` with a current version above N; the stream has
//!   no gap and no duplicate, reads back with every winner's payload and position, after
//!   kill -9 and restart of the leader, and from the promoted follower;
//! - bad stream fields (too long, not UTF-8, empty, an unknown expected-version kind, the
//!   wrong shard) are refused with a clear error and the connection goes on;
//! - the CLI: `append --stream --expect`, `read --stream`, idempotent stream appends,
//!   `tail --stream` / `tail --prefix`;
//! - a prefix subscription (catch-up, then live) sees every matching event exactly once,
//!   in stream order, across a kill -9 and restart of the leader (resuming from its
//!   positions).

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::pair::{promoted, wait_caught_up};
use common::*;
use corelog_client::{Client, ClientConfig, Error, Expect, Position};

/// version → (client, position, payload) of the one append that got it.
type Wins = Arc<Mutex<BTreeMap<u64, (usize, Position, Vec<u8>)>>>;

/// `clients` clients race on `stream` until it holds `target` events: each appends
/// expecting the version it last saw. Returns the wins and the refusals counted.
fn race(rt: &tokio::runtime::Runtime, addr: &str, stream: &str, clients: usize, target: u64) -> (Wins, u64) {
    let wins: Wins = Default::default();
    let refusals = Arc::new(Mutex::new(0u64));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..clients {
            let (addr, stream, wins, refusals) = (addr.to_string(), stream.to_string(), wins.clone(), refusals.clone());
            tasks.push(tokio::spawn(async move {
                let c = Client::connect(&addr, &ClientConfig::insecure()).await.unwrap();
                let mut seen: Option<u64> = None;
                loop {
                    let expect = seen.map_or(Expect::NoStream, Expect::Exact);
                    let v = seen.map_or(0, |s| s + 1);
                    if v >= target {
                        return;
                    }
                    let payload = format!("client {i} wants version {v}").into_bytes();
                    match c.append_to(&stream, expect, &payload).await {
                        Ok(a) => {
                            assert_eq!(a.version, v, "client {i}: expected {expect}, got version {}", a.version);
                            let old = wins.lock().unwrap().insert(v, (i, a.position, payload));
                            assert!(old.is_none(), "version {v} won twice: {old:?} and client {i}");
                            seen = Some(v);
                        }
                        Err(Error::WrongExpectedVersion { current, message }) => {
                            let cur = current.expect("someone wrote it: the stream exists");
                            assert!(seen.is_none_or(|s| cur > s), "client {i}: current {cur} after seeing {seen:?}");
                            assert!(message.contains(&format!("is at version {cur}")), "{message}");
                            *refusals.lock().unwrap() += 1;
                            seen = Some(cur);
                        }
                        Err(e) => panic!("client {i}: {e}"),
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let n = *refusals.lock().unwrap();
    (wins, n)
}

/// Reads all of `stream` and checks it against the wins: versions 0.. in order, each
/// with its winner's payload and position.
fn check_stream(rt: &tokio::runtime::Runtime, addr: &str, stream: &str, wins: &Wins) {
    let wins = wins.lock().unwrap();
    let events = rt.block_on(async {
        let c = Client::connect(addr, &ClientConfig::insecure()).await.unwrap();
        let mut all = Vec::new();
        let mut at = 0;
        loop {
            // Small pages: the paging is part of what is checked.
            let r = c.read_stream(stream, at, 7).await.unwrap();
            assert_eq!(r.next_version, at + r.events.len() as u64);
            all.extend(r.events);
            if r.next_version >= r.end_version {
                assert_eq!(r.end_version, wins.len() as u64, "end version");
                return all;
            }
            at = r.next_version;
        }
    });
    assert_eq!(events.len(), wins.len(), "one event per won version");
    for (v, e) in events.iter().enumerate() {
        let (i, pos, payload) = &wins[&(v as u64)];
        let s = e.stream.as_ref().expect("a stream event carries its stream");
        assert_eq!((s.name.as_str(), s.version), (stream, v as u64));
        assert_eq!((e.offset, &e.payload), (pos.offset, payload), "version {v} (client {i})");
    }
}

#[test]
fn racing_expected_versions_have_one_winner_each_and_survive_kill9_and_failover() {
    let extra = ["--shard-count", "2"];
    let (_dir, mut p) = started_pair_in("streams_race", &extra);
    let rt = runtime();
    let addr = p.leader.addr();
    let (wins, refusals) = race(&rt, &addr, "order-42", 8, 150);
    assert_eq!(wins.lock().unwrap().len(), 150);
    eprintln!("150 versions, {refusals} WrongExpectedVersion refusals among 8 clients");
    assert!(refusals > 0, "8 clients racing never collided: the race did not happen");
    // A second stream (maybe on the other shard) interleaved with the first.
    let (other, _) = race(&rt, &addr, "order-43", 3, 40);
    check_stream(&rt, &addr, "order-42", &wins);
    check_stream(&rt, &addr, "order-43", &other);
    p.leader.kill9();
    p.leader.start();
    // A restarted leader shows readers only what its follower confirmed again.
    wait_caught_up(&p, Duration::from_secs(30));
    check_stream(&rt, &addr, "order-42", &wins);
    // The index was rebuilt from the log: versions go on from 150.
    let c = rt.block_on(Client::connect(&addr, &ClientConfig::insecure())).unwrap();
    let e = rt.block_on(c.append_to("order-42", Expect::Exact(120), b"stale")).unwrap_err();
    assert!(matches!(e, Error::WrongExpectedVersion { current: Some(149), .. }), "{e}");
    let e = rt.block_on(c.append_to("order-42", Expect::NoStream, b"exists")).unwrap_err();
    assert!(matches!(e, Error::WrongExpectedVersion { current: Some(149), .. }), "{e}");
    let e = rt.block_on(c.append_to("nobody", Expect::Exact(0), b"none")).unwrap_err();
    assert!(matches!(e, Error::WrongExpectedVersion { current: None, .. }), "{e}");
    let a = rt.block_on(c.append_to("order-42", Expect::Exact(149), b"after restart")).unwrap();
    assert_eq!(a.version, 150);
    let pos150 = a.position;
    wait_caught_up(&p, Duration::from_secs(30));
    let gauges = |n: &Node| (n.metric_sum("corelog_streams"), n.metric_sum("corelog_stream_index_bytes"));
    assert_eq!(gauges(&p.follower), gauges(&p.leader), "the follower's index is the leader's");
    assert_eq!(p.leader.metric_sum("corelog_streams"), 2.0);
    p.leader.kill9();
    p.follower.kill9();
    // The follower built the same index from the same records.
    let mut q = promoted(&p, &extra);
    q.follower.start();
    q.leader.start();
    let addr = q.leader.addr();
    wins.lock().unwrap().insert(150, (99, pos150, b"after restart".to_vec()));
    check_stream(&rt, &addr, "order-42", &wins);
    check_stream(&rt, &addr, "order-43", &other);
    let c = rt.block_on(Client::connect(&addr, &ClientConfig::insecure())).unwrap();
    let a = rt.block_on(c.append_to("order-42", Expect::Exact(150), b"on the promoted follower")).unwrap();
    assert_eq!(a.version, 151);
}

/// Builds an `Append2` frame naming a stream from raw fields.
fn raw_append(req_id: u64, name: &[u8], kind: u8, expected: u64, payload: &[u8]) -> Vec<u8> {
    use corelog_client::codec::{encode_append2, StreamReq};
    let mut f = Vec::new();
    encode_append2(req_id, None, Some(StreamReq { name, expect_kind: kind, expected }), payload, &mut f);
    f
}

/// Reads one answer frame: (req_id, error code if an error, its message).
fn answer(s: &mut std::net::TcpStream, buf: &mut Vec<u8>) -> (u64, Option<u16>, String) {
    use corelog_client::codec::{decode_frame, Response};
    use std::io::Read;
    loop {
        if let Some((f, used)) = decode_frame(buf).unwrap() {
            let a = match Response::parse(&f).unwrap() {
                Response::Error { code, message } => (f.req_id, Some(code), message.to_string()),
                Response::WrongVersion { message, .. } => (f.req_id, Some(21), message.to_string()),
                r => (f.req_id, None, format!("{r:?}")),
            };
            buf.drain(..used);
            return a;
        }
        let mut chunk = [0u8; 4096];
        let k = s.read(&mut chunk).expect("answer before the read timeout");
        assert!(k > 0, "connection closed");
        buf.extend_from_slice(&chunk[..k]);
    }
}

#[test]
fn bad_stream_fields_are_refused_and_the_connection_goes_on() {
    use corelog_client::codec::{stream_shard, Request};
    use std::io::Write;
    let (_dir, p) = started_pair_in("streams_bad", &["--shard-count", "2"]);
    // The main port's connections are served by some shard; find a name on it and one
    // on the other.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", p.leader.ports.client)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = Vec::new();
    let mut f = Vec::new();
    Request::Hello { version: 2 }.encode(1, &mut f);
    s.write_all(&f).unwrap();
    let hello = answer(&mut s, &mut buf).2;
    let here: u16 = if hello.contains("shard: 0,") { 0 } else { 1 };
    let name_on = |shard: u16| (0..).map(|k| format!("s{k}")).find(|n| stream_shard(n.as_bytes(), 2) == shard).unwrap();
    let (good, elsewhere) = (name_on(here), name_on(1 - here));
    let too_long = vec![b'a'; 256];
    let wrong_shard = format!("lives on shard {}", 1 - here);
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (raw_append(2, &too_long, 0, 0, b"x"), 23, "256 bytes is too long"),
        (raw_append(3, &[0xc3, 0x28], 0, 0, b"x"), 23, "not UTF-8"),
        (raw_append(4, b"", 0, 0, b"x"), 23, "empty"),
        (raw_append(5, good.as_bytes(), 7, 0, b"x"), 23, "unknown expected-version kind 7"),
        (raw_append(6, elsewhere.as_bytes(), 0, 0, b"x"), 22, &wrong_shard),
        (raw_append(7, good.as_bytes(), 2, 5, b"x"), 21, "has no event, not 5 as expected"),
    ];
    // Pipelined: all sent at once, answered in order, each refused alone.
    let mut all = Vec::new();
    for (f, _, _) in &cases {
        all.extend_from_slice(f);
    }
    all.extend_from_slice(&raw_append(8, good.as_bytes(), 1, 0, b"first"));
    let mut rs = Vec::new();
    Request::ReadStream { name: good.as_bytes(), from_version: 0, max_count: 10, max_bytes: 1 << 20 }
        .encode(9, &mut rs);
    all.extend_from_slice(&rs);
    s.write_all(&all).unwrap();
    for (i, (_, code, needle)) in cases.iter().enumerate() {
        let (req_id, got, msg) = answer(&mut s, &mut buf);
        assert_eq!((req_id, got), (i as u64 + 2, Some(*code)), "{msg}");
        assert!(msg.contains(needle), "{msg:?} should say {needle:?}");
    }
    let (req_id, code, ok) = answer(&mut s, &mut buf);
    assert_eq!((req_id, code), (8, None), "the good append after the refusals: {ok}");
    assert!(ok.contains("version: Some(0)"), "{ok}");
    let (req_id, code, read) = answer(&mut s, &mut buf);
    assert_eq!((req_id, code), (9, None), "{read}");
    assert!(read.contains("end_version: 1") && read.contains("count: 1"), "{read}");
    // A v1 connection may not use streams (protocol error: the connection ends).
    let mut v1 = std::net::TcpStream::connect(("127.0.0.1", p.leader.ports.client)).unwrap();
    v1.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut f = Vec::new();
    Request::Hello { version: 1 }.encode(1, &mut f);
    f.extend_from_slice(&rs);
    v1.write_all(&f).unwrap();
    let mut b1 = Vec::new();
    answer(&mut v1, &mut b1);
    let (_, code, msg) = answer(&mut v1, &mut b1);
    assert_eq!(code, Some(4), "{msg}");
    // The CLI checks names before sending and says why.
    let out = std::process::Command::new(BIN)
        .args(["append", "--insecure", "--addr", &p.leader.addr(), "--stream", &"n".repeat(300), "x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("300 bytes is too long"), "{err}");
}

#[test]
fn cli_appends_to_and_reads_streams() {
    let (_dir, p) = started_pair_in("streams_cli", &["--shard-count", "2"]);
    let addr = p.leader.addr();
    let cli = |args: &[&str]| {
        let out =
            std::process::Command::new(BIN).args([args[0], "--insecure", "--addr", &addr]).args(&args[1..]).output();
        let out = out.unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let (ok, out, err) = cli(&["append", "--stream", "cart-7", "--expect", "none", "added", "paid", "shipped"]);
    assert!(ok, "{err}");
    let versions: Vec<&str> = out.lines().map(|l| l.rsplit(' ').next().unwrap()).collect();
    assert_eq!(versions, ["0", "1", "2"], "{out}");
    let (ok, _, err) = cli(&["append", "--stream", "cart-7", "--expect", "1", "late"]);
    assert!(!ok && err.contains("WrongExpectedVersion") && err.contains("is at version 2"), "{err}");
    let (ok, _, err) = cli(&["append", "--stream", "cart-7", "--expect", "sometime", "x"]);
    assert!(!ok && err.contains("give any, none or a number"), "{err}");
    // Idempotent: a re-sent sequence is a duplicate with its original version, not a
    // WrongExpectedVersion.
    let (ok, out, err) = cli(&["append", "--stream", "cart-7", "--expect", "2", "--producer", "0x77", "delivered"]);
    assert!(ok, "{err}");
    let (ok, again, err) = cli(&["append", "--stream", "cart-7", "--expect", "2", "--producer", "0x77", "delivered"]);
    assert!(ok, "{err}");
    assert_eq!(again.trim(), format!("{} duplicate", out.trim()), "{again}");
    assert!(out.trim().ends_with(" 3"), "{out}");
    let (ok, out, err) = cli(&["read", "--stream", "cart-7"]);
    assert!(ok, "{err}");
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
    let got: Vec<(&str, &str)> = lines.iter().map(|l| (l[0], l[2])).collect();
    assert_eq!(got, [("0", "added"), ("1", "paid"), ("2", "shipped"), ("3", "delivered")], "{out}");
    let (ok, out, _) = cli(&["read", "--stream", "cart-7", "--from-version", "2", "--limit", "1"]);
    assert!(ok && out.lines().count() == 1 && out.starts_with("2\t"), "{out}");
    let (ok, out, _) = cli(&["read", "--stream", "no-such-cart"]);
    assert!(ok && out.is_empty(), "{out}");
    // Subscriptions from the CLI: a stream from a version, a prefix over both shards.
    let (ok, out, err) = cli(&["tail", "--stream", "cart-7", "--from-version", "1", "--count", "3"]);
    assert!(ok, "{err}");
    let got: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(got, ["1", "2", "3"], "{out}");
    let (ok, _, err) = cli(&["append", "--stream", "cart-8", "other cart"]);
    assert!(ok, "{err}");
    let (ok, out, err) = cli(&["tail", "--prefix", "cart-", "--count", "5"]);
    assert!(ok, "{err}");
    let mut names: Vec<&str> = out.lines().map(|l| l.split('\t').nth(2).unwrap()).collect();
    names.sort();
    assert_eq!(names, ["cart-7", "cart-7", "cart-7", "cart-7", "cart-8"], "{out}");
}

/// A prefix subscription started from the beginning gets the matching events of the
/// log (catch-up) and then the live ones; after a kill -9 and restart of the leader it
/// resumes from its positions. In the end it has seen every matching event of the log
/// exactly once, each stream's in version order, and nothing else.
#[test]
fn a_prefix_subscription_sees_every_event_once_in_stream_order_across_a_restart() {
    use corelog_client::{Event, Subscription};
    use std::collections::HashMap;
    let (_dir, mut p) = started_pair_in("streams_sub", &["--shard-count", "2"]);
    let rt = runtime();
    let addr = p.leader.addr();
    let cfg = ClientConfig::insecure().with_failover_timeout(Duration::from_secs(20));
    // Event k goes to other-(k%4) when k%3 == 0, else to acct-(k%5).
    let write = |addr: String, cfg: ClientConfig, from: u64, n: u64| async move {
        let c = Client::connect(&addr, &cfg).await.unwrap();
        for k in from..from + n {
            let name = if k % 3 == 0 { format!("other-{}", k % 4) } else { format!("acct-{}", k % 5) };
            c.append_to(&name, Expect::Any, format!("k{k}").as_bytes()).await.unwrap();
        }
    };
    async fn collect(sub: &mut Subscription, got: &mut Vec<Event>, until: usize) {
        while got.len() < until {
            match tokio::time::timeout(Duration::from_secs(30), sub.next()).await {
                Ok(Ok(Some(e))) => got.push(e),
                other => panic!("after {} of {until} events: {other:?}", got.len()),
            }
        }
    }
    rt.block_on(write(addr.clone(), cfg.clone(), 0, 150));
    let mut got = Vec::new();
    let mut sub = rt.block_on(async {
        let mut sub = Subscription::prefix(&addr, &cfg, "acct-", &HashMap::new()).await.unwrap();
        collect(&mut sub, &mut got, 50).await; // from disk
        let live = tokio::spawn(write(addr.clone(), cfg.clone(), 150, 150));
        collect(&mut sub, &mut got, 200).await; // 100 + 100 acct events in 0..300
        live.await.unwrap();
        sub
    });
    p.leader.kill9();
    // The subscription ends with an error (its connections are gone).
    let end =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), sub.next()).await }).expect("ends in time");
    assert!(end.is_err(), "a killed server ends the subscription with an error: {end:?}");
    let positions = sub.positions().clone();
    drop(sub);
    p.leader.start();
    rt.block_on(write(addr.clone(), cfg.clone(), 300, 150));
    rt.block_on(async {
        let mut sub = Subscription::prefix(&addr, &cfg, "acct-", &positions).await.unwrap();
        collect(&mut sub, &mut got, 300).await;
    });
    // Compare with each stream as read back: same events, same order, nothing else.
    let c = rt.block_on(Client::connect(&addr, &cfg)).unwrap();
    let mut total = 0;
    for i in 0..5 {
        let name = format!("acct-{i}");
        let log = rt.block_on(c.read_stream(&name, 0, 1000)).unwrap().events;
        let seen: Vec<_> = got.iter().filter(|e| e.record.stream.as_ref().unwrap().name == name).collect();
        assert_eq!(seen.len(), log.len(), "{name}: {} seen, {} in the log", seen.len(), log.len());
        for (e, r) in seen.iter().zip(&log) {
            assert_eq!(&e.record, r, "{name}: event out of order, twice or changed");
        }
        total += log.len();
    }
    assert_eq!(total, got.len(), "only acct- events");
    assert_eq!(total, 300);
}

/// An idempotent producer's conditional stream append refused with
/// `WrongExpectedVersion` hands its sequence back: the producer goes on with the same
/// sequence, and nothing of the refused append is in the log.
#[test]
fn a_producer_goes_on_after_a_wrong_expected_version() {
    use corelog_client::Producer;
    let (_dir, p) = started_pair_in("streams_producer", &["--shard-count", "2"]);
    let rt = runtime();
    let addr = p.leader.addr();
    rt.block_on(async {
        let cfg = ClientConfig::insecure();
        let prod = Producer::connect_for_stream(&addr, &cfg, "ledger").await.unwrap();
        let a = prod.append_to("ledger", Expect::NoStream, b"opened").await.unwrap();
        assert_eq!((a.sequence, a.version), (0, Some(0)));
        let e = prod.append_to("ledger", Expect::Exact(7), b"refused").await.unwrap_err();
        assert!(matches!(e, Error::WrongExpectedVersion { current: Some(0), .. }), "{e}");
        let b = prod.append_to("ledger", Expect::Exact(0), b"credited").await.unwrap();
        assert_eq!((b.sequence, b.version, b.duplicate), (1, Some(1), false), "sequence 1 handed back and reused");
        let c = prod.append_to("ledger", Expect::Any, b"debited").await.unwrap();
        assert_eq!((c.sequence, c.version), (2, Some(2)));
        let read = Client::connect(&addr, &cfg).await.unwrap().read_stream("ledger", 0, 10).await.unwrap();
        let payloads: Vec<&[u8]> = read.events.iter().map(|e| &e.payload[..]).collect();
        assert_eq!(payloads, [&b"opened"[..], b"credited", b"debited"]);
    });
}
