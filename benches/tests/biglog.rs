//! `corelog-biglog` writes a data directory that the server's own tools accept as
//! theirs: `corelog inspect` finds every record and agrees with every segment index
//! and checkpoint; a `corelog serve` start trusts those files (its log line says so) and
//! serves the records and stream versions the tool's rule says, byte for byte; and the
//! tool continues the directory after the node was killed (`--append`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use corelog_client::codec::stream_shard;
use corelog_client::{Client, ClientConfig};

const SHARDS: u16 = 2;
const PER_SHARD: u64 = 100_000;
const PAYLOAD: usize = 64;
const STREAM_EVERY: u64 = 10;
const STREAMS: u32 = 40;
const PRODUCER_EVERY: u64 = 7;
const PRODUCERS: u32 = 3;
const SEGMENT_BYTES: u64 = 4 << 20;

/// The payload rule of `corelog-biglog` (benches/src/bin/biglog.rs, module docs).
fn payload(shard: u16, offset: u64) -> Vec<u8> {
    let key = offset.to_le_bytes();
    (0..PAYLOAD).map(|i| if i < 8 { key[i] } else { (i as u8).wrapping_mul(31) ^ shard as u8 }).collect()
}

/// The producer id rule of `corelog-biglog`.
fn producer_id(shard: u16, k: u32) -> u64 {
    0x6269_676c_6f67_0000 | ((shard as u64) << 8) | k as u64
}

/// This shard's streams, in the order the tool deals events to them.
fn streams_of(shard: u16) -> Vec<String> {
    (0..STREAMS).map(|i| format!("stream-{i}")).filter(|n| stream_shard(n.as_bytes(), SHARDS) == shard).collect()
}

/// The offset of version `v` of the `j`-th of `m` streams of a shard written in one go
/// from offset 0: the k-th event (k = v·m + j) is at offset (k + 1)·N − 1.
fn event_offset(v: u64, j: usize, m: usize) -> u64 {
    (v * m as u64 + j as u64 + 1) * STREAM_EVERY - 1
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test data kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server_bin() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_BIN_EXE_corelog-biglog")).with_file_name("corelog");
    p.exists().then_some(p)
}

fn biglog(data: &Path, records: u64, append: bool) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_corelog-biglog"));
    c.arg("--data-dir").arg(data);
    for (k, v) in [
        ("--shards", SHARDS as u64),
        ("--records", records),
        ("--payload-bytes", PAYLOAD as u64),
        ("--stream-every", STREAM_EVERY),
        ("--streams", STREAMS as u64),
        ("--producer-every", PRODUCER_EVERY),
        ("--producers", PRODUCERS as u64),
        ("--segment-bytes", SEGMENT_BYTES),
    ] {
        c.args([k, &v.to_string()]);
    }
    if append {
        c.arg("--append");
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "corelog-biglog failed: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// `corelog inspect`: its exit status 0 and each shard's record count.
fn inspect(bin: &Path, data: &Path) -> Vec<u64> {
    let o = Command::new(bin).arg("inspect").arg(data).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(0), "inspect:\n{out}{}", String::from_utf8_lossy(&o.stderr));
    for s in 0..SHARDS {
        let line = out.lines().find(|l| l.starts_with(&format!("shard {s}: segment index files:"))).unwrap_or("");
        let w: Vec<&str> = line.split_whitespace().collect();
        assert!(
            w.len() > 7 && w[5] == w[7] && w[5] != "0",
            "shard {s}: every index file agrees, and there are some:\n{out}"
        );
        assert!(line.contains("checkpoint at offset") && line.contains("agrees"), "shard {s}: checkpoint:\n{out}");
    }
    out.lines()
        .filter(|l| l.contains(" records ") && l.contains(" digest "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w[w.iter().position(|x| *x == "records").unwrap() + 1].parse().unwrap()
        })
        .collect()
}

fn free_port_run(n: u16) -> u16 {
    for _ in 0..200 {
        let p = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if p < 65000 && (p..p + n).all(|q| TcpListener::bind(("127.0.0.1", q)).is_ok()) {
            return p;
        }
    }
    panic!("no {n} free consecutive ports");
}

