//! The released commands as a new user runs them on a stock Linux box: a node under the
//! default open-file limit (`ulimit -n 1024`), a restart followed at once by a read of
//! every shard, `corelog append -` fed by a fast producer, `inspect --compare` with an
//! empty copy, a client certificate knocking on the replication port; and, in a VM with a
//! stock Debian kernel's limits, the quickstart and the README's commands.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use corelog_client::codec::{self, Repl};
use corelog_client::Client;

/// A node command run under `ulimit -S -n soft` (and `-H -n hard` when given).
fn under_ulimit(soft: u32, hard: Option<u32>) -> Vec<String> {
    let set = match hard {
        Some(h) => format!("ulimit -S -n {soft} && ulimit -H -n {h}"),
        None => format!("ulimit -S -n {soft}"),
    };
    vec!["bash".into(), "-c".into(), format!("{set} && exec \"$0\" \"$@\"")]
}

/// `n` client connections open at once, each with one append acknowledged while all the
/// others are open. Returns how many made it.
fn concurrent_connections(addr: &str, certs: &std::path::Path, n: usize) -> usize {
    let rt = runtime();
    let cfg = client_config(Some(certs));
    rt.block_on(async {
        let barrier = Arc::new(tokio::sync::Barrier::new(n));
        let mut tasks = Vec::new();
        for i in 0..n {
            let (addr, cfg, barrier) = (addr.to_string(), cfg.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let c = Client::connect(&addr, &cfg).await;
                barrier.wait().await; // every connection is open (or has failed) now
                let ok = match &c {
                    Ok(c) => c.append(format!("conn-{i}").as_bytes()).await.is_ok(),
                    Err(_) => false,
                };
                barrier.wait().await; // and stays open until every append is answered
                ok
            }));
        }
        let mut ok = 0;
        for t in tasks {
            ok += t.await.unwrap() as usize;
        }
        ok
    })
}

