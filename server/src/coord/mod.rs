//! Control plane of coordinator mode (`serve --coordinator`): the only part of the
//! server that talks to etcd. It runs on its own thread (blocking HTTP calls with short
//! timeouts; the glommio data plane never waits on it) and hands its decisions to the
//! shards through `ControlCell` atomics: the lease deadline, solo (the in-sync set is
//! this node alone), stop, and its view of leadership (told to clients).
//!
//! A follower that wins a term leads it in place: its shards hold their logs open and
//! their derived state current, so each one stops taking the old leader's batches,
//! persists the new epoch and leads (`Shard::promote`); the take-over does not depend
//! on the log's length. Every other role change — a leader that lost its term, a
//! follower told by etcd to lead without its own claim — re-executes the process
//! (`exec` of /proc/self/exe with the same arguments, same pid): the new image starts
//! from the newest checkpoint and the segments after it (`boot`), as after a crash, and
//! takes its role from etcd. Before the exec every shard stops writing and the
//! coordinator waits until no write is in flight.
//!
//! Leader: beats every quarter lease (`term::Alive`, a transaction guarded by the term)
//! and may acknowledge only until `beat sent + lease − margin`; it also keeps the etcd
//! lease of its leader key (whole seconds), re-reads the term every tick and restarts as
//! soon as the term is no longer its own. It drops the follower from the in-sync set (a
//! transaction on the term revision) when the follower has been away or silent for
//! `isr_timeout`, or at once when the link broke and the follower's replication port
//! refuses connections (its process is gone); then it acknowledges alone (degraded); it
//! adds the follower back once it holds every acknowledged record, switching to
//! two-copy acks first.
//! Follower: takes over when the leader's heartbeat has been silent for a whole lease
//! (`term::Watch`), when the leader key is gone, or at once when the replication link
//! broke and the leader's replication port refuses connections (its process is gone) —
//! only when it is in the in-sync set (see `term::take_over`).

pub mod cell;
pub mod etcd;
pub mod term;

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cell::ControlCell;
use corelog_client::codec::LeaderState;
use etcd::{Cmp, Etcd, Op};
use term::{Alive, Start, Term, View, Watch};

/// Tick of the coordinator loop (term re-read, heartbeat watch, in-sync checks): a
/// follower sees a silent lease this much late at most.
const TICK: Duration = Duration::from_millis(25);
/// How long after a lost replication link the coordinator keeps probing whether the
/// peer's process is gone (see `follow`, `follower_gone`).
const PROBE_WINDOW: Duration = Duration::from_millis(300);
/// Timeout of one etcd request.
const ETCD_TIMEOUT: Duration = Duration::from_millis(300);
/// How often the leader compacts etcd's history (each beat leaves a version behind).
const COMPACT_EVERY: Duration = Duration::from_secs(60);
/// Shortest lease `--lease-ttl-ms` accepts: four beats and a margin must fit in it.
pub const MIN_LEASE: Duration = Duration::from_millis(200);

#[derive(Clone, Debug)]
pub struct CoordConfig {
    /// `http://HOST:PORT[,…]`
    pub endpoints: String,
    pub cluster: String,
    pub node_id: String,
    pub peer_id: String,
    /// The peer's replication base address (we dial it when we lead).
    pub peer_repl: SocketAddr,
    /// The peer's client address (NotLeader answers name it when it leads).
    pub peer_client: String,
    /// The leader's lease: it acknowledges only within it after its last heartbeat, and
    /// the follower takes over once the heartbeat has been silent this long.
    pub lease: Duration,
    /// Acknowledge only with this many copies (1: degrade to the leader alone; 2: never).
    pub min_insync: u8,
    /// A follower away or silent this long is dropped from the in-sync set.
    pub isr_timeout: Duration,
}

impl CoordConfig {
    /// How long before its lease's end (as counted from the beat's send time) a leader
    /// stops acknowledging: a tenth of the lease, at least 50 ms (clock rates differ a
    /// little between machines; a beat's way to etcd is not counted by the follower).
    pub fn margin(&self) -> Duration {
        (self.lease / 10).max(Duration::from_millis(50))
    }

    /// The TTL of the etcd lease that holds the leader key: etcd leases are whole
    /// seconds, and it only needs to outlive the heartbeat's lease.
    pub fn etcd_ttl(&self) -> Duration {
        Duration::from_secs(self.lease.as_millis().div_ceil(1000).max(1) as u64)
    }