/// Starts a standalone node on `data`; returns it once /health answers, with its log.
fn serve(bin: &Path, data: &Path, port: u16, metrics: u16) -> (Server, PathBuf) {
    let log = data.with_extension("serve.log");
    let f = std::fs::File::create(&log).unwrap();
    let child = Command::new(bin)
        .args(["serve", "--role", "standalone", "--insecure", "--shard-count", &SHARDS.to_string()])
        .args(["--segment-bytes", &SEGMENT_BYTES.to_string()])
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .stdout(Stdio::null())
        .stderr(f)
        .spawn()
        .unwrap();
    let mut server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(st) = server.0.try_wait().unwrap() {
            panic!("corelog serve exited ({st}):\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        if corelog_server::probe::http_get(metrics, "/health").is_ok_and(|r| r.starts_with("HTTP/1.1 200")) {
            return (server, log);
        }
        assert!(
            Instant::now() < deadline,
            "not healthy in 15 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn biglog_writes_what_inspect_and_serve_accept() {
    let Some(bin) = server_bin() else {
        let why = "the corelog binary is not built next to corelog-biglog (cargo build --release --workspace)";
        assert!(std::env::var("CORELOG_NO_SKIP").as_deref() != Ok("1"), "cannot run: {why}, and CORELOG_NO_SKIP=1");
        eprintln!("SKIP biglog_writes_what_inspect_and_serve_accept: {why}");
        return;
    };
    let dir = Dir(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("biglog-{}", std::process::id())));
    let data = dir.0.join("data");
    std::fs::create_dir_all(&dir.0).unwrap();

    let o = biglog(&data, PER_SHARD * SHARDS as u64, false);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("wrote {} records", PER_SHARD * SHARDS as u64)), "{out}");
    assert_eq!(inspect(&bin, &data), vec![PER_SHARD; SHARDS as usize]);

    let (port, metrics) = (free_port_run(1 + SHARDS), free_port_run(1));
    let (mut server, log) = serve(&bin, &data, port, metrics);
    let text = std::fs::read_to_string(&log).unwrap();
    for s in 0..SHARDS {
        let want = format!("shard {s}: recovered {PER_SHARD} records in ");
        let line = text.lines().find(|l| l.contains(&want)).unwrap_or_else(|| panic!("no `{want}` in:\n{text}"));
        assert!(
            line.contains("sealed segment(s) from their index files, checkpoint at offset"),
            "the start did not trust the index files and a checkpoint: {line}"
        );
    }

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let cfg = ClientConfig::insecure();
        let addr = format!("127.0.0.1:{port}");
        let client = Client::connect(&addr, &cfg).await.unwrap();
        for s in 0..SHARDS {
            let c = Client::connect_shard(&addr, s, &cfg).await.unwrap();
            let streams = streams_of(s);
            let mut seqs = [0u64; PRODUCERS as usize];
            let mut next_seq = |o: u64| {
                let k = ((o / PRODUCER_EVERY) % PRODUCERS as u64) as usize;
                seqs[k] += 1;
                (k, seqs[k] - 1)
            };
            // Every record of the first 2,000 offsets, then a sample up to the end.
            let mut at = 0u64;
            let mut checked = 0;
            while at < PER_SHARD {
                let recs = c.read(s, at, 64 << 10).await.unwrap();
                assert!(!recs.is_empty(), "shard {s}: nothing at {at}");
                for r in &recs {
                    assert_eq!(r.offset, at, "shard {s}: offsets in order");
                    assert_eq!(r.payload, payload(s, at), "shard {s} offset {at}: payload");
                    let want_p = at.is_multiple_of(PRODUCER_EVERY).then(|| next_seq(at));
                    assert_eq!(r.producer.map(|p| p.id), want_p.map(|(k, _)| producer_id(s, k as u32)), "offset {at}");
                    assert_eq!(r.producer.map(|p| p.seq), want_p.map(|(_, q)| q), "shard {s} offset {at}: sequence");
                    assert_eq!(
                        r.stream.is_some(),
                        (at + 1).is_multiple_of(STREAM_EVERY),
                        "shard {s} offset {at}: event"
                    );
                    at += 1;
                    checked += 1;
                }
                if at > 2_000 {
                    break;
                }
            }
            assert!(checked > 2_000);
            for o in (2_000..PER_SHARD).step_by(9_973).chain([PER_SHARD - 1]) {
                let r = &c.read(s, o, 4096).await.unwrap()[0];
                assert_eq!((r.offset, &r.payload), (o, &payload(s, o)), "shard {s}: sampled record");
            }
            let m = streams.len();
            assert!(m > 2, "shard {s} has streams");
            let events = PER_SHARD / STREAM_EVERY;
            for (j, name) in streams.iter().enumerate().step_by(3) {
                let count = events / m as u64 + u64::from((j as u64) < events % m as u64);
                let read = client.read_stream(name, 0, 10_000).await.unwrap();
                assert_eq!(read.end_version, count, "{name}: versions");
                assert_eq!(read.events.len() as u64, count, "{name}");
                for (v, e) in read.events.iter().enumerate() {
                    let o = event_offset(v as u64, j, m);
                    assert_eq!(e.offset, o, "{name} version {v}: offset");
                    assert_eq!(
                        e.stream.as_ref().map(|x| (x.name.as_str(), x.version)),
                        Some((name.as_str(), v as u64))
                    );
                    assert_eq!(e.payload, payload(s, o), "{name} version {v}: payload");
                }
                let v = count / 2;
                let one = client.read_stream(name, v, 1).await.unwrap();
                assert_eq!(one.events[0].offset, event_offset(v, j, m), "{name} from version {v}");
            }
        }
    });

    // Killed while serving, then continued by the tool: the server's recovery first.
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    biglog(&data, 20_000, true);
    assert_eq!(inspect(&bin, &data), vec![PER_SHARD + 10_000; SHARDS as usize]);
    let (_server, _) = serve(&bin, &data, port, metrics);
    rt.block_on(async {
        let client = Client::connect(&format!("127.0.0.1:{port}"), &ClientConfig::insecure()).await.unwrap();
        let name = &streams_of(0)[0];
        let read = client.read_stream(name, 0, 10_000).await.unwrap();
        let versions: Vec<u64> = read.events.iter().map(|e| e.stream.as_ref().unwrap().version).collect();
        assert_eq!(versions, (0..read.end_version).collect::<Vec<_>>(), "{name}: versions continue");
        assert!(read.end_version > (PER_SHARD / STREAM_EVERY) / streams_of(0).len() as u64);
    });
}