fn serves_500_connections_under(soft: u32, hard: Option<u32>, expect_warn: bool) {
    let (dir, certs) = dir_with_certs("ulimit");
    let mut p = pair(&dir, Some(&certs), &["--shard-count", "2"]);
    for n in [&mut p.leader, &mut p.follower] {
        n.wrap = under_ulimit(soft, hard);
    }
    p.follower.start();
    p.leader.start();
    let log = p.leader.log_text();
    let line = log.lines().find(|l| l.contains("client connections in this process")).expect("the cap is logged");
    let max: usize = line.split("at most ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(max >= 500, "cap {max} under ulimit -n {soft}: {line}");
    assert_eq!(line.contains(" WARN "), expect_warn, "{line}");
    let ok = concurrent_connections(&p.leader.addr(), &certs, 500);
    assert_eq!(ok, 500, "{ok} of 500 concurrent connections appended under ulimit -n {soft}:\n{log}");
    assert_eq!(p.leader.metric_sum("corelog_connections_refused_total"), 0.0);
}

/// The stock case: soft limit 1,024, hard limit higher (systemd's default, a login
/// shell's): the node raises its soft limit to the hard one.
#[test]
fn a_node_started_under_a_soft_limit_of_1024_raises_it_and_serves_500_connections() {
    serves_500_connections_under(1024, None, false);
}

/// Soft and hard both 1,024: the reserve is sized from the shards, not a fixed 1,024,
/// and the start-up line warns how to raise the limit.
#[test]
fn a_node_under_a_hard_limit_of_1024_serves_500_connections_and_warns() {
    serves_500_connections_under(1024, Some(1024), true);
}

/// Appends `n` records of `size` bytes to `shard` through its direct port, 64 in flight.
fn fill_shard(addr: &str, cfg: &corelog_client::ClientConfig, shard: u16, n: usize, size: usize) {
    runtime().block_on(async {
        let c = Client::connect_shard(addr, shard, cfg).await.unwrap();
        assert_eq!(c.info().await.shard, shard);
        let mut tasks = Vec::new();
        for t in 0..64 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                for i in (t..n).step_by(64) {
                    let p = vec![b'a' + (i % 26) as u8; size];
                    c.append(&p).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

/// Restart, wait only for the client port to accept a TCP connection (what a script
/// does), then read every shard on its direct port: every one must answer. Shard 0 holds
/// far more than shard 1, so it recovers last.
#[test]
fn once_the_client_port_accepts_every_shard_answers_at_once_after_a_restart() {
    let dir = TempDir::new("ready");
    let data = dir.path().join("node");
    let mut n = Node::standalone("node", &data, None, &["--shard-count", "2"]).started();
    let cfg = client_config(None);
    fill_shard(&n.addr(), &cfg, 0, 60_000, 2_000);
    fill_shard(&n.addr(), &cfg, 1, 10, 10);
    let addr = n.addr().parse().unwrap();
    for round in 0..3 {
        n.kill9();
        // A killed process's listeners can outlive it briefly (its io_uring is torn down
        // after it is reaped): wait until the port refuses, so that what answers next is
        // the new process.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            assert!(Instant::now() < deadline, "the killed node's client port still accepts after 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        n.spawn();
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(n.is_running(), "node exited:\n{}", n.log_text());
            assert!(Instant::now() < deadline, "client port never opened:\n{}", n.log_text());
            std::thread::sleep(Duration::from_millis(1));
        }
        for shard in [0u16, 1] {
            let recs = runtime().block_on(async {
                let c = Client::connect_shard(&n.addr(), shard, &cfg).await?;
                c.read(shard, 0, 4096).await
            });
            let recs = recs.unwrap_or_else(|e| panic!("round {round}: shard {shard} right after the port opened: {e}"));
            assert!(!recs.is_empty(), "round {round}: shard {shard} read nothing");
        }
    }
}

/// `corelog append -` prints each position while stdin is still open (it used to read
/// stdin to its end first), keeps its output in input order, and every line lands.
#[test]
fn append_dash_answers_while_stdin_is_open_and_keeps_input_order() {
    let dir = TempDir::new("append-dash");
    let data = dir.path().join("node");
    let n = Node::standalone("node", &data, None, &["--shard-count", "1"]).started();
    let mut child = Command::new(BIN)
        .args(["append", "--insecure", "--addr", &n.addr(), "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    writeln!(stdin, "first").unwrap();
    stdin.flush().unwrap();
    // Read the first answer on a thread: the test fails (not hangs) if it never comes
    // while stdin stays open.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        tx.send(first).unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        rest
    });
    let first = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("no position printed within 20 s while stdin stays open")
    });
    assert_eq!(first.trim(), "0 0", "first answer");
    const N: usize = 20_000;
    for i in 1..N {
        writeln!(stdin, "line-{i}").unwrap();
    }
    drop(stdin);
    let st = child.wait().unwrap();
    let rest = reader.join().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(st.success(), "append - failed: {err}");
    let positions: Vec<u64> = rest.lines().map(|l| l.split(' ').nth(1).unwrap().parse().unwrap()).collect();
    assert_eq!(positions.len(), N - 1);
    let recs = read_all(&n.addr(), &client_config(None), 0).await_blocking();
    assert_eq!(recs.len(), N);
    assert_eq!(recs[0].payload, b"first");
    for (i, off) in positions.iter().enumerate() {
        assert_eq!(
            recs[*off as usize].payload,
            format!("line-{}", i + 1).into_bytes(),
            "line {} at offset {off}",
            i + 1
        );
    }
}

trait Blocking: std::future::Future + Sized {
    fn await_blocking(self) -> Self::Output {
        runtime().block_on(self)
    }
}
impl<F: std::future::Future> Blocking for F {}

/// `inspect --compare A B` with B empty: the copies share nothing, and the exit status
/// says so (3), not "B is a prefix of A" (0).
#[test]
fn compare_with_an_empty_copy_says_nothing_is_in_common() {
    let dir = TempDir::new("compare-empty");
    let run = |name: &str, n: usize| {
        let ports = ports();
        let data = dir.path().join(name);
        let args = Node::args(Mode::Standalone, &data, ports, None, "", &["--shard-count", "1"]);
        let mut node = Node::new(name, data.clone(), ports, args);
        node.start();
        if n > 0 {
            fill_shard(&node.addr(), &client_config(None), 0, n, 16);
        }
        node.kill9();
        data
    };
    let (a, b) = (run("a", 100), run("b", 0));
    let cmp = |x: &std::path::Path, y: &std::path::Path| {
        let o = Command::new(BIN).args(["inspect", "--compare"]).arg(x).arg(y).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).to_string())
    };
    let (code, out) = cmp(&a, &b);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("NOTHING IN COMMON") && out.contains("b: no records"), "{out}");
    let (code, out) = cmp(&b, &b);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("both empty"), "{out}");
    let (code, out) = cmp(&a, &a);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("identical below offset 100 (100 records compared"), "{out}");
}