    /// A leader of `t` acknowledges on its own fsync: the term's in-sync set lacks the
    /// peer and `--min-insync` allows one copy.
    pub fn solo_in(&self, t: &Term) -> bool {
        !t.in_sync(&self.peer_id) && self.min_insync < 2
    }

    /// A leader beats this often: four beats per lease.
    pub fn beat_every(&self) -> Duration {
        self.lease / 4
    }

    /// Reads further apart than this restart a follower's watch (`term::Watch`).
    pub fn watch_gap(&self) -> Duration {
        (TICK * 3).max(self.lease / 2)
    }
}

/// How following ended.
enum Followed {
    /// This node claimed the term (with why): it leads it in place.
    Won(Term, String),
    /// Anything else (why): re-execute and take the role etcd gives.
    Restart(String),
}

/// The role this incarnation of the process plays.
#[derive(Clone, Debug)]
pub struct Decision {
    pub leading: bool,
    pub term: Term,
}

pub struct Coordinator {
    cfg: CoordConfig,
    etcd: Etcd,
    prefix: String,
    lease: i64,
    disk_epoch: u32,
    decision: Option<Decision>,
    term_rev: i64,
    /// Leader: adding the follower back (the `gen` of the switch to two-copy acks, and
    /// until when it may take to confirm every acknowledged record).
    expanding: Option<(u64, Instant)>,
    /// Last line logged per kind of trouble, and when (repeats at most every 10 s).
    said: std::collections::HashMap<&'static str, (String, Instant)>,
    /// etcd's revision at the last read.
    revision: i64,
    /// When this node's claim of the term was sent (it is a beat too: its lease starts
    /// there).
    claimed_at: Option<Instant>,
}

