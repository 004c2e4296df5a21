//! Consumer groups: one group's state on one shard, as a pure state machine (no I/O, time
//! passed in). The shard appends the events it returns to the group's reserved stream
//! and answers members from it; a take-over folds that stream back (`apply`).
//!
//! The unit of work is a bucket: `FNV-1a-64(stream name) mod (shard_count × k)`. Since
//! `(h mod nk) mod n = h mod n`, bucket `b` lives wholly on shard `b mod n`, so a group's
//! state is per shard and no executor asks another. Members own buckets per generation;
//! every delivery and commit names its generation, and one from another generation, or
//! for a bucket the member does not own in it, is refused: two live members never own a
//! bucket in the same generation.

pub mod assign;
pub mod event;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use event::Event;

pub type Bucket = u16;

/// Buckets per shard of one group (k).
pub const MAX_K: u16 = 64;
pub const MAX_BUCKETS: usize = MAX_K as usize;
/// Members of one group on one shard.
pub const MAX_MEMBERS: usize = 256;
/// Bytes of a member id (UTF-8).
pub const MAX_MEMBER_ID: usize = 128;

/// FNV-1a-64, the hash that places a stream on a shard (protocol.md §3) and in a bucket.
pub fn fnv1a64(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The bucket of a stream in a group of `k` buckets per shard.
pub fn bucket_of(name: &[u8], shard_count: u16, k: u16) -> Bucket {
    assert!(shard_count > 0 && (1..=MAX_K).contains(&k), "shard_count {shard_count}, k {k}");
    (fnv1a64(name) % (shard_count as u64 * k as u64)) as Bucket
}

/// Why a member's request is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The member named another generation: it must take `current`'s assignment.
    Stale { current: u64 },
    /// The bucket is not the member's in the current generation.
    NotOwner { bucket: Bucket },
    /// The member has no session (it left, timed out, or the node took over): join again.
    NotMember,
    /// `MAX_MEMBERS` already.
    Full,
    /// A member id that is empty, too long, or a bucket of another shard.
    Bad(String),
}

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub shard: u16,
    pub shard_count: u16,
    /// Buckets per shard.
    pub k: u16,
    /// A member that sends nothing for this long leaves.
    pub session_ms: u64,
    /// Joins and leaves within this window open one generation together.
    pub settle_ms: u64,
}

pub struct Group {
    cfg: Config,
    /// This shard's buckets, ascending: shard, shard + n, …, shard + (k − 1)·n.
    buckets: Vec<Bucket>,
    /// The newest generation in the group's stream (0: none yet).
    gen: u64,
    owners: BTreeMap<Bucket, String>,
    /// Per bucket, the committed position: everything below it is processed.
    next: BTreeMap<Bucket, u64>,
    /// Live members and when their session ends (ms).
    members: BTreeMap<String, u64>,
    /// When to open the next generation: a join or leave is waiting for it.
    rebalance_at: Option<u64>,
}

impl Group {
    /// A group with no event yet (or before its stream is folded).
    pub fn new(cfg: Config) -> Group {
        assert!(cfg.shard < cfg.shard_count, "shard {} of {}", cfg.shard, cfg.shard_count);
        assert!((1..=MAX_K).contains(&cfg.k), "k {}", cfg.k);
        assert!(cfg.session_ms > 0, "a session of 0 ms ends at once");
        let n = cfg.shard_count;
        let buckets = (0..cfg.k).map(|i| cfg.shard + i * n).collect();
        Group {
            cfg,
            buckets,
            gen: 0,
            owners: BTreeMap::new(),
            next: BTreeMap::new(),
            members: BTreeMap::new(),
            rebalance_at: None,
        }
    }

