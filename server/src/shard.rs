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

use corelog_client::codec::{self, ErrorCode, Expect, Role};
use corelog_client::record::{self, Ext, ProducerSeq, StreamPos};

use crate::coord::cell::ControlCell;
use crate::index::LogIndex;
use crate::metrics::ShardMetrics;
use crate::producers::{refusal, Producers, Verdict};
use crate::replica::recent::{self, Recent, RecentRing};
use crate::sync::Event;
use crate::wal::batch::{MAX_BATCH_BYTES, MAX_BATCH_RECORDS};
use crate::wal::Log;

/// Encoded bytes staged ahead of the disk (open + sealed batches).
pub const MAX_STAGED_BYTES: usize = 16 * 1024 * 1024;
/// Appends accepted but not yet acknowledged, per shard.
pub const MAX_UNACKED: usize = 128 * 1024;
/// A follower this close behind (records) is worth switching back to two-copy acks for.
pub const NEAR_RECORDS: u64 = 64 * 1024;
/// Recent batches kept in memory for the replication link (default of `recent_bytes`).
pub const MAX_RECENT_BYTES: usize = 32 * 1024 * 1024;

/// The outgoing side of one client connection: encoded responses in order.
#[derive(Default)]
pub struct ConnOut {
    pub buf: RefCell<Vec<u8>>,
    pub wake: Event,
    pub drained: Event,
    /// Appends of this connection not yet answered.
    pub inflight: Cell<u32>,
    pub closed: Cell<bool>,
}

/// How an append is answered: the request's protocol version decides the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckForm {
    /// `Appended` (an `Append`).
    V1,
    /// `Appended2` (an `Append2`); `duplicate`: a duplicate's original position;
    /// `version`: the event's stream version.
    V2 { duplicate: bool, version: Option<u64> },
}

/// What one append asks for besides its payload.
#[derive(Debug, Clone, Copy, Default)]
pub struct AppendReq<'a> {
    pub producer: Option<ProducerSeq>,
    pub stream: Option<(&'a str, Expect)>,
}

/// Why an append was not taken (nothing written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Error(ErrorCode, String),
    /// The stream is not at the expected version; `current`: its last event's version.
    WrongVersion {
        current: Option<u64>,
        msg: String,
    },
    /// What was asked for was deleted by retention; `first` is the first still held.
    OutOfRange {
        first: u64,
        what: String,
    },
}

impl From<(ErrorCode, String)> for Refused {
    fn from((code, msg): (ErrorCode, String)) -> Refused {
        Refused::Error(code, msg)
    }
}

impl ConnOut {
    /// Answers one in-flight append.
    pub fn push_appended(&self, req_id: u64, shard: u16, offset: u64, form: AckForm) {
        match form {
            AckForm::V1 => codec::encode_appended(req_id, shard, offset, &mut self.buf.borrow_mut()),
            AckForm::V2 { duplicate, version } => {
                codec::encode_appended2(req_id, shard, offset, duplicate, version, &mut self.buf.borrow_mut())
            }
        }
        take(&self.inflight, 1, "inflight");
        self.wake.notify();
    }
    pub fn push_error(&self, req_id: u64, code: ErrorCode, msg: &str) {
        codec::encode_error(req_id, code as u16, msg, &mut self.buf.borrow_mut());
        self.wake.notify();
    }
}

struct Waiter {
    conn: Rc<ConnOut>,
    req_id: u64,
    form: AckForm,
    /// When the append was taken (for `corelog_append_latency_seconds`).
    at: Instant,
}

/// A retried idempotent append whose original is not committed yet: answered with the
/// original's position when it is, or with the original's failure.
struct DupWaiter {
    offset: u64,
    version: Option<u64>,
    conn: Rc<ConnOut>,
    req_id: u64,
    since: Instant,
}

/// What `Shard::append` did with an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Given an offset; answered when durable on every replica.
    Staged,
    /// An idempotent append already in the log (or on its way): the caller answers it
    /// with `answer_duplicate` once the connection's earlier answers have left.
    Duplicate,
}

