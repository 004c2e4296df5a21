//! A follower's side of the data: batches from the leader staged for the commit loop,
//! and the cut of a rejoin.

use std::time::Instant;

use super::append::Staged;
use super::{Shard, MAX_STAGED_BYTES};
use crate::wal::batch::{MAX_BATCH_BYTES, MAX_BATCH_RECORDS};

impl Shard {
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
            super::seal::before_cut(self, offset).await?;
        }
        let end = self.log.truncate(offset).await?;
        if cut {
            // The derived state of what is left, read back as a start would.
            super::seal::after_cut(self, end).await?;
        }
        self.next_assign.set(end);
        self.recent.borrow_mut().clear();
        self.release();
        Ok(end)
    }
}
