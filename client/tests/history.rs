//! Client-side history test of the Rust client (docs/protocol.md §6) against a real
//! leader + follower pair (the `corelog` binary: `CORELOG_BIN`, else
//! target/release/corelog): plain appends, stream appends and idempotent producers run
//! while the leader, the follower or both are killed (`kill -9`) and restarted, and
//! while bursts of appends are dropped mid-flight (cancellation). Every reported outcome
//! is checked against the log read back: `NotWritten` ⇒ absent, `Ok` ⇒ present at its
//! position with its payload, `Written` ⇒ present, every payload and (producer id,
//! sequence) at most once. `CORELOG_HISTORY_FAULTS` (default 8) and
//! `CORELOG_HISTORY_SECONDS` (default 25) bound it; benches/client-history.sh runs 200+.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelog_client::{Client, ClientConfig, Error, Expect, Outcome, Producer};

fn bin() -> PathBuf {
    let b = std::env::var_os("CORELOG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/corelog"));
    assert!(b.is_file(), "no corelog binary at {} (cargo build --release, or set CORELOG_BIN)", b.display());
    b
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `count` consecutive free loopback ports.
fn free_ports(count: u16) -> u16 {
    // A different start for every call of this process: nodes bind their ports only when
    // they start, so two calls in a row must not both find the same block free.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = (std::process::id() as u64).wrapping_mul(31).wrapping_add(call * 104_729);
    for i in 0..2000u64 {
        let base = 20_000 + ((seed.wrapping_mul(2654435761).wrapping_add(i * 7919)) % 12_000) as u16;
        if (base..base + count).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    panic!("no free ports");
}

/// One `corelog serve` process, killed by pid (SIGKILL) when dropped.
struct Node {
    args: Vec<String>,
    log: PathBuf,
    addr: String,
    child: Option<Child>,
}

impl Node {
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(bin())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn corelog");
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A static leader + follower pair, 2 shards, mTLS with `corelog certs`.
struct Pair {
    leader: Node,
    follower: Node,
    certs: PathBuf,
    dir: PathBuf,
}

impl Pair {
    fn start(test: &str) -> Pair {
        let dir = std::env::temp_dir().join(format!("corelog-client-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let certs = dir.join("certs");
        let ok = Command::new(bin()).args(["certs", "--out"]).arg(&certs).output().unwrap().status.success();
        assert!(ok, "corelog certs failed");
        let (l, f) = (free_ports(40), free_ports(40));
        let node = |name: &str, ident: &str, client: u16, repl: u16, role: &str, peer: String| {
            let c = |n: &str| certs.join(n).display().to_string();
            let mut args: Vec<String> = ["serve", "--role", role, "--data-dir"].map(String::from).to_vec();
            args.push(dir.join(name).display().to_string());
            args.extend([
                "--listen".into(),
                format!("127.0.0.1:{client}"),
                "--repl-listen".into(),
                format!("127.0.0.1:{repl}"),
                "--shard-count".into(),
                "2".into(),
                "--ack-timeout-ms".into(),
                "1000".into(),
            ]);
            let tls = [
                ("--cert", format!("{ident}.pem")),
                ("--key", format!("{ident}.key")),
                ("--client-ca", "ca.pem".into()),
            ];
            args.extend(tls.iter().flat_map(|(flag, file)| [flag.to_string(), c(file)]));
            args.extend(if role == "follower" {
                ["--leader-addr".into(), peer]
            } else {
                ["--follower-addr".into(), peer]
            });
            Node { args, log: dir.join(format!("{name}.log")), addr: format!("127.0.0.1:{client}"), child: None }
        };
        let leader = node("leader", "server", l, l + 20, "leader", format!("127.0.0.1:{}", f + 20));
        let follower = node("follower", "follower", f, f + 20, "follower", format!("127.0.0.1:{l}"));
        let mut p = Pair { leader, follower, certs, dir };
        p.follower.start();
        p.leader.start();
        p.wait_ready();
        p
    }

    fn cfg(&self) -> ClientConfig {
        let c = |n: &str| self.certs.join(n);
        ClientConfig::mtls(c("ca.pem"), c("client.pem"), c("client.key"), "localhost").unwrap()
    }

    fn addrs(&self) -> String {
        format!("{},{}", self.leader.addr, self.follower.addr)
    }

    /// Both nodes answer `Hello` on their client port (polled, at most 30 s).
    fn wait_ready(&mut self) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let cfg = self.cfg().with_connect_timeout(Duration::from_millis(300));
        let deadline = Instant::now() + Duration::from_secs(30);
        for a in [self.follower.addr.clone(), self.leader.addr.clone()] {
            while rt.block_on(Client::connect(&a, &cfg)).is_err() {
                assert!(Instant::now() < deadline, "{a} not ready within 30 s (logs in {})", self.dir.display());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// What the client said about one operation.
#[derive(Debug, Clone)]
struct Op {
    kind: &'static str,
    payload: Vec<u8>,
    /// `Some(Ok(position))`, `Some(Err(outcome))` (as `{:?}`: the same test builds
    /// against older clients that lack some outcomes), or None: dropped mid-flight.
    result: Option<Result<(u16, u64), String>>,
    why: String,
}

#[derive(Default)]
struct History {
    ops: Mutex<Vec<Op>>,
    seq: AtomicU64,
}

impl History {
    fn payload(&self, tag: &str, kind: &str) -> Vec<u8> {
        format!("{tag}-{kind}-{}", self.seq.fetch_add(1, Ordering::Relaxed)).into_bytes()
    }
    fn add(&self, kind: &'static str, payload: Vec<u8>, r: Option<Result<(u16, u64), Error>>) {
        let (result, why) = match r {
            None => (None, "dropped".to_string()),
            Some(Ok(p)) => (Some(Ok(p)), String::new()),
            Some(Err(e)) => (Some(Err(format!("{:?}", e.outcome()))), e.to_string()),
        };
        self.ops.lock().unwrap().push(Op { kind, payload, result, why });
    }
}

async fn one(kind: &'static str, c: &Client, p: Option<&Producer>, payload: &[u8]) -> Result<(u16, u64), Error> {
    match kind {
        "append" => c.append(payload).await.map(|p| (p.shard, p.offset)),
        "stream" => {
            let name = format!("s{}", payload.len() % 3);
            c.append_to(&name, Expect::Any, payload).await.map(|a| (a.position.shard, a.position.offset))
        }
        _ => p.expect("producer").append(payload).await.map(|a| (a.position.shard, a.position.offset)),
    }
}

async fn worker(i: usize, addrs: String, cfg: ClientConfig, tag: String, h: Arc<History>, stop: Arc<AtomicBool>) {
    let Ok(c) = Client::connect(&addrs, &cfg).await else { return };
    let mut producer: Option<Producer> = None;
    let kinds = ["append", "stream", "producer"];
    let mut k = i;
    while !stop.load(Ordering::Relaxed) {
        let kind = kinds[k % 3];
        k += 1;
        if kind == "producer" && producer.is_none() {
            match Producer::connect(&addrs, &cfg, (i % 2) as u16).await {
                Ok(p) => producer = Some(p),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let payload = h.payload(&tag, kind);
        // Every fourth round a burst of appends, dropped (cancelled) at spread times.
        if k.is_multiple_of(4) && kind != "producer" {
            let mut set = tokio::task::JoinSet::new();
            for j in 0..20 {
                let (c, payload, h) = (c.clone(), h.payload(&tag, kind), h.clone());
                let budget = Duration::from_micros(200 * j);
                set.spawn(async move {
                    match tokio::time::timeout(budget, one(kind, &c, None, &payload)).await {
                        Ok(r) => h.add(kind, payload, Some(r)),
                        Err(_) => h.add(kind, payload, None),
                    }
                });
            }
            while set.join_next().await.is_some() {}
        }
        let r = one(kind, &c, producer.as_ref(), &payload).await;
        if kind == "producer" && r.is_err() {
            producer = None; // it stopped: a new id
        }
        h.add(kind, payload, Some(r));
    }
}

/// Reads every shard's log after a barrier append on each.
async fn read_back(p: &Pair) -> HashMap<Vec<u8>, Vec<(u16, u64, Option<(u64, u64)>)>> {
    let cfg = p.cfg().with_failover_timeout(Duration::from_secs(30));
    let mut out: HashMap<Vec<u8>, Vec<_>> = HashMap::new();
    for shard in 0..2u16 {
        let c = Client::connect_shard(&p.addrs(), shard, &cfg).await.expect("connect for read-back");
        // A barrier: once an append of the shard is acknowledged, everything before it
        // is committed and visible. (It may be refused while the follower catches up.)
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(e) = c.append(b"barrier").await {
            assert!(Instant::now() < deadline, "no barrier append on shard {shard} within 60 s: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut from = 0;
        loop {
            let recs = c.read(shard, from, 1 << 20).await.expect("read back");
            let Some(last) = recs.last() else { break };
            from = last.offset + 1;
            for r in recs {
                let prod = r.producer.map(|s| (s.id, s.seq));
                out.entry(r.payload).or_default().push((shard, r.offset, prod));
            }
        }
    }
    out
}

#[test]
fn outcomes_hold_under_kills_and_cancellation() {
    let faults = env_num("CORELOG_HISTORY_FAULTS", 8);
    let seconds = env_num("CORELOG_HISTORY_SECONDS", 25);
    let mut p = Pair::start("history");
    let tag = format!("rh{}x{}", std::process::id(), Instant::now().elapsed().as_nanos() % 100_000);
    let h = Arc::new(History::default());
    let stop = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let cfg = p
        .cfg()
        .with_failover_timeout(Duration::from_secs(1))
        .with_request_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(1));
    let workers: Vec<_> =
        (0..6).map(|i| rt.spawn(worker(i, p.addrs(), cfg.clone(), tag.clone(), h.clone(), stop.clone()))).collect();
    let (mut kills, mut seed) = (0u64, std::process::id() as u64);
    let end = Instant::now() + Duration::from_secs(seconds);
    while kills < faults && Instant::now() < end {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let pause = |n: u64| std::thread::sleep(Duration::from_millis(50 + (seed >> 33) % n));
        match (seed >> 40) % 3 {
            0 => {
                p.leader.kill9();
                kills += 1;
            }
            1 => {
                p.follower.kill9();
                kills += 1;
            }
            _ => {
                // Appends then wait on the leader for the follower; the leader dies with them.
                p.follower.kill9();
                pause(250);
                p.leader.kill9();
                kills += 2;
            }
        }
        pause(1500);
        if !p.follower.running() {
            p.follower.start();
        }
        if !p.leader.running() {
            p.leader.start();
        }
        p.wait_ready();
        pause(200);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        rt.block_on(w).expect("worker");
    }
    let logs = rt.block_on(read_back(&p));
    let ops = h.ops.lock().unwrap().clone();
    let mut bad = Vec::new();
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut producers: HashMap<(u64, u64), u32> = HashMap::new();
    for (payload, at) in &logs {
        if payload.starts_with(tag.as_bytes()) && at.len() > 1 {
            bad.push(format!("{:?} stored {} times: {at:?}", String::from_utf8_lossy(payload), at.len()));
        }
        for (_, _, prod) in at {
            if let Some(k) = prod {
                *producers.entry(*k).or_default() += 1;
            }
        }
    }
    bad.extend(producers.iter().filter(|(_, &n)| n > 1).map(|(k, n)| format!("producer {k:?} stored {n} times")));
    for o in &ops {
        let at = logs.get(&o.payload);
        let name = String::from_utf8_lossy(&o.payload);
        let label = match &o.result {
            Some(Ok(_)) => "Ok",
            Some(Err(outcome)) => outcome.as_str(),
            None => "Dropped",
        };
        *counts.entry(format!("{}:{label}", o.kind)).or_default() += 1;
        match &o.result {
            Some(Ok(pos)) if !at.is_some_and(|v| v.iter().any(|(s, off, _)| (*s, *off) == *pos)) => {
                bad.push(format!("{} {name} reported at {pos:?}, log has it at {at:?}", o.kind))
            }
            Some(Err(outcome)) if *outcome == format!("{:?}", Outcome::NotWritten) && at.is_some() => {
                bad.push(format!("{} {name} reported NotWritten ({}), log has it at {at:?}", o.kind, o.why))
            }
            Some(Err(outcome)) if outcome == "Written" && at.is_none() => {
                bad.push(format!("{} {name} reported Written, absent", o.kind))
            }
            _ => {}
        }
    }
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort();
    eprintln!("rust history: {kills} kills, {} ops {counts:?}", ops.len());
    assert!(ops.len() > 100, "too few operations ran: {}", ops.len());
    assert!(bad.is_empty(), "{} outcome(s) contradict the log:\n{}", bad.len(), bad[..bad.len().min(20)].join("\n"));
    let _ = std::fs::remove_dir_all(&p.dir);
}

/// Issue 39 items 2-5 for the Rust client, on one pair: stream appends follow leadership
/// (both nodes down when the call starts, back 0.5 s later); a dropped producer append
/// stops the producer instead of leaving later appends waiting for ever; configuration
/// mistakes fail at once naming the value; `Tail::next_offset` counts records handed out.
#[test]
fn streams_follow_leadership_drops_settle_and_mistakes_fail_fast() {
    let mut p = Pair::start("items");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let cfg = p.cfg().with_failover_timeout(Duration::from_secs(20));
    let addrs = p.addrs();

    // A producer whose append is dropped after it was handed to the connection.
    let producer = rt.block_on(Producer::connect(&addrs, &cfg, 0)).unwrap();
    rt.block_on(producer.append(b"first")).unwrap();
    let dropped =
        rt.block_on(async { tokio::time::timeout(Duration::from_micros(50), producer.append(b"dropped")).await });
    if dropped.is_err() {
        let next =
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), producer.append(b"after a drop")).await });
        let r = next.expect("an append after a dropped one hangs (its sequence was never settled)");
        assert!(matches!(r, Err(Error::ProducerStopped(_))), "{r:?}");
    }

    // Configuration mistakes.
    let t0 = Instant::now();
    let e = rt.block_on(Client::connect("127.0.0.1", &cfg)).err().expect("an address without a port");
    assert!(e.to_string().contains("\"127.0.0.1\""), "{e}");
    let c = |n: &str| p.certs.join(n);
    let wrong = ClientConfig::mtls(c("ca.pem"), c("client.pem"), c("client.key"), "wrong.example").unwrap();
    let e = rt.block_on(Client::connect(&addrs, &wrong)).err().expect("a server name the certificate lacks");
    assert!(e.to_string().contains("wrong.example"), "{e}");
    assert_eq!(e.outcome(), Outcome::NotWritten);
    assert!(t0.elapsed() < Duration::from_secs(2), "mistakes retried like outages: {:?}", t0.elapsed());

    // Tail::next_offset.
    let client = rt.block_on(Client::connect_shard(&addrs, 0, &cfg)).unwrap();
    let first = rt.block_on(client.append(b"tail 0")).unwrap();
    for i in 1..300 {
        rt.block_on(client.append(format!("tail {i}").as_bytes())).unwrap();
    }
    let mut tail = rt.block_on(corelog_client::Tail::start(&addrs, &cfg, 0, first.offset)).unwrap();
    for _ in 0..3 {
        rt.block_on(tail.next()).unwrap().unwrap();
    }
    assert_eq!(tail.next_offset(), first.offset + 3);

    // Stream appends across an outage: a fresh client, both nodes down.
    let fresh = Client::connect(&addrs, &cfg);
    let fresh = rt.block_on(fresh).unwrap();
    p.leader.kill9();
    p.follower.kill9();
    let streamed = rt.spawn({
        let c = fresh.clone();
        async move { c.append_to("after-outage", Expect::Any, b"event").await }
    });
    std::thread::sleep(Duration::from_millis(500));
    p.follower.start();
    p.leader.start();
    let r = rt.block_on(streamed).unwrap();
    assert!(r.is_ok(), "a stream append did not follow leadership: {r:?}");
    let _ = std::fs::remove_dir_all(&p.dir);
}
