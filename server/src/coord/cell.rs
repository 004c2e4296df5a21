//! The only state the control plane and the data plane share: atomics written by one
//! side and read by the other, never a lock on the append path. The coordinator thread
//! writes the lease deadline, the solo flag, the stop flag and its view of leadership
//! (which clients are told: docs/protocol.md §6); each shard publishes what the
//! coordinator needs to decide on the in-sync set (its `ShardSlot`).
//!
//! Static roles (`--role`) use `ControlCell::unbounded()`: no lease, never solo.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use corelog_client::codec::LeaderState;

pub struct ControlCell {
    t0: Instant,
    /// Nanoseconds after `t0` until which this node may acknowledge (its lease, minus the
    /// margin). `u64::MAX`: no lease (static roles).
    lease_until: AtomicU64,
    /// The in-sync set in etcd is this node alone: acknowledge on the local fsync.
    solo: AtomicBool,
    /// This process stops leading/following now and will re-exec: write nothing more.
    stop: AtomicBool,
    /// Bumped by the coordinator before it asks the shards a fresh question.
    gen: AtomicU64,
    /// Every shard of this process has recovered (and cut or marked any damage).
    started: AtomicBool,
    /// Roles come from etcd (coordinator mode), not from flags.
    coordinated: AtomicBool,
    /// SIGTERM/SIGINT: take nothing new, answer what is in flight (`shutdown.rs`).
    draining: AtomicBool,
    /// The leader's lease in ms (coordinator mode; 0: none), told to clients.
    lease_ms: AtomicU32,
    /// The newest term epoch the coordinator read from etcd (0: none yet).
    view_epoch: AtomicU32,
    /// Follower: whether the term's leader holds a live lease (`LeaderState` as u8).
    leader_state: AtomicU8,
    /// Follower that won a term: the epoch every shard leads in place from now on (0:
    /// none). Set once per process: a leader that loses its term re-executes.
    lead_epoch: AtomicU32,
    pub slots: Vec<ShardSlot>,
}

/// What one shard tells the coordinator (written by the shard's executor only).
#[derive(Default)]
pub struct ShardSlot {
    /// `gen` as of the shard's last check that its follower holds every acknowledged
    /// record (0: it does not).
    pub in_sync_gen: AtomicU64,
    /// The follower is connected and close behind (worth switching back to two copies).
    pub near: AtomicBool,
    /// Nanoseconds after `t0` (+1) when the follower last confirmed new records, joined,
    /// or was found holding everything; 0: never. A link can look up for
    /// `--repl-timeout-ms` after its peer went silent: `near` alone does not tell.
    pub progress_at: AtomicU64,
    /// Nanoseconds after `t0` (+1) since which the follower has been away or an append
    /// has been waiting for it; 0 when neither.
    pub stalled_since: AtomicU64,
    /// A batch write + fdatasync is in flight.
    pub writing: AtomicBool,
    /// Follower: replication links from a leader that ended (a counter).
    pub links_lost: AtomicU64,
    /// Draining: every append taken was answered and every client connection closed.
    pub drained: AtomicBool,
    /// Graceful shutdown, after the last write: the last segment is sealed (its index
    /// file and a checkpoint at the next offset written), or had nothing to seal, or
    /// sealing it failed (logged): the shutdown thread may exit.
    pub sealed_at_stop: AtomicBool,
}

impl ControlCell {
    pub fn new(shards: usize, lease_until_now: bool) -> ControlCell {
        ControlCell {
            t0: Instant::now(),
            lease_until: AtomicU64::new(if lease_until_now { 0 } else { u64::MAX }),
            solo: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            gen: AtomicU64::new(1),
            started: AtomicBool::new(false),
            coordinated: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            lease_ms: AtomicU32::new(0),
            view_epoch: AtomicU32::new(0),
            leader_state: AtomicU8::new(LeaderState::Unknown as u8),
            lead_epoch: AtomicU32::new(0),
            slots: (0..shards).map(|_| ShardSlot::default()).collect(),
        }
    }

