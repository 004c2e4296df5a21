//! Starts that read only what the log's length does not change: the index files of the
//! sealed segments, the newest checkpoint, and the segments after it (`boot.rs`). Each
//! test ends by reading every acknowledged record back, payload for payload, and by
//! checking the derived state (stream versions, producers' windows) against what the
//! appends were told.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use corelog_client::{Client, ClientConfig, Expect, Producer};

/// 4 MiB segments, one shard: a few hundred KiB of appends seal several segments.
const ONE_SHARD: [&str; 2] = ["--shard-count", "1"];

fn standalone(dir: &TempDir, name: &str) -> Node {
    Node::standalone(name, &dir.path().join(name), None, &ONE_SHARD)
}

/// A started standalone node "node" filled with `events` (`fill`, tag "a"); with the
/// client config, the acknowledged appends and the streams' versions.
fn filled_node(dir: &TempDir, events: usize) -> (Node, ClientConfig, Acked, [Option<u64>; 5]) {
    let n = standalone(dir, "node").started();
    let cfg = client_config(None);
    let acked = Acked::default();
    let mut versions = [None; 5];
    fill(&n.addr(), &cfg, events, "a", &acked, &mut versions);
    (n, cfg, acked, versions)
}

/// Appends `n` events of ~2 KiB: 6 stream events in every 10 (streams `s-0`..`s-4`,
/// each expecting its stream's current version) and the rest plain. Returns the
/// acknowledged positions with their payloads, and each stream's last version.
fn fill(addr: &str, cfg: &ClientConfig, n: usize, tag: &str, acked: &Acked, versions: &mut [Option<u64>; 5]) {
    runtime().block_on(async {
        let c = Client::connect(addr, cfg).await.unwrap();
        for i in 0..n {
            let payload = format!("{tag}-{i}-{}", "x".repeat(2000)).into_bytes();
            let pos = if i % 10 < 6 {
                let s = i % 5;
                let expect = versions[s].map_or(Expect::NoStream, Expect::Exact);
                let a = c.append_to(&format!("s-{s}"), expect, &payload).await.unwrap();
                assert_eq!(Some(a.version), versions[s].map_or(Some(0), |v| Some(v + 1)));
                versions[s] = Some(a.version);
                a.position
            } else {
                c.append(&payload).await.unwrap()
            };
            acked.lock().unwrap().insert(pos, payload);
        }
    });
}

/// Every stream read back whole: versions 0.. at increasing offsets, each payload the one
/// acknowledged at its position, the last version the one the appends were told.
fn check_streams(addr: &str, cfg: &ClientConfig, acked: &Acked, versions: &[Option<u64>; 5]) {
    runtime().block_on(async {
        let c = Client::connect(addr, cfg).await.unwrap();
        for (s, last) in versions.iter().enumerate() {
            let name = format!("s-{s}");
            let mut got = Vec::new();
            loop {
                let r = c.read_stream(&name, got.len() as u64, 1000).await.unwrap();
                if r.events.is_empty() {
                    break;
                }
                got.extend(r.events);
            }
            assert_eq!(got.len() as u64, last.map_or(0, |v| v + 1), "stream {name}");
            let acked = acked.lock().unwrap();
            for (v, e) in got.iter().enumerate() {
                assert_eq!(e.stream.as_ref().map(|s| s.version), Some(v as u64));
                let want = acked.get(&corelog_client::Position { shard: 0, offset: e.offset });
                assert_eq!(want, Some(&e.payload), "stream {name} version {v} at offset {}", e.offset);
            }
        }
    });
}

fn recovered_line(n: &Node) -> String {
    let log = n.log_text();
    let last_start = log.rsplit("---- start #").next().unwrap_or_default().to_string();
    last_start
        .lines()
        .find(|l| l.contains(": recovered "))
        .unwrap_or_else(|| panic!("no recovery line:\n{log}"))
        .to_string()
}

