//! `corelog quickstart --failover`: etcd (from PATH) and two nodes in coordinator mode
//! on loopback with generated certificates; a recorded closed-loop load over both
//! addresses ([`crate::workload`]); the leader SIGKILLed halfway; the follower takes
//! over; the killed node restarted, rejoining as follower. Then every acknowledged append
//! is read back from the new leader at its position with its payload, the restarted node
//! must hold the same log, and everything is stopped by pid.
//!
//! Ports (base `--port`, default 19400): node a clients +0, replication +200, metrics
//! +400; node b +100, +300, +401; etcd clients +500, peers +501.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use corelog_client::ClientConfig;
use corelog_history::{self as workload, Logs};
use corelog_server::probe::http_get;

use super::{serve_args, start, Args, Proc};

const IDS: [&str; 2] = ["a", "b"];

struct Layout {
    base: u16,
}

impl Layout {
    fn client(&self, i: usize) -> u16 {
        self.base + 100 * i as u16
    }
    fn repl(&self, i: usize) -> u16 {
        self.base + 200 + 100 * i as u16
    }
    fn metrics(&self, i: usize) -> u16 {
        self.base + 400 + i as u16
    }
    fn etcd(&self) -> u16 {
        self.base + 500
    }
    fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.client(i))
    }
}

