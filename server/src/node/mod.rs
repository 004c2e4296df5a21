//! `corelog serve`: pinned glommio executors (one per owned shard, or `--executors` of
//! them with the shards dealt in turn). Each executor recovers its shards, then owns
//! their logs, commit loops, client connections (shared SO_REUSEPORT client port + each
//! shard's direct port), replication ports and, on a leader, their links.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use corelog_client::codec::Role;
use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};

pub use crate::net::tls::TlsFiles;

mod open;

use open::{open_claimed, start_links};
pub use open::{open_shard, Place};

use crate::boot;
use crate::control;
use crate::coord::cell::ControlCell;
use crate::coord::{CoordConfig, Coordinator};
use crate::metrics::{self, ShardMetrics};
use crate::net::{listener, tls};
use crate::replica::{follower, leader};
use crate::shard::retention;
use crate::shard::{Shard, ShardConfig};
use crate::wal::{self, recovery};
use corelog_runtime::fds;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeRole {
    /// Accepts appends; acknowledges once durable here AND on the follower.
    Leader,
    /// Takes batches from the leader; serves reads and tails; refuses appends (NotLeader).
    Follower,
    /// One copy only: acknowledges on local durability. For development and baselines.
    Standalone,
}

#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub shard_count: u16,
    pub shards: Vec<u16>,
    pub role: NodeRole,
    pub repl_listen: Option<SocketAddr>,
    pub follower_addr: Option<SocketAddr>,
    pub follower_name: String,
    pub leader_addr: Option<String>,
    pub tls: Option<TlsFiles>,
    pub repl_tls: Option<TlsFiles>,
    /// The authorization policy (`--authz`); None: every client certificate may do all.
    pub authz: Option<Arc<crate::access::Authz>>,
    /// The name a replication peer's certificate must carry (`net::peer`).
    pub repl_peer: crate::net::peer::PeerName,
    pub metrics_listen: Option<SocketAddr>,
    /// Serve `--metrics-listen` over TLS with the client port's certificates, a client
    /// certificate required.
    pub metrics_tls: bool,
    pub segment_bytes: u64,
    pub ack_timeout: Duration,
    /// Consumer groups: a member silent this long leaves; joins and leaves within the
    /// settle window open one generation (`--group-session-ms`, `--group-settle-ms`).
    pub groups: crate::group::table::Timing,
    pub io_memory: usize,
    pub repl_memory_bytes: usize,
    /// `--catch-up-mb-per-s` (0: no limit).
    pub catch_up_mb_s: f64,
    pub handshake_timeout: Duration,
    /// Client connections per process (None: what the open-file limit leaves, `net::fds`).
    pub max_connections: Option<usize>,
    pub repl_timeout: Duration,
    /// Idempotent producers remembered per shard (`producers::Producers`).
    pub max_producers: usize,
    /// Coordinator mode: the role comes from etcd (`role` is then ignored).
    pub coord: Option<CoordConfig>,
    /// Which old segments each shard deletes (`shard/retention.rs`).
    pub retain: crate::shard::retention::Policy,
    /// SIGTERM/SIGINT: how long the graceful shutdown may take (`shutdown.rs`).
    pub shutdown_timeout: Duration,
    /// MiB/s of sealed segments the node's shards re-read together to find damage
    /// (`scrub/`); 0: off.
    pub scrub_mib_per_s: f64,
    /// `--executors`: how many executors (threads, each with its own io_uring rings and
    /// pinned to one CPU) run the owned shards; None: one per shard.
    pub executors: Option<usize>,
}

