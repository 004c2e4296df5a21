//! Logical shards on fewer executors (`--executors`, issue 37 step 1): a pair of 16
//! shards on 2 executors per node replicates every shard, and every acknowledged append
//! survives kill -9 of either node while the load runs; a shard seeded by its leader
//! re-executes the node while a shard on the same executor writes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use corelog_client::{Client, ClientConfig};

const SHARDS: u16 = 16;

/// Names of the process's threads that start with `prefix` (glommio names an executor's
/// threads `<name>-<executor id>`).
fn threads(pid: u32, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with(prefix) {
            out.push(comm.trim().to_string());
        }
    }
    out
}

/// `per_shard` connections on each shard's direct port at once, `per_conn` appends each;
/// every acknowledgement goes into `acked`. Returns the connections that failed.
async fn load_every_shard(addr: &str, per_shard: usize, per_conn: usize, tag: &str, acked: &Acked) -> usize {
    let loads: Vec<_> = (0..SHARDS)
        .map(|shard| {
            let (addr, acked, tag) = (addr.to_string(), acked.clone(), format!("{tag}-s{shard}"));
            tokio::spawn(async move {
                load_to((&addr, Some(shard)), &client_config(None), per_shard, per_conn, &tag, 0, &acked).await
            })
        })
        .collect();
    let mut failed = 0;
    for l in loads {
        failed += l.await.unwrap();
    }
    failed
}

#[test]
fn sixteen_shards_on_two_executors_replicate_and_survive_kill9() {
    let dir = TempDir::new("executors");
    let (lp, fp) = (ports_for(SHARDS), ports_for(SHARDS));
    let extra = ["--shard-count", "16", "--executors", "2"];
    let (ldata, fdata) = (dir.path().join("leader"), dir.path().join("follower"));
    let largs = Node::args(Mode::Leader { follower_repl: fp.repl }, &ldata, lp, None, "", &extra);
    let fargs = Node::args(Mode::Follower { leader_client: lp.client }, &fdata, fp, None, "", &extra);
    let mut p =
        Pair { leader: Node::new("leader", ldata, lp, largs), follower: Node::new("follower", fdata, fp, fargs) };
    p.follower.start();
    p.leader.start();
    for n in [&p.leader, &p.follower] {
        let pid = n.child.as_ref().unwrap().id();
        let (ex0, ex1, per_shard) = (threads(pid, "exec-0"), threads(pid, "exec-1"), threads(pid, "shard-"));
        assert!(!ex0.is_empty() && !ex1.is_empty(), "{}: no thread of executor exec-0 or exec-1", n.name);
        assert!(
            threads(pid, "exec-2").is_empty() && per_shard.is_empty(),
            "{}: more executors than 2: {per_shard:?}",
            n.name
        );
    }
    let rt = runtime();
    let acked = Acked::default();
    let addr = p.leader.addr();
    assert_eq!(rt.block_on(load_every_shard(&addr, 2, 20, "calm", &acked)), 0, "connections that failed");
    assert_eq!(acked.lock().unwrap().len(), SHARDS as usize * 2 * 20);

    // kill -9 of each node in turn while every shard takes appends; what was acked stays.
    for victim in ["follower", "leader"] {
        let load = rt.spawn({
            let (addr, acked) = (addr.clone(), acked.clone());
            async move { load_every_shard(&addr, 2, 400, victim, &acked).await }
        });
        let before = acked.lock().unwrap().len();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while acked.lock().unwrap().len() < before + 500 {
            assert!(std::time::Instant::now() < deadline, "no appends acknowledged under load");
            std::thread::sleep(Duration::from_millis(5));
        }
        let n = if victim == "leader" { &mut p.leader } else { &mut p.follower };
        n.kill9();
        n.start();
        rt.block_on(load).unwrap();
    }
    assert_eq!(
        rt.block_on(load_every_shard(&addr, 1, 20, "after", &acked)),
        0,
        "connections that failed after the restarts"
    );
    let per_shard: Vec<usize> =
        (0..SHARDS).map(|s| acked.lock().unwrap().keys().filter(|k| k.shard == s).count()).collect();
    assert!(per_shard.iter().all(|n| *n >= 80), "every shard took appends: {per_shard:?}");
    wait_caught_up(&p, Duration::from_secs(60));
    let shards: Vec<_> = rt.block_on(async {
        let mut out = Vec::new();
        for s in 0..SHARDS {
            out.push(read_all(&addr, &client_config(None), s).await);
        }
        out
    });
    verify_acked(&acked, &shards);
    let logs = p.kill_and_compare();
    assert_eq!(logs.len(), SHARDS as usize, "inspect lists every shard of both nodes: {logs:?}");
}

