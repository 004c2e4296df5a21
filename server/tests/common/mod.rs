//! Test harness: real `corelog` processes on loopback (or in network namespaces:
//! `netns`), started, killed (-9) and restarted by pid; certificates from `corelog
//! certs`; the tokio client library; coordinator-mode clusters (`coord`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelog_client::{Client, ClientConfig, Position, Record};

pub mod coord;
pub mod coord_run;
pub mod etcd;
pub mod netns;
pub mod node;
pub mod pair;
pub mod setup;
pub mod vm;

pub use node::*;
#[allow(unused_imports)]
pub use pair::*;
#[allow(unused_imports)]
pub use setup::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_corelog");

/// A block of free ports: client P, direct P+1.., repl R.., metrics M.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    pub client: u16,
    pub repl: u16,
    pub metrics: u16,
}

static NEXT_PORT: AtomicU32 = AtomicU32::new(0);

fn bindable(p: u16) -> bool {
    TcpListener::bind(("127.0.0.1", p)).is_ok()
}

/// Finds 24 consecutive free ports (client + 8 direct, repl + 8, metrics), from a
/// per-process start (wrapping), so parallel test binaries rarely meet. Below the
/// kernel's ephemeral range (`ip_local_port_range`, 32768.. by default): a port found
/// free is bound by a node only when it starts, sometimes many seconds later, and in
/// between any outgoing connection of a parallel test could take an ephemeral port.
pub fn ports() -> Ports {
    let (lo, span) = port_range();
    let start = (std::process::id() % (span / 100)) * 100;
    for _ in 0..span / 24 {
        let n = NEXT_PORT.fetch_add(24, Ordering::SeqCst);
        let base = (lo + (start + n) % (span - 24)) as u16;
        if (base..base + 24).all(bindable) {
            return Ports { client: base, repl: base + 10, metrics: base + 20 };
        }
    }
    panic!("no 24 consecutive free ports in {lo}..{}", lo + span);
}

/// Free ports for a node of `shards` shards (more than `ports` leaves room for): client
/// P with its direct ports P+1..=P+shards, replication R..R+shards, metrics M.
pub fn ports_for(shards: u16) -> Ports {
    let width = 3 * (shards as u32 + 2);
    let (lo, span) = port_range();
    let start = (std::process::id() % (span / 100)) * 100;
    for _ in 0..span / width {
        let n = NEXT_PORT.fetch_add(width, Ordering::SeqCst);
        let base = (lo + (start + n) % (span - width)) as u16;
        if (base..base + width as u16).all(bindable) {
            let w = shards + 2;
            return Ports { client: base, repl: base + w, metrics: base + 2 * w };
        }
    }
    panic!("no {width} consecutive free ports in {lo}..{}", lo + span);
}

/// (first port, count) to pick test ports from: 10000 up to the ephemeral range's start
/// when that leaves at least 5,000; else 20000..60000 as before.
fn port_range() -> (u32, u32) {
    const LO: u32 = 10_000;
    let eph_lo = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok());
    match eph_lo {
        Some(e) if e >= LO + 5_000 => (LO, e - LO),
        _ => (20_000, 40_000),
    }
}

/// `program` run under the command prefix `wrap` (e.g. `ip netns exec NS`), if any.
pub fn wrapped(wrap: &[String], program: &str) -> Command {
    match wrap.split_first() {
        Some((prefix, rest)) => {
            let mut c = Command::new(prefix);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    }
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        // Under target/ (a real disk: O_DIRECT is required), not /tmp (may be tmpfs).
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&root).unwrap();
        TempDir(root)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            eprintln!("test data kept in {}", self.0.display());
        }
    }
}

pub fn certs(dir: &Path) -> PathBuf {
    let out = dir.join("certs");
    let st = Command::new(BIN).args(["certs", "--out"]).arg(&out).stdout(Stdio::null()).status().unwrap();
    assert!(st.success());
    out
}

#[allow(unused_imports)] // not every test binary uses it
pub use corelog_server::probe::http_get;

