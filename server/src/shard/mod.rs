//! The per-core owner of one shard: its log, its group-commit loop, the appends waiting
//! for durability, and the watermarks that decide when an append is acknowledged.
//!
//! Data plane only: roles and epochs are decided by `control` and the replication
//! handshake, and change only through this type's methods (`fence`, `adopt_epoch`,
//! `follower_joined`, `follower_acked`).
//!
//! Epoch acceptance: a leader writes nothing in an epoch its follower has not accepted
//! (persisted) in a handshake. Until then appends are staged but the commit loop writes
//! nothing; when the oldest staged append has waited `ack_timeout`, every staged append
//! is answered `Unavailable` (nothing written) and its offsets are handed out again. So
//! every record of an epoch was written by the one incarnation whose epoch the follower
//! accepted, and a follower's records that its restarted leader never wrote are in an
//! older epoch than anything that leader writes: the handshake cuts them.
//!
//! Adaptive group commit: appends are encoded straight into the open batch as they
//! arrive; the commit loop takes the whole open batch whenever the previous write+fsync
//! returns. An idle shard flushes a lone append at once; a busy one grows its batches by
//! itself. No timer, no delay knob. Bounds: `MAX_BATCH_BYTES`/`MAX_BATCH_RECORDS` per
//! batch, `MAX_STAGED_BYTES` queued ahead of the disk, `MAX_UNACKED` appends not yet
//! acknowledged; an append beyond them waits (back-pressure reaches the socket).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelog_client::codec::{self, ErrorCode, Role};

use crate::coord::cell::ControlCell;
use crate::group::table::Groups;
use crate::index::LogIndex;
use crate::metrics::ShardMetrics;
use crate::producers::Producers;
use crate::replica::recent::RecentRing;
use crate::wal::Log;
use corelog_runtime::sync::{Event, EventWait};

mod append;
mod commit;
mod lifecycle;
mod replicated;
pub mod retention;
mod seal;
#[cfg(test)]
mod tests;

pub use append::{AckForm, Answer, AppendReq, Outcome, Refused, Taken};
use append::{DupWaiter, Staged};
use commit::Unacked;

/// Encoded bytes staged ahead of the disk (open + sealed batches).
pub const MAX_STAGED_BYTES: usize = 16 * 1024 * 1024;
/// Appends accepted but not yet acknowledged, per shard.
pub const MAX_UNACKED: usize = 128 * 1024;
/// A follower this close behind (records) is worth switching back to two-copy acks for.
pub const NEAR_RECORDS: u64 = 64 * 1024;
/// Recent batches kept in memory for the replication link (default of `recent_bytes`).
pub const MAX_RECENT_BYTES: usize = 32 * 1024 * 1024;

#[derive(Clone)]
pub struct ShardConfig {
    pub id: u16,
    pub shard_count: u16,
    /// Acknowledge on local durability alone (no follower). Development/benchmark only.
    pub standalone: bool,
    pub ack_timeout: Duration,
    /// Consumer groups' session time and settle window.
    pub groups: crate::group::table::Timing,
    /// Heap bytes of recent batches kept for the replication link (buffers plus
    /// per-batch overhead; ≥ 2 batches are kept).
    pub recent_bytes: usize,
    /// Leader: bytes per second at most when catching a follower up from the segments
    /// (`--catch-up-mb-per-s`; 0: no limit).
    pub catch_up_rate: f64,
    /// TLS handshake + first frame (`Hello`) on client and replication connections.
    pub handshake_timeout: Duration,
    /// A replication link on which nothing arrived for this long is dropped (either
    /// side); an idle leader pings every fifth of it.
    pub repl_timeout: Duration,
    /// Client address of the leader, for `NotLeader` answers on a follower.
    pub leader_addr: Option<String>,
    /// Decisions of the control plane (lease, solo, stop); `ControlCell::unbounded` for
    /// static roles.
    pub ctl: Arc<ControlCell>,
    /// This shard's slot in `ctl.slots`.
    pub slot: usize,
    /// Which old segments to delete (`--retain-bytes`, `--retain-hours`).
    pub retain: retention::Policy,
    /// Who may do what on the client port (`access`); None: everything is allowed.
    pub authz: Option<Arc<crate::access::Authz>>,
}

