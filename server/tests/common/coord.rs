//! Coordinator-mode clusters for the failover and partition tests: a single-member etcd
//! and two nodes `a` and `b` (on loopback, or in network namespaces), a recorded
//! closed-loop workload against them (the Rust client's, in process, or the Python
//! client's, `client/python/tests/failover_load.py`), and the checks of its history:
//! every ack read back at its position with its bytes (`workload::check`), epoch order
//! (no split brain) and Porcupine (tools/porcupine; needs `go`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::etcd::Etcd;
use super::netns::Net;
use super::{certs, client_config, runtime, Node, Ports, TempDir};
use corelog_client::{ClientConfig, Position};
use corelog_history::{self as workload, Background, History, Linearizability, Logs, Op, OpResult, Report};

pub const CONNECTIONS: usize = 100;
/// Every node has its own namespace: the same ports everywhere.
pub const NETNS_PORTS: Ports = Ports { client: 9400, repl: 9500, metrics: 9600 };
/// Hosts of node 0 and node 1 in a netns cluster; `e` is etcd's, `c` the client's (the
/// test process, in the root namespace).
pub const HOSTS: [&str; 2] = ["a", "b"];

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

/// Shards per node and the executors that run them: `CORELOG_CRASH_LAYOUT=L/E` (at most
/// 8 shards: the port blocks), default 2/2 (one executor per shard).
pub fn layout() -> (u16, u16) {
    let v = std::env::var("CORELOG_CRASH_LAYOUT").unwrap_or_else(|_| "2/2".into());
    let parsed = v.split_once('/').and_then(|(l, e)| Some((l.parse::<u16>().ok()?, e.parse::<u16>().ok()?)));
    match parsed {
        Some((l, e)) if (1..=8).contains(&l) && (1..=l).contains(&e) => (l, e),
        _ => panic!("CORELOG_CRASH_LAYOUT={v}: give SHARDS/EXECUTORS, 1..=8 shards on 1..=shards executors"),
    }
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
        "--min-insync",
        "1",
        "--metrics-listen",
        &listen(w.ports.metrics),
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
    .chain(layout_flags())
    .collect()
}

/// The `serve` flags of the layout: `--shard-count L`, and `--executors E` only when the
/// layout shares executors (older builds, which the upgrade test runs, do not know the
/// flag: one executor per shard needs none).
pub fn layout_flags() -> Vec<String> {
    let (l, e) = layout();
    let mut f = vec!["--shard-count".to_string(), l.to_string()];
    if e < l {
        f.extend(["--executors".to_string(), e.to_string()]);
    }
    f
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
    cluster_on(test, super::BIN)
}

/// `cluster`, both nodes started on the binary `program`.
pub fn cluster_on(test: &str, program: &str) -> Option<Cluster> {
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
    Some(Cluster::start(test, dir, etcd, None, w, program))
}