/// A follower seeded by its leader re-executes once every write in flight has finished.
/// With two shards on one executor, the other shard's commit loop clears its own flag:
/// waiting for it must not block the executor (it used to, and after 5 s the node exited
/// with status 70 instead of re-executing).
#[test]
fn a_seed_on_a_shared_executor_re_executes_while_the_other_shard_writes() {
    let dir = TempDir::new("executors_seed");
    let extra = ["--shard-count", "2", "--executors", "1", "--repl-memory-bytes", "65536"];
    let mut p = started_pair(&dir, None, &extra);
    let rt = runtime();
    let cfg = ClientConfig::insecure();
    let addr = p.leader.addr();
    // Shard 0: three 4 MiB segments, then trimmed, so an empty follower needs a seed.
    rt.block_on(async {
        let tasks: Vec<_> = (0..8u8)
            .map(|t| {
                let (addr, cfg) = (addr.clone(), cfg.clone());
                tokio::spawn(async move {
                    let c = Client::connect_shard(&addr, 0, &cfg).await.unwrap();
                    for _ in 0..375 {
                        c.append(&[b'a' + t; 4096]).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    wait_caught_up(&p, Duration::from_secs(30));
    let c0 = rt.block_on(Client::connect_shard(&addr, 0, &cfg)).unwrap();
    let first = rt.block_on(c0.trim(0, 1_400)).unwrap();
    assert!(first > 0, "the trim deleted a segment (first offset {first})");

    // Shard 1 takes appends without pause while the follower comes back empty: its commit
    // loop writes the whole time shard 0 is seeded.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acked = Acked::default();
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let (addr, stop, acked, cfg) = (addr.clone(), stop.clone(), acked.clone(), cfg.clone());
            rt.spawn(async move {
                let c1 = Client::connect_shard(&addr, 1, &cfg).await.unwrap();
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let mut payload = format!("during-seed-{w}-{i}-").into_bytes();
                    payload.resize(16 * 1024, b'a' + (i % 26) as u8);
                    if let Ok(pos) = c1.append(&payload).await {
                        acked.lock().unwrap().insert(pos, payload);
                    }
                }
            })
        })
        .collect();
    // Writing before the follower goes: its shard 1 catches up, then writes live.
    wait_until("appends on shard 1", Duration::from_secs(20), || acked.lock().unwrap().len() > 200);
    // Five times: whether shard 1 has a write in flight at the moment the seed re-executes
    // is up to timing (the blocking wait failed this test in 2 of 5 runs of 2–3 rounds).
    for round in 1..=5 {
        p.follower.kill9();
        std::fs::remove_dir_all(&p.follower.data).unwrap();
        p.follower.spawn();
        let seeded = format!("seeded from the leader at offset {first}");
        wait_until("the seed", Duration::from_secs(20), || p.follower.log_text().matches(&seeded).count() >= round);
        wait_until("the re-executed follower's catch-up", Duration::from_secs(60), || {
            assert!(p.follower.is_running(), "the seeded follower exited:\n{}", p.follower.log_text());
            p.follower.metric_sum("corelog_log_end_offset") >= p.leader.metric_sum("corelog_committed_offset")
        });
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        rt.block_on(w).unwrap();
    }
    assert!(p.follower.is_running(), "the seeded follower exited:\n{}", p.follower.log_text());
    let log = p.follower.log_text();
    assert!(!log.contains("did not finish within 5 s"), "{log}");
    assert!(acked.lock().unwrap().len() > 100, "shard 1 took appends during the seed");
    wait_caught_up(&p, Duration::from_secs(60));
    let shards = rt.block_on(async { vec![Vec::new(), read_all(&p.follower.addr(), &cfg, 1).await] });
    verify_acked(&acked, &shards);
    p.kill_and_compare();
}