fn flip_byte(path: &Path, at_from_end: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, len - at_from_end).unwrap();
    b[0] ^= 0x20;
    f.write_all_at(&b, len - at_from_end).unwrap();
}

fn files(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// A start after kill -9 trusts the sealed segments' index files and the checkpoint,
/// scans only what follows, and serves every record, every stream version and every
/// producer's window as before; appends go on with the right versions.
#[test]
fn a_start_reads_the_segment_indexes_and_the_checkpoint_and_scans_only_the_tail() {
    let dir = TempDir::new("ckpt-start");
    let (mut n, cfg, acked, mut versions) = filled_node(&dir, 8_000);
    // An idempotent producer whose window must survive: sequence 3 re-sent is a duplicate.
    let (pid, seq3) = runtime().block_on(async {
        let p = Producer::connect(&n.addr(), &cfg, 0).await.unwrap();
        let mut at = None;
        for i in 0..5u64 {
            let a = p.append(format!("p-{i}").as_bytes()).await.unwrap();
            acked.lock().unwrap().insert(a.position, format!("p-{i}").into_bytes());
            if i == 3 {
                at = Some(a.position);
            }
        }
        (p.id(), at.unwrap())
    });
    n.kill9();
    let shard = n.data.join("shard-0");
    let sealed = files(&shard, ".idx").len();
    assert!(sealed >= 3, "8,000 × 2 KiB in 4 MiB segments sealed only {sealed}");
    assert_eq!(files(&shard, ".ckpt").len(), 1, "one checkpoint kept");
    n.start();
    let line = recovered_line(&n);
    assert!(
        line.contains(&format!("{sealed} sealed segment(s) from their index files, checkpoint at offset"))
            && line.contains(", 1 segment(s) scanned"),
        "{line}"
    );
    let recs = runtime().block_on(read_all(&n.addr(), &cfg, 0));
    verify_acked(&acked, &[recs]);
    check_streams(&n.addr(), &cfg, &acked, &versions);
    runtime().block_on(async {
        let p = Producer::resume(&n.addr(), &cfg, 0, pid, 3).await.unwrap();
        let a = p.append(b"p-3").await.unwrap();
        assert!(a.duplicate && a.position == seq3, "{a:?}");
    });
    fill(&n.addr(), &cfg, 500, "b", &acked, &mut versions);
    check_streams(&n.addr(), &cfg, &acked, &versions);
}

/// Streams with no event in the last segment are not held decoded: once a roll's
/// checkpoint is written, its stream heads are read in place. Reads of every version and
/// appends expecting each stream's version find them there, live and after kill -9.
#[test]
fn streams_not_written_since_the_last_roll_are_read_in_place_from_its_checkpoint() {
    let dir = TempDir::new("ckpt-base");
    let (mut n, cfg, acked, mut versions) = filled_node(&dir, 3_000);
    // ~5 MB of plain appends: the segment of the last stream event is sealed (4 MiB).
    runtime().block_on(async {
        let c = Client::connect(&n.addr(), &cfg).await.unwrap();
        for i in 0..2_500 {
            let payload = format!("plain-{i}-{}", "y".repeat(2000)).into_bytes();
            let pos = c.append(&payload).await.unwrap();
            acked.lock().unwrap().insert(pos, payload);
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while n.metric_sum("corelog_streams_decoded") != 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "streams still decoded: {}",
            n.metric_sum("corelog_streams_decoded")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(n.metric_sum("corelog_streams"), 5.0);
    check_streams(&n.addr(), &cfg, &acked, &versions);
    fill(&n.addr(), &cfg, 200, "b", &acked, &mut versions);
    // Written again, so decoded (fewer than 5 if a roll fell in the last few appends).
    let decoded = n.metric_sum("corelog_streams_decoded");
    assert!((1.0..=5.0).contains(&decoded), "{decoded}");
    check_streams(&n.addr(), &cfg, &acked, &versions);
    n.kill9();
    n.start();
    check_streams(&n.addr(), &cfg, &acked, &versions);
    fill(&n.addr(), &cfg, 100, "c", &acked, &mut versions);
    let recs = runtime().block_on(read_all(&n.addr(), &cfg, 0));
    verify_acked(&acked, &[recs]);
    check_streams(&n.addr(), &cfg, &acked, &versions);
}

/// A damaged or missing segment index is rebuilt by scanning its segment; a damaged
/// checkpoint is passed over for a scan from the log's first segment. Nothing is lost,
/// nothing differs.
#[test]
fn damaged_index_files_and_checkpoints_are_rebuilt_or_passed_over() {
    let dir = TempDir::new("ckpt-damage");
    let (mut n, cfg, acked, mut versions) = filled_node(&dir, 8_000);
    n.kill9();
    let shard = n.data.join("shard-0");
    let (code, out) = inspect(&n.data);
    assert!(
        code == 0 && out.contains("agree with their segments") && out.contains("agrees with the log below it"),
        "{out}"
    );
    let idx = files(&shard, ".idx");
    // An index whose checksum holds but whose stream runs are wrong: only a full scan
    // (inspect) can tell; a start trusts it. Here it is put back right afterwards.
    let good = std::fs::read(&idx[0]).unwrap();
    let mut forged = corelog_server::wal::segidx::SegIdx::decode(&good).unwrap();
    let fv_at = 1 + forged.run_bytes[0] as usize + 4; // name_len, name, run number, then the first version
    forged.run_bytes[fv_at] ^= 1;
    std::fs::write(&idx[0], forged.encode()).unwrap();
    let (code, out) = inspect(&n.data);
    assert!(code == 2 && out.contains("INDEX MISMATCH") && out.contains("stream runs differ"), "{out}");
    std::fs::write(&idx[0], good).unwrap();
    flip_byte(&idx[1], 5); // a batch entry, before the CRC
    std::fs::remove_file(&idx[2]).unwrap();
    let (code, out) = inspect(&n.data);
    assert!(code == 2 && out.contains("checksum mismatch"), "{out}");
    n.start();
    let log = n.log_text();
    // Trusted up to the damaged file; it and every later one rebuilt (their runs'
    // pointers lead into it), and a checkpoint written for the next start.
    let untrusted: Vec<&str> = log.lines().filter(|l| l.contains("is not trusted")).collect();
    assert!(untrusted.len() == 1 && untrusted[0].contains("checksum mismatch"), "{log}");
    let rebuilt = log.lines().filter(|l| l.contains("segment index rebuilt by a scan")).count();
    assert_eq!(rebuilt, idx.len() - 1, "{log}");
    assert!(log.contains("checkpoint written at offset"), "{log}");
    check_streams(&n.addr(), &cfg, &acked, &versions);
    verify_acked(&acked, &[runtime().block_on(read_all(&n.addr(), &cfg, 0))]);
    n.kill9();
    assert_eq!(inspect(&n.data).0, 0, "{}", inspect(&n.data).1);
    // The rebuilt files are trusted at the next start.
    n.start();
    assert!(!n.log_text().rsplit("---- start #").next().unwrap().contains("rebuilt"), "{}", n.log_text());
    n.kill9();
    let ckpt = files(&shard, ".ckpt");
    let len = std::fs::metadata(&ckpt[0]).unwrap().len();
    flip_byte(&ckpt[0], len - 12); // its offset: the header and metadata are checked at start
    n.start();
    let line = recovered_line(&n);
    let want = format!("no checkpoint, {} sealed segment(s) read again", idx.len());
    assert!(line.contains(&want), "{line}\n{}", n.log_text());
    check_streams(&n.addr(), &cfg, &acked, &versions);
    verify_acked(&acked, &[runtime().block_on(read_all(&n.addr(), &cfg, 0))]);
    fill(&n.addr(), &cfg, 300, "b", &acked, &mut versions);
    check_streams(&n.addr(), &cfg, &acked, &versions);
    // A damaged page of stream heads: the start takes the checkpoint (its metadata checks
    // out) and reads no page; the check of its pages after the start finds the damage,
    // moves the file aside and stops the node; the next start rebuilds without it.
    n.kill9();
    let ckpt = files(&shard, ".ckpt");
    let newest = ckpt.last().unwrap();
    flip_byte(newest, 9); // in the last page's entries
    let (code, out) = inspect(&n.data);
    assert!(code == 2 && out.contains("of its stream heads is damaged"), "{out}");
    n.spawn();
    assert_eq!(n.wait_exit(Duration::from_secs(30)), Some(70), "{}", n.log_text());
    let log = n.log_text();
    assert!(log.contains("of its stream heads is damaged") && log.contains("ckpt.damaged"), "{log}");
    assert!(!newest.exists() && newest.with_extension("ckpt.damaged").exists());
    n.start();
    let line = recovered_line(&n);
    assert!(line.contains("no checkpoint"), "{line}\n{}", n.log_text());
    check_streams(&n.addr(), &cfg, &acked, &versions);
    verify_acked(&acked, &[runtime().block_on(read_all(&n.addr(), &cfg, 0))]);
}

/// Two nodes A and B that share `common` appends, then B alone (promoted, standalone)
/// writes appends A never sees, then A leads above every epoch used and B rejoins as
/// its follower and is cut back to the shared ones: the scene of a cut across or into
/// sealed segments.
struct Rejoin {
    _dir: TempDir,
    /// Flags of both nodes. The default ack timeout (10 s): a rejoin's cut can take a
    /// while on a busy machine, and the leader holds the first appends until it is done.
    flags: [&'static str; 2],
    ports: (Ports, Ports),
    data: (std::path::PathBuf, std::path::PathBuf),
    cfg: ClientConfig,
    acked: Acked,
    versions: [Option<u64>; 5],
}

impl Rejoin {
    /// The pair writes `common` appends, B catching up; both are killed.
    fn new(tag: &str, common: usize) -> Rejoin {
        let dir = TempDir::new(tag);
        let data = (dir.path().join("a"), dir.path().join("b"));
        let mut r = Rejoin {
            _dir: dir,
            flags: ["--shard-count", "1"],
            ports: (ports(), ports()),
            data,
            cfg: client_config(None),
            acked: Acked::default(),
            versions: [None; 5],
        };
        let (mut a, mut b) = r.pair_takes(("a", "b"), common, "common", Duration::from_secs(20));
        a.kill9();
        b.kill9();
        r
    }

    /// A leading (`names.0`) and B following (`names.1`) start, A takes `n` appends
    /// tagged `tag` and B catches up within `within`. Returns (A, B), both running.
    fn pair_takes(&mut self, names: (&str, &str), n: usize, tag: &str, within: Duration) -> (Node, Node) {
        let (mut a, mut b) = (self.node(names.0, true), self.node(names.1, false));
        b.start();
        a.start();
        fill(&a.addr(), &self.cfg, n, tag, &self.acked, &mut self.versions);
        let p = Pair { leader: a, follower: b };
        wait_caught_up(&p, within);
        (p.leader, p.follower)
    }

    /// A (leader) or B (follower), named `name`.
    fn node(&self, name: &str, leader: bool) -> Node {
        let ((pa, pb), (da, db)) = (self.ports, &self.data);
        if leader {
            Node::serving(name, Mode::Leader { follower_repl: pb.repl }, da, pa, &self.flags)
        } else {
            Node::serving(name, Mode::Follower { leader_client: pa.client }, db, pb, &self.flags)
        }
    }

    /// B on its own, standalone.
    fn b_alone(&self, name: &str) -> Node {
        let (pb, db) = (self.ports.1, &self.data.1);
        Node::serving(name, Mode::Standalone, db, pb, &self.flags)
    }

    /// B, promoted, writes `n` appends A never sees (not counted as acknowledged), then
    /// `stop` ends it.
    fn b_writes_alone(&self, n: usize, stop: impl FnOnce(&mut Node)) {
        promote(&self.data.1, None);
        let mut b = self.b_alone("b-alone");
        b.start();
        let mut lost_versions = self.versions;
        fill(&b.addr(), &self.cfg, n, "b-only", &Acked::default(), &mut lost_versions);
        stop(&mut b);
    }

    /// A leads above every epoch used; B rejoins as its follower, is cut back, and both
    /// hold the `after` appends A takes. Returns (A, B), both running.
    fn rejoin(&mut self, after: usize) -> (Node, Node) {
        promote(&self.data.0, Some("4"));
        let (a, b) = self.pair_takes(("a-lead", "b-follow"), after, "after", Duration::from_secs(30));
        assert!(b.log_text().contains("dropped records"), "{}", b.log_text());
        (a, b)
    }

    /// Both logs identical and `records` long; B, started on its own from its index
    /// files and checkpoint, serves every acknowledged append and stream version.
    fn b_holds_as_leader(&self, records: u64) {
        let s = assert_same_logs(&self.data.0, &self.data.1);
        assert_eq!(s[0].0, records, "{s:?}");
        let mut b = self.b_alone("b-again");
        b.start();
        verify_acked(&self.acked, &[runtime().block_on(read_all(&b.addr(), &self.cfg, 0))]);
        check_streams(&b.addr(), &self.cfg, &self.acked, &self.versions);
    }
}

/// A follower whose divergent suffix spans several sealed segments is cut back across
/// them at its rejoin: the index files of what it cut and the checkpoints above the cut
/// go first; it catches up, and its next start (from the index files and a checkpoint)
/// holds exactly the leader's log.
#[test]
fn a_cut_across_sealed_segments_leaves_no_index_or_checkpoint_of_what_was_cut() {
    let mut r = Rejoin::new("ckpt-cut", 1_000);
    // B alone writes ~12 MiB that A never sees: three sealed segments.
    r.b_writes_alone(6_000, |b| b.kill9());
    let before = files(&r.data.1.join("shard-0"), ".idx").len();
    assert!(before >= 4, "B sealed {before} segments");
    let (mut a_lead, mut b_follow) = r.rejoin(200);
    b_follow.kill9();
    let ckpts = files(&r.data.1.join("shard-0"), ".ckpt");
    for c in &ckpts {
        let off: u64 = c.file_stem().unwrap().to_string_lossy().trim_start_matches("checkpoint-").parse().unwrap();
        let end = a_lead.metric_sum("corelog_log_end_offset") as u64;
        assert!(off <= end, "a checkpoint at {off} above the leader's end {end} survived the cut");
    }
    a_lead.kill9();
    r.b_holds_as_leader(1_200);
}

/// A cut into a segment a clean stop sealed and cut to its data: the rejoining node's
/// log is cut back inside it and grows again past its shortened end (the writer extends
/// the file, then rolls); both logs end identical and every acknowledged append reads back.
#[test]
fn a_cut_into_a_segment_sealed_at_a_clean_stop_grows_it_again() {
    let mut r = Rejoin::new("ckpt-cut-short", 500);
    // B alone writes 300 appends in its first segment, then stops cleanly: that segment
    // is sealed and cut to its data.
    r.b_writes_alone(300, |b| {
        signal(b, libc::SIGTERM);
        assert_eq!(b.wait_exit(Duration::from_secs(20)), Some(0), "{}", b.log_text());
    });
    let first = r.data.1.join("shard-0").join("00000000000000000000.log");
    let short = std::fs::metadata(&first).unwrap().len();
    assert!(short < 4 << 20, "the segment sealed at the stop holds {short} bytes");
    // B is cut back to 500, inside that segment.
    let (mut a_lead, mut b_follow) = r.rejoin(3_000);
    b_follow.kill9();
    a_lead.kill9();
    assert!(std::fs::metadata(&first).unwrap().len() > short, "the cut segment grew again");
    r.b_holds_as_leader(3_500);
}