pub struct Shard {
    cfg: ShardConfig,
    log: Rc<Log>,
    role: Cell<Role>,
    /// Follower taking over in place (`promote`): no more batches or handshakes.
    promoting: Cell<bool>,
    /// A replication handshake is cutting the log (`truncate`).
    cutting: Cell<bool>,
    epoch: Cell<u32>,
    /// Leader: a follower has accepted `epoch` (always true for standalone/follower).
    accepted: Cell<bool>,
    accepted_ev: Event,
    /// Next offset to assign (≥ log.next_offset()).
    next_assign: Cell<u64>,
    staged: RefCell<VecDeque<Staged>>,
    staged_bytes: Cell<usize>,
    unacked: RefCell<VecDeque<Unacked>>,
    unacked_count: Cell<usize>,
    /// Follower's durable end as last acknowledged to us (leader only).
    follower_next: Cell<u64>,
    /// Leader: a follower link is joined (false since `link_down_since`).
    link_up: Cell<bool>,
    link_down_since: Cell<Instant>,
    /// Leader: when the follower last confirmed new records (or joined).
    follower_progress: Cell<Instant>,
    /// Leader: the committed end as last released; never goes back. Starts at the end of
    /// the history this leader inherited (static: its log at `admin promote`, format.md
    /// §1 `promoted-epoch`, else 0; coordinator: its log when it took the lead).
    acked_end: Cell<u64>,
    /// `ctl.solo()` as this shard last acted on it.
    solo_seen: Cell<bool>,
    /// Leader: batches handed to the disk, kept for the replication link.
    recent: RefCell<RecentRing>,
    /// Something was staged: wakes the commit loop.
    staged_ev: Event,
    /// A batch was handed to the disk: wakes the replication link.
    shipped_ev: Event,
    /// The committed end advanced: wakes tails and the follower's acker.
    durable_ev: Event,
    /// Room was made under the bounds: wakes waiting appends.
    space_ev: Event,
    /// Idempotent producers' state and the stream index, derived from the log.
    index: RefCell<LogIndex>,
    /// The producers' table of the records written (the index above also holds the staged
    /// ones): what a checkpoint saves (`seal`).
    durable_producers: RefCell<Producers>,
    /// The index and checkpoint writes of the last segment sealed, still running.
    sealing: RefCell<Option<glommio::Task<()>>>,
    /// Retried idempotent appends waiting for their original (few; leader only).
    dups: RefCell<Vec<DupWaiter>>,
    /// Follower: offsets below are durable on the leader too (as its batches show), so
    /// no handshake will ever cut them: retention may delete them.
    peer_durable: Cell<u64>,
    /// Draining (graceful shutdown): every append was answered; client connections close.
    closing: Cell<bool>,
    /// The seal of a graceful shutdown has begun (`seal_at_stop`).
    sealing_at_stop: Cell<bool>,
    closing_ev: Event,
    /// Client connections open on this shard's executor.
    open_conns: Cell<usize>,
    /// A trim is running (one at a time; `retention::trim`).
    trimming: Cell<bool>,
    trim_done: Event,
    /// Leader: the consumer groups this shard serves (`grouplog` opens them).
    groups: Groups,
    metrics: ShardMetrics,
}

/// This shard's turn to trim (`Shard::trim_turn`).
pub struct TrimTurn<'a>(&'a Shard);

impl Drop for TrimTurn<'_> {
    fn drop(&mut self) {
        self.0.trimming.set(false);
        self.0.trim_done.notify();
    }
}