pub fn client_config(certs: Option<&Path>) -> ClientConfig {
    match certs {
        Some(c) => {
            ClientConfig::mtls(c.join("ca.pem"), c.join("client.pem"), c.join("client.key"), "localhost").unwrap()
        }
        None => ClientConfig::insecure(),
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Acknowledged appends: position → payload.
pub type Acked = Arc<Mutex<HashMap<Position, Vec<u8>>>>;

/// A raw mTLS connection to 127.0.0.1:`port` with the client certificate of `certs`
/// (name `localhost`), for a test that writes frames by hand.
pub async fn raw_mtls(
    port: u16,
    certs: &Path,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tls = corelog_client::tls::client_config(
        &certs.join("ca.pem"),
        Some((&certs.join("client.pem"), &certs.join("client.key"))),
    )
    .map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a valid name");
    tokio_rustls::TlsConnector::from(Arc::new(tls)).connect(name, tcp).await.map_err(|e| e.to_string())
}

/// `conns` connections each appending up to `per_conn` unique payloads (sequentially,
/// one in flight). Stops a connection at its first error. Returns the number of errors.
pub async fn load(addr: &str, cfg: &ClientConfig, conns: usize, per_conn: usize, tag: &str, acked: &Acked) -> usize {
    load_sized(addr, cfg, conns, per_conn, tag, 0, acked).await
}

/// `load` with each payload padded to at least `min_bytes`.
pub async fn load_sized(
    addr: &str,
    cfg: &ClientConfig,
    conns: usize,
    per_conn: usize,
    tag: &str,
    min_bytes: usize,
    acked: &Acked,
) -> usize {
    load_to((addr, None), cfg, conns, per_conn, tag, min_bytes, acked).await
}

/// `load_sized` through the shared client port (`shard` None) or shard `s`'s direct port
/// (`Some(s)`: every append must land on `s`).
pub async fn load_to(
    (addr, shard): (&str, Option<u16>),
    cfg: &ClientConfig,
    conns: usize,
    per_conn: usize,
    tag: &str,
    min_bytes: usize,
    acked: &Acked,
) -> usize {
    let mut tasks = Vec::new();
    for c in 0..conns {
        let (addr, cfg, acked, tag) = (addr.to_string(), cfg.clone(), acked.clone(), tag.to_string());
        tasks.push(tokio::spawn(async move {
            let client = match shard {
                None => Client::connect(&addr, &cfg).await,
                Some(s) => Client::connect_shard(&addr, s, &cfg).await,
            };
            let Ok(client) = client else { return 1 };
            for i in 0..per_conn {
                let mut payload = format!("{tag}-c{c}-i{i}-{}-", rand::random::<u64>()).into_bytes();
                if payload.len() < min_bytes {
                    payload.resize(min_bytes, b'a' + (i % 26) as u8);
                }
                match client.append(&payload).await {
                    Ok(pos) => {
                        assert!(
                            shard.is_none_or(|s| s == pos.shard),
                            "an append on {shard:?}'s direct port landed at {pos:?}"
                        );
                        let prev = acked.lock().unwrap().insert(pos, payload);
                        assert!(prev.is_none(), "position {pos:?} acknowledged twice");
                    }
                    Err(_) => return 1,
                }
            }
            0
        }));
    }
    let mut errors = 0;
    for t in tasks {
        errors += t.await.unwrap();
    }
    errors
}

/// Acknowledged appends: position → (payload, stream name and version if any).
pub type Told = Arc<Mutex<HashMap<Position, (Vec<u8>, Option<(String, u64)>)>>>;

/// `conns` connections appending 2 KiB payloads until `stop` is set, every other one to
/// one of `streams` streams (`acct-N`, expected version any); each acknowledgement goes
/// into `told`. A connection panics at its first error.
pub fn stream_load(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    conns: usize,
    streams: usize,
    told: &Told,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..conns)
        .map(|c| {
            let (addr, told, stop) = (addr.to_string(), told.clone(), stop.clone());
            rt.spawn(async move {
                let client = Client::connect(&addr, &ClientConfig::insecure()).await.unwrap();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let mut payload = format!("c{c}-i{i}-").into_bytes();
                    payload.resize(2048, b'a' + (i % 26) as u8);
                    let r = if i.is_multiple_of(2) {
                        let name = format!("acct-{}", (c + i as usize) % streams);
                        let a = client.append_to(&name, corelog_client::Expect::Any, &payload).await;
                        a.map(|a| (a.position, Some((name, a.version))))
                    } else {
                        client.append(&payload).await.map(|p| (p, None))
                    };
                    let (pos, s) = r.unwrap_or_else(|e| panic!("connection {c}: {e}"));
                    assert!(told.lock().unwrap().insert(pos, (payload, s)).is_none(), "{pos:?} acknowledged twice");
                }
            })
        })
        .collect()
}