    pub fn gen(&self) -> u64 {
        self.gen
    }

    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// The committed position of a bucket (None: nothing committed yet).
    pub fn committed(&self, bucket: Bucket) -> Option<u64> {
        self.next.get(&bucket).copied()
    }

    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.members.keys().map(String::as_str)
    }

    /// Folds one event of the group's stream, in log order. An event that could not have
    /// been written by `tick` or `commit` at its place is damage, reported, not applied.
    pub fn apply(&mut self, event: &Event) -> Result<(), String> {
        match event {
            Event::Gen { gen, owners } => {
                if *gen <= self.gen {
                    return Err(format!("generation {gen} after {}", self.gen));
                }
                let mut next_owners = BTreeMap::new();
                for (member, buckets) in owners {
                    for b in buckets {
                        if self.buckets.binary_search(b).is_err() {
                            return Err(format!("bucket {b} is not shard {}'s", self.cfg.shard));
                        }
                        if next_owners.insert(*b, member.clone()).is_some() {
                            return Err(format!("bucket {b} owned twice in generation {gen}"));
                        }
                    }
                }
                self.gen = *gen;
                self.owners = next_owners;
            }
            Event::Commit { gen, member, bucket, next } => {
                if *gen != self.gen || self.owners.get(bucket) != Some(member) {
                    return Err(format!("commit of bucket {bucket} by {member} in generation {gen}, not its owner's"));
                }
                self.next.insert(*bucket, *next);
            }
        }
        Ok(())
    }

    /// After a fold on a node that takes over: no session survives it; members join
    /// again and the first joins open the next generation.
    pub fn resume(&mut self) {
        self.members.clear();
        self.rebalance_at = None;
    }

    /// A member joins (or a member renews its session by joining again).
    pub fn join(&mut self, member: &str, now_ms: u64) -> Result<(), Refusal> {
        if member.is_empty() || member.len() > MAX_MEMBER_ID {
            return Err(Refusal::Bad(format!("member id of {} bytes (1..={MAX_MEMBER_ID})", member.len())));
        }
        let until = now_ms + self.cfg.session_ms;
        if let Some(deadline) = self.members.get_mut(member) {
            *deadline = until;
            return Ok(());
        }
        if self.members.len() == MAX_MEMBERS {
            return Err(Refusal::Full);
        }
        self.members.insert(member.to_string(), until);
        self.rebalance_by(now_ms + self.cfg.settle_ms);
        Ok(())
    }

    pub fn leave(&mut self, member: &str, now_ms: u64) {
        if self.members.remove(member).is_some() {
            self.rebalance_by(now_ms);
        }
    }

    /// Renews a member's session; Stale tells it a new generation is there to take.
    pub fn heartbeat(&mut self, member: &str, gen: u64, now_ms: u64) -> Result<(), Refusal> {
        let deadline = self.members.get_mut(member).ok_or(Refusal::NotMember)?;
        *deadline = now_ms + self.cfg.session_ms;
        if gen != self.gen {
            return Err(Refusal::Stale { current: self.gen });
        }
        Ok(())
    }

    /// Ends sessions that ran out and opens a generation when one is due. The returned
    /// event is applied already: the caller appends it to the group's stream before it
    /// delivers anything under it.
    pub fn tick(&mut self, now_ms: u64) -> Option<Event> {
        let before = self.members.len();
        self.members.retain(|_, deadline| *deadline > now_ms);
        if self.members.len() != before {
            self.rebalance_by(now_ms);
        }
        if self.rebalance_at.is_none_or(|at| at > now_ms) {
            return None;
        }
        self.rebalance_at = None;
        let members: Vec<String> = self.members.keys().cloned().collect();
        let owners = assign::assign(&self.buckets, &members, &self.owners);
        let event = Event::Gen { gen: self.gen + 1, owners };
        self.apply(&event).expect("a generation this group opens folds");
        Some(event)
    }

    /// When `tick` has something to do next (None: nothing until a member acts).
    pub fn next_deadline(&self) -> Option<u64> {
        self.members.values().copied().chain(self.rebalance_at).min()
    }

    /// A member commits a bucket's position; the returned event is applied already and is
    /// to be appended (acknowledged to the member once durable).
    pub fn commit(&mut self, member: &str, gen: u64, bucket: Bucket, next: u64, now_ms: u64) -> Result<Event, Refusal> {
        self.check_owner(member, gen, bucket)?;
        *self.members.get_mut(member).expect("check_owner found the member") = now_ms + self.cfg.session_ms;
        let event = Event::Commit { gen, member: member.to_string(), bucket, next };
        self.apply(&event).expect("a commit check_owner allowed folds");
        Ok(event)
    }

    /// Where a delivery of `bucket` to `member` in generation `gen` starts: the committed
    /// position, else `start` (the subscription's start).
    pub fn deliver_from(&self, member: &str, gen: u64, bucket: Bucket, start: u64) -> Result<u64, Refusal> {
        self.check_owner(member, gen, bucket)?;
        Ok(self.committed(bucket).unwrap_or(start))
    }

    /// The member's buckets in the current generation with their committed positions.
    pub fn assigned(&self, member: &str) -> Vec<(Bucket, Option<u64>)> {
        self.owners.iter().filter(|(_, m)| m.as_str() == member).map(|(&b, _)| (b, self.committed(b))).collect()
    }

    /// The lowest committed position over this shard's buckets (lag = end of log − this);
    /// None while a bucket has none.
    pub fn low_water(&self) -> Option<u64> {
        self.buckets.iter().map(|b| self.committed(*b)).collect::<Option<Vec<_>>>()?.into_iter().min()
    }

    fn check_owner(&self, member: &str, gen: u64, bucket: Bucket) -> Result<(), Refusal> {
        if self.buckets.binary_search(&bucket).is_err() {
            return Err(Refusal::Bad(format!("bucket {bucket} is not shard {}'s", self.cfg.shard)));
        }
        if !self.members.contains_key(member) {
            return Err(Refusal::NotMember);
        }
        if gen != self.gen {
            return Err(Refusal::Stale { current: self.gen });
        }
        if self.owners.get(&bucket).map(String::as_str) != Some(member) {
            return Err(Refusal::NotOwner { bucket });
        }
        Ok(())
    }

    fn rebalance_by(&mut self, at_ms: u64) {
        self.rebalance_at = Some(self.rebalance_at.map_or(at_ms, |t| t.min(at_ms)));
    }
}