impl Shard {
    /// `commit_floor`: on a leader, the end of the history it inherited (see `committed`).
    pub fn new(
        cfg: ShardConfig,
        log: Rc<Log>,
        role: Role,
        epoch: u32,
        commit_floor: u64,
        index: LogIndex,
        metrics: ShardMetrics,
    ) -> Rc<Shard> {
        let next = log.next_offset();
        assert!(commit_floor <= next, "commit floor {commit_floor} above the log end {next}");
        let replicated_leader = role == Role::Leader && !cfg.standalone;
        let recent_ring = RecentRing::new(cfg.recent_bytes);
        publish_index(&metrics, &index); // what the boot scan rebuilt
        Rc::new(Shard {
            acked_end: Cell::new(commit_floor),
            link_up: Cell::new(false),
            link_down_since: Cell::new(Instant::now()),
            follower_progress: Cell::new(Instant::now()),
            solo_seen: Cell::new(false),
            cfg,
            log,
            role: Cell::new(role),
            promoting: Cell::new(false),
            cutting: Cell::new(false),
            epoch: Cell::new(epoch),
            accepted: Cell::new(!replicated_leader),
            accepted_ev: Event::default(),
            next_assign: Cell::new(next),
            staged: Default::default(),
            staged_bytes: Cell::new(0),
            unacked: Default::default(),
            unacked_count: Cell::new(0),
            follower_next: Cell::new(0),
            recent: RefCell::new(recent_ring),
            staged_ev: Event::default(),
            shipped_ev: Event::default(),
            durable_ev: Event::default(),
            space_ev: Event::default(),
            durable_producers: RefCell::new(index.producers.copy()),
            index: RefCell::new(index),
            sealing: RefCell::new(None),
            dups: Default::default(),
            peer_durable: Cell::new(0),
            closing: Cell::new(false),
            sealing_at_stop: Cell::new(false),
            closing_ev: Event::default(),
            open_conns: Cell::new(0),
            trimming: Cell::new(false),
            trim_done: Event::default(),
            groups: Groups::default(),
            metrics,
        })
    }

    pub fn id(&self) -> u16 {
        self.cfg.id
    }

    pub fn cfg(&self) -> &ShardConfig {
        &self.cfg
    }

    pub fn log(&self) -> &Rc<Log> {
        &self.log
    }