/// Waits (bounded) until `cond` holds, re-checking every 10 ms.
pub fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts an unbounded background load (20 connections) and returns once `n` appends
/// are acknowledged; the load ends when the node dies (each connection stops at its
/// first error). Await the handle to collect the error count.
pub fn load_until(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    cfg: &ClientConfig,
    tag: &str,
    acked: &Acked,
    n: usize,
) -> tokio::task::JoinHandle<usize> {
    let (addr, cfg, acked2, tag) = (addr.to_string(), cfg.clone(), acked.clone(), tag.to_string());
    let h = rt.spawn(async move { load(&addr, &cfg, 20, 1_000_000, &tag, &acked2).await });
    while acked.lock().unwrap().len() < n {
        assert!(!h.is_finished(), "load ended before {n} acknowledgements");
        std::thread::sleep(Duration::from_millis(5));
    }
    h
}

/// Reads a whole shard from its direct port; checks offsets are gap-free from 0.
pub async fn read_all(addr: &str, cfg: &ClientConfig, shard: u16) -> Vec<Record> {
    read_from(addr, cfg, shard, 0).await
}

/// `read_all` of a log that starts at `first` (trimmed or seeded there).
pub async fn read_from(addr: &str, cfg: &ClientConfig, shard: u16, first: u64) -> Vec<Record> {
    let c = Client::connect_shard(addr, shard, cfg).await.unwrap();
    let mut out: Vec<Record> = Vec::new();
    loop {
        let recs = c.read(shard, first + out.len() as u64, 1 << 20).await.unwrap();
        if recs.is_empty() {
            return out;
        }
        for r in recs {
            assert_eq!(r.offset, first + out.len() as u64, "gap in shard {shard}");
            out.push(r);
        }
    }
}

/// Every acknowledged record is present, byte-identical, at its position.
pub fn verify_acked(acked: &Acked, shards: &[Vec<Record>]) {
    let acked = acked.lock().unwrap();
    for (pos, payload) in acked.iter() {
        let s = &shards[pos.shard as usize];
        let r = s
            .get(pos.offset as usize)
            .unwrap_or_else(|| panic!("acked {pos:?} missing (shard has {} records)", s.len()));
        assert_eq!(&r.payload, payload, "acked {pos:?} differs");
    }
}

/// `corelog inspect`: (exit code, stdout).
pub fn inspect(data: &Path) -> (i32, String) {
    let o = Command::new(BIN).arg("inspect").arg(data).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).to_string())
}

/// Per-shard (records, digest) from inspect output.
pub fn inspect_summary(out: &str) -> Vec<(u64, String)> {
    out.lines()
        .filter(|l| l.contains(" records "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let get = |k: &str| w[w.iter().position(|x| *x == k).unwrap() + 1];
            (get("records").parse().unwrap(), get("digest").to_string())
        })
        .collect()
}

/// A test that cannot run here: prints `SKIP <test>: <why>` and returns, unless
/// `CORELOG_NO_SKIP=1` (set by .ci/run), where it fails instead: a green CI proves the
/// test ran.
pub fn skip(test: &str, why: &str) {
    if std::env::var("CORELOG_NO_SKIP").is_ok_and(|v| v == "1") {
        panic!("{test} cannot run here ({why}), and CORELOG_NO_SKIP=1 forbids skipping it");
    }
    eprintln!("SKIP {test}: {why}");
}

/// `corelog admin promote --data-dir DATA [--epoch E]` on a stopped node; panics unless it
/// succeeds. Returns its stdout ("promoted …: epoch N; …").
pub fn promote(data: &Path, epoch: Option<&str>) -> String {
    let mut c = Command::new(BIN);
    c.args(["admin", "promote", "--data-dir"]).arg(data);
    if let Some(e) = epoch {
        c.args(["--epoch", e]);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "admin promote {}: {}", data.display(), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// Sends `sig` (e.g. SIGSTOP, SIGCONT) to a running node process.
pub fn signal(n: &Node, sig: i32) {
    let pid = n.child.as_ref().expect("running").id() as i32;
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// Sealed segments (their `.idx` index files) under a node's data dir: each was written,
/// with a checkpoint, when its segment rolled — a crash loop reports how many rolls its
/// faults could land in.
pub fn sealed_segments(data_dir: &Path) -> usize {
    let shards = std::fs::read_dir(data_dir).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>());
    shards
        .unwrap_or_default()
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|d| d.flatten())
        .filter(|e| e.path().extension().is_some_and(|x| x == "idx"))
        .count()
}
