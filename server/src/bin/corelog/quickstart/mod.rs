//! `corelog quickstart`: certificates in a temporary directory, a leader and a follower
//! on loopback, a short closed-loop load from `corelog-loadgen`, the results table, a
//! cross-check of both logs with `inspect`, then everything stopped (by pid).
//! `--failover`: the same in coordinator mode with etcd and a leader SIGKILL mid-run
//! ([`failover`]).

pub mod failover;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use corelog_server::probe::http_get;
use corelog_server::{control, wal};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Closed-loop connections (each with one append in flight).
    #[arg(long, default_value_t = 100)]
    connections: u32,
    /// Seconds of load.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Base port: leader clients on it, follower clients on +100, replication +200/+300,
    /// metrics +400/+401.
    #[arg(long, default_value_t = 19400)]
    port: u16,
    /// Keep the data here instead of a temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Coordinator mode instead of static roles: etcd (from PATH; client port base+500,
    /// peer +501) and two nodes that elect their leader through it; the leader is
    /// SIGKILLed halfway through the load, restarted, and rejoins as follower.
    #[arg(long)]
    failover: bool,
}

pub(crate) struct Proc {
    name: &'static str,
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("quickstart: stopped {} (pid {})", self.name, self.child.id());
    }
}

pub(crate) fn sibling(name: &str) -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let p = me.with_file_name(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(format!("{} not found next to {} (build the workspace: cargo build --release)", name, me.display()))
    }
}

pub(crate) fn wait_healthy(port: u16, p: &mut Proc) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(st)) = p.child.try_wait() {
            return Err(format!("{} exited during start-up: {st}", p.name));
        }
        if http_get(port, "/health").map(|r| r.starts_with("HTTP/1.1 200")).unwrap_or(false) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{} not healthy after 30 s", p.name))
}

pub(crate) fn start(exe: &Path, name: &'static str, args: &[String], log: &Path) -> Result<Proc, String> {
    let f = std::fs::File::create(log).map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(f)
        .spawn()
        .map_err(|e| format!("start {name}: {e}"))?;
    eprintln!("quickstart: started {name} (pid {}), log {}", child.id(), log.display());
    Ok(Proc { name, child })
}

fn count_records(data: &Path) -> Result<u64, String> {
    let mut n = 0;
    for s in control::list_shards(data)? {
        n += wal::recovery::scan(s, &control::shard_dir(data, s)).map_err(|e| e.to_string())?.records;
    }
    Ok(n)
}

/// The data directory: `--dir`, else a new one under the system's temporary directory.
pub(crate) fn root(a: &Args) -> Result<PathBuf, String> {
    let root = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("corelog-quickstart-{}", std::process::id())),
    };
    std::fs::create_dir_all(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
    Ok(root)
}