/// A client certificate (signed by the same CA as the nodes') completes no TLS handshake
/// on a follower's replication port and gets no `Repl::Hello` back; the follower logs and
/// counts the refusal. The pair itself still replicates.
#[test]
fn a_client_certificate_cannot_open_a_replication_link() {
    let (dir, certs) = dir_with_certs("repl-peer");
    let p = started_pair(&dir, Some(&certs), &["--shard-count", "1"]);
    let cfg = client_config(Some(&certs));
    let acked = Acked::default();
    assert_eq!(runtime().block_on(load(&p.leader.addr(), &cfg, 2, 5, "pair", &acked)), 0, "the pair replicates");

    let answer: Result<Vec<u8>, String> = runtime().block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = raw_mtls(p.follower.ports.repl, &certs).await?;
        let mut frame = Vec::new();
        let hello = Repl::Hello {
            version: codec::REPL_PROTOCOL_VERSION,
            shard: 0,
            shard_count: 1,
            epoch: u32::MAX - 1,
            next_offset: 0,
            last_epoch: 0,
        };
        hello.encode(&mut frame);
        s.write_all(&frame).await.map_err(|e| e.to_string())?;
        s.flush().await.map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        match tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await {
            Ok(Ok(_)) => Ok(got),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer and no close within 10 s".into()),
        }
    });
    if let Ok(bytes) = &answer {
        assert!(bytes.is_empty(), "the follower answered a client certificate on its replication port: {bytes:?}");
    }
    wait_log(&p.follower, "refused the leader's certificate");
    assert!(p.follower.metric_sum("corelog_replication_peer_refused_total") >= 1.0);
    // The real leader's link was not disturbed.
    assert_eq!(runtime().block_on(load(&p.leader.addr(), &cfg, 2, 5, "after", &acked)), 0);
}

/// The leader checks its end too: a follower whose certificate does not carry the name
/// the leader requires gets no link (and no append is acknowledged through it).
#[test]
fn a_leader_refuses_a_follower_without_the_peer_name() {
    let (dir, certs) = dir_with_certs("repl-peer-leader");
    let mut p = pair(&dir, Some(&certs), &["--shard-count", "1"]);
    p.leader.args.extend(["--repl-peer-name".into(), "elsewhere.example".into()]);
    p.follower.start();
    p.leader.start();
    wait_log(&p.leader, "refused the follower's certificate");
    assert!(p.leader.metric_sum("corelog_replication_peer_refused_total") >= 1.0);
    let r = runtime().block_on(async {
        let c = Client::connect(&p.leader.addr(), &client_config(Some(&certs))).await.unwrap();
        tokio::time::timeout(Duration::from_secs(2), c.append(b"never acknowledged alone")).await
    });
    assert!(!matches!(r, Ok(Ok(_))), "an append was acknowledged without a follower: {r:?}");
}

/// A fresh Debian kernel with its default limits (open files: soft 1,024, hard 4,096) in a
/// throw-away VM (`infra/vm/run-in-vm.sh`): `corelog quickstart`, then every command of the
/// README's "Using it" section, checked one by one (`tests/vm/stock.sh`).
#[test]
fn readme_commands_in_a_stock_vm() {
    if !vm::vm_wanted("readme_commands_in_a_stock_vm") {
        return;
    }
    let loadgen = std::path::Path::new(BIN).with_file_name("corelog-loadgen");
    assert!(loadgen.exists(), "{} is not built (cargo build --release --workspace)", loadgen.display());
    let mut cmd = vm::vm_command();
    cmd.args(["-s", "3072", "-t", "420", "--mem", "2048"])
        .arg("-f")
        .arg(format!("{BIN}:/usr/local/bin/corelog"))
        .arg("-f")
        .arg(format!("{}:/usr/local/bin/corelog-loadgen", loadgen.display()));
    vm::run_vm_script("readme_commands_in_a_stock_vm", cmd, "stock.sh", "stock-vm", |_| false);
}
