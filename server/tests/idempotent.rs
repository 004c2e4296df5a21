//! Idempotent appends (protocol `Append2`, client `Producer`) against real processes:
//!
//! - producers with many appends in flight while the leader of a static pair is killed
//!   (-9) and restarted, again and again: the client retries what it does not know the
//!   outcome of; every sequence ends up in the log exactly once, every position the client
//!   was given reads back with its payload, and both logs are equal;
//! - the same across automatic failover (coordinator mode, etcd);
//! - the producers' state is rebuilt from the log after kill -9 and is the same on the
//!   follower (a promoted follower answers a retry with the original position);
//! - refusals: a sequence far ahead, an unknown producer, a sequence older than the window.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::pair::{promoted, wait_caught_up};
use common::*;
use corelog_client::{ClientConfig, ErrorCode, Position, Producer, Record};

/// What one producer was told: sequence → (position, payload).
type Told = Arc<Mutex<HashMap<u64, (Position, Vec<u8>)>>>;

struct Run {
    acked: Arc<AtomicU64>,
    handles: Vec<tokio::task::JoinHandle<(u64, Told, u64, u64)>>,
}

/// `producers` producers (alternating shards 0 and 1), each appending `per` payloads with
/// `depth` in flight. Every append must succeed (the producer retries across failures).
fn start(
    rt: &tokio::runtime::Runtime,
    addrs: String,
    cfg: ClientConfig,
    producers: usize,
    per: u64,
    depth: u64,
) -> Run {
    let acked = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for i in 0..producers {
        let (addrs, cfg, acked) = (addrs.clone(), cfg.clone(), acked.clone());
        handles.push(rt.spawn(async move {
            let p = Arc::new(Producer::connect(&addrs, &cfg, (i % 2) as u16).await.expect("producer connects"));
            let told: Told = Default::default();
            let next = Arc::new(AtomicU64::new(0));
            let mut tasks = Vec::new();
            for _ in 0..depth {
                let (p, told, next, acked) = (p.clone(), told.clone(), next.clone(), acked.clone());
                tasks.push(tokio::spawn(async move {
                    let mut dups = 0;
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= per {
                            return dups;
                        }
                        let payload = format!("p{i}-k{k}-{:x}", p.id()).into_bytes();
                        let a = match p.append(&payload).await {
                            Ok(a) => a,
                            Err(e) => panic!("producer {i}: append k={k} failed after retries: {e}"),
                        };
                        dups += a.duplicate as u64;
                        let old = told.lock().unwrap().insert(a.sequence, (a.position, payload));
                        assert!(old.is_none(), "sequence {} answered twice", a.sequence);
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            let mut dups = 0;
            for t in tasks {
                dups += t.await.expect("append task");
            }
            (p.id(), told, p.retries(), dups)
        }));
    }
    Run { acked, handles }
}

impl Run {
    fn wait_more(&self, n: u64, what: &str) {
        let target = self.acked.load(Ordering::Relaxed) + n;
        let deadline = Instant::now() + Duration::from_secs(90);
        while self.acked.load(Ordering::Relaxed) < target {
            assert!(Instant::now() < deadline, "fewer than {n} appends acknowledged {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Joins the producers (every append answered), reads the log with `read`
    /// (shard → records) and checks each producer's records: each sequence exactly once,
    /// at the position the client was told, with its payload. Returns a summary line.
    fn finish(self, rt: &tokio::runtime::Runtime, per: u64, read: impl FnOnce() -> Vec<Vec<Record>>) -> String {
        let joined: Vec<_> = self.handles.into_iter().map(|h| rt.block_on(h).expect("producer task")).collect();
        let logs = read();
        let (mut retries, mut dups) = (0, 0);
        for (id, told, r, d) in &joined {
            retries += r;
            dups += d;
            check_producer(*id, &told.lock().unwrap(), &logs, per);
        }
        format!(
            "{} producers × {per} appends, {retries} attempts sent again, {dups} answered as duplicates",
            joined.len()
        )
    }
}

fn check_producer(id: u64, told: &HashMap<u64, (Position, Vec<u8>)>, logs: &[Vec<Record>], per: u64) {
    assert_eq!(told.len() as u64, per, "producer {id:#x}: every append answered once");
    let mut seen: HashMap<u64, (usize, u64)> = HashMap::new();
    for (shard, recs) in logs.iter().enumerate() {
        for r in recs.iter().filter(|r| r.producer.is_some_and(|p| p.id == id)) {
            let seq = r.producer.unwrap().seq;
            if let Some(prev) = seen.insert(seq, (shard, r.offset)) {
                panic!("producer {id:#x} sequence {seq} stored twice: {prev:?} and ({shard}, {})", r.offset);
            }
        }
    }
    assert_eq!(seen.len() as u64, per, "producer {id:#x}: sequences in the log");
    for (seq, (pos, payload)) in told {
        assert!(*seq < per, "sequence {seq} beyond the {per} appends made");
        let rec = logs[pos.shard as usize].iter().find(|r| r.offset == pos.offset);
        let rec = rec.unwrap_or_else(|| panic!("acknowledged position {pos:?} not in the log"));
        assert_eq!(&rec.payload, payload, "payload at {pos:?}");
        assert_eq!(rec.producer.map(|p| (p.id, p.seq)), Some((id, *seq)), "producer at {pos:?}");
    }
}

fn slow_failover_cfg(certs: Option<&std::path::Path>) -> ClientConfig {
    client_config(certs)
        .with_failover_timeout(Duration::from_secs(40))
        .with_request_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(1))
}

fn read_logs(rt: &tokio::runtime::Runtime, addr: &str, cfg: &ClientConfig) -> Vec<Vec<Record>> {
    (0..2).map(|s| rt.block_on(read_all(addr, cfg, s))).collect()
}

#[test]
fn producers_retry_across_leader_kill9_and_store_every_sequence_once() {
    let (_dir, mut p) = started_pair_in("idem_kill", &["--shard-count", "2"]);
    let rt = runtime();
    let per = 1500;
    let run = start(&rt, p.leader.addr(), slow_failover_cfg(None), 6, per, 16);
    for round in 0..3 {
        run.wait_more(300, &format!("before kill {round}"));
        p.leader.kill9();
        p.leader.start();
    }
    run.wait_more(300, "after the last restart");
    let addr = p.leader.addr();
    let summary = run.finish(&rt, per, || read_logs(&rt, &addr, &ClientConfig::insecure()));
    wait_caught_up(&p, Duration::from_secs(30));
    let shards = p.kill_and_compare();
    eprintln!("idempotent kill loop: {summary}; both logs {shards:?}");
}

#[test]
fn producers_retry_across_automatic_failover() {
    let Some(mut c) = coord::cluster("idem_failover") else { return };
    let leader = c.wait_pair(Duration::from_secs(60));
    let other = 1 - leader;
    let rt = runtime();
    let per = 1000;
    let cfg = slow_failover_cfg(Some(&c.certs));
    let run = start(&rt, c.addrs().join(","), cfg.clone(), 4, per, 16);
    run.wait_more(300, "before the kill");
    c.nodes[leader].kill9();
    c.wait_health(Duration::from_secs(30), "the follower leading", |h| h[other].contains("role=leader"));
    run.wait_more(300, "after the failover");
    c.nodes[leader].spawn();
    assert_eq!(c.wait_pair(Duration::from_secs(60)), other, "the restarted node took the lead back");
    let addr = c.nodes[other].addr();
    let summary = run.finish(&rt, per, || read_logs(&rt, &addr, &cfg));
    c.wait_same_log(leader, other, Duration::from_secs(60));
    eprintln!("idempotent failover: {summary}");
}

#[test]
fn producer_state_survives_kill9_matches_the_follower_and_refuses_out_of_line_sequences() {
    let (_dir, mut p) = started_pair_in("idem_state", &["--shard-count", "1"]);
    let rt = runtime();
    let cfg = ClientConfig::insecure().with_failover_timeout(Duration::from_millis(300));
    let addr = p.leader.addr();
    let (id, pos) = rt.block_on(async {
        let prod = Producer::connect(&addr, &cfg, 0).await.unwrap();
        let mut pos = Vec::new();
        for i in 0..10 {
            let a = prod.append(format!("e{i}").as_bytes()).await.unwrap();
            assert_eq!((a.sequence, a.duplicate), (i, false));
            pos.push(a.position);
        }
        (prod.id(), pos)
    });
    // Sends sequence `seq` of producer `id` again (any payload: a duplicate is not written).
    let again = |addr: &str, id: u64, seq: u64| {
        rt.block_on(async {
            let prod = Producer::resume(addr, &cfg, 0, id, seq).await.unwrap();
            prod.append(b"retry").await
        })
    };
    let a = again(&addr, id, 5).unwrap();
    assert!(a.duplicate && a.position == pos[5], "retry of 5: {a:?}");
    p.leader.kill9();
    p.leader.start();
    let a = again(&addr, id, 7).unwrap();
    assert!(a.duplicate && a.position == pos[7], "retry of 7 after kill -9: {a:?}");
    // Refusals: each writes nothing.
    let e = again(&addr, id, 20).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::SequenceGap), "{e}");
    assert!(e.to_string().contains("expects sequence 10"), "{e}");
    let e = again(&addr, id ^ 1, 3).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownProducer), "{e}");
    let a = again(&addr, id, 10).unwrap();
    assert!(!a.duplicate && a.position.offset == pos[9].offset + 1, "sequence 10 is new: {a:?}");
    wait_caught_up(&p, Duration::from_secs(30));
    let producers = |n: &Node| (n.metric_sum("corelog_producers"), n.metric_sum("corelog_producer_state_bytes"));
    assert_eq!(producers(&p.follower), producers(&p.leader), "the follower's table is the leader's");
    p.leader.kill9();
    p.follower.kill9();
    // The follower built the same table from the same records.
    let mut q = promoted(&p, &["--shard-count", "1"]);
    q.follower.start();
    q.leader.start();
    let addr = q.leader.addr();
    let a = again(&addr, id, 3).unwrap();
    assert!(a.duplicate && a.position == pos[3], "retry of 3 on the promoted follower: {a:?}");
    // Past the window (64 positions per producer) a retry is StaleSequence.
    rt.block_on(async {
        let prod = Producer::resume(&addr, &cfg, 0, id, 11).await.unwrap();
        for _ in 0..70 {
            prod.append(b"more").await.unwrap();
        }
    });
    let e = again(&addr, id, 2).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::StaleSequence), "{e}");
    let records = rt.block_on(read_all(&addr, &ClientConfig::insecure(), 0));
    assert_eq!(records.len(), 81, "10 + 1 + 70 appends, no retry written");
    assert!(records.iter().all(|r| r.payload != b"retry" || r.producer.unwrap().seq == 10));
    assert!(q.leader.metric_sum("corelog_producers") >= 1.0);
    assert!(q.leader.metric_sum("corelog_producer_state_bytes") > 0.0);
    // The CLI: a producer continued by hand; a re-sent sequence prints its position.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(BIN)
            .args(["append", "--insecure", "--addr", &addr])
            .args(args)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let (ok, out, err) = cli(&["--producer", "0x5eed", "--seq", "0", "one", "two"]);
    assert!(ok, "{err}");
    assert!(err.contains("producer 0x0000000000005eed shard 0: next sequence 2"), "{err}");
    let first: Vec<&str> = out.lines().collect();
    assert_eq!(first.len(), 2, "{out}");
    let (ok, out, err) = cli(&["--producer", "24301", "--seq", "1", "two again", "three"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("{} duplicate", first[1]), "{out}");
    assert!(!lines[1].ends_with("duplicate"), "{out}");
    let (ok, _, err) = cli(&["--producer", "0x5eed", "--seq", "9", "gap"]);
    assert!(!ok && err.contains("SequenceGap"), "{err}");
}

/// One frame read back: req_id, op, and (offset, duplicate) of an `Appended2`.
type Answer = (u64, u8, Option<(u64, bool)>);

/// Reads `n` frames from `s`.
fn read_frames(s: &mut std::net::TcpStream, n: usize) -> Vec<Answer> {
    use corelog_client::codec::{decode_frame, Response};
    use std::io::Read;
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        let mut chunk = [0u8; 4096];
        let k = s.read(&mut chunk).expect("answer before the read timeout");
        assert!(k > 0, "closed after {out:?}");
        buf.extend_from_slice(&chunk[..k]);
        while let Some((f, used)) = decode_frame(&buf).unwrap() {
            let a = match Response::parse(&f).unwrap() {
                Response::Appended2 { offset, duplicate, .. } => Some((offset, duplicate)),
                _ => None,
            };
            out.push((f.req_id, f.op, a));
            buf.drain(..used);
        }
    }
    out
}

