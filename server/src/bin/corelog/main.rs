//! `corelog`: one binary for the server and its tools. `serve`, `certs` and the admin
//! commands on a stopped node's data dir call the library (`corelog_server`) directly;
//! the client subcommands are in [`cli`], the rest in [`inspect`], [`quickstart`] and
//! [`workload`].

mod cli;
mod group;
mod inspect;
mod quickstart;
mod workload;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use corelog_server::coord::CoordConfig;
use corelog_server::node::{self, NodeRole, ServeConfig, TlsFiles};
use corelog_server::{certs, config, control};

use cli::ConnArgs;

#[derive(Parser)]
#[command(name = "corelog", version, about = "Thread-per-core durable replicated event log")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a node (one pinned executor per owned shard).
    Serve(Box<ServeArgs>),
    /// Write a development CA and leader/follower/client certificates (ECDSA P-256).
    Certs {
        #[arg(long)]
        out: PathBuf,
        /// Extra DNS names / IPs for the node certificates (localhost, 127.0.0.1 always).
        #[arg(long = "name")]
        names: Vec<String>,
        /// Also issue `client-NAME.pem`/`.key` with common name NAME (the principal under
        /// the default `--principal-from cn`). With a CA already in --out, only these
        /// are written, signed by it.
        #[arg(long = "client")]
        clients: Vec<String>,
    },
    /// Append events; prints `shard offset` per event (`shard offset version` with
    /// --stream). `-` reads one event per stdin line.
    Append {
        #[command(flatten)]
        conn: ConnArgs,
        #[command(flatten)]
        idem: cli::IdemArgs,
        #[command(flatten)]
        stream: cli::StreamArgs,
        #[arg(required = true)]
        payloads: Vec<String>,
    },
    /// Read committed records of a shard: `offset<TAB>payload` per line; or of one
    /// stream (--stream): `version<TAB>offset<TAB>payload` per line.
    Read {
        #[command(flatten)]
        conn: ConnArgs,
        #[arg(long, default_value_t = 0, conflicts_with = "stream")]
        shard: u16,
        #[arg(long, default_value_t = 0, conflicts_with = "stream")]
        from: u64,
        /// Read this stream's events (from its shard) instead of a shard's records.
        #[arg(long)]
        stream: Option<String>,
        /// With --stream: the first version to read.
        #[arg(long, default_value_t = 0, requires = "stream")]
        from_version: u64,
        #[arg(long, default_value_t = u64::MAX)]
        limit: u64,
        #[arg(long)]
        hex: bool,
    },
    /// Follow a shard live from an offset; or one stream (--stream:
    /// `version<TAB>offset<TAB>payload`), or every stream whose name starts with a prefix
    /// on every shard (--prefix: `shard<TAB>offset<TAB>stream<TAB>version<TAB>payload`).
    Tail {
        #[command(flatten)]
        conn: ConnArgs,
        #[arg(long, default_value_t = 0, conflicts_with_all = ["stream", "prefix"])]
        shard: u16,
        #[arg(long, default_value_t = 0, conflicts_with_all = ["stream", "prefix"])]
        from: u64,
        /// Follow this stream's events.
        #[arg(long, conflicts_with = "prefix")]
        stream: Option<String>,
        /// With --stream: the first version.
        #[arg(long, default_value_t = 0, requires = "stream")]
        from_version: u64,
        /// Follow the events of every stream whose name starts with this ("" for all).
        #[arg(long)]
        prefix: Option<String>,
        /// Stop after this many records.
        #[arg(long)]
        count: Option<u64>,
        #[arg(long)]
        hex: bool,
        #[command(flatten)]
        group: group::GroupArgs,
    },
    /// Consumer groups (`tail --group` consumes as a member).
    Group {
        #[command(subcommand)]
        cmd: group::GroupCmd,
    },
    /// Verify a data directory offline (exit 0 sound, 1 torn tail, 2 corruption).
    Inspect {
        /// The data dir (two with --compare).
        #[arg(required = true, num_args = 1..=2, value_name = "DATA_DIR")]
        data_dirs: Vec<PathBuf>,
        /// `inspect --compare A B`: compare two data dirs (e.g. leader and follower)
        /// record by record and print, per shard, where they first differ. Exit 0 when
        /// on every shard the records both hold are identical (and there is at least one,
        /// or both are empty), 1 when some offset differs, 3 when nothing differs but a
        /// shard's copies share no record (one empty, or trimmed past the other's end),
        /// 2 on a read error.
        #[arg(long)]
        compare: bool,
    },
    /// Generate certs, start a leader and a follower, run a short load, print results.
    Quickstart(quickstart::Args),
    /// Closed-loop load recording every operation, then a read-back cross-check.
    Workload(workload::Args),
    /// Control-plane operations.
    Admin {
        #[command(subcommand)]
        cmd: AdminCmd,
    },
}