    pub fn set_coordinated(&self) {
        self.coordinated.store(true, Ordering::Release);
    }

    pub fn coordinated(&self) -> bool {
        self.coordinated.load(Ordering::Acquire)
    }

    pub fn set_started(&self) {
        self.started.store(true, Ordering::Release);
    }

    /// Every shard has recovered: a follower may take over only then (a shard that found
    /// damage has marked itself by then, see `control::any_repair_mark`).
    pub fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// No coordinator: never a lease limit, never solo.
    pub fn unbounded(shards: usize) -> ControlCell {
        ControlCell::new(shards, false)
    }

    pub fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.t0).as_nanos() as u64
    }

    pub fn instant(&self, nanos: u64) -> Instant {
        self.t0 + std::time::Duration::from_nanos(nanos)
    }

    /// May this node acknowledge at `now`? (lease not near its end, not stopping)
    pub fn may_ack(&self, now: Instant) -> bool {
        let until = self.lease_until.load(Ordering::Acquire);
        !self.stopping() && (until == u64::MAX || self.nanos(now) < until)
    }

    pub fn set_lease_until(&self, at: Instant) {
        self.lease_until.store(self.nanos(at), Ordering::Release);
    }

    pub fn solo(&self) -> bool {
        self.solo.load(Ordering::Acquire)
    }

    pub fn set_solo(&self, solo: bool) {
        self.solo.store(solo, Ordering::Release);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A graceful shutdown began: refuse new appends and connections.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// After this returns, a shard either sees the stop before its next write or has
    /// its `writing` flag visibly set (SeqCst on both sides).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn set_lease(&self, lease: Duration) {
        self.lease_ms.store(lease.as_millis().min(u32::MAX as u128) as u32, Ordering::Release);
    }

    /// The leader's lease in ms (0: no lease, static roles).
    pub fn lease_ms(&self) -> u32 {
        self.lease_ms.load(Ordering::Acquire)
    }

    /// The coordinator's latest reading of etcd: the term's epoch and, on a follower,
    /// whether its leader holds a live lease.
    pub fn set_view(&self, epoch: u32, leader: LeaderState) {
        self.view_epoch.fetch_max(epoch, Ordering::AcqRel);
        self.leader_state.store(leader as u8, Ordering::Release);
    }

    /// (newest term epoch read, the follower's view of its leader's lease).
    pub fn view(&self) -> (u32, LeaderState) {
        let s = LeaderState::from_u8(self.leader_state.load(Ordering::Acquire)).unwrap_or(LeaderState::Unknown);
        (self.view_epoch.load(Ordering::Acquire), s)
    }

    /// Tells every shard of this follower to lead `epoch` in place (the term is won and
    /// the lease, solo flag and view are set for it before this).
    pub fn lead_in_place(&self, epoch: u32) {
        assert!(epoch > 0, "epoch 0 is no term");
        let was = self.lead_epoch.swap(epoch, Ordering::AcqRel);
        assert_eq!(was, 0, "a process leads in place once (losing the term re-executes it)");
    }

    /// The epoch to lead in place, once the coordinator has won a term as a follower.
    pub fn lead_order(&self) -> Option<u32> {
        Some(self.lead_epoch.load(Ordering::Acquire)).filter(|e| *e > 0)
    }

    pub fn gen(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    pub fn bump_gen(&self) -> u64 {
        self.gen.fetch_add(1, Ordering::AcqRel) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lease_bounds_acks() {
        let c = ControlCell::new(1, true);
        let now = Instant::now();
        assert!(!c.may_ack(now), "no lease yet");
        c.set_lease_until(now + Duration::from_millis(500));
        assert!(c.may_ack(now));
        assert!(!c.may_ack(now + Duration::from_millis(501)));
        c.stop();
        assert!(!c.may_ack(now));
        assert!(ControlCell::unbounded(1).may_ack(now + Duration::from_secs(1 << 30)));
    }
}
