//! The shard's clock and lifecycle: the deadline loop, the control plane's decisions
//! (lease, solo, stop), client connections, and the graceful shutdown.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use corelog_client::codec::Role;

use super::{Shard, NEAR_RECORDS};
use corelog_runtime::sync::take;

impl Shard {
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
            match super::seal::roll(&self, true).await {
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
    pub(super) fn role_changed(&self) {
        self.expire(Instant::now());
        self.accepted_ev.notify();
        self.space_ev.notify();
        self.durable_ev.notify();
    }
}