/// A batch being filled or waiting for the disk.
struct Staged {
    first_offset: u64,
    count: u32,
    records: Vec<u8>,
    waiters: Vec<Waiter>,
    since: Instant,
}

/// A batch durable here (and shipped), waiting for the follower.
struct Unacked {
    first_offset: u64,
    waiters: VecDeque<Waiter>,
    since: Instant,
}

#[derive(Clone)]
pub struct ShardConfig {
    pub id: u16,
    pub shard_count: u16,
    /// Acknowledge on local durability alone (no follower). Development/benchmark only.
    pub standalone: bool,
    pub ack_timeout: Duration,
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
    pub retain: crate::retention::Policy,
    /// Who may do what on the client port (`access`); None: everything is allowed.
    pub authz: Option<Arc<crate::access::Authz>>,
}

pub struct Shard {
    pub cfg: ShardConfig,
    pub log: Rc<Log>,
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
    pub recent: RefCell<RecentRing>,
    /// Something was staged: wakes the commit loop.
    staged_ev: Event,
    /// A batch was handed to the disk: wakes the replication link.
    pub shipped_ev: Event,
    /// The committed end advanced: wakes tails and the follower's acker.
    pub durable_ev: Event,
    /// Room was made under the bounds: wakes waiting appends.
    space_ev: Event,
    /// Idempotent producers' state and the stream index, derived from the log.
    index: RefCell<LogIndex>,
    /// The producers' table of the records written (the index above also holds the staged
    /// ones): what a checkpoint saves (`seal`).
    pub(crate) durable_producers: RefCell<Producers>,
    /// The index and checkpoint writes of the last segment sealed, still running.
    pub(crate) sealing: RefCell<Option<glommio::Task<()>>>,
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
    pub trimming: Cell<bool>,
    pub trim_done: Event,
    pub metrics: ShardMetrics,
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
            metrics,
        })
    }

    pub fn id(&self) -> u16 {
        self.cfg.id
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
    /// greeted as a follower's close (`conn.rs`): a follower's connection never writes.
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

    /// Accepts one append for `conn`: encodes it into the open batch. The answer is
    /// pushed to `conn` once the record is durable on every replica (or fails). An
    /// idempotent append (`producer`) is checked against the producer's state first:
    /// a duplicate is not written (`Taken::Duplicate`), an out-of-line sequence is refused.
    /// A stream append then gets the stream's next version if `expect` holds.
    pub async fn append(
        &self,
        req: AppendReq<'_>,
        form: AckForm,
        payload: &[u8],
        conn: &Rc<ConnOut>,
        req_id: u64,
    ) -> Result<Taken, Refused> {
        // The version is not known yet; its width is.
        let sized = Ext { producer: req.producer, stream: req.stream.map(|(name, _)| StreamPos { name, version: 0 }) };
        let len = record::RECORD_HEADER_LEN + sized.len() + payload.len();
        self.wait_room(len).await?;
        // From here to the offset's assignment nothing awaits: the verdicts still hold.
        let index = self.index.borrow();
        if let Some(p) = req.producer {
            match index.producers.check(p) {
                Verdict::Fresh => {}
                Verdict::Duplicate(_) => return Ok(Taken::Duplicate),
                v => return Err(refusal(p, v).into()),
            }
        }
        let stream = match req.stream {
            None => None,
            Some((name, expect)) => match index.streams.check(name, expect) {
                Ok(version) => Some(StreamPos { name, version }),
                Err(current) => {
                    self.metrics.wrong_versions.increment(1);
                    let at = current.map_or("has no event".to_string(), |v| format!("is at version {v}"));
                    let msg = format!("stream {name:?} {at}, not {expect} as expected; nothing written");
                    return Err(Refused::WrongVersion { current, msg });
                }
            },
        };
        drop(index);
        let ext = Ext { producer: req.producer, stream };
        let form = match form {
            AckForm::V2 { duplicate, .. } => AckForm::V2 { duplicate, version: stream.map(|s| s.version) },
            f => f,
        };
        let mut staged = self.staged.borrow_mut();
        let need_new = match staged.back() {
            None => true,
            Some(b) => b.records.len() + len > MAX_BATCH_BYTES || b.count >= MAX_BATCH_RECORDS,
        };
        if need_new {
            let cap = if staged.is_empty() { 4096 } else { MAX_BATCH_BYTES };
            staged.push_back(Staged {
                first_offset: self.next_assign.get(),
                count: 0,
                records: Vec::with_capacity(cap),
                waiters: Vec::new(),
                since: Instant::now(),
            });
        }
        let b = staged.back_mut().expect("pushed above");
        let offset = self.next_assign.get();
        record::encode_ex(offset, self.epoch.get(), ext, payload, &mut b.records);
        b.count += 1;
        b.waiters.push(Waiter { conn: conn.clone(), req_id, form, at: Instant::now() });
        conn.inflight.set(conn.inflight.get() + 1);
        self.next_assign.set(offset + 1);
        self.staged_bytes.set(self.staged_bytes.get() + len);
        self.unacked_count.set(self.unacked_count.get() + 1);
        drop(staged);
        if !ext.is_empty() {
            self.update_index(|t| t.note(offset, ext).expect("the version was taken from this index"));
        }
        if !self.accepted.get() {
            self.metrics.appends_held.set(self.unacked_count.get() as f64);
        }
        self.staged_ev.notify();
        Ok(Taken::Staged)
    }

    /// Changes the producers' table or the stream index and publishes their sizes.
    pub(crate) fn update_index<R>(&self, f: impl FnOnce(&mut LogIndex) -> R) -> R {
        let mut t = self.index.borrow_mut();
        let r = f(&mut t);
        publish_index(&self.metrics, &t);
        r
    }

    /// Reads the index (e.g. a stream's offsets for a read).
    pub fn with_index<R>(&self, f: impl FnOnce(&LogIndex) -> R) -> R {
        f(&self.index.borrow())
    }

    /// Answers a retried idempotent append (after `append` said `Taken::Duplicate` and
    /// every earlier answer of `conn` has left) with its original's position: now if that
    /// is committed, else when it is. `false`: the producer's state changed meanwhile
    /// (the original's offset was handed out again): call `append` once more.
    /// A retry naming a stream is answered with the original's version there (none if
    /// the original was not an event of that stream).
    pub async fn answer_duplicate(
        &self,
        p: ProducerSeq,
        stream: Option<&str>,
        conn: &Rc<ConnOut>,
        req_id: u64,
    ) -> bool {
        let Verdict::Duplicate(offset) = self.index.borrow().producers.check(p) else {
            return false;
        };
        let version = match stream {
            Some(name) => self.version_at(name, offset).await,
            None => None,
        };
        self.metrics.duplicates.increment(1);
        conn.inflight.set(conn.inflight.get() + 1);
        if offset < self.committed() {
            conn.push_appended(req_id, self.id(), offset, AckForm::V2 { duplicate: true, version });
        } else {
            let d = DupWaiter { offset, version, conn: conn.clone(), req_id, since: Instant::now() };
            self.dups.borrow_mut().push(d);
        }
        true
    }

    /// The version of `name`'s event at `offset`: from memory in the last segment, else
    /// from the record itself (its stream extension). None: no such event there.
    async fn version_at(&self, name: &str, offset: u64) -> Option<u64> {
        if offset >= self.log.last_segment_first() {
            let l = self.with_index(|t| t.streams.locate(name))?;
            return l.active.binary_search(&offset).ok().map(|i| l.active_from() + i as u64);
        }
        let (recs, n) = self.log.read(offset, offset + 1, 1).await.ok()?;
        let (at, ext, _) = record::peek(&recs).ok().filter(|_| n == 1)?;
        ext.stream.filter(|s| at == offset && s.name == name).map(|s| s.version)
    }

    /// Waits until an append of `len` encoded bytes fits under the bounds. Errors when
    /// this node takes no appends.
    async fn wait_room(&self, len: usize) -> Result<(), (ErrorCode, String)> {
        loop {
            if let Some(e) = self.refuse() {
                return Err(e);
            }
            if self.staged_bytes.get() + len <= MAX_STAGED_BYTES && self.unacked_count.get() < MAX_UNACKED {
                return Ok(());
            }
            self.space_ev.wait().await;
        }
    }

    /// Follower side: wait until `bytes` more can be staged.
    pub async fn wait_stage_space(&self, bytes: usize) {
        while self.staged_bytes.get() + bytes > MAX_STAGED_BYTES {
            self.space_ev.wait().await;
        }
    }

    /// Follower side: whether a verified batch from the leader fits the stream index
    /// (each event's version the next of its stream). A mismatch means the two logs
    /// disagree: the batch is refused (the link drops) instead of crashing the node.
    pub fn check_replicated(&self, records: &[u8]) -> Result<(), String> {
        self.index.borrow().check_run(records)
    }

    /// Follower side: stage records received from the leader (already verified and
    /// checked with `check_replicated`; the caller waited for room with `wait_stage_space`).
    pub fn stage_replicated(&self, first_offset: u64, count: u32, records: &[u8]) {
        assert_eq!(first_offset, self.next_assign.get(), "replicated batch out of order");
        let mut staged = self.staged.borrow_mut();
        let fits = staged.back().is_some_and(|b| {
            b.records.len() + records.len() <= MAX_BATCH_BYTES && b.count + count <= MAX_BATCH_RECORDS
        });
        if !fits {
            staged.push_back(Staged {
                first_offset,
                count: 0,
                records: Vec::new(),
                waiters: Vec::new(),
                since: Instant::now(),
            });
        }
        let b = staged.back_mut().expect("pushed above");
        b.records.extend_from_slice(records);
        self.update_index(|t| t.note_run(records).expect("checked with check_replicated"));
        b.count += count;
        self.next_assign.set(first_offset + count as u64);
        self.staged_bytes.set(self.staged_bytes.get() + records.len());
        drop(staged);
        self.staged_ev.notify();
    }

    /// Waits until every offset below `end` is durable on this node, and the index and
    /// checkpoint of the last segment it sealed are written (a bench that wrote a log
    /// through `stage_replicated` and is about to stop).
    pub async fn settle(&self, end: u64) {
        while self.log.next_offset() < end {
            self.durable_ev.wait().await;
        }
        let pending = self.sealing.borrow_mut().take();
        if let Some(t) = pending {
            t.await;
        }
    }

    /// Drops staged-but-unwritten state and cuts the log (follower rejoin).
    pub async fn truncate(&self, offset: u64) -> std::io::Result<u64> {
        assert!(!self.cutting.replace(true), "one cut at a time");
        let r = self.cut(offset).await;
        self.cutting.set(false);
        self.durable_ev.notify(); // a take-over waits for the cut
        r
    }

    async fn cut(&self, offset: u64) -> std::io::Result<u64> {
        // Batches of an earlier leader connection must reach the disk first.
        while self.assigned() != self.log.next_offset() {
            self.durable_ev.wait().await;
        }
        let cut = offset < self.log.next_offset();
        if cut {
            crate::seal::before_cut(self, offset).await?;
        }
        let end = self.log.truncate(offset).await?;
        if cut {
            // The derived state of what is left, read back as a start would.
            crate::seal::after_cut(self, end).await?;
        }
        self.next_assign.set(end);
        self.recent.borrow_mut().clear();
        self.release();
        Ok(end)
    }

    /// The group-commit loop. Runs for the life of the shard.
    pub async fn commit_loop(self: Rc<Self>) {
        let slot = &self.cfg.ctl.slots[self.cfg.slot];
        loop {
            if self.cfg.ctl.stopping() {
                return; // the process re-executes: nothing more is written
            }
            if !self.accepted.get() && !self.cfg.ctl.solo() {
                // A leader writes nothing before its follower accepted its epoch
                // (unless the in-sync set is this node alone).
                self.accepted_ev.wait().await;
                continue;
            }
            let next = self.staged.borrow_mut().pop_front();
            let Some(b) = next else {
                self.staged_ev.wait().await;
                continue;
            };
            let epoch = self.epoch.get();
            let shipping = self.role.get() == Role::Leader && !self.cfg.standalone;
            let records = Rc::new(if shipping { recent::compact(b.records) } else { b.records });
            if shipping {
                // Ship while writing locally, not after.
                self.recent.borrow_mut().push(Recent {
                    first_offset: b.first_offset,
                    count: b.count,
                    epoch,
                    records: records.clone(),
                    shipped: Instant::now(),
                });
                self.shipped_ev.notify();
            }
            let first_epoch = first_record_epoch(&records);
            let last_epoch = if self.role.get() == Role::Leader { epoch } else { last_record_epoch(&records) };
            let t = Instant::now();
            // Set before checking stop (both SeqCst): either the coordinator sees this
            // write in flight and waits for it before re-executing, or we see the stop.
            slot.writing.store(true, Ordering::SeqCst);
            if self.cfg.ctl.stopping() {
                slot.writing.store(false, Ordering::SeqCst);
                return;
            }
            if self.log.must_roll(records.len()) {
                if let Err(e) = crate::seal::roll(&self, false).await {
                    crate::fatal(&format!(
                        "shard {}: starting a new segment for the batch at offset {} failed: {e}; stopping without acknowledging it",
                        self.id(),
                        b.first_offset
                    ));
                }
            }
            let written = self.log.write_batch(b.count, epoch, &records, first_epoch, last_epoch).await;
            slot.writing.store(false, Ordering::SeqCst);
            if let Err(e) = written {
                crate::fatal(&format!(
                    "shard {}: write/fdatasync of batch at offset {} failed: {e}; stopping without acknowledging it",
                    self.id(),
                    b.first_offset
                ));
            }
            self.durable_producers.borrow_mut().note_run(&records);
            self.metrics.fsync_seconds.record(t.elapsed().as_secs_f64());
            self.metrics.batches.increment(1);
            self.metrics.batch_records.record(b.count as f64);
            self.metrics.batch_bytes.record(records.len() as f64);
            self.metrics.bytes.increment(records.len() as u64);
            take(&self.staged_bytes, records.len(), "staged_bytes");
            if !b.waiters.is_empty() {
                self.unacked.borrow_mut().push_back(Unacked {
                    first_offset: b.first_offset,
                    waiters: b.waiters.into(),
                    since: b.since,
                });
            }
            self.release();
        }
    }

    /// Acknowledges every waiting append below the committed end.
    pub fn release(&self) {
        let end = self.committed();
        if self.role.get() == Role::Leader {
            self.acked_end.set(end);
        }
        self.release_dups(end);
        let mut n = 0u64;
        let now = Instant::now();
        let mut unacked = self.unacked.borrow_mut();
        while let Some(u) = unacked.front_mut() {
            while u.first_offset < end {
                let Some(w) = u.waiters.pop_front() else {
                    break;
                };
                w.conn.push_appended(w.req_id, self.id(), u.first_offset, w.form);
                self.metrics.append_seconds.record(now.duration_since(w.at).as_secs_f64());
                u.first_offset += 1;
                n += 1;
            }
            if u.waiters.is_empty() {
                unacked.pop_front();
            } else {
                break;
            }
        }
        drop(unacked);
        if n > 0 {
            take(&self.unacked_count, n as usize, "unacked_count");
            self.metrics.appends.increment(n);
        }
        self.metrics.durable_offset.set(end as f64);
        self.metrics.log_end.set(self.log.next_offset() as f64);
        self.metrics.log_bytes.set(self.log.disk_bytes() as f64);
        if !self.cfg.standalone && self.role.get() == Role::Leader {
            let lag = self.log.next_offset().saturating_sub(self.follower_next.get());
            self.metrics.replication_lag.set(lag as f64);
        }
        self.space_ev.notify();
        self.durable_ev.notify();
    }

    /// Answers retried appends whose original is now below the committed end. They go
    /// before the appends released in the same call: on one connection a duplicate is
    /// registered only once every earlier answer has left, and the connection's later
    /// appends get offsets above its original, so they are released in the same call or
    /// a later one — answers stay in request order.
    fn release_dups(&self, end: u64) {
        let mut dups = self.dups.borrow_mut();
        if dups.is_empty() {
            return;
        }
        dups.retain(|d| {
            if d.offset < end {
                d.conn.push_appended(
                    d.req_id,
                    self.id(),
                    d.offset,
                    AckForm::V2 { duplicate: true, version: d.version },
                );
                false
            } else {
                true
            }
        });
    }

    /// Fails retried appends waiting on originals that failed or timed out.
    fn fail_dups(&self, pick: impl Fn(&DupWaiter) -> bool, code: ErrorCode, msg: &str) {
        let mut dups = self.dups.borrow_mut();
        dups.retain(|d| {
            if pick(d) {
                take(&d.conn.inflight, 1, "inflight");
                d.conn.push_error(d.req_id, code, msg);
                false
            } else {
                true
            }
        });
    }

    /// Fails appends older than the ack deadline (no follower confirmation in time) and
    /// every waiting append when the node stops leading.
    pub fn expire(&self, now: Instant) {
        let deadline = self.cfg.ack_timeout;
        let leading = self.role.get() == Role::Leader;
        if !self.accepted.get() && !self.cfg.ctl.solo() {
            let oldest = self.staged.borrow().front().map(|b| b.since);
            if oldest.is_some_and(|t| !leading || now.duration_since(t) >= deadline) {
                self.drop_staged();
            }
            return;
        }
        let (code, msg) = if leading {
            (ErrorCode::ReplicationTimeout, format!("not confirmed by the follower within {deadline:?}; the write is durable on the leader only and may still appear"))
        } else {
            (ErrorCode::OutcomeUnknown, "leadership lost before the follower confirmed; outcome unknown".to_string())
        };
        self.fail_dups(|d| !leading || now.duration_since(d.since) >= deadline, code, &msg);
        let mut n = 0usize;
        let mut unacked = self.unacked.borrow_mut();
        while let Some(u) = unacked.front() {
            if leading && now.duration_since(u.since) < deadline {
                break;
            }
            let u = unacked.pop_front().expect("front exists");
            for w in u.waiters {
                take(&w.conn.inflight, 1, "inflight");
                w.conn.push_error(w.req_id, code, &msg);
                n += 1;
            }
        }
        drop(unacked);
        if n > 0 {
            take(&self.unacked_count, n, "unacked_count");
            self.metrics.errors.increment(n as u64);
            self.space_ev.notify();
        }
    }

    /// Before acceptance nothing was written: every staged append is answered
    /// `Unavailable` and its offset is handed out again.
    fn drop_staged(&self) {
        assert!(!self.accepted.get(), "staged appends are dropped only before acceptance");
        let staged: Vec<Staged> = self.staged.borrow_mut().drain(..).collect();
        let Some(first) = staged.first().map(|b| b.first_offset) else { return };
        assert_eq!(first, self.log.next_offset(), "nothing is written before acceptance");
        let msg = format!(
            "not written: no follower accepted this leader's epoch {} within {:?}",
            self.epoch.get(),
            self.cfg.ack_timeout
        );
        // The offsets are handed out again: the producers' appends there never happened,
        // and retries waiting on them fail the same way.
        self.update_index(|t| t.forget_from(first));
        self.fail_dups(|d| d.offset >= first, ErrorCode::Unavailable, &msg);
        let mut n = 0;
        for b in staged {
            take(&self.staged_bytes, b.records.len(), "staged_bytes");
            for w in b.waiters {
                take(&w.conn.inflight, 1, "inflight");
                w.conn.push_error(w.req_id, ErrorCode::Unavailable, &msg);
                n += 1;
            }
        }
        self.next_assign.set(first);
        take(&self.unacked_count, n, "unacked_count");
        self.metrics.errors.increment(n as u64);
        self.metrics.appends_held.set(0.0);
        self.space_ev.notify();
    }

    /// Periodic deadline check and control-plane sync (every 20 ms).
    pub async fn deadline_loop(self: Rc<Self>) {
        loop {
            // Every 20 ms while something waits on a deadline (or etcd's lease rules);
            // an idle shard of a static pair wakes 4 times a second instead of 50: an
            // append arriving meanwhile has its deadline checked ≤ 250 ms late, against
            // an ack timeout of seconds.
            let idle = !self.cfg.ctl.coordinated()
                && !self.cfg.ctl.draining()
                && self.unacked_count.get() == 0
                && self.dups.borrow().is_empty()
                && self.staged.borrow().is_empty();
            glommio::timer::sleep(Duration::from_millis(if idle { 250 } else { 20 })).await;
            self.sync_control();
            self.expire(Instant::now());
            self.drain_step();
            let ctl = &self.cfg.ctl;
            if ctl.draining() && ctl.stopping() && !self.sealing_at_stop.replace(true) {
                glommio::spawn_local(self.clone().seal_at_stop()).detach();
            }
        }
    }

    /// Graceful shutdown, once the commit loop has stopped and its last write finished:
    /// seals the last segment (`seal::roll`: its index file, then a checkpoint at the next
    /// offset), so that the next start finds its checkpoint at the log's end and reads no
    /// tail. The sealed segment is cut to its written end: a restart does not leave a
    /// segment's preallocated space behind. Says so in the shard's slot; the shutdown thread waits for every shard's.
    async fn seal_at_stop(self: Rc<Self>) {
        let slot = &self.cfg.ctl.slots[self.cfg.slot];
        while slot.writing.load(Ordering::SeqCst) {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        if self.log.last_segment_written() {
            let t = Instant::now();
            match crate::seal::roll(&self, true).await {
                Ok(()) => {
                    let task = self.sealing.borrow_mut().take();
                    if let Some(task) = task {
                        task.await;
                    }
                    log::info!(
                        "shard {}: sealed the last segment at offset {} for the next start ({} ms)",
                        self.id(),
                        self.log.next_offset(),
                        t.elapsed().as_millis()
                    );
                }
                Err(e) => log::warn!("shard {}: sealing the last segment: {e} (the next start scans it)", self.id()),
            }
        }
        slot.sealed_at_stop.store(true, Ordering::SeqCst);
    }

    /// Graceful shutdown, on this shard: once every append taken has its answer, client
    /// connections are told to close (each sends what it holds, then closes its TLS
    /// session); once none is open the shard reports itself drained.
    fn drain_step(&self) {
        if !self.cfg.ctl.draining() {
            return;
        }
        if !self.closing.get() && self.unacked_count.get() == 0 && self.dups.borrow().is_empty() {
            log::info!(
                "shard {}: every append taken is answered; closing {} client connection(s)",
                self.id(),
                self.open_conns.get()
            );
            self.closing.set(true);
            self.closing_ev.notify();
        }
        if self.closing.get() && self.open_conns.get() == 0 {
            self.cfg.ctl.slots[self.cfg.slot].drained.store(true, Ordering::SeqCst);
        }
    }

    /// Draining: new client connections are closed at accept.
    pub fn draining(&self) -> bool {
        self.cfg.ctl.draining()
    }

    /// Resolves when the shard asks a client connection greeted as `greeted` to close:
    /// at a graceful shutdown, or once a connection greeted as a follower's finds the
    /// shard leading (`promote`; clients count on a follower's connection never writing).
    pub async fn closing(&self, greeted: &Cell<Option<Role>>) {
        while !self.closing.get() && !self.greeted_other(greeted.get()) {
            self.closing_ev.wait().await;
        }
    }

    /// The connection was greeted as a follower's and the shard no longer follows.
    pub fn greeted_other(&self, greeted: Option<Role>) -> bool {
        greeted == Some(Role::Follower) && self.role.get() != Role::Follower
    }

    pub fn conn_opened(&self) {
        self.open_conns.set(self.open_conns.get() + 1);
    }

    pub fn conn_closed(&self) {
        take(&self.open_conns, 1, "open_conns");
    }

    /// Acts on the coordinator's decisions and tells it what it needs to decide on the
    /// in-sync set. Static roles: nothing changes here (no lease, never solo or stopped).
    fn sync_control(&self) {
        let ctl = &self.cfg.ctl;
        if ctl.stopping() {
            if !ctl.draining() {
                self.fence("the coordinator ended this node's term");
            }
            return;
        }
        let solo = ctl.solo();
        if solo != self.solo_seen.replace(solo) {
            self.accepted_ev.notify();
        }
        // Acks held at the lease's end resume here once it is renewed.
        self.release();
        if self.role.get() != Role::Leader || self.cfg.standalone {
            return;
        }
        let slot = &ctl.slots[self.cfg.slot];
        let g = ctl.gen();
        let follower = self.follower_next.get();
        let in_sync = self.link_up.get() && follower >= self.acked_end.get();
        slot.in_sync_gen.store(if in_sync { g } else { 0 }, Ordering::Release);
        let lag = self.log.next_offset().saturating_sub(follower);
        slot.near.store(self.link_up.get() && lag <= NEAR_RECORDS, Ordering::Release);
        let progress = if lag == 0 { Instant::now() } else { self.follower_progress.get() };
        slot.progress_at.store(ctl.nanos(progress) + 1, Ordering::Release);
        let waiting = self.unacked.borrow().front().map(|u| u.since);
        let waiting = waiting.or_else(|| self.staged.borrow().front().map(|b| b.since));
        let since = if !self.link_up.get() { Some(self.link_down_since.get()) } else { waiting };
        let since = if solo { None } else { since };
        slot.stalled_since.store(since.map_or(0, |t| ctl.nanos(t) + 1), Ordering::Release);
    }

    /// Wakes everyone whose answer depends on the role (after fencing).
    fn role_changed(&self) {
        self.expire(Instant::now());
        self.accepted_ev.notify();
        self.space_ev.notify();
        self.durable_ev.notify();
    }
}

/// Takes `n` from a counter. One that would go below zero is a bug in its bookkeeping
/// (in release it would wrap silently and lift every bound that reads it): stop there.
fn take<T>(c: &Cell<T>, n: T, what: &str)
where
    T: Copy + PartialOrd + std::ops::Sub<Output = T> + std::fmt::Display,
{
    let v = c.get();
    assert!(v >= n, "counter {what} would go below zero: {v} - {n}");
    c.set(v - n);
}

fn publish_index(m: &ShardMetrics, t: &LogIndex) {
    m.producers.set(t.producers.len() as f64);
    m.producer_bytes.set(t.producers.bytes() as f64);
    m.streams.set(t.streams.len() as f64);
    m.stream_bytes.set(t.streams.bytes() as f64);
    m.streams_decoded.set(t.streams.decoded() as f64);
}

fn first_record_epoch(recs: &[u8]) -> u32 {
    record::decode(recs).map(|(r, _)| r.epoch).unwrap_or(0)
}

fn last_record_epoch(recs: &[u8]) -> u32 {
    record::Records::new(recs).flatten().last().map(|r| r.epoch).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_takes_what_it_holds() {
        let c = Cell::new(3usize);
        take(&c, 2, "c");
        take(&c, 1, "c");
        assert_eq!(c.get(), 0);
    }

    #[test]
    #[should_panic(expected = "counter inflight would go below zero: 0 - 1")]
    fn a_counter_below_zero_stops_with_its_name() {
        take(&Cell::new(0u32), 1, "inflight");
    }
}
