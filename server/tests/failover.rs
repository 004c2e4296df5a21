//! Coordinator mode (etcd) under real failures, with real processes and a real etcd on
//! loopback, under closed-loop load of 100 connections recorded by the workload module
//! (every operation: ok at its position / failed / unknown):
//!
//! - the leader SIGKILLed (CORELOG_FAILOVER_TRIALS trials, default 3): the follower
//!   takes over, writes resume, the old leader rejoins as follower and catches up;
//! - the follower SIGKILLed: the leader degrades and acknowledges alone, then the
//!   follower rejoins the in-sync set;
//! - the leader frozen (SIGSTOP) past its lease, and etcd frozen;
//! - every fault kind of docs/operations.md §8.1 in network namespaces, with the Rust or
//!   the Python client (`every_fault_kind_resumes_writes`): writes must resume while the
//!   fault lasts; `benches/failover.sh` runs it with 10+ trials per kind and both clients
//!   and checks the times against the targets.
//!
//! Every run's history is checked against the surviving leader's log (every ack read
//! back at its position with its bytes, nothing stored twice, nothing refused stored),
//! for epoch order (no append invoked after a newer epoch's first ack is acknowledged in
//! an older epoch: two leaders never ack at once), and with Porcupine (tools/porcupine;
//! needs `go`) for linearizability. Timings are printed, not asserted (noisy machines):
//! `benches/failover.sh` measures them over 20+ trials.
//!
//! Also here, without etcd: the workload and `corelog workload` against a static pair.

mod common;

use std::process::Command;
use std::time::Duration;

use common::coord::{
    cluster, epoch, epochs_in_order, health, netns_cluster, run_for, start_load, verify, Cluster, HOSTS,
};
use common::coord_run::{assert_no_ack_past_the_lease, cluster_under_load};
use common::{client_config, client_tls_args, dir_with_certs, runtime, started_pair, BIN};
use corelog_history::{self as workload, History, Logs, OpResult};

