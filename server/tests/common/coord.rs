//! Coordinator-mode clusters for the failover and partition tests: a single-member etcd
//! and two nodes `a` and `b` (on loopback, or in network namespaces), a recorded
//! closed-loop workload against them, and the checks of its history: every ack read back
//! at its position with its bytes (`workload::check`), epoch order (no split brain) and
//! Porcupine (tools/porcupine; needs `go`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::etcd::Etcd;
use super::netns::Net;
use super::{certs, client_config, runtime, Node, Ports, TempDir};
use corelog_client::ClientConfig;
use corelog_server::workload::{self, Background, History, Linearizability, Logs, OpResult, Report};

pub const CONNECTIONS: usize = 100;

/// etcd, then two coordinator-mode nodes `a` and `b`. Dropped in this order: nodes,
/// etcd, namespaces, data.
pub struct Cluster {
    pub nodes: [Node; 2],
    pub etcd: Etcd,
    pub net: Option<Net>,
    pub certs: PathBuf,
    pub dir: TempDir,
    pub test: String,
}

/// How node `i` runs: where it listens, where the test reaches it, what it dials.
pub struct Wiring {
    /// Host of its listening sockets ("127.0.0.1", "0.0.0.0").
    pub listen: String,
    /// Where the test (the client) reaches it.
    pub host: String,
    /// Command prefix (`ip netns exec NS`), or none.
    pub wrap: Vec<String>,
    pub ports: Ports,
    /// `--peer-repl`, `--peer-client` (as the client sees the peer), `--coordinator`.
    pub peer_repl: String,
    pub peer_client: String,
    pub etcd: String,
}