fn etcd_installed() -> bool {
    Command::new("etcd").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// etcd tuned for a 1 s lease (heartbeat 50 ms, election 250 ms); waits until it answers.
fn start_etcd(root: &Path, l: &Layout) -> Result<Proc, String> {
    let url = |p: u16| format!("http://127.0.0.1:{p}");
    let (client, peer) = (url(l.etcd()), url(l.etcd() + 1));
    let log = root.join("etcd.log");
    let f = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let child = Command::new("etcd")
        .args(["--name", "quickstart", "--data-dir"])
        .arg(root.join("etcd"))
        .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("quickstart={peer}")])
        .args(["--heartbeat-interval", "50", "--election-timeout", "250"])
        .stdout(Stdio::null())
        .stderr(f)
        .spawn()
        .map_err(|e| format!("start etcd: {e}"))?;
    eprintln!("quickstart: started etcd (pid {}), log {}", child.id(), log.display());
    let mut p = Proc { name: "etcd", child };
    let mut etcd = corelog_server::coord::etcd::Etcd::new(&client, Duration::from_secs(1))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if etcd.range_prefix("/corelog/").is_ok() {
            return Ok(p);
        }
        if let Ok(Some(st)) = p.child.try_wait() {
            return Err(format!("etcd exited during start-up ({st}); see {}", log.display()));
        }
        if Instant::now() >= deadline {
            return Err(format!("etcd not answering after 30 s; see {}", log.display()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn node_args(root: &Path, l: &Layout, i: usize) -> Vec<String> {
    let cert = ["server", "follower"][i];
    let local = |p: u16| format!("127.0.0.1:{p}");
    let ports = (l.client(i), l.repl(i), l.metrics(i));
    let mut v = serve_args(&root.join(IDS[i]), &root.join("certs"), cert, ports);
    for (flag, val) in [
        ("--coordinator", format!("http://127.0.0.1:{}", l.etcd())),
        ("--cluster", "quickstart".into()),
        ("--node-id", IDS[i].into()),
        ("--peer-id", IDS[1 - i].into()),
        ("--peer-repl", local(l.repl(1 - i))),
        ("--peer-client", local(l.client(1 - i))),
    ] {
        v.extend([flag.to_string(), val]);
    }
    v
}

/// The `role=… epoch=… insync=… degraded=…` line of node `i`'s /health ("" when down).
fn health(l: &Layout, i: usize) -> String {
    let r = http_get(l.metrics(i), "/health").unwrap_or_default();
    r.lines().last().filter(|s| s.contains("role=")).unwrap_or_default().trim().to_string()
}

/// Polls /health (20 ms) until one node leads with both in sync and the other follows;
/// the leader's index.
fn wait_pair(l: &Layout, within: Duration) -> Result<usize, String> {
    let deadline = Instant::now() + within;
    loop {
        let h = [health(l, 0), health(l, 1)];
        let lead = |s: &str| s.contains("role=leader") && s.contains("insync=2") && s.contains("degraded=0");
        for i in 0..2 {
            if lead(&h[i]) && h[1 - i].contains("role=follower") {
                return Ok(i);
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("no leader with an in-sync follower after {within:?}: health {h:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read(rt: &tokio::runtime::Runtime, l: &Layout, i: usize, cfg: &ClientConfig) -> Result<Logs, String> {
    rt.block_on(workload::read_all(&l.addr(i), cfg))
}

pub fn run(a: Args) -> Result<(), String> {
    if !etcd_installed() {
        return Err("etcd not found on PATH: install it (Debian: apt-get install etcd-server) \
                    or run `corelog quickstart` without --failover"
            .into());
    }
    if a.connections == 0 || a.seconds < 2 {
        return Err("--failover needs --connections ≥ 1 and --seconds ≥ 2".into());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let root = super::root(&a)?;
    let certs = root.join("certs");
    corelog_server::certs::generate(&certs, &[], &[])?;
    let l = Layout { base: a.port };
    let _etcd = start_etcd(&root, &l)?;
    let log = |i: usize| root.join(format!("{}.log", IDS[i]));
    let spawn = |i: usize| start(&exe, IDS[i], &node_args(&root, &l, i), &log(i));
    let mut nodes = [Some(spawn(0)?), Some(spawn(1)?)];
    let leader = wait_pair(&l, Duration::from_secs(30))?;
    let other = 1 - leader;
    println!(
        "quickstart: etcd on 127.0.0.1:{}; node {} leads on {} (insync=2), node {} follows on {}; {} connections for {} s, mTLS",
        l.etcd(),
        IDS[leader],
        l.addr(leader),
        IDS[other],
        l.addr(other),
        a.connections,
        a.seconds
    );
    let client =
        ClientConfig::mtls(certs.join("ca.pem"), certs.join("client.pem"), certs.join("client.key"), "localhost")
            .map_err(|e| e.to_string())?;
    let load = workload::spawn(workload::Config {
        addrs: vec![l.addr(0), l.addr(1)],
        client: client.clone().with_failover_timeout(Duration::from_secs(3)),
        connections: a.connections as usize,
        duration: Duration::from_secs(a.seconds + 120),
        payload_bytes: 64,
        tag: "quickstart".into(),
    })?;
    // The load's own length: half before the kill, half after.
    std::thread::sleep(Duration::from_millis(a.seconds * 500));
    let before = load.live.oks();
    let kill_us = load.now_us();
    let mut dead = nodes[leader].take().expect("the leader runs");
    dead.child.kill().map_err(|e| format!("SIGKILL node {}: {e}", IDS[leader]))?;
    let _ = dead.child.wait();
    drop(dead);
    println!("quickstart: SIGKILL to node {} (the leader) after {before} acknowledged appends", IDS[leader]);
    let took = Instant::now();
    while !health(&l, other).contains("role=leader") {
        if took.elapsed() > Duration::from_secs(30) {
            load.finish();
            return Err(format!("node {} did not take over within 30 s; see {}", IDS[other], log(other).display()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(a.seconds * 500));
    println!("quickstart: node {} leads; restarting node {}", IDS[other], IDS[leader]);
    nodes[leader] = Some(spawn(leader)?);
    let rejoined = wait_pair(&l, Duration::from_secs(60));
    let h = load.finish();
    if rejoined? != other {
        return Err(format!("node {} took the lead back after its restart", IDS[leader]));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let logs = read(&rt, &l, other, &client)?;
    let hist = root.join("quickstart.history");
    h.write(&hist, Some(&logs)).map_err(|e| format!("{}: {e}", hist.display()))?;
    let report = workload::check(&h, &logs).map_err(|e| format!("cross-check FAILED: {e}"))?;
    match h.takeover(&logs, kill_us) {
        Some(g) => println!(
            "quickstart: failover: writes resumed after {} ms (the old leader's last acknowledgement {:+} ms, the new leader's first {:+} ms from the kill)",
            g.len().as_millis(),
            (g.from_us as i64 - kill_us as i64) / 1000,
            (g.to_us as i64 - kill_us as i64) / 1000
        ),
        None => return Err("no acknowledgement by the new leader".into()),
    }
    println!("quickstart: {report}");
    wait_same_log(&rt, &l, leader, &client, &logs)?;
    println!("quickstart: history {}; data, certificates and logs in {}", hist.display(), root.display());
    drop(nodes);
    Ok(())
}

/// Waits (60 s at most) until node `i`, rejoined as follower, holds `logs` record for
/// record.
fn wait_same_log(
    rt: &tokio::runtime::Runtime,
    l: &Layout,
    i: usize,
    client: &ClientConfig,
    logs: &Logs,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = read(rt, l, i, client)?;
        if got == *logs {
            let n: usize = got.values().map(Vec::len).sum();
            println!(
                "quickstart: node {} rejoined as follower and holds the same {n} records, record for record",
                IDS[i]
            );
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("node {}'s log differs from the leader's 60 s after the run", IDS[i]));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
