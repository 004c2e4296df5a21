//! `corelog admin backup` against real processes:
//!
//! - a leader + follower under a load of plain and stream appends; a backup of the leader
//!   is killed (-9) half-way, run again (it goes on from where the copy ends, not from
//!   zero), and run a third time after more appends (it copies only what is new and
//!   leaves the segments it wrote before untouched). The copy passes `corelog inspect`,
//!   matches the leader record for record below its end (`inspect --compare`), holds
//!   every append acknowledged before the backup started, and seeds a new pair: a leader
//!   started on it and an empty follower end with identical logs, and every acknowledged
//!   append below the backup's offsets reads back from it with its payload and stream
//!   version;
//! - a directory holding another node's log is refused, with a message that says why; a
//!   backup taken before a trim goes on after it (the trim is below its end); a new backup
//!   of the trimmed log starts at its first offset with the node's index snapshot (it
//!   passes `inspect` and goes on later); a backup that ends below the trim is refused.

mod common;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::pair::{pair, wait_caught_up};
use common::*;
use corelog_client::{Client, ClientConfig, Position};

const SHARDS: u16 = 2;

fn backup_cmd(addr: &str, to: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(["admin", "backup", "--insecure", "--addr", addr, "--to"]).arg(to).args(["--segment-bytes", "4194304"]);
    c
}

/// Runs a backup to the end: per shard (from, next), from its output.
fn backup(addr: &str, to: &Path) -> Vec<(u64, u64)> {
    let o = backup_cmd(addr, to).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "backup failed:\n{out}\n{err}");
    let mut shards = vec![None; SHARDS as usize];
    for l in out.lines().filter(|l| l.starts_with("shard ")) {
        // shard S offsets 0..N (copied F..N) epoch E
        let w: Vec<&str> = l.split_whitespace().collect();
        let s: usize = w[1].parse().unwrap();
        let next: u64 = w[3].split_once("..").unwrap().1.parse().unwrap();
        let (from, to) = w[5].trim_start_matches('(').split_once("..").unwrap();
        assert_eq!(to.trim_end_matches(')').parse::<u64>().unwrap(), next, "{l}");
        shards[s] = Some((from.parse().unwrap(), next));
    }
    shards.into_iter().map(|s| s.unwrap_or_else(|| panic!("a shard missing from:\n{out}"))).collect()
}

/// A backup that must fail: its stderr.
fn refused(addr: &str, to: &Path) -> String {
    let o = backup_cmd(addr, to).output().unwrap();
    assert!(!o.status.success(), "backup of {addr} into {} succeeded", to.display());
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Segment files under `dir`: path → (inode, mtime ns).
fn segment_files(dir: &Path) -> HashMap<String, (u64, i64)> {
    let mut out = HashMap::new();
    for s in 0..SHARDS {
        let d = dir.join(format!("shard-{s}"));
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.ends_with(".log") {
                let m = e.metadata().unwrap();
                out.insert(format!("shard-{s}/{name}"), (m.ino(), m.mtime() * 1_000_000_000 + m.mtime_nsec()));
            }
        }
    }
    out
}