/// Node `i` (0: `a`, 1: `b`) of the pair, data in `dir/<id>`.
fn coord_args(cluster: &str, dir: &Path, certs: &Path, i: usize, w: &Wiring) -> Vec<String> {
    let (id, peer, cert) = [("a", "b", "server"), ("b", "a", "follower")][i];
    let f = |name: String| certs.join(name).display().to_string();
    let listen = |p: u16| format!("{}:{p}", w.listen);
    [
        "serve",
        "--data-dir",
        &dir.join(id).display().to_string(),
        "--listen",
        &listen(w.ports.client),
        "--repl-listen",
        &listen(w.ports.repl),
        "--coordinator",
        &w.etcd,
        "--cluster",
        cluster,
        "--node-id",
        id,
        "--peer-id",
        peer,
        "--peer-repl",
        &w.peer_repl,
        "--peer-client",
        &w.peer_client,
        "--lease-ttl-ms",
        "1000",
        "--min-insync",
        "1",
        "--metrics-listen",
        &listen(w.ports.metrics),
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

/// On loopback. None (after `common::skip`) where etcd is not installed.
pub fn cluster(test: &str) -> Option<Cluster> {
    let dir = TempDir::new(test);
    let etcd = Etcd::start(test, dir.path())?;
    let p = [fixed_ports(), fixed_ports()];
    let local = |port: u16| format!("127.0.0.1:{port}");
    let wiring = |i: usize| Wiring {
        listen: "127.0.0.1".into(),
        host: "127.0.0.1".into(),
        wrap: Vec::new(),
        ports: p[i],
        peer_repl: local(p[1 - i].repl),
        peer_client: local(p[1 - i].client),
        etcd: etcd.endpoint(),
    };
    let w = [wiring(0), wiring(1)];
    Some(Cluster::start(test, dir, etcd, None, w))
}

/// The `role=… epoch=… insync=… degraded=…` part of a node's /health; "" when down.
pub fn health(n: &Node) -> String {
    n.http("/health")
        .ok()
        .and_then(|r| r.lines().last().map(|l| l.trim().to_string()))
        .filter(|l| l.contains("role="))
        .unwrap_or_default()
}

/// The epoch in a /health line (`role=… epoch=N …`).
pub fn epoch(health: &str) -> u32 {
    let e = health.split_whitespace().find_map(|w| w.strip_prefix("epoch="));
    e.and_then(|e| e.parse().ok()).unwrap_or_else(|| panic!("no epoch in {health:?}"))
}

impl Cluster {
    /// Starts nodes `a` and `b` (not waiting for them), certificates in `dir/certs`.
    pub fn start(test: &str, dir: TempDir, etcd: Etcd, net: Option<Net>, wiring: [Wiring; 2]) -> Cluster {
        let certs = certs(dir.path());
        let name = format!("{test}_{}", std::process::id());
        let node = |i: usize, id: &str| {
            let w = &wiring[i];
            let mut n = Node::new(id, dir.path().join(id), w.ports, coord_args(&name, dir.path(), &certs, i, w));
            (n.host, n.wrap) = (w.host.clone(), w.wrap.clone());
            n
        };
        let mut nodes = [node(0, "a"), node(1, "b")];
        nodes[0].spawn();
        nodes[1].spawn();
        Cluster { nodes, etcd, net, certs, dir, test: test.into() }
    }

    /// Polls (20 ms) until `cond` holds on the nodes' health lines; panics with the
    /// logs after `within`.
    pub fn wait_health(&self, within: Duration, what: &str, cond: impl Fn(&[String; 2]) -> bool) -> [String; 2] {
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
    pub fn wait_pair(&self, within: Duration) -> usize {
        self.wait_pair_in(within, |_| true)
    }

    /// `wait_pair` with the leader in an epoch for which `epoch_ok` holds (a /health line
    /// may be from before a role change the node has yet to notice).
    pub fn wait_pair_in(&self, within: Duration, epoch_ok: impl Fn(u32) -> bool) -> usize {
        let h = self.wait_health(within, "one leader (insync=2, the epoch expected) and one follower", |h| {
            let lead = |l: &String| {
                l.contains("role=leader") && l.contains("insync=2") && l.contains("degraded=0") && epoch_ok(epoch(l))
            };
            (lead(&h[0]) && h[1].contains("role=follower")) || (lead(&h[1]) && h[0].contains("role=follower"))
        });
        usize::from(!h[0].contains("role=leader"))
    }

    /// Polls a metric of node `i` until `cond` holds; panics after `within`.
    pub fn wait_metric(&self, i: usize, name: &str, within: Duration, cond: impl Fn(f64) -> bool) {
        let deadline = Instant::now() + within;
        loop {
            let m = self.nodes[i].http("/metrics").unwrap_or_default();
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

    pub fn logs(&self) -> String {
        let nodes: String = self.nodes.iter().map(|n| format!("---- {} ----\n{}\n", n.name, n.log_text())).collect();
        let etcd = self.etcd.log_text();
        let tail = &etcd[etcd.len().saturating_sub(4000)..];
        format!("{nodes}---- etcd (tail) ----\n{tail}")
    }

    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(Node::addr).collect()
    }

    pub fn client(&self) -> ClientConfig {
        client_config(Some(&self.certs))
    }

    pub fn load(&self, tag: &str) -> Background {
        start_load(self.addrs(), self.client(), tag)
    }

    pub fn read(&self, i: usize) -> Logs {
        runtime().block_on(workload::read_all(&self.nodes[i].addr(), &self.client())).expect("read back")
    }

    /// Checks `h` against the log of node `leader` (see the module docs); writes the
    /// history next to the data (kept on failure).
    pub fn verify(&self, leader: usize, h: &History) -> Report {
        let logs = self.read(leader);
        verify(&self.test, self.dir.path(), h, &logs)
    }

    /// Waits (bounded) until node `i`'s log equals node `leader`'s, record by record.
    /// Either may be ahead for a moment (the leader shows a record only once the
    /// follower's confirmation arrived), but the two never disagree where both hold.
    pub fn wait_same_log(&self, i: usize, leader: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let want = self.read(leader);
            let got = self.read(i);
            if got == want {
                return;
            }
            let lens = |l: &Logs| l.values().map(Vec::len).collect::<Vec<_>>();
            let agree = want.iter().all(|(s, w)| got.get(s).is_some_and(|g| w.starts_with(g) || g.starts_with(w)));
            assert!(agree, "{}'s log disagrees with the leader's", self.nodes[i].name);
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

pub fn start_load(addrs: Vec<String>, client: ClientConfig, tag: &str) -> Background {
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
pub fn run_for(load: &Background, at_least: Duration, more: u64, what: &str) {
    let (from, base) = (Instant::now(), load.live.oks());
    let ok = load.wait_until(Duration::from_secs(60), |n| n >= base + more && from.elapsed() >= at_least);
    assert!(ok, "{what}: fewer than {more} acknowledgements in 60 s ({} since)", load.live.oks() - base);
}

/// The history's checks against `logs`: read-back, epoch order, Porcupine.
pub fn verify(test: &str, dir: &Path, h: &History, logs: &Logs) -> Report {
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
        super::skip(&format!("{test}: porcupine"), "go not on PATH");
    }
    eprintln!("{}: {r}; unavailability window {}", h.tag, r.window.map_or("-".to_string(), |g| g.to_string()));
    r
}

/// Two leaders never acknowledge at once: no append invoked after the first
/// acknowledgement of an epoch completed is acknowledged in an older epoch. (Sound
/// with the client's clock: a recorded invocation is no later, a recorded completion
/// no earlier, than the real one.)
pub fn epochs_in_order(h: &History, logs: &Logs) -> Result<(), String> {
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