    pub fn metrics(&self) -> &ShardMetrics {
        &self.metrics
    }

    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// Resolves at the next change of the committed end or the log's end, or of the
    /// role (tails, the follower's acker, a cut or take-over waiting for the disk).
    pub fn changed(&self) -> EventWait<'_> {
        self.durable_ev.wait()
    }

    /// Wakes every task waiting on `changed` (one that is told to stop, e.g. a push
    /// stream or a follower's acker, looks at its flag again).
    pub fn nudge(&self) {
        self.durable_ev.notify();
    }

    /// Leader: resolves when a batch is handed to the disk (and so to the link).
    pub fn shipped(&self) -> EventWait<'_> {
        self.shipped_ev.wait()
    }

    /// Wakes the replication link's sender (its follower's reader ended).
    pub fn nudge_shipper(&self) {
        self.shipped_ev.notify();
    }

    /// Leader: the batches kept in memory for the replication link.
    pub fn with_recent<R>(&self, f: impl FnOnce(&RecentRing) -> R) -> R {
        f(&self.recent.borrow())
    }

    /// Waits for this shard's turn to trim (one trim at a time); the turn ends when
    /// the guard is dropped.
    pub async fn trim_turn(&self) -> TrimTurn<'_> {
        while self.trimming.replace(true) {
            self.trim_done.wait().await;
        }
        TrimTurn(self)
    }

    /// The producers' table of the records written (not staged): what a checkpoint saves.
    fn with_durable_producers<R>(&self, f: impl FnOnce(&mut Producers) -> R) -> R {
        f(&mut self.durable_producers.borrow_mut())
    }

    /// The index and checkpoint writes of the last segment sealed, if still running
    /// (taken: the caller awaits it).
    fn take_sealing(&self) -> Option<glommio::Task<()>> {
        self.sealing.borrow_mut().take()
    }

    /// Records the writes of a segment just sealed (after awaiting the previous ones).
    fn set_sealing(&self, task: glommio::Task<()>) {
        let prev = self.sealing.borrow_mut().replace(task);
        assert!(prev.is_none(), "a seal's writes start after the previous seal's were taken");
    }

    pub fn role(&self) -> Role {
        self.role.get()
    }

    pub fn epoch(&self) -> u32 {
        self.epoch.get()
    }

    /// Stops leading for good (this process): refuses appends, fails waiting ones.
    pub fn fence(&self, why: &str) {
        if self.role.get() == Role::Leader {
            log::warn!("shard {}: FENCED: {why}; refusing appends until restarted as follower", self.id());
            self.role.set(Role::Fenced);
            self.role_changed();
        }
    }

    /// A follower taking a leader's batches (not fenced, leading or taking over).
    pub fn following(&self) -> bool {
        self.role.get() == Role::Follower && !self.promoting.get()
    }

    /// Follower: persists a leader's higher epoch before anything of it is applied.
    pub fn adopt_epoch(&self, shard_dir: &std::path::Path, epoch: u32) -> Result<(), String> {
        if !self.following() {
            return Err(format!("this node is not following (it is {})", self.role.get().name()));
        }
        if epoch > self.epoch.get() {
            crate::control::write_epoch(shard_dir, epoch)?;
            self.epoch.set(epoch);
            log::info!("shard {}: now at epoch {epoch}", self.id());
        }
        Ok(())
    }

    /// Coordinator mode: this follower won the term of `epoch` and leads it in place, its
    /// log and derived state as they are (no restart, no recovery: the take-over costs
    /// the same however long the log). In order: it takes no more of the old leader's
    /// batches or handshakes; waits until every batch it took is on disk and any cut is
    /// done; persists the epoch before anything of it is written (as a leader's start
    /// does); then leads with its whole log as inherited history — it was in the
    /// in-sync set, so it holds every acknowledged record, and the rest of it was never
    /// acknowledged (see `committed`). Nothing of the epoch is written before a
    /// follower accepts it (or the in-sync set is this node alone). Client connections
    /// greeted as a follower's close (`net/conn/`): a follower's connection never writes.
    /// Returns the commit floor.
    pub async fn promote(&self, shard_dir: &std::path::Path, epoch: u32) -> Result<u64, String> {
        assert_eq!(self.role.get(), Role::Follower, "only a follower takes over");
        assert!(!self.cfg.standalone, "a standalone shard has no follower role");
        self.promoting.set(true);
        self.durable_ev.notify(); // the old leader's acker stops
        while self.cutting.get() || self.assigned() != self.log.next_offset() {
            self.durable_ev.wait().await;
        }
        let mine = self.epoch.get();
        if epoch <= mine {
            return Err(format!("the term's epoch {epoch} is not above the shard's epoch {mine}"));
        }
        crate::control::write_epoch(shard_dir, epoch)?;
        self.epoch.set(epoch);
        let floor = self.log.next_offset();
        self.acked_end.set(floor);
        self.follower_next.set(0);
        self.link_up.set(false);
        self.link_down_since.set(Instant::now());
        self.follower_progress.set(Instant::now());
        self.accepted.set(false);
        self.recent.borrow_mut().clear();
        self.role.set(Role::Leader);
        self.promoting.set(false);
        self.role_changed();
        self.closing_ev.notify();
        self.release();
        Ok(floor)
    }

    /// Leader: the follower persisted our epoch, cut its log to `next`, and its last
    /// record is identical to ours. From now on this epoch may be written.
    pub fn follower_joined(&self, next: u64) {
        assert_eq!(self.role.get(), Role::Leader, "only a leader takes a follower");
        assert!(next <= self.log.next_offset(), "follower end {next} beyond our durable end");
        self.follower_next.set(next);
        self.follower_progress.set(Instant::now());
        self.link_up.set(true);
        if !self.accepted.get() {
            log::info!("shard {}: epoch {} accepted by the follower; writing appends", self.id(), self.epoch());
            self.accepted.set(true);
            self.metrics.appends_held.set(0.0);
            self.accepted_ev.notify();
        }
        self.release();
    }

    /// Leader: the follower's durable end advanced to `next` (never past what we assigned).
    pub fn follower_acked(&self, next: u64) {
        assert!(next <= self.assigned(), "follower acked {next}, beyond the {} offsets assigned", self.assigned());
        if next > self.follower_next.get() {
            // Round trip of every batch shipped that this confirmation covers in full.
            let now = Instant::now();
            let prev = self.follower_next.get();
            for r in self.recent.borrow().iter().rev() {
                let end = r.first_offset + r.count as u64;
                if end <= prev {
                    break;
                }
                if end <= next {
                    self.metrics.repl_rtt_seconds.record(now.duration_since(r.shipped).as_secs_f64());
                }
            }
            self.follower_next.set(next);
            self.follower_progress.set(Instant::now());
            self.release();
        }
    }

    /// Leader: the follower link ended.
    pub fn follower_lost(&self) {
        if self.link_up.replace(false) {
            self.link_down_since.set(Instant::now());
        }
    }

    /// Follower: a leader's link ended (the coordinator checks whether the leader is gone).
    pub fn leader_link_lost(&self) {
        self.cfg.ctl.slots[self.cfg.slot].links_lost.fetch_add(1, Ordering::AcqRel);
    }

    /// Records readers may see: durable here, and on the follower too when we lead
    /// (unless the in-sync set is this node alone); nothing new while the lease is near
    /// its end or after fencing (a fenced leader's suffix may be truncated).
    pub fn committed(&self) -> u64 {
        let local = self.log.next_offset();
        match self.role.get() {
            Role::Fenced if !self.cfg.standalone => self.acked_end.get(),
            Role::Leader if !self.cfg.standalone => {
                if !self.cfg.ctl.may_ack(Instant::now()) {
                    return self.acked_end.get();
                }
                let both = if self.cfg.ctl.solo() { local } else { local.min(self.follower_next.get()) };
                both.max(self.acked_end.get())
            }
            _ => local,
        }
    }

    /// Follower: every offset below `end` is durable on the leader and here.
    pub fn set_peer_durable(&self, end: u64) {
        if end > self.peer_durable.get() {
            self.peer_durable.set(end);
        }
    }

    /// Retention deletes nothing at or above this: what the peer may still need. A
    /// leader keeps what its follower has not confirmed (it catches up from the
    /// segments; none since this start: nothing is deleted) and the follower's last
    /// record (a rejoin compares it with ours, protocol.md §8 step 8); a follower keeps
    /// what the leader has not shown durable (a handshake may cut it); a fenced node
    /// keeps all.
    pub fn trim_floor(&self) -> u64 {
        let end = self.log.next_offset();
        match self.role.get() {
            Role::Leader if self.cfg.standalone => end,
            Role::Leader => self.follower_next.get().saturating_sub(1).min(end),
            Role::Follower => self.peer_durable.get().min(end),
            Role::Fenced => 0,
        }
    }

    /// Offsets handed out so far (staged or written).
    pub fn assigned(&self) -> u64 {
        self.next_assign.get()
    }

    /// Why this node takes no appends (or subscriptions) now, if it does not.
    pub fn refuse(&self) -> Option<(ErrorCode, String)> {
        if self.cfg.ctl.draining() {
            let msg = "this node is shutting down (SIGTERM/SIGINT); nothing written: retry on another node or after it restarts";
            return Some((ErrorCode::ShuttingDown, msg.into()));
        }
        let ctl = &self.cfg.ctl;
        match self.role.get() {
            // Coordinator mode: a leader past its lease refuses (nothing written) instead
            // of holding appends it may never acknowledge; a follower that sees no live
            // leader names none, so that clients wait for the take-over (protocol.md §6).
            Role::Leader if ctl.coordinated() && !ctl.may_ack(Instant::now()) => Some((
                ErrorCode::Unavailable,
                "this leader's lease has lapsed (etcd not heard from); nothing written: retry, a take-over may be under way".into(),
            )),
            Role::Leader => None,
            Role::Follower if ctl.coordinated() && ctl.view().1 == codec::LeaderState::Lapsed => {
                Some((ErrorCode::NotLeader, String::new()))
            }
            Role::Follower => Some((ErrorCode::NotLeader, self.cfg.leader_addr.clone().unwrap_or_default())),
            Role::Fenced => {
                Some((ErrorCode::Fenced, format!("this node was fenced by a higher epoch than {}", self.epoch.get())))
            }
        }
    }
}

fn publish_index(m: &ShardMetrics, t: &LogIndex) {
    m.producers.set(t.producers.len() as f64);
    m.producer_bytes.set(t.producers.bytes() as f64);
    m.streams.set(t.streams.len() as f64);
    m.stream_bytes.set(t.streams.bytes() as f64);
    m.streams_decoded.set(t.streams.decoded() as f64);
}