impl ServeConfig {
    /// A standalone node of `shard_count` shards with `corelog serve`'s defaults and no
    /// port: for tools that write a log through the shards without serving it (benches).
    pub fn offline(data_dir: PathBuf, shard_count: u16, segment_bytes: u64) -> ServeConfig {
        let d = Duration::from_millis;
        ServeConfig {
            data_dir,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            shard_count,
            shards: (0..shard_count).collect(),
            role: NodeRole::Standalone,
            repl_listen: None,
            follower_addr: None,
            follower_name: "localhost".into(),
            leader_addr: None,
            tls: None,
            repl_tls: None,
            authz: None,
            repl_peer: crate::net::peer::PeerName::new(crate::net::peer::DEFAULT_PEER_NAME).expect("a valid name"),
            metrics_listen: None,
            metrics_tls: false,
            segment_bytes,
            ack_timeout: d(10_000),
            groups: Default::default(),
            io_memory: 512 * 1024,
            repl_memory_bytes: crate::shard::MAX_RECENT_BYTES,
            catch_up_mb_s: 0.0,
            handshake_timeout: d(10_000),
            max_connections: None,
            repl_timeout: d(5_000),
            max_producers: crate::producers::DEFAULT_MAX_PRODUCERS,
            coord: None,
            retain: crate::shard::retention::Policy::default(),
            shutdown_timeout: d(15_000),
            // A tool that writes a log does not re-read it (nor slow its writes by it).
            scrub_mib_per_s: 0.0,
            executors: None,
        }
    }

    /// Executors this process runs: `--executors`, at most one per owned shard.
    pub fn executors(&self) -> usize {
        self.executors.unwrap_or(self.shards.len()).clamp(1, self.shards.len().max(1))
    }
}

fn port_plus(addr: SocketAddr, n: u16) -> SocketAddr {
    SocketAddr::new(addr.ip(), addr.port() + n)
}

/// How the `ready:` line describes the client port: kernel TLS, userspace TLS, none.
pub const READY_MODES: [&str; 3] =
    ["mTLS (kernel TLS after a rustls handshake)", "mTLS (userspace rustls)", "PLAINTEXT (--insecure)"];

/// Runs the node until the process is killed. Returns only on a start-up error.
pub fn serve(mut cfg: ServeConfig) -> Result<(), String> {
    crate::shutdown::block_signals(); // before any thread: only the shutdown thread takes them
    let limit = fds::raise();
    let (ctl, term_epoch) = match cfg.coord.clone() {
        Some(cc) => join_coordinator(&mut cfg, cc)?,
        None => (Arc::new(ControlCell::unbounded(cfg.shards.len())), None),
    };
    crate::shutdown::spawn(ctl.clone(), cfg.shutdown_timeout)?;
    check_roles(&cfg)?;
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| format!("create {}: {e}", cfg.data_dir.display()))?;
    wal::probe::check_direct_io(&cfg.data_dir)?;
    let tls = Tls::load(&cfg)?;
    let handle = metrics::install();
    let metrics_addr = match cfg.metrics_listen {
        Some(a) => {
            let tls = tls.client.clone().filter(|_| cfg.metrics_tls);
            let served = metrics::serve(a, handle, ctl.clone(), cfg.data_dir.clone(), tls);
            Some(served.map_err(|e| format!("metrics listen {a}: {e}"))?)
        }
        None => None,
    };
    let cap = listener::ConnCap::new(connection_cap(&cfg, limit));
    // Every shard recovers with its client ports bound but not listening; once all have,
    // this thread makes them listen (every direct port before the shared one, so that a
    // connection the shared port takes finds every shard's direct port open) and the
    // executors start accepting. No client port answers while any shard of this process
    // is still recovering (docs/operations.md §2, the `ready:` line).
    let (tx, rx) = mpsc::channel::<Result<(String, [RawFd; 2]), String>>();
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let joins = spawn_shards(&cfg, (&ctl, term_epoch), &tls, cap, (tx, go_rx))?;
    let fds = recovered(&cfg, &ctl, rx)?;
    for i in [0, 1] {
        for f in &fds {
            // SAFETY: a bound TCP socket of an executor, kept open (not yet accepted on)
            // until `go` is sent below.
            if unsafe { libc::listen(f[i], listener::BACKLOG) } != 0 {
                return Err(format!("listen on the client port: {}", std::io::Error::last_os_error()));
            }
        }
    }
    let _ = go_tx.send(true);
    ctl.set_started(); // /health answers 200 from here on
    let tls_mode = match (&cfg.tls, corelog_runtime::ktls::available()) {
        (Some(_), true) => READY_MODES[0],
        (Some(_), false) => READY_MODES[1],
        (None, _) => READY_MODES[2],
    };
    log::info!(
        "ready: role {:?}, shards {:?} of {}, clients on {} ({tls_mode}), metrics on {}",
        cfg.role,
        cfg.shards,
        cfg.shard_count,
        cfg.listen,
        metrics_addr.map(|a| a.to_string()).unwrap_or_else(|| "(off)".into())
    );
    for j in joins {
        let _ = j.join();
    }
    Ok(())
}

