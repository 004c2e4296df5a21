//! What a member has yielded and committed on each shard: the bookkeeping behind
//! [`super::Consumer::commit`], with no I/O.
//!
//! A commit names the generation its records were delivered under, and the server
//! refuses one of an older generation, so the marks of a shard start over with each
//! assignment and are dropped when the shard's session ends.

use std::collections::BTreeMap;

/// One shard's marks under its current generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Marks {
    gen: u64,
    /// The offset after the last record yielded under `gen` (none yet: `None`).
    done: Option<u64>,
    /// The last `next` sent in a commit under `gen`.
    committed: Option<u64>,
}

/// A commit to send: everything yielded from `shard` under `gen` lies below `next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    pub shard: u16,
    pub gen: u64,
    pub next: u64,
}

/// Per shard, what was yielded and what was committed (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    shards: BTreeMap<u16, Marks>,
}

impl Ledger {
    /// `shard` opened generation `gen`: nothing is yielded under it yet.
    pub fn assigned(&mut self, shard: u16, gen: u64) {
        self.shards.insert(shard, Marks { gen, done: None, committed: None });
    }

    /// `shard`'s session ended: nothing of it can be committed until it is assigned again.
    pub fn lost(&mut self, shard: u16) {
        self.shards.remove(&shard);
    }

    /// The record at `offset` of `shard`, delivered under `gen`, was yielded. A record of
    /// another generation than the shard's current one is not counted (its commit would
    /// be refused).
    pub fn yielded(&mut self, shard: u16, gen: u64, offset: u64) {
        if let Some(m) = self.shards.get_mut(&shard).filter(|m| m.gen == gen) {
            m.done = Some(m.done.map_or(offset + 1, |d| d.max(offset + 1)));
        }
    }

    /// The commits due: one per shard with records yielded since its last commit.
    pub fn due(&self) -> Vec<Due> {
        let due = self.shards.iter().filter_map(|(&shard, m)| match (m.done, m.committed) {
            (Some(next), Some(c)) if next <= c => None,
            (Some(next), _) => Some(Due { shard, gen: m.gen, next }),
            (None, _) => None,
        });
        due.collect()
    }

    /// A commit was sent: not due again until more is yielded (whatever its answer: a
    /// refused or lost commit of this generation would be refused again).
    pub fn sent(&mut self, d: Due) {
        if let Some(m) = self.shards.get_mut(&d.shard).filter(|m| m.gen == d.gen) {
            m.committed = Some(m.committed.map_or(d.next, |c| c.max(d.next)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(shard: u16, gen: u64, next: u64) -> Due {
        Due { shard, gen, next }
    }

    #[test]
    fn commits_the_offset_after_the_last_record_yielded_per_shard() {
        let mut l = Ledger::default();
        assert!(l.due().is_empty());
        l.assigned(0, 3);
        l.assigned(1, 3);
        assert!(l.due().is_empty(), "nothing yielded: nothing to commit");
        l.yielded(0, 3, 10);
        l.yielded(0, 3, 14);
        l.yielded(1, 3, 2);
        assert_eq!(l.due(), vec![due(0, 3, 15), due(1, 3, 3)]);
        for d in l.due() {
            l.sent(d);
        }
        assert!(l.due().is_empty(), "committed: not due again");
        l.yielded(1, 3, 7);
        assert_eq!(l.due(), vec![due(1, 3, 8)]);
    }

    #[test]
    fn a_new_generation_or_a_lost_session_starts_the_shard_over() {
        let mut l = Ledger::default();
        l.assigned(0, 3);
        l.yielded(0, 3, 10);
        l.assigned(0, 4);
        assert!(l.due().is_empty(), "what was yielded under gen 3 cannot be committed under 4");
        l.yielded(0, 3, 11);
        assert!(l.due().is_empty(), "a record of an old generation does not count");
        l.yielded(0, 4, 5);
        assert_eq!(l.due(), vec![due(0, 4, 6)]);
        l.sent(due(0, 3, 12));
        assert_eq!(l.due(), vec![due(0, 4, 6)], "a commit of an old generation marks nothing");
        l.lost(0);
        assert!(l.due().is_empty());
        l.yielded(0, 4, 9);
        assert!(l.due().is_empty(), "nothing counts on a shard without a session");
    }
}
