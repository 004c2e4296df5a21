//! Consumer groups: one group's state on one shard, as a pure state machine (no I/O, time
//! passed in). The shard appends the events it returns to the group's reserved stream
//! and answers members from it; a take-over folds that stream back (`apply`).
//!
//! The unit of work is a bucket: `FNV-1a-64(stream name) mod (shard_count × k)`. Since
//! `(h mod nk) mod n = h mod n`, bucket `b` lives wholly on shard `b mod n`, so a group's
//! state is per shard and no executor asks another. Members own buckets per generation;
//! every delivery and commit names its generation, and a commit from another generation,
//! or by a member owning nothing in it, is refused: two live members never own a bucket
//! in the same generation. A commit covers every bucket the member owns (delivery to a
//! member is in offset order across its buckets).

pub mod assign;
pub mod event;
pub mod table;
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
/// Commits between two snapshots of a group's state in its stream: a fold reads at most
/// this many events after the last `State`.
pub const SNAPSHOT_EVERY: u32 = 64;

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
    /// The member owns no bucket in the current generation.
    NotOwner,
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
    commits_since_state: u32,
    /// The streams the group reads: names starting with this (set by the first join or
    /// by the fold).
    pub prefix: String,
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
            commits_since_state: 0,
            prefix: String::new(),
        }
    }

    pub fn k(&self) -> u16 {
        self.cfg.k
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
    /// been written by `tick`, `commit` or `snapshot` at its place is damage, reported,
    /// not applied.
    pub fn apply(&mut self, event: &Event) -> Result<(), String> {
        match event {
            Event::State { gen, k, prefix, owners, next } => {
                if *k != self.cfg.k {
                    return Err(format!("state of a group of {k} buckets per shard, folded as {}", self.cfg.k));
                }
                if *gen < self.gen || (*gen == self.gen && self.gen == 0) {
                    return Err(format!("state of generation {gen} after {}", self.gen));
                }
                let mut next_owners = BTreeMap::new();
                for (member, buckets) in owners {
                    for b in buckets {
                        self.check_bucket(*b)?;
                        if next_owners.insert(*b, member.clone()).is_some() {
                            return Err(format!("bucket {b} owned twice in generation {gen}"));
                        }
                    }
                }
                if *gen == self.gen && next_owners != self.owners {
                    return Err(format!("a snapshot of generation {gen} with other owners"));
                }
                let mut committed = BTreeMap::new();
                for (b, n) in next {
                    self.check_bucket(*b)?;
                    committed.insert(*b, *n);
                }
                self.gen = *gen;
                self.prefix = prefix.clone();
                self.owners = next_owners;
                self.next = committed;
                self.commits_since_state = 0;
            }
            Event::Commit { gen, member, next } => {
                let mine: Vec<Bucket> = self.owned_by(member);
                if *gen != self.gen || mine.is_empty() {
                    return Err(format!("commit by {member} in generation {gen}, owning nothing there"));
                }
                for b in mine {
                    let at = self.next.entry(b).or_insert(*next);
                    *at = (*at).max(*next);
                }
                self.commits_since_state += 1;
            }
        }
        Ok(())
    }

    fn check_bucket(&self, b: Bucket) -> Result<(), String> {
        match self.buckets.binary_search(&b) {
            Ok(_) => Ok(()),
            Err(_) => Err(format!("bucket {b} is not shard {}'s", self.cfg.shard)),
        }
    }

    fn owned_by(&self, member: &str) -> Vec<Bucket> {
        self.owners.iter().filter(|(_, m)| m.as_str() == member).map(|(&b, _)| b).collect()
    }

    /// The whole state as one event (to append; applied already, which starts the count
    /// of `commits_since_state` again): a fold may start from it.
    pub fn snapshot(&mut self) -> Event {
        let mut owners: BTreeMap<&str, Vec<Bucket>> = BTreeMap::new();
        for (b, m) in &self.owners {
            owners.entry(m.as_str()).or_default().push(*b);
        }
        let event = Event::State {
            gen: self.gen,
            k: self.cfg.k,
            prefix: self.prefix.clone(),
            owners: owners.into_iter().map(|(m, b)| (m.to_string(), b)).collect(),
            next: self.next.iter().map(|(&b, &n)| (b, n)).collect(),
        };
        self.apply(&event).expect("a group's own snapshot folds");
        event
    }

    /// Commits folded since the last `State`: the caller appends a snapshot when this
    /// reaches `SNAPSHOT_EVERY`, which bounds what a fold reads.
    pub fn commits_since_state(&self) -> u32 {
        self.commits_since_state
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
        let next = self.next.iter().map(|(&b, &n)| (b, n)).collect();
        let event = Event::State { gen: self.gen + 1, k: self.cfg.k, prefix: self.prefix.clone(), owners, next };
        self.apply(&event).expect("a generation this group opens folds");
        Some(event)
    }

    /// When `tick` has something to do next (None: nothing until a member acts).
    pub fn next_deadline(&self) -> Option<u64> {
        self.members.values().copied().chain(self.rebalance_at).min()
    }

    /// A member commits: everything delivered to it below `next` is processed. The
    /// returned event is applied already and is to be appended (acknowledged to the
    /// member once durable).
    pub fn commit(&mut self, member: &str, gen: u64, next: u64, now_ms: u64) -> Result<Event, Refusal> {
        if !self.members.contains_key(member) {
            return Err(Refusal::NotMember);
        }
        if gen != self.gen {
            return Err(Refusal::Stale { current: self.gen });
        }
        if self.owned_by(member).is_empty() {
            return Err(Refusal::NotOwner);
        }
        *self.members.get_mut(member).expect("checked above") = now_ms + self.cfg.session_ms;
        let event = Event::Commit { gen, member: member.to_string(), next };
        self.apply(&event).expect("a commit by an owner in the current generation folds");
        Ok(event)
    }

    /// A join or leave waits for the next generation.
    pub fn rebalancing(&self) -> bool {
        self.rebalance_at.is_some()
    }

    pub fn is_member(&self, member: &str) -> bool {
        self.members.contains_key(member)
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

    fn rebalance_by(&mut self, at_ms: u64) {
        self.rebalance_at = Some(self.rebalance_at.map_or(at_ms, |t| t.min(at_ms)));
    }
}
