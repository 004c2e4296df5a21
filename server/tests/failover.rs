//! Coordinator mode (etcd) under real failures, with real processes and a real etcd on
//! loopback, under closed-loop load of 100 connections recorded by the workload module
//! (every operation: ok at its position / failed / unknown):
//!
//! - the leader SIGKILLed (CORELOG_FAILOVER_TRIALS trials, default 3): the follower
//!   takes over, writes resume, the old leader rejoins as follower and catches up;
//! - the follower SIGKILLed: the leader degrades and acknowledges alone, then the
//!   follower rejoins the in-sync set;
//! - the leader frozen (SIGSTOP) past its lease, and etcd frozen.
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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::{certs, client_config, http_get, ports, runtime, Mode, Node, Ports, TempDir, BIN};
use corelog_client::ClientConfig;
use corelog_server::workload::{self, Background, History, Linearizability, Logs, OpResult, Report};

const CONNECTIONS: usize = 100;

/// etcd, then two coordinator-mode nodes `a` and `b`. Dropped in this order: nodes,
/// etcd, data.
struct Cluster {
    nodes: [Node; 2],
    etcd: Etcd,
    certs: PathBuf,
    dir: TempDir,
    test: String,
}

/// Node `i` (0: `a`, 1: `b`) of the pair, data in `dir/<id>`.
fn coord_args(etcd: &Etcd, cluster: &str, dir: &Path, certs: &Path, i: usize, ports: [Ports; 2]) -> Vec<String> {
    let (id, peer, cert) = [("a", "b", "server"), ("b", "a", "follower")][i];
    let (me, other, data) = (ports[i], ports[1 - i], dir.join(id));
    let f = |name: String| certs.join(name).display().to_string();
    let loopback = |p: u16| format!("127.0.0.1:{p}");
    [
        "serve",
        "--data-dir",
        &data.display().to_string(),
        "--listen",
        &loopback(me.client),
        "--repl-listen",
        &loopback(me.repl),
        "--coordinator",
        &etcd.endpoint(),
        "--cluster",
        cluster,
        "--node-id",
        id,
        "--peer-id",
        peer,
        "--peer-repl",
        &loopback(other.repl),
        "--peer-client",
        &loopback(other.client),
        "--lease-ttl-ms",
        "1000",
        "--min-insync",
        "1",
        "--metrics-listen",
        &loopback(me.metrics),
        "--shard-count",
        "2",
        "--segment-bytes",
        &(4u64 << 20).to_string(),
        "--cert",
        &f(format!("{cert}.pem")),
        "--key",
        &f(format!("{cert}.key")),
        "--client-ca",
        &f("ca.pem".into()),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Like `common::ports`, but below the kernel's ephemeral range: these nodes re-bind
/// their ports on every restart and role change (re-exec), and a port in that range may
/// meanwhile have become the local end of one of the workload's many reconnections
/// (seen: "listen …: Address already in use" on a restart).
fn fixed_ports() -> Ports {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let ephemeral = range.split_whitespace().next().and_then(|p| p.parse::<u32>().ok()).unwrap_or(32768);
    let (lo, span) = (10_000u32, ephemeral.saturating_sub(10_000).max(48));
    let start = (std::process::id() % 64) * 24 * 4;
    let free = |p: u32| std::net::TcpListener::bind(("127.0.0.1", p as u16)).is_ok();
    for _ in 0..span / 24 {
        let base = lo + (start + NEXT.fetch_add(24, Ordering::SeqCst)) % (span - 24);
        if (base..base + 24).all(free) {
            let b = base as u16;
            return Ports { client: b, repl: b + 10, metrics: b + 20 };
        }
    }
    panic!("no 24 consecutive free ports in {lo}..{ephemeral}");
}

/// None (after `common::skip`) where etcd is not installed.
fn cluster(test: &str) -> Option<Cluster> {
    let dir = TempDir::new(test);
    let etcd = Etcd::start(test, dir.path())?;
    let certs = certs(dir.path());
    let p = [fixed_ports(), fixed_ports()];
    let name = format!("{test}_{}", std::process::id());
    let node = |i: usize, id: &str| {
        Node::new(id, dir.path().join(id), p[i], coord_args(&etcd, &name, dir.path(), &certs, i, p))
    };
    let mut nodes = [node(0, "a"), node(1, "b")];
    nodes[0].spawn();
    nodes[1].spawn();
    Some(Cluster { nodes, etcd, certs, dir, test: test.into() })
}

/// The `role=… epoch=… insync=… degraded=…` part of a node's /health; "" when down.
fn health(n: &Node) -> String {
    http_get(n.ports.metrics, "/health")
        .ok()
        .and_then(|r| r.lines().last().map(|l| l.trim().to_string()))
        .filter(|l| l.contains("role="))
        .unwrap_or_default()
}

impl Cluster {
    /// Polls (20 ms) until `cond` holds on the nodes' health lines; panics with the
    /// logs after `within`.
    fn wait_health(&self, within: Duration, what: &str, cond: impl Fn(&[String; 2]) -> bool) -> [String; 2] {
        let deadline = Instant::now() + within;
        loop {
            let h = [health(&self.nodes[0]), health(&self.nodes[1])];
            if cond(&h) {
                return h;
            }
            if Instant::now() >= deadline {
                panic!("not {what} within {within:?}: health {h:?}\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until one node leads with both in sync and the other follows; its index.
    fn wait_pair(&self, within: Duration) -> usize {
        let h = self.wait_health(within, "one leader (insync=2) and one follower", |h| {
            let lead = |l: &String| l.contains("role=leader") && l.contains("insync=2") && l.contains("degraded=0");
            (lead(&h[0]) && h[1].contains("role=follower")) || (lead(&h[1]) && h[0].contains("role=follower"))
        });
        usize::from(!h[0].contains("role=leader"))
    }

    /// Polls a metric of node `i` until `cond` holds; panics after `within`.
    fn wait_metric(&self, i: usize, name: &str, within: Duration, cond: impl Fn(f64) -> bool) {
        let deadline = Instant::now() + within;
        loop {
            let m = http_get(self.nodes[i].ports.metrics, "/metrics").unwrap_or_default();
            let v = m.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok());
            if v.is_some_and(&cond) {
                return;
            }
            if Instant::now() >= deadline {
                panic!("{name} on {} is {v:?} after {within:?}\n{}", self.nodes[i].name, self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn logs(&self) -> String {
        let nodes: String = self.nodes.iter().map(|n| format!("---- {} ----\n{}\n", n.name, n.log_text())).collect();
        let etcd = self.etcd.log_text();
        let tail = &etcd[etcd.len().saturating_sub(4000)..];
        format!("{nodes}---- etcd (tail) ----\n{tail}")
    }

    fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(Node::addr).collect()
    }

    fn client(&self) -> ClientConfig {
        client_config(Some(&self.certs))
    }

    fn load(&self, tag: &str) -> Background {
        start_load(self.addrs(), self.client(), tag)
    }

    fn read(&self, i: usize) -> Logs {
        runtime().block_on(workload::read_all(&self.nodes[i].addr(), &self.client())).expect("read back")
    }

    /// Checks `h` against the log of node `leader` (see the module docs); writes the
    /// history next to the data (kept on failure).
    fn verify(&self, leader: usize, h: &History) -> Report {
        let logs = self.read(leader);
        verify(&self.test, self.dir.path(), h, &logs)
    }

    /// Waits (bounded) until node `i`'s log equals node `leader`'s, record by record.
    fn wait_same_log(&self, i: usize, leader: usize, within: Duration) {
        let want = self.read(leader);
        let deadline = Instant::now() + within;
        loop {
            let got = self.read(i);
            if got == want {
                return;
            }
            let lens = |l: &Logs| l.values().map(Vec::len).collect::<Vec<_>>();
            let prefix = want.iter().all(|(s, w)| got.get(s).is_some_and(|g| w.starts_with(g)));
            assert!(prefix, "{}'s log is not a prefix of the leader's", self.nodes[i].name);
            assert!(
                Instant::now() < deadline,
                "{} not caught up within {within:?}: {:?} of {:?} records",
                self.nodes[i].name,
                lens(&got),
                lens(&want)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn start_load(addrs: Vec<String>, client: ClientConfig, tag: &str) -> Background {
    workload::spawn(workload::Config {
        addrs,
        client: client.with_failover_timeout(Duration::from_secs(3)).with_request_timeout(Duration::from_secs(5)),
        connections: CONNECTIONS,
        duration: Duration::from_secs(300),
        payload_bytes: 48,
        tag: tag.into(),
    })
    .expect("workload")
}

/// Lets the load run at least `at_least` and until `more` further appends were
/// acknowledged (polled, at most 60 s).
fn run_for(load: &Background, at_least: Duration, more: u64, what: &str) {
    let (from, base) = (Instant::now(), load.live.oks());
    let ok = load.wait_until(Duration::from_secs(60), |n| n >= base + more && from.elapsed() >= at_least);
    assert!(ok, "{what}: fewer than {more} acknowledgements in 60 s ({} since)", load.live.oks() - base);
}

/// The history's checks against `logs`: read-back, epoch order, Porcupine.
fn verify(test: &str, dir: &Path, h: &History, logs: &Logs) -> Report {
    let file = dir.join(format!("{}.history", h.tag));
    h.write(&file, Some(logs)).expect("write history");
    let r = workload::check(h, logs)
        .unwrap_or_else(|e| panic!("cross-check FAILED ({} ops, history in {}):\n{e}", h.ops.len(), file.display()));
    epochs_in_order(h, logs).unwrap_or_else(|e| panic!("{e}\n(history in {})", file.display()));
    if workload::go_available() {
        match workload::porcupine(&workload::porcupine_dir(), &file).expect("porcupine") {
            Linearizability::Linearizable(s) => eprintln!("{s}"),
            v => panic!("{v:?} (history in {})", file.display()),
        }
    } else {
        common::skip(&format!("{test}: porcupine"), "go not on PATH");
    }
    eprintln!("{}: {r}; unavailability window {}", h.tag, r.window.map_or("-".to_string(), |g| g.to_string()));
    r
}

/// Two leaders never acknowledge at once: no append invoked after the first
/// acknowledgement of an epoch completed is acknowledged in an older epoch. (Sound
/// with the client's clock: a recorded invocation is no later, a recorded completion
/// no earlier, than the real one.)
fn epochs_in_order(h: &History, logs: &Logs) -> Result<(), String> {
    let epoch = |o: &workload::Op| match o.result {
        OpResult::Ok(p) => Some(logs[&p.shard][p.offset as usize].epoch),
        _ => None,
    };
    let mut first_ack = std::collections::BTreeMap::<u32, u64>::new();
    for o in &h.ops {
        if let Some(e) = epoch(o) {
            let t = first_ack.entry(e).or_insert(o.done_us);
            *t = (*t).min(o.done_us);
        }
    }
    for o in &h.ops {
        let Some(e) = epoch(o) else { continue };
        if let Some((newer, t)) = first_ack.range(e + 1..).find(|(_, &t)| o.invoke_us > t) {
            return Err(format!(
                "SPLIT BRAIN: an append invoked at {} µs was acknowledged in epoch {e}, after epoch {newer}'s first acknowledgement at {t} µs:\n{}",
                o.invoke_us,
                h.around(o.invoke_us, 5)
            ));
        }
    }
    Ok(())
}

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
        let r = c.verify(other, &h);
        c.wait_same_log(leader, other, Duration::from_secs(60));
        let w = r.window.expect("acknowledgements");
        let rel = |t: u64| (t as i64 - kill_us as i64) / 1000;
        eprintln!(
            "trial {trial}: unavailability window {} ms (from {:+} ms to {:+} ms after the kill; {} ok, {} unknown)",
            w.len().as_millis(),
            rel(w.from_us),
            rel(w.to_us),
            r.ok,
            r.unknown
        );
        windows.push(w.len());
    }
    windows.sort();
    let ms: Vec<u128> = windows.iter().map(Duration::as_millis).collect();
    eprintln!(
        "failover over {} trials: unavailability window p50 {} ms, max {} ms (all: {ms:?})",
        ms.len(),
        ms[(ms.len() - 1) / 2],
        ms[ms.len() - 1]
    );
}

#[test]
fn follower_sigkill_degrades_then_rejoins_the_in_sync_set() {
    let Some(mut c) = cluster("failover_follower_kill") else { return };
    let leader = c.wait_pair(Duration::from_secs(60));
    let follower = 1 - leader;
    let load = c.load("f");
    run_for(&load, Duration::from_secs(1), 200, "before the kill");
    c.nodes[follower].kill9();
    c.wait_metric(leader, "corelog_degraded", Duration::from_secs(15), |v| v == 1.0);
    c.wait_metric(leader, "corelog_insync_replicas", Duration::from_secs(1), |v| v == 1.0);
    let degraded_us = load.now_us();
    run_for(&load, Duration::ZERO, 200, "acknowledged alone while degraded");
    let restart_us = load.now_us();
    c.nodes[follower].spawn();
    c.wait_metric(leader, "corelog_insync_replicas", Duration::from_secs(60), |v| v == 2.0);
    c.wait_metric(leader, "corelog_degraded", Duration::from_secs(5), |v| v == 0.0);
    assert_eq!(c.wait_pair(Duration::from_secs(10)), leader, "the leader changed");
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
    let Some(c) = cluster("failover_frozen_leader") else { return };
    let leader = c.wait_pair(Duration::from_secs(60));
    let other = 1 - leader;
    let load = c.load("z");
    run_for(&load, Duration::from_secs(1), 200, "before the freeze");
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
    let Some(c) = cluster("failover_etcd_frozen") else { return };
    c.wait_pair(Duration::from_secs(60));
    let load = c.load("e");
    run_for(&load, Duration::from_secs(1), 200, "before the freeze");
    let pid = c.etcd.pid();
    let frozen_us = load.now_us();
    // SAFETY: signals to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // The fault itself: etcd frozen for 2.5 s, well past the 1 s lease.
    std::thread::sleep(Duration::from_millis(2500));
    let thawed_us = load.now_us();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let leader = c.wait_pair(Duration::from_secs(60));
    run_for(&load, Duration::ZERO, 200, "after etcd came back");
    let h = load.finish();
    // The leader acks only until its last renewal (sent before the freeze) + the TTL:
    // nothing invoked later than that may complete before etcd is back.
    let late: Vec<_> = h
        .ops
        .iter()
        .filter(|o| matches!(o.result, OpResult::Ok(_)) && o.invoke_us > frozen_us + 1_000_000 && o.done_us < thawed_us)
        .collect();
    assert!(
        late.is_empty(),
        "{} acks past the lease with etcd frozen, e.g.:\n{}",
        late.len(),
        h.around(late[0].invoke_us, 5)
    );
    c.verify(leader, &h);
}

/// A static leader/follower pair (no etcd): the workload, its checks and Porcupine, and
/// `corelog workload` end to end.
#[test]
fn the_workload_and_corelog_workload_check_out_against_a_static_pair() {
    let dir = TempDir::new("workload_static");
    let certs = certs(dir.path());
    let (lp, fp) = (ports(), ports());
    let (ld, fd) = (dir.path().join("leader"), dir.path().join("follower"));
    let extra = ["--shard-count", "2"];
    let largs = Node::args(Mode::Leader { follower_repl: fp.repl }, &ld, lp, Some(&certs), "server", &extra);
    let fargs = Node::args(Mode::Follower { leader_client: lp.client }, &fd, fp, Some(&certs), "follower", &extra);
    let mut follower = Node::new("follower", fd, fp, fargs);
    let mut leader = Node::new("leader", ld, lp, largs);
    follower.start();
    leader.start();
    // Follower first in the list: every connection is sent on by NotLeader.
    let addrs = vec![follower.addr(), leader.addr()];
    let load = start_load(addrs.clone(), client_config(Some(&certs)), "s");
    run_for(&load, Duration::from_secs(1), 500, "static pair");
    let h = load.finish();
    let r = verify(
        "workload_static",
        dir.path(),
        &h,
        &runtime().block_on(workload::read_all(&leader.addr(), &client_config(Some(&certs)))).unwrap(),
    );
    assert_eq!(r.failed + r.unknown, 0, "errors with both nodes up:\n{}", h.around(0, 5));
    assert!(r.ok >= 500 && r.window.is_some());
    let hist = dir.path().join("cli.history");
    let mut cmd = Command::new(BIN);
    cmd.args(["workload", "--addr", &addrs.join(","), "--connections", "100", "--duration-ms", "1500", "--tag", "cli"])
        .arg("--ca")
        .arg(certs.join("ca.pem"))
        .arg("--cert")
        .arg(certs.join("client.pem"))
        .arg("--key")
        .arg(certs.join("client.key"))
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
    // This run's records follow the first run's: its shard 0 starts after them.
    assert!(text.lines().any(|l| l.starts_with("shard 0 start ") && !l.starts_with("shard 0 start 0 ")));
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
        let recs = epochs.iter().enumerate().map(|(i, &epoch)| Record { offset: i as u64, epoch, payload: vec![] });
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