/// Coordinator mode: joins the election through etcd (the highest epoch on disk goes
/// with it); the term decides this node's role. Returns the control cell the
/// coordinator thread drives and, when leading, the term's epoch.
fn join_coordinator(cfg: &mut ServeConfig, cc: CoordConfig) -> Result<(Arc<ControlCell>, Option<u32>), String> {
    if cfg.shards.len() != cfg.shard_count as usize {
        return Err("--coordinator: one process owns every shard of the node (no --shards)".into());
    }
    let mut disk_epoch = 0;
    for &id in &cfg.shards {
        let dir = control::shard_dir(&cfg.data_dir, id);
        disk_epoch = disk_epoch.max(control::read_epoch(&dir)?);
        control::read_repair_mark(&dir)?; // a marked node does not lead (coordinator)
    }
    let (coordinator, d) = Coordinator::start(cc.clone(), disk_epoch)?;
    let c = ControlCell::new(cfg.shards.len(), d.leading);
    c.set_coordinated();
    let mut term_epoch = None;
    if d.leading {
        c.set_solo(cc.solo_in(&d.term));
        cfg.role = NodeRole::Leader;
        term_epoch = Some(d.term.epoch);
    } else {
        cfg.role = NodeRole::Follower;
    }
    cfg.follower_addr = Some(cc.peer_repl);
    cfg.leader_addr = Some(cc.peer_client.clone());
    let ctl = Arc::new(c);
    let run = ctl.clone();
    std::thread::Builder::new()
        .name("coordinator".into())
        .spawn(move || coordinator.run(run))
        .map_err(|e| format!("start the coordinator thread: {e}"))?;
    Ok((ctl, term_epoch))
}

/// The flags that must go together for the role.
fn check_roles(cfg: &ServeConfig) -> Result<(), String> {
    if cfg.shards.is_empty() || cfg.shards.iter().any(|s| *s >= cfg.shard_count) {
        return Err(format!("--shards {:?} must be non-empty and below --shard-count {}", cfg.shards, cfg.shard_count));
    }
    if cfg.role != NodeRole::Standalone && cfg.repl_listen.is_none() {
        return Err("--repl-listen is required for leader and follower roles".into());
    }
    if cfg.role == NodeRole::Leader && cfg.follower_addr.is_none() {
        return Err("--follower-addr is required for a leader (use --role standalone for a single copy)".into());
    }
    Ok(())
}

/// The TLS settings of the client and replication ports, live: a watcher thread
/// reloads them (and the policy) when their files change.
struct Tls {
    client: Option<tls::Live<rustls::ServerConfig>>,
    repl_server: Option<tls::Live<rustls::ServerConfig>>,
    repl_client: Option<tls::Live<rustls::ClientConfig>>,
}