#[derive(Subcommand)]
enum AdminCmd {
    /// Make a stopped follower's data dir the leader's: bump the epoch on every shard.
    /// Then start it with `serve --role leader`.
    Promote {
        #[arg(long)]
        data_dir: PathBuf,
        /// New epoch (default: one above the highest on this disk). Must exceed every
        /// epoch either node has used.
        #[arg(long)]
        epoch: Option<u32>,
    },
    /// Delete a running node's whole segments of a shard below an offset, within what its
    /// peer may still need (each address given is asked in turn: give both nodes' client
    /// addresses to trim both copies). Prints each node's first offset afterwards; reads
    /// below it get OutOfRange.
    Trim {
        #[command(flatten)]
        conn: cli::ConnArgs,
        #[arg(long)]
        shard: u16,
        /// Delete segments holding only offsets below this.
        #[arg(long)]
        before: u64,
    },
    /// Copy a running node's log into DIR while it serves (docs/operations.md §16): every
    /// shard's committed records, written by the server's own code. DIR is created, or
    /// an earlier backup of the same node there is continued from where it ends. Prints
    /// each shard's offsets; every append acknowledged before the backup started is below
    /// them. Start a node with `--data-dir DIR` to restore; `corelog inspect DIR` checks it.
    Backup {
        #[command(flatten)]
        conn: cli::ConnArgs,
        /// The backup directory (a data directory).
        #[arg(long)]
        to: PathBuf,
        /// Segment file size of the copy (as `serve --segment-bytes`).
        #[arg(long, default_value_t = 256 * 1024 * 1024)]
        segment_bytes: u64,
        /// Read the node's records at most this fast, all shards together, in MB/s (10^6
        /// bytes): what a backup costs the node's appends is the CPU and disk reads it
        /// takes (docs/operations.md §16). 0: as fast as the node answers.
        #[arg(long, default_value_t = 0.0)]
        max_mb_per_s: f64,
    },
    /// Give up the damaged last batch of a stopped node's shard (or the records a
    /// needs-repair shard may lack) so that it can serve alone. Their offsets are handed
    /// out again. Only when no other copy exists: a follower repairs itself from its
    /// leader without this.
    AcceptLoss {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        shard: u16,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Settings from a TOML file (keys named like the flags); precedence flag >
    /// environment (CORELOG_<FLAG>) > file > default (docs/operations.md §2).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration (each setting and where it came from) as TOML
    /// and exit without starting.
    #[arg(long)]
    print_config: bool,
    #[arg(long)]
    data_dir: PathBuf,
    /// Log lines on stderr: `text` (`<UTC timestamp> <LEVEL> <message>`) or `json` (one
    /// object per line: ts, level, msg).
    #[arg(long, value_enum, default_value = "text")]
    log_format: corelog_server::logging::Format,
    /// Client address; shard s also listens on port+1+s (its direct port).
    #[arg(long, default_value = "127.0.0.1:9400")]
    listen: SocketAddr,
    /// Static role (development, the quickstart). Not with --coordinator, where etcd
    /// decides.
    #[arg(long, value_enum, required_unless_present = "coordinator", conflicts_with = "coordinator")]
    role: Option<NodeRole>,
    /// Coordinator mode: etcd endpoints `http://HOST:PORT[,…]`; the role, epoch and
    /// in-sync set come from etcd, with automatic failover (docs/operations.md §8).
    #[arg(long, requires_all = ["cluster", "node_id", "peer_id", "peer_repl", "peer_client", "repl_listen"])]
    coordinator: Option<String>,
    /// Coordinator mode: the cluster's name (its keys live under /corelog/NAME/ in etcd).
    #[arg(long)]
    cluster: Option<String>,
    /// Coordinator mode: this node's id (letters, digits, '-', '_').
    #[arg(long)]
    node_id: Option<String>,
    /// Coordinator mode: the other node's id.
    #[arg(long)]
    peer_id: Option<String>,
    /// Coordinator mode: the other node's replication base address.
    #[arg(long)]
    peer_repl: Option<SocketAddr>,
    /// Coordinator mode: the other node's client address (named in NotLeader answers).
    #[arg(long)]
    peer_client: Option<String>,
    /// Coordinator mode: the leader's lease. The leader beats in etcd every quarter of it
    /// and acknowledges only until its last beat's send + lease − max(lease/10, 50 ms);
    /// the follower takes over once the beat has been silent this long (docs/operations.md
    /// §8). The leader key's etcd lease is this rounded up to whole seconds.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u64).range(200..=60_000))]
    lease_ttl_ms: u64,
    /// Coordinator mode: copies an append needs before it is acknowledged. 1: when the
    /// follower is lost the leader drops it from the in-sync set and acks alone
    /// (degraded); 2: never ack on one copy (unavailable instead).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    min_insync: u8,
    /// Coordinator mode: a follower away (or not confirming a waiting append) this long
    /// is dropped from the in-sync set (at once when its process is gone).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(50..))]
    isr_timeout_ms: u64,
    /// Total shards of the node (default: one per CPU). Leader and follower must agree.
    #[arg(long)]
    shard_count: Option<u16>,
    /// Shards this process owns (default: all), e.g. `--shards 0,1`. Run several
    /// processes with disjoint sets on one data dir and port to exceed the open-file limit.
    #[arg(long, value_delimiter = ',')]
    shards: Vec<u16>,
    /// Executors (threads, each with its own io_uring rings, pinned to one CPU) that run
    /// this process's shards, dealt to them in turn (default: one per shard). Fewer
    /// executors than shards puts several logical shards on one core, each with its own
    /// log, commit loop, ports and links.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    executors: Option<u16>,
    /// Alias of --shard-count for the common one-process case.
    #[arg(long)]
    cores: Option<u16>,
    /// Replication base address: shard s listens on port+s.
    #[arg(long)]
    repl_listen: Option<SocketAddr>,
    /// Leader only: the follower's replication base address.
    #[arg(long)]
    follower_addr: Option<SocketAddr>,
    /// Leader only: name to verify in the follower's certificate.
    #[arg(long, default_value = "localhost")]
    follower_name: String,
    /// Follower only: the leader's client address, returned with NotLeader.
    #[arg(long)]
    leader_addr: Option<String>,
    #[arg(long)]
    cert: Option<PathBuf>,
    #[arg(long)]
    key: Option<PathBuf>,
    /// CA that client certificates must chain to.
    #[arg(long)]
    client_ca: Option<PathBuf>,
    /// Replication certificate/key/CA (default: the client-port ones).
    #[arg(long)]
    repl_cert: Option<PathBuf>,
    #[arg(long)]
    repl_key: Option<PathBuf>,
    #[arg(long)]
    repl_ca: Option<PathBuf>,
    /// A DNS name (or IP) the peer's certificate must carry on the replication link, in
    /// both directions: a certificate signed by the CA without it (an application's
    /// client certificate) is refused. `corelog certs` puts the default in node
    /// certificates only.
    #[arg(long, default_value = corelog_server::net::peer::DEFAULT_PEER_NAME)]
    repl_peer_name: String,
    /// Plaintext on every port. Never in production.
    #[arg(long)]
    insecure: bool,
    /// Authorization policy (TOML; docs/operations.md, Security): deny by default, the
    /// grants in the file allowed. Reloaded on change and on SIGHUP. Without it every
    /// client certificate has every right. Needs mTLS.
    #[arg(long)]
    authz: Option<PathBuf>,
    /// How a client certificate names its principal: rules tried in order, comma-separated
    /// (`cn`, `dns`, `dns:SUFFIX`, `uri`, `uri:PREFIX`).
    #[arg(long, default_value = "cn")]
    principal_from: String,
    /// Serve Prometheus /metrics and /health here.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Serve --metrics-listen over HTTPS with the client port's certificate, and require
    /// a client certificate signed by the client CA (default: plain HTTP; firewall it).
    #[arg(long)]
    metrics_tls: bool,
    /// Segment file size (preallocated).
    #[arg(long, default_value_t = 256 * 1024 * 1024)]
    segment_bytes: u64,
    /// Fail an append not confirmed by the follower within this many milliseconds.
    #[arg(long, default_value_t = 10_000)]
    ack_timeout_ms: u64,
    /// Consumer groups: a member that sends nothing for this many ms leaves its group.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    group_session_ms: u64,
    /// Consumer groups: joins and leaves within this many ms open one generation.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    group_settle_ms: u64,
    /// io_uring registered buffer memory per executor (memlock is 8 MiB per user here).
    #[arg(long, default_value_t = 512 * 1024)]
    io_memory: usize,
    /// Leader: heap bytes of recent batches (buffers and per-batch overhead) kept in
    /// memory per shard for the replication link;
    /// a follower further behind is caught up from the segments (default 32 MiB, at
    /// least 64 KiB; small values are for tests of the catch-up path).
    #[arg(long, default_value_t = corelog_server::shard::MAX_RECENT_BYTES as u64, value_parser = clap::value_parser!(u64).range(65536..))]
    repl_memory_bytes: u64,
    /// Leader: catch a follower up from the segments (one that was away, or starts
    /// empty) at most this fast, in MB/s per shard (10^6 bytes): the reads compete with
    /// the appends for the shard's CPU and disk. 0: no limit.
    #[arg(long, default_value_t = 0.0)]
    catch_up_mb_per_s: f64,
    /// A client or replication connection must finish its TLS handshake and send its
    /// first frame (`Hello`) within this many milliseconds, or it is closed.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    handshake_timeout_ms: u64,
    /// Client connections this process keeps open at most (client port and direct ports,
    /// all its shards); beyond it new ones are closed at once and counted in
    /// corelog_connections_refused_total. Default: the open-file limit (raised to the hard
    /// limit at start) less a reserve for shards and segments (docs/operations.md §9).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: Option<u64>,
    /// A replication link on which nothing arrives for this many milliseconds is dropped
    /// (leader and follower); an idle leader pings every fifth of it, the follower acks.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(100..))]
    repl_timeout_ms: u64,
    /// Idempotent producers remembered per shard; a new one beyond it evicts the one whose
    /// last append is oldest (docs/operations.md §11).
    #[arg(long, default_value_t = corelog_server::producers::DEFAULT_MAX_PRODUCERS as u64, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_producers: u64,
    /// Retention: keep at most about this many bytes of segment files per shard; older
    /// whole segments are deleted (never the one being written, never records the peer
    /// may still need). Off by default (docs/operations.md §13).
    #[arg(long)]
    retain_bytes: Option<u64>,
    /// Retention: delete a segment once its last write is older than this many hours
    /// (fractions allowed, e.g. 0.5). Off by default.
    #[arg(long)]
    retain_hours: Option<f64>,
    /// SIGTERM/SIGINT: stop taking appends and connections, answer what was taken, close
    /// connections, exit 0 — within this many milliseconds, else exit 1 at once (as
    /// does a second signal).
    #[arg(long, default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1..))]
    shutdown_timeout_ms: u64,
    /// Scrubbing: MiB/s of sealed segments the node re-reads, shared by its shards, to find
    /// damage a start no longer reads (every CRC, against the segment index files);
    /// damage is logged, counted and shown on /health. The default covers 1 TB a day;
    /// 0 turns it off (docs/operations.md §7.3).
    #[arg(long, default_value_t = corelog_server::scrub::DEFAULT_MIB_PER_S)]
    scrub_mib_per_s: f64,
}

fn serve_config(a: ServeArgs) -> Result<ServeConfig, String> {
    let ncpu = std::thread::available_parallelism().map(|n| n.get() as u16).unwrap_or(1);
    let shard_count = a.shard_count.or(a.cores).unwrap_or(ncpu);
    let shards = if a.shards.is_empty() { (0..shard_count).collect() } else { a.shards };
    let coord = match a.coordinator {
        None => None,
        Some(endpoints) => {
            let id_ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            let (node_id, peer_id) = (a.node_id.unwrap_or_default(), a.peer_id.unwrap_or_default());
            let cluster = a.cluster.unwrap_or_default();
            if !id_ok(&node_id) || !id_ok(&peer_id) || !id_ok(&cluster) || node_id == peer_id {
                return Err(
                    "--cluster, --node-id and --peer-id: letters, digits, '-', '_'; node and peer ids differ".into()
                );
            }
            Some(CoordConfig {
                endpoints,
                cluster,
                node_id,
                peer_id,
                peer_repl: a.peer_repl.expect("required by clap"),
                peer_client: a.peer_client.expect("required by clap"),
                lease: Duration::from_millis(a.lease_ttl_ms),
                min_insync: a.min_insync,
                isr_timeout: Duration::from_millis(a.isr_timeout_ms),
            })
        }
    };
    let tls = match (a.insecure, a.cert, a.key, a.client_ca) {
        (true, None, None, None) => None,
        (true, ..) => return Err("--insecure cannot be combined with --cert/--key/--client-ca".into()),
        (false, Some(cert), Some(key), Some(ca)) => Some(TlsFiles { cert, key, ca }),
        (false, ..) => return Err("mTLS needs --cert, --key and --client-ca (or --insecure for plaintext)".into()),
    };
    let repl_tls = match (&tls, a.repl_cert, a.repl_key, a.repl_ca) {
        (_, None, None, None) => None,
        (Some(_), Some(cert), Some(key), Some(ca)) => Some(TlsFiles { cert, key, ca }),
        (None, ..) => return Err("--repl-cert/--repl-key/--repl-ca cannot be combined with --insecure".into()),
        _ => return Err("--repl-cert, --repl-key and --repl-ca go together".into()),
    };
    cli::check_segment_bytes(a.segment_bytes)?;
    let mapping = corelog_server::principal::Mapping::parse(&a.principal_from)?;
    let authz = match (a.authz, &tls) {
        (None, _) => None,
        (Some(_), None) => {
            return Err("--authz needs mTLS: principals come from client certificates (drop --insecure)".into())
        }
        (Some(path), Some(_)) => Some(std::sync::Arc::new(corelog_server::access::Authz::load(&path, mapping)?)),
    };
    let age = match a.retain_hours {
        None => None,
        Some(h) if h.is_finite() && h > 0.0 && h < 1e6 => Some(Duration::from_secs_f64(h * 3600.0)),
        Some(h) => return Err(format!("--retain-hours {h}: give a number of hours above 0 (fractions allowed)")),
    };
    let scrub = a.scrub_mib_per_s;
    if !(scrub.is_finite() && (0.0..=1e6).contains(&scrub)) {
        return Err(format!("--scrub-mib-per-s {scrub}: give MiB per second, 0 (off) up to 1000000"));
    }
    Ok(ServeConfig {
        executors: a.executors.map(usize::from),
        scrub_mib_per_s: scrub,
        retain: corelog_server::shard::retention::Policy { bytes: a.retain_bytes, age },
        shutdown_timeout: Duration::from_millis(a.shutdown_timeout_ms),
        data_dir: a.data_dir,
        listen: a.listen,
        shard_count,
        shards,
        role: a.role.unwrap_or(NodeRole::Follower),
        repl_listen: a.repl_listen,
        follower_addr: a.follower_addr,
        follower_name: a.follower_name,
        leader_addr: a.leader_addr,
        tls,
        repl_tls,
        authz,
        repl_peer: corelog_server::net::peer::PeerName::new(&a.repl_peer_name)?,
        metrics_listen: a.metrics_listen,
        metrics_tls: match (a.metrics_tls, a.metrics_listen.is_some(), a.insecure) {
            (true, false, _) => return Err("--metrics-tls needs --metrics-listen".into()),
            (true, _, true) => return Err("--metrics-tls cannot be combined with --insecure".into()),
            (m, ..) => m,
        },
        segment_bytes: a.segment_bytes,
        ack_timeout: Duration::from_millis(a.ack_timeout_ms),
        groups: corelog_server::group::table::Timing { session_ms: a.group_session_ms, settle_ms: a.group_settle_ms },
        io_memory: a.io_memory,
        handshake_timeout: Duration::from_millis(a.handshake_timeout_ms),
        max_connections: a.max_connections.map(|n| n as usize),
        repl_timeout: Duration::from_millis(a.repl_timeout_ms),
        max_producers: a.max_producers as usize,
        repl_memory_bytes: usize::try_from(a.repl_memory_bytes).map_err(|e| format!("--repl-memory-bytes: {e}"))?,
        catch_up_mb_s: match a.catch_up_mb_per_s {
            r if r >= 0.0 && r.is_finite() => r,
            r => return Err(format!("--catch-up-mb-per-s {r}: a rate of 0 (no limit) or more")),
        },
        coord,
    })
}

/// `corelog serve`: its arguments completed from CORELOG_<FLAG> variables and the
/// `--config` file (`config.rs`); other commands unchanged.
fn with_settings(mut argv: Vec<OsString>) -> (Vec<OsString>, BTreeMap<String, config::Source>) {
    if argv.get(1).is_none_or(|a| a != "serve") {
        return (argv, BTreeMap::new());
    }
    let cmd = Cli::command();
    let serve = cmd.find_subcommand("serve").expect("serve is a subcommand");
    match config::expand(serve, &argv[2..], &|k| std::env::var(k).ok()) {
        Ok((rest, sources)) => {
            argv.truncate(2);
            argv.extend(rest);
            (argv, sources)
        }
        Err(e) => {
            eprintln!("corelog: error: {e}");
            std::process::exit(2);
        }
    }
}

fn main() {
    // A panic anywhere (e.g. an executor thread) stops the whole process: never serve
    // with a dead shard behind a healthy /health.
    std::panic::set_hook(Box::new(|info| {
        corelog_server::fatal(&info.to_string());
    }));
    let (argv, sources) = with_settings(std::env::args_os().collect());
    let matches = match Cli::command().try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => {
            let from: Vec<String> = sources
                .iter()
                .filter(|(_, s)| matches!(s, config::Source::Env | config::Source::File))
                .map(|(k, s)| {
                    format!(
                        "{k} ({})",
                        if *s == config::Source::Env { config::env_name(k) } else { "--config file".into() }
                    )
                })
                .collect();
            let _ = e.print();
            if !from.is_empty() && e.use_stderr() {
                eprintln!("note: settings taken from the environment or the --config file: {}", from.join(", "));
            }
            std::process::exit(e.exit_code());
        }
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let serving = matches!(cli.cmd, Cmd::Serve(_));
    let r: Result<(), String> = match cli.cmd {
        Cmd::Serve(a) if a.print_config => {
            let cmd = Cli::command();
            let serve = cmd.find_subcommand("serve").expect("serve is a subcommand");
            let m = matches.subcommand_matches("serve").expect("parsed as serve");
            print!("{}", config::print(serve, m, &sources));
            Ok(())
        }
        Cmd::Serve(a) => {
            corelog_server::logging::init(a.log_format);
            serve_config(*a).and_then(node::serve)
        }
        Cmd::Certs { out, names, clients } => certs::generate(&out, &names, &clients).map(|said| println!("{said}")),
        Cmd::Append { conn, idem, stream, payloads } => cli::append(&conn, &idem, &stream, &payloads),
        Cmd::Read { conn, stream: Some(name), from_version, limit, hex, .. } => {
            cli::read_stream(&conn, &name, from_version, limit, hex)
        }
        Cmd::Read { conn, shard, from, limit, hex, .. } => cli::read(&conn, shard, from, limit, hex),
        Cmd::Tail { conn, stream: Some(name), from_version, count, hex, .. } => {
            cli::subscribe(&conn, cli::Follow::Stream(name, from_version), count, hex)
        }
        Cmd::Tail { conn, group: g @ group::GroupArgs { group: Some(_), .. }, prefix, count, hex, .. } => {
            group::tail(&conn, &g, prefix.as_deref().unwrap_or(""), count, hex)
        }
        Cmd::Tail { conn, prefix: Some(p), count, hex, .. } => {
            cli::subscribe(&conn, cli::Follow::Prefix(p), count, hex)
        }
        Cmd::Tail { conn, shard, from, count, hex, .. } => cli::tail(&conn, shard, from, count, hex),
        Cmd::Group { cmd: group::GroupCmd::Describe { conn, group } } => group::describe(&conn, &group),
        Cmd::Inspect { data_dirs, compare } => std::process::exit(match (compare, &data_dirs[..]) {
            (false, [d]) => inspect::run(d),
            (true, [a, b]) => inspect::compare(a, b),
            _ => {
                eprintln!("corelog inspect: give one data dir, or two with --compare");
                2
            }
        }),
        Cmd::Quickstart(a) => quickstart::run(a),
        Cmd::Workload(a) => workload::main(a),
        Cmd::Admin { cmd: AdminCmd::Trim { conn, shard, before } } => cli::trim(&conn, shard, before),
        Cmd::Admin { cmd: AdminCmd::Backup { conn, to, segment_bytes, max_mb_per_s } } => {
            cli::backup(&conn, &to, segment_bytes, max_mb_per_s)
        }
        Cmd::Admin { cmd: AdminCmd::AcceptLoss { data_dir, shard } } => {
            control::accept_loss(&data_dir, shard).map(|what| println!("{what}"))
        }
        Cmd::Admin { cmd: AdminCmd::Promote { data_dir, epoch } } => control::promote(&data_dir, epoch).map(|e| {
            println!("promoted {}: epoch {e}; start it with `corelog serve --role leader`", data_dir.display())
        }),
    };
    if let Err(e) = r {
        if serving {
            log::error!("error: {e}");
        } else {
            eprintln!("corelog: error: {e}");
        }
        // EX_NOPERM: the policy refused (a script can tell it from a failure).
        let forbidden = format!("server error {} Forbidden", corelog_client::codec::ErrorCode::Forbidden as u16);
        std::process::exit(if e.contains(&forbidden) { 77 } else { 1 });
    }
}
