//! One shard's start inside its executor: its storage opened and recovered (the tail
//! repaired, the epoch of this start decided), the shard and its tasks spawned, and its
//! client ports bound for `serve` to open once every shard is ready.

use super::*;

/// Why a leader or standalone node does not start on a damaged last batch, and what the
/// operator can do.
fn refuse_damaged(id: u16, d: &crate::wal::damage::Damage, cfg: &ServeConfig) -> String {
    let how = match (cfg.role, cfg.coord.is_some()) {
        (NodeRole::Standalone, _) => "This is the only copy".to_string(),
        (_, true) => "In coordinator mode a damaged node does not lead: it re-executes, waits for its in-sync peer to take over, then follows it and gets the batch back".to_string(),
        _ => "Repair it from the follower, which holds every acknowledged record: stop the follower, `corelog admin promote` its data dir and start it as leader, then start this node as its follower (it cuts the batch and fetches it again)".to_string(),
    };
    format!(
        "refusing to start: {d}. The batch was written whole and changed afterwards, so it may have been acknowledged: cutting it would lose acknowledged writes and hand their offsets out again. {how}. To give up these records (their offsets are then reused): `corelog admin accept-loss --data-dir {} --shard {id}`; `corelog inspect` shows the damage",
        cfg.data_dir.display(),
    )
}

/// Which shard an executor runs, and what the control plane decided for it.
pub struct Place {
    pub(super) id: u16,
    pub(super) slot: usize,
    pub(super) ctl: Arc<ControlCell>,
    /// Coordinator mode, leading: the epoch of the term this node won in etcd.
    pub(super) term_epoch: Option<u32>,
}

impl Place {
    /// Shard `id` alone in its process, with static roles (a bench writing a log).
    pub fn alone(id: u16) -> Place {
        Place { id, slot: 0, ctl: Arc::new(ControlCell::unbounded(1)), term_epoch: None }
    }
}

/// Opens one shard with its client ports claimed (`open_shard`); its replication port
/// and link start with `start_links`. An executor that runs several shards opens them
/// all first, so that a shard's start-up (which blocks its executor while it reads its
/// log) stalls no link or ack of another.
pub(super) async fn open_claimed(place: Place, cfg: &ServeConfig) -> Result<(Rc<Shard>, String, ClientPorts), String> {
    // Taken now (a clash is found before recovery), listened on once every shard is ready.
    let ports = ClientPorts::claim(cfg.listen, place.id)?;
    let (shard, recovered) = open_shard(place, cfg).await?;
    let line = format!("{recovered}, direct port {}", ports.direct_addr.port());
    Ok((shard, line, ports))
}

/// The replication listener of an opened shard and, on a leader (or a coordinated node
/// that may come to lead), its link to the follower.
pub(super) fn start_links(
    shard: &Rc<Shard>,
    cfg: &ServeConfig,
    repl_server: tls::ServerTls,
    repl_client: tls::ClientTls,
) -> Result<(), String> {
    let id = shard.id();
    let dir = shard.log().dir().to_path_buf();
    if let Some(base) = cfg.repl_listen {
        let a = port_plus(base, id);
        let l = listener::bind(a, false).map_err(|e| format!("replication listen {a}: {e}"))?;
        glommio::spawn_local(follower::accept_loop(shard.clone(), l, repl_server, dir.clone())).detach();
    }
    if cfg.role == NodeRole::Leader || cfg.coord.is_some() {
        let peer = port_plus(cfg.follower_addr.expect("checked in serve"), id);
        let link =
            leader::LinkConfig { peer, tls: repl_client, server_name: cfg.follower_name.clone(), dir: dir.clone() };
        if cfg.role == NodeRole::Leader {
            glommio::spawn_local(leader::run(shard.clone(), link)).detach();
        } else {
            // A coordinated follower that wins a term leads in place (`coord`).
            glommio::spawn_local(leader::run_when_elected(shard.clone(), link)).detach();
        }
    }
    Ok(())
}