fn trials() -> usize {
    std::env::var("CORELOG_FAILOVER_TRIALS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(3)
}

#[test]
fn leader_sigkill_under_load_fails_over_and_loses_nothing() {
    let Some(mut c) = cluster("failover_leader_kill") else { return };
    let mut windows = Vec::new();
    for trial in 0..trials() {
        let leader = c.wait_pair(Duration::from_secs(60));
        let other = 1 - leader;
        let load = c.load(&format!("t{trial}"));
        run_for(&load, Duration::from_secs(2), 200, "before the kill");
        let kill_us = load.now_us();
        c.nodes[leader].kill9();
        c.wait_health(Duration::from_secs(30), "the follower leading", |h| h[other].contains("role=leader"));
        run_for(&load, Duration::from_secs(3), 200, "after the failover");
        c.nodes[leader].spawn(); // it must come back as follower and catch up, under load
        assert_eq!(c.wait_pair(Duration::from_secs(60)), other, "the restarted node took the lead back");
        run_for(&load, Duration::ZERO, 100, "after the rejoin");
        let h = load.finish();
        assert!(h.oks_after(kill_us) > 0, "no append acknowledged after the kill");
        let logs = c.read(other);
        let r = verify(&c.test, c.dir.path(), &h, &logs);
        c.wait_same_log(leader, other, Duration::from_secs(60));
        // Writes resumed: from the old leader's last ack to the new leader's first
        // (epochs from the read-back); the largest gap between any two acks of the trial
        // (which includes the rejoin) is printed beside it.
        let w = h.takeover(&logs, kill_us).expect("acknowledgements in the old and the new epoch");
        let gap = r.window.expect("acknowledgements");
        let rel = |t: u64| (t as i64 - kill_us as i64) / 1000;
        eprintln!(
            "trial {trial}: writes resumed after {} ms (old leader's last ack {:+} ms, new leader's first {:+} ms from the kill); largest gap {} ms; {} ok, {} unknown",
            w.len().as_millis(),
            rel(w.from_us),
            rel(w.to_us),
            gap.len().as_millis(),
            r.ok,
            r.unknown
        );
        windows.push(w.len());
    }
    windows.sort();
    let ms: Vec<u128> = windows.iter().map(Duration::as_millis).collect();
    eprintln!(
        "failover over {} trials: writes resumed after p50 {} ms, max {} ms (all: {ms:?})",
        ms.len(),
        ms[(ms.len() - 1) / 2],
        ms[ms.len() - 1]
    );
}

/// A follower that wins the term leads it in place (no restart, the epoch one above the
/// old leader's), and a client connection greeted as the follower's is closed at that
/// moment without an answer: clients count on a follower's connection never writing
/// (`client/`, `failed_on`), so it must not carry a write after the take-over.
#[test]
fn a_take_over_leads_in_place_and_closes_the_connections_greeted_as_a_followers() {
    use corelog_client::codec::{decode_frame, Request, Response, Role, PROTOCOL_VERSION};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(mut c) = cluster("failover_in_place") else { return };
    let leader = c.wait_pair(Duration::from_secs(60));
    let other = 1 - leader;
    let old = epoch(&health(&c.nodes[leader]));
    let rt = runtime();
    let mut s = rt.block_on(common::raw_mtls(c.nodes[other].ports.client, &c.certs)).expect("mTLS to the follower");
    let mut got = Vec::new();
    let hello = rt.block_on(async {
        let mut f = Vec::new();
        Request::Hello { version: PROTOCOL_VERSION }.encode(1, &mut f);
        s.write_all(&f).await.unwrap();
        s.flush().await.unwrap();
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(Some((f, used))) = decode_frame(&got) {
                let role = match Response::parse(&f).expect("a HelloOk") {
                    Response::HelloOk { role, .. } => role,
                    other => panic!("expected HelloOk, got {other:?}"),
                };
                got.drain(..used);
                return role;
            }
            let n = s.read(&mut buf).await.expect("HelloOk");
            assert!(n > 0, "the follower closed before its HelloOk");
            got.extend_from_slice(&buf[..n]);
        }
    });
    assert_eq!(hello, Role::Follower, "greeted as");
    c.nodes[leader].kill9();
    c.wait_health(Duration::from_secs(30), "the follower leading", |h| h[other].contains("role=leader"));
    // Nothing sent since the Hello: the connection must end, with no frame, by itself.
    let rest = rt.block_on(async {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
            .await
            .expect("the follower's connection still open 10 s after the take-over")
            .map(|_| rest)
    });
    if let Ok(rest) = rest {
        assert!(got.is_empty() && rest.is_empty(), "frames after the HelloOk: {got:?} {rest:?}");
    }
    let h = health(&c.nodes[other]);
    assert_eq!(epoch(&h), old + 1, "the new leader's epoch: {h}");
    let log = c.nodes[other].log_text();
    assert!(log.contains("in place from offset"), "{log}");
    assert!(!log.contains("re-executing"), "{log}");
    let fresh = rt.block_on(corelog_client::Client::connect(&c.nodes[other].addr(), &c.client())).expect("connect");
    rt.block_on(fresh.append(b"after the take-over")).expect("an append on a fresh connection");
}

#[test]
fn follower_sigkill_degrades_then_rejoins_the_in_sync_set() {
    let Some((mut c, leader, follower, load)) =
        cluster_under_load("failover_follower_kill", "f", 200, "before the kill")
    else {
        return;
    };
    c.nodes[follower].kill9();
    c.wait_metric(leader, "corelog_degraded", Duration::from_secs(15), |v| v == 1.0);
    c.wait_metric(leader, "corelog_insync_replicas", Duration::from_secs(1), |v| v == 1.0);
    let degraded_us = load.now_us();
    run_for(&load, Duration::ZERO, 200, "acknowledged alone while degraded");
    let restart_us = load.now_us();
    c.rejoin(leader, follower);
    run_for(&load, Duration::ZERO, 100, "after the rejoin");
    let h = load.finish();
    let alone = h
        .ops
        .iter()
        .filter(|o| matches!(o.result, OpResult::Ok(_)) && o.invoke_us > degraded_us && o.done_us < restart_us)
        .count();
    assert!(alone > 0, "nothing acknowledged while the follower was down");
    assert!(c.nodes[leader].log_text().contains("DEGRADED: follower"), "no DEGRADED line:\n{}", c.logs());
    let r = c.verify(leader, &h);
    c.wait_same_log(follower, leader, Duration::from_secs(60));
    eprintln!("follower kill: {alone} appends acknowledged by the leader alone; {} ok in all", r.ok);
}