impl Coordinator {
    /// Connects, then decides this incarnation's role (waits while etcd is unreachable:
    /// no node may lead without it).
    pub fn start(cfg: CoordConfig, disk_epoch: u32) -> Result<(Coordinator, Decision), String> {
        if cfg.node_id == cfg.peer_id || cfg.node_id.is_empty() || cfg.node_id.contains([' ', ',', '=']) {
            return Err(format!(
                "--node-id {:?} must be non-empty, without spaces, ',' or '=', and differ from --peer-id",
                cfg.node_id
            ));
        }
        if cfg.lease < MIN_LEASE {
            return Err(format!("--lease-ttl-ms must be at least {}", MIN_LEASE.as_millis()));
        }
        assert!(cfg.margin() + cfg.beat_every() < cfg.lease, "four beats and the margin fit in {:?}", cfg.lease);
        let etcd = Etcd::new(&cfg.endpoints, ETCD_TIMEOUT)?;
        let prefix = format!("/corelog/{}/", cfg.cluster);
        let mut c = Coordinator {
            cfg,
            etcd,
            prefix,
            lease: 0,
            disk_epoch,
            decision: None,
            term_rev: 0,
            expanding: None,
            said: Default::default(),
            revision: 0,
            claimed_at: None,
        };
        loop {
            match c.try_start() {
                Ok(Some(d)) => {
                    c.decision = Some(d.clone());
                    return Ok((c, d));
                }
                Ok(None) => {}
                Err(e) => {
                    c.note("etcd", &format!("etcd {}: {e} (no node can lead without etcd; retrying)", c.cfg.endpoints))
                }
            }
            std::thread::sleep(TICK * 2);
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Logs `msg` unless the same `kind` said the same within the last 10 s.
    fn note(&mut self, kind: &'static str, msg: &str) {
        let now = Instant::now();
        let fresh = match self.said.get(kind) {
            Some((m, at)) => m != msg || now.duration_since(*at) >= Duration::from_secs(10),
            None => true,
        };
        if fresh {
            log::info!("coordinator: {msg}");
            self.said.insert(kind, (msg.to_string(), now));
        }
    }

    fn read(&mut self) -> Result<View, String> {
        let (kvs, revision) = self.etcd.range_prefix_at(&self.prefix)?;
        self.revision = revision;
        let v = View::from_kvs(&self.prefix, &kvs)?;
        if let Some((_, rev)) = &v.term {
            self.term_rev = *rev;
        }
        Ok(v)
    }

    fn try_start(&mut self) -> Result<Option<Decision>, String> {
        if self.lease == 0 {
            self.lease = self.etcd.grant(self.cfg.etcd_ttl().as_secs() as i64)?;
        }
        let view = self.read()?;
        match term::on_start(&view, &self.cfg.node_id, self.disk_epoch) {
            Start::Lead(_) if crate::control::any_repair_mark() => {
                self.note(
                    "wait",
                    "a shard is marked needs-repair (it may lack acknowledged records): not leading; waiting for the peer to lead, then following it until caught up",
                );
                Ok(None)
            }
            Start::Lead(t) => {
                if self.claim(&view, &t)? {
                    log::info!("coordinator: leading in epoch {} (in-sync set {:?})", t.epoch, t.isr);
                    return Ok(Some(Decision { leading: true, term: t }));
                }
                Ok(None) // someone else moved first: look again
            }
            Start::Follow(t) => {
                log::info!("coordinator: following {} (epoch {}, in-sync set {:?})", t.leader, t.epoch, t.isr);
                Ok(Some(Decision { leading: false, term: t }))
            }
            Start::Wait(why) => {
                self.note("wait", &why);
                Ok(None)
            }
        }
    }

    /// Writes `t`, the leader key (with our etcd lease) and a first heartbeat if the
    /// term, the leader key and the heartbeat are still as `view` saw them (a beat that
    /// landed since fails it: the leader was not silent after all).
    fn claim(&mut self, view: &View, t: &Term) -> Result<bool, String> {
        // Epochs only rise: a claim is ours, above the term it replaces and our disk's.
        let above = view.term.as_ref().is_none_or(|(old, _)| t.epoch > old.epoch) && t.epoch > self.disk_epoch;
        assert!(above && t.leader == self.cfg.node_id, "claiming {t:?} over {:?}", view.term);
        let (tk, lk, ak) = (self.key("term"), self.key("leader"), self.key("alive"));
        let seen = |key, rev: Option<i64>| rev.map_or(Cmp::Absent(key), |r| Cmp::ModRev(key, r));
        let cmps = [
            seen(&tk, view.term.as_ref().map(|(_, r)| *r)),
            seen(&lk, view.leader.as_ref().map(|(_, r)| *r)),
            seen(&ak, view.alive.as_ref().map(|(_, r)| *r)),
        ];
        let value = t.encode();
        let me = self.cfg.node_id.clone();
        let beat = Alive { epoch: t.epoch, leader: me.clone() }.encode();
        let ops = [
            Op::Put { key: &tk, value: &value, lease: 0 },
            Op::Put { key: &lk, value: &me, lease: self.lease },
            Op::Put { key: &ak, value: &beat, lease: 0 },
        ];
        let sent = Instant::now();
        match self.etcd.txn_at(&cmps, &ops)? {
            Some(rev) => {
                (self.term_rev, self.claimed_at) = (rev, Some(sent));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The leader's heartbeat: holds only while the term is the one last read and the
    /// leader key is ours. `Ok(false)`: it did not hold (the read decides what changed).
    fn beat(&mut self, t: &Term) -> Result<bool, String> {
        let (tk, lk, ak) = (self.key("term"), self.key("leader"), self.key("alive"));
        let me = self.cfg.node_id.clone();
        let beat = Alive { epoch: t.epoch, leader: me.clone() }.encode();
        let cmps = [Cmp::ModRev(&tk, self.term_rev), Cmp::Value(&lk, &me)];
        self.etcd.txn(&cmps, &[Op::Put { key: &ak, value: &beat, lease: 0 }])
    }

    /// Changes the term's in-sync set, guarded by its revision and our leadership.
    fn set_isr(&mut self, t: &Term, isr: Vec<String>) -> Result<bool, String> {
        assert!(isr.first() == Some(&self.cfg.node_id) && isr.len() <= 2, "in-sync set {isr:?}: the leader first");
        let (tk, lk) = (self.key("term"), self.key("leader"));
        let value = Term { isr, ..t.clone() }.encode();
        let me = self.cfg.node_id.clone();
        let cmps = [Cmp::ModRev(&tk, self.term_rev), Cmp::Value(&lk, &me)];
        match self.etcd.txn_at(&cmps, &[Op::Put { key: &tk, value: &value, lease: 0 }])? {
            Some(rev) => {
                self.term_rev = rev; // the next beat compares it
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Runs for the life of this incarnation; never returns (it re-executes the process).
    pub fn run(mut self, ctl: Arc<ControlCell>) -> ! {
        let d = self.decision.clone().expect("decided in start");
        assert!(!d.leading || d.term.leader == self.cfg.node_id, "leading {:?}, not ours", d.term);
        ctl.set_lease(self.cfg.lease);
        ctl.set_view(d.term.epoch, LeaderState::Unknown);
        gauges(&d.term, d.leading, ctl.solo());
        let why = if d.leading {
            self.lead(&ctl, d.term)
        } else {
            match self.follow(&ctl, d.term) {
                Followed::Won(t, why) => {
                    self.lead_in_place(&ctl, &t, &why);
                    self.lead(&ctl, t)
                }
                Followed::Restart(why) => why,
            }
        };
        restart(&ctl, &why)
    }

    /// Sets what a leader's shards act on (in-sync set, lease from the claim, view),
    /// then orders them to lead `t` in place.
    fn lead_in_place(&mut self, ctl: &ControlCell, t: &Term, why: &str) {
        assert_eq!(t.leader, self.cfg.node_id, "leading a term in place that names another node");
        let at = self.claimed_at.expect("a term led in place was claimed by this node");
        let solo = self.cfg.solo_in(t);
        ctl.set_solo(solo);
        ctl.set_lease_until(at + self.cfg.lease.saturating_sub(self.cfg.margin()));
        ctl.set_view(t.epoch, LeaderState::Unknown);
        gauges(t, true, solo);
        log::info!("coordinator: {why}: leading in epoch {} in place (in-sync set {:?})", t.epoch, t.isr);
        ctl.lead_in_place(t.epoch);
    }

    /// Keeps the lease; returns why this node stopped leading.
    fn lead(&mut self, ctl: &ControlCell, mut t: Term) -> String {
        let ttl = self.cfg.etcd_ttl();
        let (mut next_renew, mut next_beat) = (Instant::now(), Instant::now());
        let mut lapsed = None;
        let mut compact = (Instant::now() + COMPACT_EVERY, 0);
        // The claim was a beat: acknowledge from here (the shards may still be recovering).
        let claimed = self.claimed_at.expect("a node leads only a term it claimed");
        ctl.set_lease_until(claimed + self.cfg.lease.saturating_sub(self.cfg.margin()));
        loop {
            let now = Instant::now();
            if now >= next_beat {
                match self.beat(&t) {
                    // etcd counts nothing here: the follower's watch starts when it sees
                    // this beat, after it was sent; stop acking a margin before then.
                    Ok(true) => {
                        ctl.set_lease_until(now + self.cfg.lease.saturating_sub(self.cfg.margin()));
                        next_beat = now + self.cfg.beat_every();
                    }
                    Ok(false) => {} // the term or the leader key changed: the read below says how
                    Err(e) => {
                        self.note("renew", &format!("cannot renew the lease ({e}); acknowledgements stop at its end"))
                    }
                }
            }
            if now >= next_renew {
                match self.etcd.keep_alive(self.lease) {
                    Ok(Some(granted)) => next_renew = now + granted.min(ttl) / 4,
                    Ok(None) => return format!("lease {} expired in etcd", self.lease),
                    Err(e) => self.note("keepalive", &format!("cannot keep the leader key's etcd lease alive ({e})")),
                }
            }
            let l = !ctl.may_ack(Instant::now());
            if lapsed != Some(l) {
                crate::metrics::set_lease_lapsed(l);
                lapsed = Some(l);
            }
            match self.read() {
                Ok(view) => {
                    if let Err(why) = term::still_leading(&view, &self.cfg.node_id, t.epoch) {
                        return why;
                    }
                    let read = view.term.expect("checked by still_leading").0;
                    assert!(read.epoch == t.epoch && read.leader == t.leader, "led {t:?}, read {read:?}");
                    t = read;
                    ctl.set_view(t.epoch, LeaderState::Unknown);
                    if let Err(e) = self.manage_isr(ctl, &t) {
                        self.note("isr", &format!("in-sync set: {e}"));
                    }
                }
                Err(e) => self.note("etcd", &format!("etcd unreachable: {e}")),
            }
            if now >= compact.0 {
                // History older than a minute is what a beat left behind.
                if compact.1 > 0 {
                    if let Err(e) = self.etcd.compact(compact.1) {
                        self.note("compact", &format!("etcd compaction: {e}"));
                    }
                }
                compact = (now + COMPACT_EVERY, self.revision);
            }
            std::thread::sleep(TICK);
        }
    }

    fn manage_isr(&mut self, ctl: &ControlCell, t: &Term) -> Result<(), String> {
        let peer = self.cfg.peer_id.clone();
        let now = Instant::now();
        if t.in_sync(&peer) {
            if self.cfg.min_insync >= 2 || ctl.solo() {
                return Ok(());
            }
            let stalled = ctl.slots.iter().filter_map(|s| {
                let since = s.stalled_since.load(std::sync::atomic::Ordering::Acquire);
                (since != 0).then(|| ctl.instant(since - 1))
            });
            let Some(oldest) = stalled.min() else { return Ok(()) };
            let why = if now.saturating_duration_since(oldest) >= self.cfg.isr_timeout {
                format!("away or silent for {:?}", self.cfg.isr_timeout)
            } else if self.follower_gone(ctl, now) {
                "gone (its link broke and its replication port refuses connections)".to_string()
            } else {
                return Ok(());
            };
            if self.set_isr(t, vec![self.cfg.node_id.clone()])? {
                ctl.set_solo(true);
                gauges(&Term { isr: vec![self.cfg.node_id.clone()], ..t.clone() }, true, true);
                log::warn!(
                    "coordinator: DEGRADED: follower {peer} {why}: removed from the in-sync set of epoch {}; acknowledging on this node's fsync alone",
                    t.epoch
                );
            }
            return Ok(());
        }
        // The follower is out of the set: bring it back once it holds everything acked.
        // Over several ticks (the lease keeps being renewed meanwhile): switch to
        // two-copy acks first, wait until every shard's follower holds every acked
        // record (`in_sync_gen` fresh after the switch), then write the set.
        let solo_allowed = self.cfg.min_insync < 2;
        match self.expanding {
            None => {
                // Near, and confirming: a follower behind a silent link (a partition)
                // still looks connected until the link times out; trying it would hold
                // every ack for `isr_timeout`, again and again.
                let fresh = |s: &cell::ShardSlot| {
                    let at = s.progress_at.load(std::sync::atomic::Ordering::Acquire);
                    at != 0 && now.saturating_duration_since(ctl.instant(at - 1)) < self.cfg.isr_timeout / 2
                };
                if ctl.slots.iter().all(|s| s.near.load(std::sync::atomic::Ordering::Acquire) && fresh(s)) {
                    ctl.set_solo(false);
                    self.expanding = Some((ctl.gen(), now + self.cfg.isr_timeout));
                }
                Ok(())
            }
            Some((g, until)) => {
                if !ctl.slots.iter().all(|s| s.in_sync_gen.load(std::sync::atomic::Ordering::Acquire) >= g) {
                    if now < until {
                        return Ok(());
                    }
                    self.expanding = None;
                    ctl.set_solo(solo_allowed);
                    return Err(format!(
                        "follower {peer} did not confirm every acknowledged record within {:?}; acking as before",
                        self.cfg.isr_timeout
                    ));
                }
                self.expanding = None;
                let isr = vec![self.cfg.node_id.clone(), peer.clone()];
                if self.set_isr(t, isr.clone())? {
                    gauges(&Term { isr, ..t.clone() }, true, false);
                    log::info!("coordinator: follower {peer} caught up: back in the in-sync set of epoch {}; acknowledging on both fsyncs", t.epoch);
                } else {
                    ctl.set_solo(solo_allowed);
                }
                Ok(())
            }
        }
    }

    /// A shard's link to the follower broke within `PROBE_WINDOW` and the follower's
    /// replication port refuses connections: its process is gone, no need to wait for
    /// `isr_timeout`. (A frozen or cut-off follower does not refuse: that one waits.)
    fn follower_gone(&self, ctl: &ControlCell, now: Instant) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        let broke = ctl.slots.iter().any(|s| {
            let since = s.stalled_since.load(Acquire);
            since != 0 && !s.near.load(Acquire) && now.saturating_duration_since(ctl.instant(since - 1)) < PROBE_WINDOW
        });
        broke && refuses(self.cfg.peer_repl)
    }

    /// Keeps our lease (needed to claim the leader key); returns when this node claimed
    /// the term, or must restart to take another role.
    fn follow(&mut self, ctl: &ControlCell, mut shown: Term) -> Followed {
        let mut next_renew = Instant::now();
        let mut links_lost = 0;
        let mut watch = Watch::new(self.cfg.lease, self.cfg.watch_gap());
        // After a replication link was lost, the leader's replication port is probed
        // every tick for PROBE_WINDOW: a dying process may still hold its listening
        // socket for a moment after its connections broke. (A live leader logs each
        // probe as a failed TLS handshake: a handful per lost link.)
        let mut probe_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if now >= next_renew {
                match self.etcd.keep_alive(self.lease) {
                    Ok(Some(_)) => next_renew = now + self.cfg.etcd_ttl() / 4,
                    Ok(None) => match self.etcd.grant(self.cfg.etcd_ttl().as_secs() as i64) {
                        Ok(l) => self.lease = l,
                        Err(e) => self.note("renew", &format!("lease grant: {e}")),
                    },
                    Err(e) => self.note("etcd", &format!("etcd unreachable: {e}")),
                }
            }
            let lost: u64 = ctl.slots.iter().map(|s| s.links_lost.load(std::sync::atomic::Ordering::Acquire)).sum();
            assert!(lost >= links_lost, "{lost} replication links lost, {links_lost} before: the counters only grow");
            if lost > links_lost {
                links_lost = lost;
                probe_until = Some(now + PROBE_WINDOW);
            }
            let leader_dead = probe_until.is_some_and(|t| now < t) && refuses(self.cfg.peer_repl);
            match self.read() {
                Ok(view) => {
                    if let Some((t, _)) = &view.term {
                        if t.leader == self.cfg.node_id {
                            return Followed::Restart(format!("the term names this node leader (epoch {})", t.epoch));
                        }
                        if *t != shown {
                            gauges(t, false, false);
                            shown = t.clone();
                        }
                    }
                    let silent = watch.observe(view.beat(), Instant::now()).is_some();
                    let lost = view.leader.is_none() || leader_dead || silent;
                    let state = if lost { LeaderState::Lapsed } else { LeaderState::Live };
                    ctl.set_view(view.term.as_ref().map_or(0, |(t, _)| t.epoch), state);
                    if lost && !ctl.started() {
                        self.note("take-over", "leader lost while this node is still recovering: no take-over yet");
                    } else if lost && crate::control::any_repair_mark() {
                        self.note(
                            "take-over",
                            "leader lost, but a shard here is marked needs-repair (it may lack acknowledged records): no take-over",
                        );
                    } else if lost {
                        match term::take_over(&view, &self.cfg.node_id, self.disk_epoch, leader_dead || silent) {
                            Ok(t) => match self.claim(&view, &t) {
                                Ok(true) => {
                                    let how = if leader_dead {
                                        "its process is gone".to_string()
                                    } else if silent {
                                        format!("its heartbeat was silent for {:?}", self.cfg.lease)
                                    } else {
                                        "its etcd lease expired".to_string()
                                    };
                                    let why =
                                        format!("took over as leader of epoch {}: the leader is lost ({how})", t.epoch);
                                    assert!(t.epoch > shown.epoch, "took over {t:?} after {shown:?}");
                                    return Followed::Won(t, why);
                                }
                                Ok(false) => {}
                                Err(e) => self.note("take-over", &format!("take-over: {e}")),
                            },
                            Err(why) => self.note("take-over", &format!("leader lost: {why}")),
                        }
                    }
                }
                Err(e) => {
                    ctl.set_view(0, LeaderState::Unknown);
                    self.note("etcd", &format!("etcd unreachable: {e}"))
                }
            }
            std::thread::sleep(TICK);
        }
    }
}

/// The peer's replication port refuses connections (nobody listens: its process is gone).
/// A live host refuses at once; one that does not answer within a tick (cut off, far
/// away) is not judged here — the heartbeat or `--isr-timeout-ms` decides — and the
/// coordinator's loop is not held up.
fn refuses(addr: SocketAddr) -> bool {
    matches!(TcpStream::connect_timeout(&addr, TICK),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
}

fn gauges(t: &Term, leading: bool, solo: bool) {
    metrics::gauge!("corelog_leader").set(if leading { 1.0 } else { 0.0 });
    metrics::gauge!("corelog_epoch").set(t.epoch as f64);
    metrics::gauge!("corelog_insync_replicas").set(t.isr.len() as f64);
    metrics::gauge!("corelog_degraded").set(if leading && solo { 1.0 } else { 0.0 });
    crate::metrics::set_health(&format!(
        "role={} epoch={} insync={} degraded={}",
        if leading { "leader" } else { "follower" },
        t.epoch,
        t.isr.len(),
        u8::from(leading && solo)
    ));
}

/// Stops the data plane and re-executes this process to take its new role from etcd.
fn restart(ctl: &ControlCell, why: &str) -> ! {
    crate::reexec::reexec(ctl, why)
}