/// Opens one shard on the calling executor, without any port: locks its directory,
/// recovers its log (`boot`), repairs a torn tail, persists a leader's new epoch, and
/// starts its commit, deadline and retention loops. Returns the shard and the line
/// saying what it recovered. (`serve` adds the ports; a bench writes through it alone.)
pub async fn open_shard(place: Place, cfg: &ServeConfig) -> Result<(Rc<Shard>, String), String> {
    let id = place.id;
    let dir = control::shard_dir(&cfg.data_dir, id);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let lock = control::lock_shard(&dir)?;
    std::mem::forget(lock); // held until the process exits
    wal::probe::disable_poll_ring(&dir).await?;
    // Sealed segments from their index files, derived state from the newest checkpoint,
    // and a scan of the segments from there on (`boot`).
    let booted = boot::open(id, &dir, cfg.max_producers)?;
    for r in &booted.rebuilt {
        log::info!("shard {id}: segment index rebuilt by a scan: {r}");
    }
    repair_tail(id, &dir, &booted.tail, cfg)?;
    let log = Rc::new(
        wal::Log::open_indexed(&dir, &booted.sealed, &booted.tail, cfg.segment_bytes)
            .await
            .map_err(|e| format!("open log: {e}"))?,
    );
    let (commit_floor, epoch) = epoch_of_start(&place, cfg, &dir, &log)?;
    assert!(commit_floor <= log.next_offset(), "the inherited history ends within the log");
    let role = match cfg.role {
        NodeRole::Leader | NodeRole::Standalone => Role::Leader,
        NodeRole::Follower => Role::Follower,
    };
    let metrics = ShardMetrics::new(id);
    let any_tls = cfg.tls.is_some() || cfg.repl_tls.is_some();
    metrics.ktls_active.set(if any_tls && corelog_runtime::ktls::available() { 1.0 } else { 0.0 });
    let (records, segments, how) = (booted.records(), booted.segments(), booted.how());
    let shard = Shard::new(shard_config(&place, cfg), log, role, epoch, commit_floor, booted.index, metrics);
    shard.release(); // publish the recovered offsets
    glommio::spawn_local(shard.clone().commit_loop()).detach();
    glommio::spawn_local(shard.clone().deadline_loop()).detach();
    shard.metrics().first_offset.set(shard.log().first_offset() as f64);
    if cfg.retain.any() {
        glommio::spawn_local(retention::run(shard.clone())).detach();
    }
    crate::scrub::spawn(&shard, cfg.scrub_mib_per_s, cfg.shard_count);
    let line = format!(
        "shard {id}: recovered {records} records in {segments} segment(s) ({how}), next offset {}, epoch {epoch}",
        shard.log().next_offset(),
    );
    Ok((shard, line))
}

/// What the scan found at the log's end: a torn write is cut; damage to a possibly
/// acknowledged batch only a follower may cut (its leader holds every acknowledged
/// record and sends them again), and the needs-repair mark keeps it from leading until
/// it has them back. A node still marked starts only as a follower.
fn repair_tail(id: u16, dir: &std::path::Path, scan: &recovery::ShardScan, cfg: &ServeConfig) -> Result<(), String> {
    let mark = control::read_repair_mark(dir)?;
    if let Some(d) = &scan.damage {
        let from = mark.map_or(d.first_offset, |m| m.min(d.first_offset));
        control::write_repair_mark(dir, from)?;
        if cfg.role != NodeRole::Follower {
            return Err(refuse_damaged(id, d, cfg));
        }
        let t = scan.torn.as_ref().expect("a damaged tail has bytes to zero");
        recovery::repair(t)?;
        log::warn!(
            "shard {id}: {d}; this node follows: the batch is cut and fetched again from the leader (marked needs-repair from offset {from}: it does not lead until it has caught up)"
        );
    } else if let Some(t) = &scan.torn {
        let what = recovery::repair(t)?;
        log::info!("shard {id}: {what}");
    }
    if let (Some(m), None) = (mark, &scan.damage) {
        if cfg.role != NodeRole::Follower {
            return Err(format!(
                "{} is marked needs-repair: it may lack acknowledged records from offset {m} (a damaged batch was cut and the shard has not caught up with a leader since). It can only follow a node that holds them (`serve --role follower`, or coordinator mode with its peer leading); if no copy exists, `corelog admin accept-loss --data-dir {} --shard {id}` lets it serve without them",
                dir.display(),
                cfg.data_dir.display()
            ));
        }
        log::warn!("shard {id}: marked needs-repair from offset {m}: following until caught up with the leader");
    }
    Ok(())
}