#[test]
fn a_leader_frozen_past_its_lease_is_replaced_and_rejoins_as_follower() {
    let Some((c, leader, other, load)) = cluster_under_load("failover_frozen_leader", "z", 200, "before the freeze")
    else {
        return;
    };
    common::signal(&c.nodes[leader], libc::SIGSTOP);
    c.wait_health(Duration::from_secs(30), "the follower leading", |h| h[other].contains("role=leader"));
    run_for(&load, Duration::ZERO, 200, "on the new leader");
    common::signal(&c.nodes[leader], libc::SIGCONT);
    // It wakes, finds its lease gone, re-executes itself (same pid) and follows.
    assert_eq!(c.wait_pair(Duration::from_secs(60)), other);
    run_for(&load, Duration::ZERO, 100, "after the rejoin");
    let h = load.finish();
    c.verify(other, &h);
    c.wait_same_log(leader, other, Duration::from_secs(60));
}

#[test]
fn with_etcd_frozen_the_leader_stops_acknowledging_at_its_lease_end() {
    let Some((c, _, _, load)) = cluster_under_load("failover_etcd_frozen", "e", 200, "before the freeze") else {
        return;
    };
    let pid = c.etcd.pid();
    let frozen_us = load.now_us();
    // SAFETY: signals to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // The fault itself: etcd frozen for 2.5 s, well past the 1 s lease.
    std::thread::sleep(Duration::from_millis(2500));
    let thawed_us = load.now_us();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    c.wait_pair(Duration::from_secs(60));
    run_for(&load, Duration::from_secs(1), 200, "after etcd came back");
    let h = load.finish();
    // Asked again now: right after the thaw, /health can still show the frozen leader
    // leading (from before it noticed its lease was gone). Reading the log back from it
    // while it restarts as a follower most likely explains a CI run on 2026-11-26 where
    // every acknowledged record was on both nodes' disks but the read-back came up short.
    let leader = c.wait_pair(Duration::from_secs(60));
    // Nothing invoked past the lease (renewed last before the freeze) may complete
    // before etcd is back.
    assert_no_ack_past_the_lease(&h, frozen_us, thawed_us, "frozen");
    c.verify(leader, &h);
}

/// A static leader/follower pair (no etcd): the workload, its checks and Porcupine, and
/// `corelog workload` end to end.
#[test]
fn the_workload_and_corelog_workload_check_out_against_a_static_pair() {
    let (dir, certs) = dir_with_certs("workload_static");
    let p = started_pair(&dir, Some(&certs), &["--shard-count", "2"]);
    // Follower first in the list: every connection is sent on by NotLeader.
    let addrs = vec![p.follower.addr(), p.leader.addr()];
    let load = start_load(addrs.clone(), client_config(Some(&certs)), "s");
    run_for(&load, Duration::from_secs(1), 500, "static pair");
    let h = load.finish();
    let r = verify(
        "workload_static",
        dir.path(),
        &h,
        &runtime().block_on(workload::read_all(&p.leader.addr(), &client_config(Some(&certs)))).unwrap(),
    );
    assert_eq!(r.failed + r.unknown, 0, "errors with both nodes up:\n{}", h.around(0, 5));
    assert!(r.ok >= 500 && r.window.is_some());
    let hist = dir.path().join("cli.history");
    let mut cmd = Command::new(BIN);
    cmd.args(["workload", "--addr", &addrs.join(","), "--connections", "100", "--duration-ms", "1500", "--tag", "cli"])
        .args(client_tls_args(&certs, "client"))
        .arg("--history")
        .arg(&hist);
    if workload::go_available() {
        cmd.arg("--porcupine").arg(workload::porcupine_dir());
    }
    let o = cmd.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "corelog workload: {}\n{out}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    assert!(out.lines().any(|l| l.starts_with("cross-check OK")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("unavailability window: ")), "{out}");
    assert!(!workload::go_available() || out.contains("porcupine: linearizable"), "{out}");
    let text = std::fs::read_to_string(&hist).unwrap();
    assert!(
        text.lines().filter(|l| l.starts_with("op ")).count() > 100 && text.contains("\nshard 1 start "),
        "{hist:?}"
    );
    // This run's records follow the first run's in every shard: a shard's first `cli-`
    // record sits right after that shard's first-run records (all acknowledged above, so
    // their count per shard is exact). The shard a connection lands on follows the CPU
    // that handled its SYN, so the first run may have left a shard empty.
    let mut first_run = std::collections::BTreeMap::<u16, u64>::new();
    for o in &h.ops {
        if let OpResult::Ok(p) = &o.result {
            *first_run.entry(p.shard).or_default() += 1;
        }
    }
    assert_eq!(first_run.values().sum::<u64>(), r.ok as u64);
    let starts: Vec<(u16, u64)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("shard ")?.split(' ').collect();
            Some((f[0].parse().unwrap(), f[2].parse().unwrap()))
        })
        .collect();
    assert_eq!(starts.len(), 2, "{text}");
    for (shard, start) in starts {
        assert_eq!(start, first_run.get(&shard).copied().unwrap_or(0), "shard {shard}: {hist:?}");
    }
}

