//! Graceful shutdown (SIGTERM/SIGINT) against real processes:
//!
//! - SIGTERM to the leader of a pair under load: it stops taking appends (`ShuttingDown`),
//!   answers what it took, closes its connections and exits 0 within the deadline; then
//!   SIGINT to the follower, exit 0; neither log has a torn tail (`corelog inspect` exit
//!   0); each sealed its last segment, so the restart scans no tail; after it every
//!   acknowledged append reads back with its payload from both.
//! - with the follower frozen (SIGSTOP) the leader cannot answer what it took: a second
//!   signal exits at once with status 1, as does the deadline (`--shutdown-timeout-ms`).

mod common;

use std::time::{Duration, Instant};

use common::pair::{wait_caught_up, wait_log};
use common::*;
use corelog_client::{Client, ClientConfig};

#[test]
fn sigterm_under_load_answers_what_was_taken_and_exits_0() {
    let (_dir, mut p) = started_pair_in("shutdown-load", &["--shard-count", "2"]);
    let rt = runtime();
    let cfg = ClientConfig::insecure();
    let acked: Acked = Default::default();
    let load = load_until(&rt, &p.leader.addr(), &cfg, "term", &acked, 3000);
    let t = Instant::now();
    signal(&p.leader, libc::SIGTERM);
    assert_eq!(p.leader.wait_exit(Duration::from_secs(20)), Some(0), "{}", p.leader.log_text());
    let took = t.elapsed();
    let errors = rt.block_on(load).unwrap();
    let log = p.leader.log_text();
    assert!(log.contains("received SIGTERM") && log.contains("shut down cleanly"), "{log}");
    wait_caught_up_follower(&p.follower, &p.leader);
    signal(&p.follower, libc::SIGINT);
    assert_eq!(p.follower.wait_exit(Duration::from_secs(20)), Some(0), "{}", p.follower.log_text());
    assert!(p.follower.log_text().contains("received SIGINT"));
    for d in [&p.leader.data, &p.follower.data] {
        let (code, out) = inspect(d);
        assert_eq!(code, 0, "a torn tail or worse after a graceful shutdown:\n{out}");
        // A shard that holds records sealed its last segment at the stop, cut to its data
        // (4 MiB segments here; the load wrote far less than that since the last full one).
        let mut sealed = 0;
        for s in 0..2 {
            let mut logs: Vec<_> = std::fs::read_dir(d.join(format!("shard-{s}")))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect();
            logs.sort();
            let Some(last_sealed) = logs.len().checked_sub(2).map(|i| &logs[i]) else { continue };
            let len = std::fs::metadata(last_sealed).unwrap().len();
            assert!(len > 0 && len < 4 << 20 && len % 4096 == 0, "{}: {len} bytes", last_sealed.display());
            assert!(last_sealed.with_extension("idx").exists(), "{} has no index file", last_sealed.display());
            sealed += 1;
        }
        assert!(sealed > 0, "no shard of {} sealed a segment", d.display());
    }
    p.follower.start();
    p.leader.start();
    // Each shard sealed its last segment at the stop: the start reads no tail.
    for node in [&p.leader, &p.follower] {
        let log = node.log_text();
        assert!(log.contains("sealed the last segment at offset"), "{log}");
        let last = log.rsplit("---- start #").next().unwrap();
        let starts: Vec<_> = last.lines().filter(|l| l.contains(": recovered ")).collect();
        assert_eq!(starts.len(), 2, "{last}");
        assert!(starts.iter().all(|l| l.contains("segment(s) scanned (0 bytes)")), "{starts:#?}");
    }
    wait_caught_up(&p, Duration::from_secs(30));
    let n = acked.lock().unwrap().len();
    for node in [&p.leader, &p.follower] {
        let shards: Vec<_> = (0..2).map(|s| rt.block_on(read_all(&node.addr(), &cfg, s))).collect();
        verify_acked(&acked, &shards);
    }
    eprintln!("{n} appends acknowledged, {errors} connections refused at shutdown; the leader exited 0 after {took:?}");
    p.leader.kill9();
    p.follower.kill9();
}

/// The follower's log holds the leader's durable end as its metrics last showed it (the
/// leader is gone: compare with what the follower reports against the leader's log).
fn wait_caught_up_follower(f: &Node, l: &Node) {
    let (_, out) = inspect(&l.data);
    let want: f64 = out
        .lines()
        .filter(|x| x.contains(" records "))
        .map(|x| x.split_whitespace().skip_while(|w| *w != "next").nth(1).unwrap().parse::<f64>().unwrap())
        .sum();
    let deadline = Instant::now() + Duration::from_secs(20);
    while f.metric_sum("corelog_log_end_offset") < want {
        assert!(Instant::now() < deadline, "the follower never reached the leader's end {want}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One append answered: the follower has accepted the leader's epoch (before that a
/// leader writes nothing, so a frozen follower would leave the appends unwritten).
fn answered_once(rt: &tokio::runtime::Runtime, l: &Node) {
    rt.block_on(async {
        let c = Client::connect(&l.addr(), &ClientConfig::insecure()).await.unwrap();
        c.append(b"the epoch is accepted").await.unwrap();
    });
}

/// Appends that the leader takes and cannot answer (the follower is frozen), started in
/// the background; returns once the leader has written some of them.
fn stuck_appends(rt: &tokio::runtime::Runtime, l: &Node) -> tokio::task::JoinHandle<()> {
    let end0 = l.metric_sum("corelog_log_end_offset");
    let addr = l.addr();
    let h = rt.spawn(async move {
        let c = Client::connect(&addr, &ClientConfig::insecure()).await.unwrap();
        let _ = c.append(b"waits for a frozen follower").await;
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while l.metric_sum("corelog_log_end_offset") <= end0 {
        assert!(Instant::now() < deadline, "the leader did not write the append");
        std::thread::sleep(Duration::from_millis(10));
    }
    h
}

#[test]
fn a_second_signal_or_the_deadline_exits_at_once() {
    let (_dir, mut p) = started_pair_in("shutdown-stuck", &["--shard-count", "1", "--ack-timeout-ms", "60000"]);
    let rt = runtime();
    answered_once(&rt, &p.leader);
    signal(&p.follower, libc::SIGSTOP);
    let _a = stuck_appends(&rt, &p.leader);
    signal(&p.leader, libc::SIGTERM);
    wait_log(&p.leader, "received SIGTERM");
    let t = Instant::now();
    signal(&p.leader, libc::SIGTERM);
    assert_eq!(p.leader.wait_exit(Duration::from_secs(10)), Some(1));
    assert!(t.elapsed() < Duration::from_secs(5), "the second signal took {:?}", t.elapsed());
    assert!(p.leader.log_text().contains("second signal (SIGTERM); exiting now"), "{}", p.leader.log_text());

    // The deadline: 300 ms.
    p.leader.args.extend(["--shutdown-timeout-ms".to_string(), "300".to_string()]);
    signal(&p.follower, libc::SIGCONT);
    p.leader.start();
    answered_once(&rt, &p.leader);
    signal(&p.follower, libc::SIGSTOP);
    let _b = stuck_appends(&rt, &p.leader);
    let t = Instant::now();
    signal(&p.leader, libc::SIGTERM);
    assert_eq!(p.leader.wait_exit(Duration::from_secs(10)), Some(1));
    assert!(t.elapsed() < Duration::from_secs(5), "the deadline took {:?}", t.elapsed());
    assert!(p.leader.log_text().contains("not drained within 300ms"), "{}", p.leader.log_text());
    signal(&p.follower, libc::SIGCONT);
    p.follower.kill9();
}