/// The shard's commit floor and epoch for this start.
///
/// A promoted node's log at its promotion is history it inherited (every record of an
/// epoch below the promoted one): as leader it serves it without a follower ack. In
/// coordinator mode the whole log at the take-over is such history (the node was in the
/// in-sync set: it holds every acknowledged record; the rest was never acked).
///
/// Every replicated leader start is a new epoch, persisted before anything else: a
/// batch an earlier incarnation shipped but never wrote is then always in an older
/// epoch than what this one writes, and the handshake cuts it (docs/protocol.md §8).
/// Coordinator mode: the epoch of the term won in etcd (above every epoch on disk).
fn epoch_of_start(
    place: &Place,
    cfg: &ServeConfig,
    dir: &std::path::Path,
    log: &wal::Log,
) -> Result<(u64, u32), String> {
    let stored_epoch = control::read_epoch(dir)?;
    let commit_floor = match control::read_promoted_epoch(dir)? {
        _ if place.term_epoch.is_some() => log.next_offset(),
        Some(p) => log.end_of_epoch(p.saturating_sub(1)),
        None => 0,
    };
    let epoch = if let Some(e) = place.term_epoch {
        assert!(e > stored_epoch, "term epoch {e} not above the shard's {stored_epoch}");
        control::write_epoch(dir, e)?;
        e
    } else if cfg.role == NodeRole::Leader {
        let e = stored_epoch.checked_add(1).ok_or("epoch counter exhausted")?;
        control::write_epoch(dir, e)?;
        e
    } else {
        stored_epoch
    };
    assert!(epoch >= stored_epoch, "a start never goes back to an older epoch");
    Ok((commit_floor, epoch))
}

fn shard_config(place: &Place, cfg: &ServeConfig) -> ShardConfig {
    ShardConfig {
        id: place.id,
        shard_count: cfg.shard_count,
        standalone: cfg.role == NodeRole::Standalone,
        ack_timeout: cfg.ack_timeout,
        groups: cfg.groups,
        recent_bytes: cfg.repl_memory_bytes,
        catch_up_rate: cfg.catch_up_mb_s * 1e6,
        handshake_timeout: cfg.handshake_timeout,
        repl_timeout: cfg.repl_timeout,
        leader_addr: cfg.leader_addr.clone(),
        ctl: place.ctl.clone(),
        slot: place.slot,
        retain: cfg.retain,
        authz: cfg.authz.clone(),
    }
}

/// A shard's client ports between recovery and readiness: bound, then listening (made so
/// by `serve`), then accepted on.
pub(super) struct ClientPorts {
    shared: socket2::Socket,
    direct_addr: SocketAddr,
    direct: socket2::Socket,
}

impl ClientPorts {
    fn claim(listen: SocketAddr, id: u16) -> Result<ClientPorts, String> {
        let direct_addr = port_plus(listen, 1 + id);
        Ok(ClientPorts {
            shared: listener::claim(listen, true).map_err(|e| format!("listen {listen}: {e}"))?,
            direct_addr,
            direct: listener::claim(direct_addr, false)
                .map_err(|e| format!("listen {direct_addr} (direct port of shard {id}): {e}"))?,
        })
    }

    /// The direct port's socket, then the shared port's.
    pub(super) fn fds(&self) -> [RawFd; 2] {
        [self.direct.as_raw_fd(), self.shared.as_raw_fd()]
    }

    /// Accepts clients on both ports from now on; `serve` has made them listen.
    pub(super) fn accept(self, shard: &Rc<Shard>, tls: tls::ServerTls, cap: Arc<listener::ConnCap>) {
        // SAFETY: each fd is a bound, listening TCP socket whose ownership moves here.
        let [shared, direct] = [self.shared, self.direct].map(|s| unsafe { TcpListener::from_raw_fd(s.into_raw_fd()) });
        glommio::spawn_local(listener::accept_clients(shard.clone(), shared, tls.clone(), cap.clone())).detach();
        glommio::spawn_local(listener::accept_clients(shard.clone(), direct, tls, cap)).detach();
    }
}