/// The epoch-order check itself, on synthetic histories.
#[test]
fn the_epoch_order_check_catches_an_old_leader_acking_after_a_new_one() {
    use corelog_client::{Position, Record};
    let op = |seq: u64, invoke_us: u64, done_us: u64, offset: u64| workload::Op {
        conn: 0,
        seq,
        payload: vec![],
        invoke_us,
        done_us,
        result: OpResult::Ok(Position { shard: 0, offset }),
    };
    let log = |epochs: &[u32]| -> Logs {
        let recs = epochs.iter().enumerate().map(|(i, &epoch)| Record {
            offset: i as u64,
            epoch,
            producer: None,
            stream: None,
            payload: vec![],
        });
        [(0u16, recs.collect())].into_iter().collect()
    };
    // Epoch 2's first ack completes at 20; an epoch-1 ack of an append invoked at 15
    // (concurrent) is fine, one invoked at 30 is not.
    let h = |late: u64| History {
        tag: "t".into(),
        ops: vec![op(0, 0, 10, 0), op(1, 15, 40, 1), op(2, 12, 20, 2), op(3, late, late + 5, 3)],
    };
    assert!(epochs_in_order(&h(25), &log(&[1, 1, 2, 2])).is_ok());
    let e = epochs_in_order(&h(30), &log(&[1, 1, 2, 1])).unwrap_err();
    assert!(e.starts_with("SPLIT BRAIN") && e.contains("invoked at 30 µs was acknowledged in epoch 1"), "{e}");
}

/// A fault of one node, made and undone by the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    LeaderKill,
    LeaderStop,
    /// The leader cut from etcd and from the follower (clients still reach it).
    LeaderCut,
    FollowerKill,
    /// The follower cut from etcd and from the leader.
    FollowerCut,
}

impl Fault {
    const ALL: [Fault; 5] =
        [Fault::LeaderKill, Fault::LeaderStop, Fault::LeaderCut, Fault::FollowerKill, Fault::FollowerCut];

    fn name(self) -> &'static str {
        match self {
            Fault::LeaderKill => "leader-kill",
            Fault::LeaderStop => "leader-stop",
            Fault::LeaderCut => "leader-cut",
            Fault::FollowerKill => "follower-kill",
            Fault::FollowerCut => "follower-cut",
        }
    }

    fn on_leader(self) -> bool {
        matches!(self, Fault::LeaderKill | Fault::LeaderStop | Fault::LeaderCut)
    }

    /// How long the fault lasts in trial `k`: 3 s; a freeze 2 to 4 s.
    fn hold(self, k: usize) -> Duration {
        match self {
            Fault::LeaderStop => Duration::from_millis(2000 + (k as u64 * 733) % 2001),
            _ => Duration::from_secs(3),
        }
    }

    /// Makes the fault on node `victim` (`on`), or undoes it: a kill is undone by a
    /// restart, a freeze by SIGCONT, a cut (from its peer and from etcd) by healing it.
    fn set(self, c: &mut Cluster, victim: usize, on: bool) {
        let (v, peer) = (HOSTS[victim], HOSTS[1 - victim]);
        match self {
            Fault::LeaderKill | Fault::FollowerKill if on => c.nodes[victim].kill9(),
            Fault::LeaderKill | Fault::FollowerKill => c.nodes[victim].spawn(),
            Fault::LeaderStop => common::signal(&c.nodes[victim], if on { libc::SIGSTOP } else { libc::SIGCONT }),
            Fault::LeaderCut | Fault::FollowerCut => {
                let net = c.net.as_ref().expect("netns");
                for to in [peer, "e"] {
                    if on {
                        net.cut(v, to);
                    } else {
                        net.heal(v, to);
                    }
                }
            }
        }
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.into())
}