/// A retry whose original is not committed yet waits for it; an append sent behind the
/// retry on the same connection is answered after it, even when one follower ack
/// commits both (answers leave in request order).
#[test]
fn a_retry_waiting_for_its_original_is_answered_before_the_appends_behind_it() {
    use corelog_client::codec::{self, op, ProducerSeq, Request};
    use std::io::Write;
    let (_dir, p) = started_pair_in("idem_order", &["--shard-count", "1"]);
    let connect = || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", p.leader.ports.client)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut f = Vec::new();
        Request::Hello { version: 2 }.encode(1, &mut f);
        s.write_all(&f).unwrap();
        assert_eq!(read_frames(&mut s, 1)[0].1, op::HELLO_OK);
        s
    };
    let (mut first, mut second) = (connect(), connect());
    let wait_metric = |name: &str, v: f64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.leader.metric_sum(name) < v {
            assert!(Instant::now() < deadline, "{name} never reached {v}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // The follower has accepted the leader's epoch (before that, appends are held,
    // not written); then it is frozen: nothing is committed while it is.
    wait_log(&p.leader, "accepted by the follower");
    signal(&p.follower, libc::SIGSTOP);
    let id = ProducerSeq { id: 0xabc, seq: 0 };
    let mut f = Vec::new();
    codec::encode_append2(2, Some(id), None, b"original", &mut f);
    first.write_all(&f).unwrap();
    wait_metric("corelog_log_end_offset", 1.0); // the original has its offset
    let mut f = Vec::new();
    codec::encode_append2(2, Some(id), None, b"retry", &mut f);
    codec::encode_append2(3, Some(ProducerSeq { seq: 1, ..id }), None, b"next", &mut f);
    second.write_all(&f).unwrap();
    wait_metric("corelog_append_duplicates_total", 1.0); // the retry waits for offset 0
    wait_metric("corelog_log_end_offset", 2.0); // "next" is written behind it
    signal(&p.follower, libc::SIGCONT);
    let got = read_frames(&mut second, 2);
    assert_eq!(got, vec![(2, op::APPENDED2, Some((0, true))), (3, op::APPENDED2, Some((1, false)))]);
    assert_eq!(read_frames(&mut first, 1), vec![(2, op::APPENDED2, Some((0, false)))]);
}