impl Tls {
    fn load(cfg: &ServeConfig) -> Result<Tls, String> {
        let client = match &cfg.tls {
            Some(t) => Some(tls::Live::new(tls::server_config(&t.cert, &t.key, &t.ca)?)),
            None => None,
        };
        let repl_tls = cfg.repl_tls.as_ref().or(cfg.tls.as_ref());
        let (repl_server, repl_client) = match repl_tls {
            Some(t) => (
                Some(tls::Live::new(tls::repl_server_config(&t.cert, &t.key, &t.ca, &cfg.repl_peer)?)),
                Some(tls::Live::new(tls::client_config(&t.cert, &t.key, &t.ca, &cfg.repl_peer)?)),
            ),
            None => (None, None),
        };
        crate::net::reload::Watched {
            client: cfg.tls.clone().zip(client.clone()),
            repl: match (repl_tls, &repl_server, &repl_client) {
                (Some(f), Some(s), Some(c)) => Some((f.clone(), s.clone(), c.clone())),
                _ => None,
            },
            peer: cfg.repl_peer.clone(),
            authz: cfg.authz.clone(),
        }
        .spawn()?;
        let t = Tls { client, repl_server, repl_client };
        t.log_posture(cfg);
        Ok(t)
    }

    /// Says what is (and is not) protected: the policy, the replication CA, kTLS.
    fn log_posture(&self, cfg: &ServeConfig) {
        match &cfg.authz {
            Some(a) => log::info!(
                "authorization: policy {} in force ({} grants; deny by default)",
                a.path.display(),
                a.grants()
            ),
            None if cfg.tls.is_some() => log::warn!(
                "authorization: no --authz policy: every certificate the client CA signed may append, read and trim everything"
            ),
            None => {}
        }
        if cfg.tls.is_some() && cfg.repl_tls.is_none() && cfg.role != NodeRole::Standalone {
            log::warn!(
                "replication: no --repl-ca, so the replication port trusts the client CA; a peer is told from an application by the name --repl-peer-name `{}` alone (a separate replication CA is stronger)",
                cfg.repl_peer.name()
            );
        }
        if self.client.is_some() || self.repl_server.is_some() {
            // Probed once here (a throwaway loopback socket per cipher), before any shard.
            log::info!("{}", corelog_runtime::ktls::status_line());
        }
    }
}

type Ready = mpsc::Sender<Result<(String, [RawFd; 2]), String>>;

/// One executor per shard, pinned to its CPU: it recovers its shard, reports its
/// `ready` line and bound ports on `ready`, and accepts once `go` says every shard has.
fn spawn_shards(
    cfg: &ServeConfig,
    (ctl, term_epoch): (&Arc<ControlCell>, Option<u32>),
    tls: &Tls,
    cap: Arc<listener::ConnCap>,
    (ready, go): (Ready, tokio::sync::watch::Receiver<bool>),
) -> Result<Vec<glommio::ExecutorJoinHandle<()>>, String> {
    let cpus = corelog_runtime::cpus::allowed();
    let mut joins = Vec::new();
    for (e, hosted) in deal(&cfg.shards, cfg.executors()).into_iter().enumerate() {
        let cfg = cfg.clone();
        let ctl = ctl.clone();
        let (tx, mut go_rx) = (ready.clone(), go.clone());
        let (client_tls, repl_server, repl_client) =
            (tls.client.clone(), tls.repl_server.clone(), tls.repl_client.clone());
        let cap = cap.clone();
        // One shard per executor keeps the thread named and pinned by its shard.
        let first = cfg.shards[hosted[0]];
        let name = if hosted.len() == 1 { format!("shard-{first}") } else { format!("exec-{e}") };
        let cpu = corelog_runtime::cpus::pick(&cpus, first as usize);
        // One blocking thread per hosted shard (all on the executor's CPU, as one shard's
        // is by default): a shard's checkpoint or index write off the executor does not
        // queue behind another shard's.
        let blocking = glommio::CpuSet::online().map_err(|e| format!("list CPUs: {e}"))?.filter(|l| l.cpu == cpu);
        let ex = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .blocking_thread_pool_placement(glommio::PoolPlacement::Custom(vec![blocking; hosted.len()]))
            .name(&name)
            .io_memory(cfg.io_memory)
            // Thousands of armed polls per executor: a deep ring keeps io_uring's
            // cancel hash short (the default 128 cost ~2% CPU at 18k connections).
            .ring_depth(4096)
            .spawn(move || async move {
                // The executor's shards open one after another, then their links start;
                // each reports once ready (a failure ends the process, see `recovered`).
                let mut started = Vec::with_capacity(hosted.len());
                for slot in hosted {
                    let id = cfg.shards[slot];
                    let place = Place { id, slot, ctl: ctl.clone(), term_epoch };
                    match open_claimed(place, &cfg).await {
                        Ok(opened) => started.push(opened),
                        Err(e) => {
                            let _ = tx.send(Err(format!("shard {id}: {e}")));
                            return;
                        }
                    }
                }
                for (shard, line, ports) in &started {
                    let r = start_links(shard, &cfg, repl_server.clone(), repl_client.clone());
                    let _ = tx.send(
                        r.map(|()| (line.clone(), ports.fds())).map_err(|e| format!("shard {}: {e}", shard.id())),
                    );
                }
                drop(tx);
                if go_rx.wait_for(|go| *go).await.is_err() {
                    return; // another shard failed: the process is ending
                }
                let mut shards = Vec::with_capacity(started.len());
                for (shard, _, ports) in started {
                    ports.accept(&shard, client_tls.clone(), cap.clone());
                    shards.push(shard);
                }
                // The shards' tasks run until the process ends.
                std::future::pending::<()>().await;
                drop(shards);
            })
            .map_err(|e| format!("start executor {name}: {e}"))?;
        joins.push(ex);
    }
    Ok(joins)
}