#[test]
fn a_backup_under_load_resumes_grows_and_seeds_a_new_pair() {
    let extra = ["--shard-count", "2"];
    let (dir, mut p) = started_pair_in("backup", &extra);
    let rt = runtime();
    let (told, stop) = (Told::default(), Arc::new(AtomicBool::new(false)));
    let load = stream_load(&rt, &p.leader.addr(), 8, 16, &told, &stop);
    let until = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while told.lock().unwrap().len() < n {
            assert!(Instant::now() < deadline, "fewer than {n} appends acknowledged in 120 s");
            assert!(!load.iter().any(|h| h.is_finished()), "a load connection ended");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    until(30_000);
    let bk = dir.path().join("backup");

    // Killed half-way: once it has written three segment files.
    let before_first: Vec<Position> = told.lock().unwrap().keys().copied().collect();
    let mut child = backup_cmd(&p.leader.addr(), &bk).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while segment_files(&bk).len() < 3 {
        assert!(child.try_wait().unwrap().is_none(), "the backup ended before it wrote three segments");
        assert!(Instant::now() < deadline, "no three segments in 60 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    // Again: it goes on from the copy's end (after cutting what the kill tore).
    let second = backup(&p.leader.addr(), &bk);
    assert!(second.iter().map(|s| s.0).sum::<u64>() > 0, "the second backup started from zero: {second:?}");
    for pos in &before_first {
        assert!(pos.offset < second[pos.shard as usize].1, "{pos:?} acknowledged before the backup, not in it");
    }

    // Incremental: what the second run wrote stays as it is, only the new is copied.
    let acked = told.lock().unwrap().len();
    until(acked + 5_000);
    let files = segment_files(&bk);
    let third = backup(&p.leader.addr(), &bk);
    for s in 0..SHARDS as usize {
        assert_eq!(third[s].0, second[s].1, "shard {s}: the third backup did not go on from the second's end");
        assert!(third[s].1 >= second[s].1);
    }
    assert!(third.iter().zip(&second).any(|(t, s)| t.1 > s.1), "nothing new copied: {third:?}");
    let after = segment_files(&bk);
    let mut kept = 0;
    for (name, was) in &files {
        // The last segment of each shard is the one the copy goes on writing.
        let last = files.keys().filter(|n| n.split('/').next() == name.split('/').next()).max().unwrap();
        if name != last {
            assert_eq!(after.get(name), Some(was), "{name} was written again by an incremental backup");
            kept += 1;
        }
    }
    assert!(kept >= 2, "only {kept} sealed segments to check");

    stop.store(true, Ordering::Relaxed);
    for h in load {
        rt.block_on(h).unwrap();
    }
    p.leader.kill9();
    p.follower.kill9();
    let (code, out) = inspect(&bk);
    assert_eq!(code, 0, "inspect of the backup:\n{out}");
    let o = Command::new(BIN).arg("inspect").arg("--compare").arg(&p.leader.data).arg(&bk).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));

    // Restored as the seed of a new pair: an empty follower copies it from the new leader.
    let mut q = pair(&dir, None, &extra);
    std::fs::remove_dir_all(&q.leader.data).unwrap();
    std::fs::remove_dir_all(&q.follower.data).unwrap();
    std::fs::rename(&bk, &q.leader.data).unwrap();
    q.follower.start();
    q.leader.start();
    wait_caught_up(&q, Duration::from_secs(60));
    let cfg = ClientConfig::insecure();
    let shards: Vec<Vec<corelog_client::Record>> =
        (0..SHARDS).map(|s| rt.block_on(read_all(&q.leader.addr(), &cfg, s))).collect();
    let mut checked = 0;
    for (pos, (payload, s)) in told.lock().unwrap().iter() {
        if pos.offset >= third[pos.shard as usize].1 {
            continue;
        }
        let r = &shards[pos.shard as usize][pos.offset as usize];
        assert_eq!(&r.payload, payload, "payload at {pos:?}");
        assert_eq!(r.stream.as_ref().map(|v| (v.name.clone(), v.version)), *s, "stream at {pos:?}");
        checked += 1;
    }
    assert!(checked >= 35_000, "only {checked} acknowledged appends below the backup's end");
    for (s, recs) in shards.iter().enumerate() {
        assert_eq!(recs.len() as u64, third[s].1, "shard {s}: the restored node holds another count");
    }
    q.kill_and_compare();
}

#[test]
fn a_backup_refuses_another_nodes_log_and_copies_a_trimmed_log_from_its_first_offset() {
    let dir = TempDir::new("backup-refused");
    let rt = runtime();
    let cfg = ClientConfig::insecure();
    let node = |name: &str| {
        let (data, pt) = (dir.path().join(name), ports());
        let mut n = Node::new(
            name,
            data.clone(),
            pt,
            Node::args(Mode::Standalone, &data, pt, None, "", &["--shard-count", "2"]),
        );
        n.start();
        n
    };
    let (x, y) = (node("x"), node("y"));
    // x: a few records on each shard; y: 12 MiB on shard 0 (three 4 MiB segments).
    rt.block_on(async {
        for s in 0..SHARDS {
            let c = Client::connect_shard(&x.addr(), s, &cfg).await.unwrap();
            for i in 0..10 {
                c.append(format!("x{s}-{i}").as_bytes()).await.unwrap();
            }
        }
    });
    let fill = |from: usize, to: usize| {
        rt.block_on(async {
            let c = Client::connect_shard(&y.addr(), 0, &cfg).await.unwrap();
            for i in from..to {
                c.append(&vec![b'y' ^ (i % 7) as u8; 4096]).await.unwrap();
            }
        })
    };
    // A backup of y's first 100 records, which the trim below will pass.
    fill(0, 100);
    let small = dir.path().join("small");
    assert_eq!(backup(&y.addr(), &small), vec![(0, 100), (0, 0)]);
    fill(100, 3_000);
    let bk = dir.path().join("bk");
    assert_eq!(backup(&x.addr(), &bk), vec![(0, 10), (0, 10)]);
    let e = refused(&y.addr(), &bk);
    assert!(e.contains("holds another log"), "{e}");

    // A backup of y taken before the trim goes on after it: the trim is below its end.
    let early = dir.path().join("early");
    assert_eq!(backup(&y.addr(), &early), vec![(0, 3_000), (0, 0)]);
    let o = Command::new(BIN)
        .args(["admin", "trim", "--insecure", "--addr", &y.addr(), "--shard", "0", "--before", "2000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "trim: {}", String::from_utf8_lossy(&o.stderr));
    // A new backup of the trimmed log starts at its first offset, with its snapshot; one
    // that ends below it cannot go on.
    let bk2 = dir.path().join("bk2");
    let copied = backup(&y.addr(), &bk2);
    let first = copied[0].0;
    assert!(first > 100 && first <= 2_000, "{copied:?}");
    assert_eq!(copied, vec![(first, 3_000), (0, 0)]);
    let (code, out) = inspect(&bk2);
    assert_eq!(code, 0, "{out}");
    let e = refused(&y.addr(), &small);
    assert!(e.contains("retention trimmed it") && e.contains("this backup ends at 100"), "{e}");
    rt.block_on(async {
        let c = Client::connect_shard(&y.addr(), 0, &cfg).await.unwrap();
        for i in 0..10 {
            c.append(format!("y-after-{i}").as_bytes()).await.unwrap();
        }
    });
    assert_eq!(backup(&y.addr(), &early), vec![(3_000, 3_010), (0, 0)]);
    assert_eq!(backup(&y.addr(), &bk2), vec![(3_000, 3_010), (0, 0)], "the trimmed copy goes on too");
    let (code, out) = inspect(&early);
    assert_eq!(code, 0, "{out}");
}