/// etcd in `e`, node `a` in `a`, node `b` in `b`, links between all of them and `c` (this
/// process). Each node reaches its peer and etcd on their direct links; the client (and
/// `--peer-client`) uses the nodes' addresses on their links to `c`. None (after
/// `common::skip`) without etcd or network namespaces. With `seed` (a data dir of 2
/// shards, e.g. written by `corelog-biglog`), both nodes start from a copy of it.
pub fn netns_cluster(test: &str, seed: Option<&Path>) -> Option<Cluster> {
    if !Etcd::installed(test) {
        return None;
    }
    let links = [("a", "b"), ("a", "e"), ("b", "e"), ("c", "a"), ("c", "b"), ("c", "e")];
    let net = Net::new(test, &["a", "b", "e", "c"], &links)?;
    let dir = TempDir::new(test);
    if let Some(seed) = seed {
        for id in HOSTS {
            let to = dir.path().join(id);
            // cp: reflinks where the filesystem has them, sparse files kept sparse.
            let st = std::process::Command::new("cp")
                .args(["-a", "--reflink=auto", "--sparse=always"])
                .arg(seed)
                .arg(&to)
                .status()
                .expect("run cp");
            assert!(st.success(), "copying {} to {} failed: {st}", seed.display(), to.display());
        }
        // Written back before the nodes start: gigabytes of dirty pages flushed during the
        // first faults stall etcd's fsyncs (a lapsed lease measured as a slow take-over).
        let st = std::process::Command::new("sync").status().expect("run sync");
        assert!(st.success(), "sync: {st}");
    }
    let etcd = Etcd::start_in(test, dir.path(), &net.exec("e"), &net.addr("e", "c"))?;
    let wiring = |i: usize| {
        let (me, peer) = (HOSTS[i], HOSTS[1 - i]);
        Wiring {
            listen: "0.0.0.0".into(),
            host: net.addr(me, "c"),
            wrap: net.exec(me),
            ports: NETNS_PORTS,
            peer_repl: format!("{}:{}", net.addr(peer, me), NETNS_PORTS.repl),
            peer_client: format!("{}:{}", net.addr(peer, "c"), NETNS_PORTS.client),
            etcd: format!("http://{}:2379", net.addr("e", me)),
        }
    };
    let w = [wiring(0), wiring(1)];
    Some(Cluster::start(test, dir, etcd, Some(net), w, super::BIN))
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
    /// Starts nodes `a` and `b` on `program` (not waiting for them), certificates in
    /// `dir/certs`.
    pub fn start(
        test: &str,
        dir: TempDir,
        etcd: Etcd,
        net: Option<Net>,
        wiring: [Wiring; 2],
        program: &str,
    ) -> Cluster {
        let certs = certs(dir.path());
        let name = format!("{test}_{}", std::process::id());
        let node = |i: usize, id: &str| {
            let w = &wiring[i];
            let mut n = Node::new(id, dir.path().join(id), w.ports, coord_args(&name, dir.path(), &certs, i, w));
            (n.host, n.wrap, n.program) = (w.host.clone(), w.wrap.clone(), program.into());
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
                panic!("not {what} within {within:?}: health {h:?}\n{}\n{}", self.procs(), self.logs());
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

    /// Each node's process state (see `Node::proc_report`).
    pub fn procs(&self) -> String {
        self.nodes.iter().map(|n| format!("---- {} process ----\n{}\n", n.name, n.proc_report())).collect()
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

    /// A recorded load of `conns` connections by the client `kind` ("rust" or "python").
    pub fn load_of(&self, kind: &str, tag: &str, conns: usize) -> Load {
        match kind {
            "rust" => Load::Rust(start_load_n(self.addrs(), self.client(), tag, conns)),
            "python" => Load::Python(PyLoad::start(&self.addrs(), &self.certs, self.dir.path(), tag, conns)),
            k => panic!("no client {k:?}: rust or python"),
        }
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
    start_load_n(addrs, client, tag, CONNECTIONS)
}

fn start_load_n(addrs: Vec<String>, client: ClientConfig, tag: &str, connections: usize) -> Background {
    workload::spawn(workload::Config {
        addrs,
        client: client.with_failover_timeout(Duration::from_secs(3)).with_request_timeout(Duration::from_secs(5)),
        connections,
        duration: Duration::from_secs(600),
        payload_bytes: 48,
        tag: tag.into(),
    })
    .expect("workload")
}

/// A recorded load: the Rust workload in this process, or the Python client's in a child.
pub enum Load {
    Rust(Background),
    Python(PyLoad),
}

impl Load {
    /// µs since the load's start, on its history's clock.
    pub fn now_us(&self) -> u64 {
        match self {
            Load::Rust(b) => b.now_us(),
            Load::Python(p) => p.now_us(),
        }
    }

    pub fn oks(&self) -> u64 {
        match self {
            Load::Rust(b) => b.live.oks(),
            Load::Python(p) => p.oks.load(Ordering::Relaxed),
        }
    }

    /// Lets the load run at least `at_least` and until `more` further appends were
    /// acknowledged (polled, at most 60 s).
    pub fn run_for(&self, at_least: Duration, more: u64, what: &str) {
        let (from, base) = (Instant::now(), self.oks());
        let deadline = from + Duration::from_secs(60);
        while self.oks() < base + more || from.elapsed() < at_least {
            assert!(Instant::now() < deadline, "{what}: fewer than {more} acknowledgements in 60 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn finish(self) -> History {
        match self {
            Load::Rust(b) => b.finish(),
            Load::Python(p) => p.finish(),
        }
    }
}

/// `client/python/tests/failover_load.py` in a child process (the package from the source
/// tree; `CORELOG_PYTHON` names the interpreter, default `python3`), on this process's
/// monotonic clock: its history's times are µs since `t0`.
pub struct PyLoad {
    child: Child,
    t0: Instant,
    out: PathBuf,
    tag: String,
    oks: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
}

impl PyLoad {
    pub fn start(addrs: &[String], certs: &Path, dir: &Path, tag: &str, conns: usize) -> PyLoad {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf();
        let python = std::env::var("CORELOG_PYTHON").unwrap_or_else(|_| "python3".into());
        let out = dir.join(format!("{tag}.pyhistory"));
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid timespec; CLOCK_MONOTONIC is Instant's clock on Linux.
        assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) }, 0);
        let t0 = Instant::now();
        let t0_ns = ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128;
        let mut child = Command::new(&python)
            .arg(repo.join("client/python/tests/failover_load.py"))
            .args(["--addrs", &addrs.join(","), "--tag", tag, "--conns", &conns.to_string()])
            .arg("--certs")
            .arg(certs)
            .args(["--t0-ns", &t0_ns.to_string()])
            .arg("--out")
            .arg(&out)
            .env("PYTHONPATH", repo.join("client/python/src"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{python}: {e}"));
        let (oks, done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (o, d) = (oks.clone(), done.clone());
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match line.split_once(' ') {
                    Some(("oks", n)) => o.store(n.parse().unwrap_or(0), Ordering::Relaxed),
                    _ if line == "ready" => {
                        let _ = tx.send(());
                    }
                    _ if line == "done" => d.store(true, Ordering::Release),
                    _ => {}
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(30)).expect("the Python load said ready");
        PyLoad { child, t0, out, tag: tag.into(), oks, done }
    }

    fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    /// Stops the load (appends in flight get 5 s), then reads its history.
    fn finish(mut self) -> History {
        drop(self.child.stdin.take()); // EOF: stop
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.done.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the Python load did not finish within 60 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
        read_history(&self.out, &self.tag)
    }
}

impl Drop for PyLoad {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill(); // by pid
            let _ = self.child.wait();
        }
    }
}

/// A history in the workload's line format (`op CONN SEQ INVOKE_US DONE_US PAYLOAD ...`).
pub fn read_history(path: &Path, tag: &str) -> History {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut ops: Vec<Op> = text.lines().filter(|l| l.starts_with("op ")).map(op_of_line).collect();
    ops.sort_by_key(|o| (o.invoke_us, o.conn, o.seq));
    History { tag: tag.into(), ops }
}

fn op_of_line(line: &str) -> Op {
    let parsed = || -> Option<Op> {
        // op CONN SEQ INVOKE_US DONE_US PAYLOAD RESULT…
        let f: Vec<&str> = line.splitn(7, ' ').collect();
        let n = |i: usize| f.get(i)?.parse::<u64>().ok();
        let (kind, rest) = f.get(6)?.split_once(' ').unwrap_or((f.get(6)?, ""));
        let result = match kind {
            "ok" => {
                let (s, o) = rest.split_once(' ')?;
                OpResult::Ok(Position { shard: s.parse().ok()?, offset: o.parse().ok()? })
            }
            "failed" => OpResult::Failed(rest.into()),
            "unknown" => OpResult::Unknown(rest.into()),
            _ => return None,
        };
        let payload = f.get(5)?.as_bytes().to_vec();
        Some(Op { conn: n(1)? as u32, seq: n(2)?, payload, invoke_us: n(3)?, done_us: n(4)?, result })
    };
    parsed().unwrap_or_else(|| panic!("bad history line {line:?}"))
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