/// The longest stretch without an acknowledgement around a fault at `from_us` that lasted
/// until `to_us`: the largest gap between consecutive ack completions from a second
/// before the fault to the first ack after its end. `(gap start, gap end)` in µs.
fn stall(h: &History, from_us: u64, to_us: u64) -> Option<(u64, u64)> {
    let mut done: Vec<u64> = h.ops.iter().filter(|o| matches!(o.result, OpResult::Ok(_))).map(|o| o.done_us).collect();
    done.sort_unstable();
    let lo = done.partition_point(|&t| t < from_us.saturating_sub(1_000_000));
    let hi = done.partition_point(|&t| t <= to_us);
    let window = &done[lo..(hi + 1).min(done.len())];
    window.windows(2).map(|w| (w[0], w[1])).max_by_key(|(a, b)| b - a)
}

/// Seconds since midnight UTC of `t`, as log lines are stamped.
fn day_secs(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs_f64() % 86_400.0
}

/// The lines of a node's log from `fault` on.
fn since_fault(log: &str, fault: std::time::SystemTime) -> Vec<&str> {
    let d = day_secs(fault);
    log.lines().filter(|l| log_secs(l).is_some_and(|t| t >= d)).collect()
}

/// Seconds since midnight UTC of a log line's timestamp (`YYYY-MM-DDTHH:MM:SS.ffffffZ`).
fn log_secs(line: &str) -> Option<f64> {
    let t = line.split_whitespace().next()?.split_once('T')?.1.trim_end_matches('Z');
    let mut f = t.split(':');
    let (h, m, s) = (f.next()?.parse::<f64>().ok()?, f.next()?.parse::<f64>().ok()?, f.next()?.parse::<f64>().ok()?);
    Some(h * 3600.0 + m * 60.0 + s)
}

/// The new leader's side of the last take-over after `fault` (its log, UTC): when it
/// claimed the term and when its first shard led it in place, in ms from the fault.
fn takeover_timeline(log: &str, fault: std::time::SystemTime) -> String {
    let d = day_secs(fault);
    let steps = [("claimed", "took over as leader"), ("led", "in place from offset")];
    let mut at = Vec::new();
    let lines = since_fault(log, fault);
    let mut from = 0;
    for (name, what) in steps {
        match lines[from..].iter().position(|l| l.contains(what)) {
            Some(i) => {
                from += i;
                at.push(format!("{name} {:+.0} ms", (log_secs(lines[from]).expect("filtered") - d) * 1000.0));
            }
            None => at.push(format!("{name} ?")),
        }
    }
    format!("new leader: {}", at.join(", "))
}

