//! The group-commit loop and what follows a write: acknowledging what every replica
//! holds (`release`), failing what waited too long or lost its leader (`expire`).

use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use corelog_client::codec::{ErrorCode, Role};
use corelog_client::record;

use super::append::{DupWaiter, Staged, Waiter};
use super::{AckForm, Outcome, Shard};
use crate::replica::recent::{self, Recent};
use corelog_runtime::sync::take;

/// A batch durable here (and shipped), waiting for the follower.
pub(super) struct Unacked {
    pub(super) first_offset: u64,
    pub(super) waiters: VecDeque<Waiter>,
    pub(super) since: Instant,
}

fn first_record_epoch(recs: &[u8]) -> u32 {
    record::decode(recs).map(|(r, _)| r.epoch).unwrap_or(0)
}

fn last_record_epoch(recs: &[u8]) -> u32 {
    record::Records::new(recs).flatten().last().map(|r| r.epoch).unwrap_or(0)
}

impl Shard {
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
                if let Err(e) = super::seal::roll(&self, false).await {
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
                let outcome = Outcome::Appended { offset: u.first_offset, form: w.form };
                w.conn.answer(w.req_id, self.id(), outcome);
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
                let form = AckForm::V2 { duplicate: true, version: d.version };
                d.conn.answer(d.req_id, self.id(), Outcome::Appended { offset: d.offset, form });
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
                d.conn.answer(d.req_id, self.id(), Outcome::Failed { code, msg });
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
                w.conn.answer(w.req_id, self.id(), Outcome::Failed { code, msg: &msg });
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
                w.conn.answer(w.req_id, self.id(), Outcome::Failed { code: ErrorCode::Unavailable, msg: &msg });
                n += 1;
            }
        }
        self.next_assign.set(first);
        take(&self.unacked_count, n, "unacked_count");
        self.metrics.errors.increment(n as u64);
        self.metrics.appends_held.set(0.0);
        self.space_ev.notify();
    }
}