pub fn run(a: Args) -> Result<(), String> {
    if a.failover {
        return failover::run(a);
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let loadgen = sibling("corelog-loadgen")?;
    let root = root(&a)?;
    let certs = root.join("certs");
    corelog_server::certs::generate(&certs, &[], &[])?;
    let c = |f: &str| certs.join(f).display().to_string();
    let p = a.port;
    let node = |role: &str, ports: (u16, u16, u16), cert: &str| node_args(&root, &certs, p, role, ports, cert);
    let mut follower = start(
        &exe,
        "follower",
        &node("follower", (p + 100, p + 300, p + 401), "follower"),
        &root.join("follower.log"),
    )?;
    let mut leader = start(&exe, "leader", &node("leader", (p, p + 200, p + 400), "server"), &root.join("leader.log"))?;
    wait_healthy(p + 401, &mut follower)?;
    wait_healthy(p + 400, &mut leader)?;
    println!(
        "quickstart: leader on 127.0.0.1:{p}, follower on 127.0.0.1:{}, mTLS, running {} connections for {} s",
        p + 100,
        a.connections,
        a.seconds
    );
    let st = Command::new(&loadgen)
        .args([
            "run",
            "--target",
            &format!("127.0.0.1:{p}"),
            "--connections",
            &a.connections.to_string(),
            "--duration",
            &format!("{}s", a.seconds),
            "--ca",
            &c("ca.pem"),
            "--cert",
            &c("client.pem"),
            "--key",
            &c("client.key"),
        ])
        .status()
        .map_err(|e| format!("run {}: {e}", loadgen.display()))?;
    let metrics = http_get(p + 400, "/metrics").unwrap_or_default();
    let acked: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("corelog_appends_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    drop(leader);
    drop(follower);
    if !st.success() {
        return Err(format!("load generator failed: {st}"));
    }
    println!("quickstart: leader acknowledged {acked} appends in total (metrics)");
    check_logs(&root, acked)?;
    println!("quickstart: data, certificates and logs are in {}", root.display());
    Ok(())
}

/// `serve` arguments of one node of the static pair: `role` "leader" or "follower",
/// `cert` its certificate; the leader's client port is `leader_port`.
fn node_args(
    root: &Path,
    certs: &Path,
    leader_port: u16,
    role: &str,
    ports: (u16, u16, u16),
    cert: &str,
) -> Vec<String> {
    let mut v = serve_args(&root.join(role), certs, cert, ports);
    v.extend(["--role".into(), role.into()]);
    if role == "leader" {
        v.extend(["--follower-addr".into(), format!("127.0.0.1:{}", leader_port + 300)]);
    } else {
        v.extend(["--leader-addr".into(), format!("127.0.0.1:{leader_port}")]);
    }
    v
}

/// The `serve` arguments every quickstart node has, in either mode: its data dir, its
/// client, replication and metrics ports (`ports`) on loopback, mTLS with the generated
/// certificate `cert` from `certs`, and 64 MiB segments.
pub(crate) fn serve_args(data: &Path, certs: &Path, cert: &str, ports: (u16, u16, u16)) -> Vec<String> {
    let (listen, repl, metrics) = ports;
    let c = |f: &str| certs.join(f).display().to_string();
    let local = |p: u16| format!("127.0.0.1:{p}");
    let mut v = vec!["serve".to_string()];
    for (flag, val) in [
        ("--data-dir", data.display().to_string()),
        ("--listen", local(listen)),
        ("--repl-listen", local(repl)),
        ("--metrics-listen", local(metrics)),
        ("--cert", c(&format!("{cert}.pem"))),
        ("--key", c(&format!("{cert}.key"))),
        ("--client-ca", c("ca.pem")),
        ("--segment-bytes", (64u64 << 20).to_string()),
    ] {
        v.extend([flag.to_string(), val]);
    }
    v
}

/// Both logs pass `inspect`, are identical record for record, and hold exactly the
/// `acked` appends the leader's metrics counted.
fn check_logs(root: &Path, acked: f64) -> Result<(), String> {
    let mut records = Vec::new();
    for (name, dir) in [("leader", "leader"), ("follower", "follower")] {
        println!("quickstart: corelog inspect {} ({name}):", root.join(dir).display());
        let code = crate::inspect::run(&root.join(dir));
        if code != 0 {
            return Err(format!("inspect of the {name} log exited {code}"));
        }
        records.push(count_records(&root.join(dir))?);
    }
    let (l, f) = (root.join("leader"), root.join("follower"));
    println!("quickstart: corelog inspect --compare {} {}:", l.display(), f.display());
    let code = crate::inspect::compare(&l, &f);
    if code != 0 {
        return Err(format!(
            "cross-check FAILED: the leader's and follower's logs differ (inspect --compare exited {code})"
        ));
    }
    if records.iter().any(|r| *r as f64 != acked) {
        return Err(format!(
            "cross-check FAILED: {acked} acknowledged, records on disk (leader, follower) = {records:?}"
        ));
    }
    println!(
        "quickstart: cross-check OK: {acked} acknowledged = records on the leader = records on the follower, record for record identical"
    );
    Ok(())
}