/// Every fault kind under a recorded closed-loop load, in network namespaces (a netns
/// cluster: clients reach both nodes; a cut is the node's links to etcd and to its peer):
/// leader kill -9, leader SIGSTOP (2–4 s), leader cut from etcd and follower (3 s),
/// follower kill -9, follower cut from etcd and leader (3 s). Each fault is undone and the
/// pair must be whole again before the next. Asserted: writes resume while the fault lasts
/// (the follower takes over, or the leader drops its follower and acknowledges alone);
/// every history passes `verify` (read-back, epoch order, Porcupine). The times are
/// printed, not asserted (`benches/failover.sh` checks them over 10+ trials per kind).
/// Env: CORELOG_FAULT_KINDS (comma-separated names, default all), CORELOG_FAULT_TRIALS
/// (per kind, default 1), CORELOG_FAULT_CLIENT (`rust` or `python`), CORELOG_FAULT_CONNS
/// (default 16), CORELOG_FAULT_SEED (a 2-shard data dir both nodes start from a copy of).
#[test]
fn every_fault_kind_resumes_writes() {
    let kinds: Vec<Fault> = {
        let want = env_or("CORELOG_FAULT_KINDS", "all");
        let all = Fault::ALL.into_iter();
        all.filter(|k| want == "all" || want.split(',').any(|w| w.trim() == k.name())).collect()
    };
    assert!(!kinds.is_empty(), "CORELOG_FAULT_KINDS names no fault kind");
    let trials: usize = env_or("CORELOG_FAULT_TRIALS", "1").parse().expect("CORELOG_FAULT_TRIALS");
    let client = env_or("CORELOG_FAULT_CLIENT", "rust");
    let conns: usize = env_or("CORELOG_FAULT_CONNS", "16").parse().expect("CORELOG_FAULT_CONNS");
    let seed = std::env::var_os("CORELOG_FAULT_SEED").map(std::path::PathBuf::from);
    for kind in kinds {
        // A cluster of its own per kind: every kind starts from the same logs (empty or the seed), so
        // that a kind measured later does not pay for a longer recovery scan.
        let test = format!("fault_kinds_{}", kind.name().replace('-', "_"));
        let Some(mut c) = netns_cluster(&test, seed.as_deref()) else { return };
        c.wait_pair(Duration::from_secs(60));
        let load = c.load_of(&client, &kind.name().replace('-', "_"), conns);
        load.run_for(Duration::from_secs(1), 200, "before the first fault");
        let mut faults = Vec::new();
        for k in 0..trials {
            let leader = c.wait_pair(Duration::from_secs(60));
            let victim = if kind.on_leader() { leader } else { 1 - leader };
            let old = epoch(&health(&c.nodes[leader]));
            load.run_for(Duration::from_millis(300), 50, "before the fault");
            let (t0, from_us, wall) = (std::time::Instant::now(), load.now_us(), std::time::SystemTime::now());
            kind.set(&mut c, victim, true);
            // The fault's duration is the fault itself (what is waited for is measured).
            std::thread::sleep(kind.hold(k).saturating_sub(t0.elapsed()));
            let to_us = load.now_us();
            kind.set(&mut c, victim, false);
            let now = if kind.on_leader() {
                c.wait_pair_in(Duration::from_secs(60), |e| e > old)
            } else {
                c.wait_pair_in(Duration::from_secs(60), |e| e == old)
            };
            assert_eq!(now, if kind.on_leader() { 1 - leader } else { leader }, "{}: who leads", kind.name());
            load.run_for(Duration::from_millis(300), 50, "after the fault");
            if kind.on_leader() {
                let log = c.nodes[1 - leader].log_text();
                eprintln!("fault {} trial {k}: {}", kind.name(), takeover_timeline(&log, wall));
                // The follower that won the term led it without a restart.
                let since = since_fault(&log, wall).join("\n");
                assert!(
                    since.contains("leading in epoch") && since.contains("in place from offset"),
                    "{}: the take-over did not lead in place:\n{since}",
                    kind.name()
                );
                assert!(!since.contains("re-executing"), "{}: the new leader re-executed:\n{since}", kind.name());
            }
            faults.push((from_us, to_us));
        }
        let h = load.finish();
        let leader = c.wait_pair(Duration::from_secs(60));
        let r = c.verify(leader, &h);
        let mut ms = Vec::new();
        for (k, &(from_us, to_us)) in faults.iter().enumerate() {
            let (a, b) = stall(&h, from_us, to_us).expect("acknowledgements around the fault");
            let rel = |t: u64| (t as i64 - from_us as i64) / 1000;
            eprintln!(
                "fault {} trial {k}: writes resumed after {} ms (no ack from {:+} to {:+} ms of the fault, which lasted {} ms); {client} client",
                kind.name(),
                (b - a) / 1000,
                rel(a),
                rel(b),
                (to_us - from_us) / 1000
            );
            assert!(
                b <= to_us,
                "{}: writes resumed only after the fault ended (trial {k}):\n{}",
                kind.name(),
                c.logs()
            );
            ms.push((b - a) / 1000);
        }
        ms.sort_unstable();
        let mut why: Vec<&str> = h
            .ops
            .iter()
            .filter_map(|o| match &o.result {
                OpResult::Failed(e) | OpResult::Unknown(e) => Some(e.as_str()),
                OpResult::Ok(_) => None,
            })
            .collect();
        why.sort_unstable();
        why.dedup_by_key(|e| e.split(':').next().unwrap_or_default().to_string());
        eprintln!("fault kind {}: outcomes other than ok, e.g. {:?}", kind.name(), &why[..why.len().min(4)]);
        let records: usize = c.read(leader).values().map(Vec::len).sum();
        eprintln!("fault kind {}: {records} records in the log at the end", kind.name());
        eprintln!(
            "fault kind {} over {} trials ({client} client, {conns} connections): writes resumed after p50 {} ms, max {} ms (all: {ms:?}); {} ok, {} unknown, {} failed",
            kind.name(),
            ms.len(),
            ms[(ms.len() - 1) / 2],
            ms[ms.len() - 1],
            r.ok,
            r.unknown,
            r.failed
        );
    }
}