/// Deals the slots of `shards` to `executors` executors in turn: executor e hosts
/// slots e, e + executors, … (each list non-empty, every slot once).
fn deal(shards: &[u16], executors: usize) -> Vec<Vec<usize>> {
    assert!(executors >= 1 && executors <= shards.len(), "{executors} executors for {} shards", shards.len());
    let mut out = vec![Vec::new(); executors];
    for slot in 0..shards.len() {
        out[slot % executors].push(slot);
    }
    out
}

/// Waits until every shard recovered; its `ready` line is logged and its two bound
/// client sockets returned. A shard that failed ends the start (a coordinator-mode
/// leader whose shard is damaged re-executes to follow instead).
fn recovered(
    cfg: &ServeConfig,
    ctl: &ControlCell,
    rx: mpsc::Receiver<Result<(String, [RawFd; 2]), String>>,
) -> Result<Vec<[RawFd; 2]>, String> {
    let mut fds = Vec::new();
    for _ in &cfg.shards {
        match rx.recv() {
            Ok(Ok((line, f))) => {
                log::info!("{line}");
                fds.push(f);
            }
            Ok(Err(e)) if cfg.coord.is_some() && cfg.role == NodeRole::Leader && control::any_repair_mark() => {
                // Won the term, then found damage: the mark is on disk now; the next
                // image does not lead (it waits for the peer to take over and follows).
                log::warn!("{e}");
                crate::reexec::reexec(ctl, "a shard is damaged and cannot lead");
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("an executor died during start-up".into()),
        }
    }
    assert_eq!(fds.len(), cfg.shards.len(), "one pair of client sockets per shard");
    Ok(fds)
}

/// The client-connection cap of this process (`--max-connections`, else what the
/// open-file limit leaves after the shards' reserve), logged with how to raise it.
fn connection_cap(cfg: &ServeConfig, limit: fds::Limit) -> usize {
    let dirs: Vec<PathBuf> = cfg.shards.iter().map(|&id| control::shard_dir(&cfg.data_dir, id)).collect();
    let reserve =
        fds::reserve(cfg.executors(), cfg.shards.len(), fds::count_segments(dirs.iter().map(PathBuf::as_path)));
    let room = fds::default_max_connections(limit, reserve);
    let max = cfg.max_connections.unwrap_or(room);
    let (line, warn) = fds::cap_line(max, room, limit, reserve, cfg.max_connections.is_some());
    if warn {
        log::warn!("{line}");
    } else {
        log::info!("{line}");
    }
    max
}
