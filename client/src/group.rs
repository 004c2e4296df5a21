//! Consumer groups (protocol version 4): the members of a group share the events of
//! every stream whose name starts with a prefix, each event going to one member, and
//! commit how far they got so that a member that leaves or fails is taken over from
//! its last commit.
//!
//! ```no_run
//! # async fn demo() -> Result<(), corelog_client::Error> {
//! use corelog_client::group::{Consumer, ConsumerOptions};
//! use corelog_client::ClientConfig;
//! let cfg = ClientConfig::mtls("certs/ca.pem", "certs/client.pem", "certs/client.key", "localhost")?;
//! let opts = ConsumerOptions { auto_commit: true, ..Default::default() };
//! let mut c = Consumer::join("127.0.0.1:9400", &cfg, "billing", "worker-1", "order-", &opts).await?;
//! while let Some(e) = c.next().await? {
//!     let s = e.record.stream.as_ref().unwrap();
//!     println!("{} v{}: {:?}", s.name, s.version, e.record.payload);
//! }
//! # Ok(()) }
//! ```
//!
//! A member joins on every shard of the cluster, on a connection of its own to each
//! shard's direct port at the leader (`member.rs`); the server splits each shard's
//! streams into `k` buckets and assigns each bucket to one member, in generations
//! numbered up as members come and go. Events arrive in offset order within a bucket
//! (so in version order within a stream), from the bucket's committed position on.
//! [`Consumer::commit`] commits, per shard, the offset after the last event yielded
//! from it under its current generation (`ledger.rs`); with `auto_commit` that happens
//! whenever [`Consumer::next`] is about to wait for more events. Delivery is at least
//! once: events yielded after the last commit come again to whoever gets their bucket
//! next. A lost connection (a restart, a failover, a session that ran out) is joined
//! again, following leadership, for up to `rejoin_within`; then `next` returns the
//! error.

mod ledger;
mod member;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::client::{split_addrs, Client, ClientConfig, Error, Record};
use ledger::{Due, Ledger};
use member::{Answer, CommitCmd, Item, Spec};

/// Items buffered between the shards' tasks and the consumer.
const QUEUE: usize = 4096;

/// How a member joins and keeps its sessions.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Buckets per shard, fixed by the group's first join (1..=64); 0: the group's own,
    /// or the server's default for a new group.
    pub k: u8,
    /// Commit what was yielded whenever `next` is about to wait for more events.
    pub auto_commit: bool,
    /// How often each shard's connection says the member is alive (default 1 s; the
    /// server ends a session silent for longer than its `--group-session-ms`).
    pub heartbeat: Duration,
    /// How long a shard whose connection ended is joined again before `next` returns
    /// the error (default 30 s).
    pub rejoin_within: Duration,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            k: 0,
            auto_commit: false,
            heartbeat: Duration::from_secs(1),
            rejoin_within: Duration::from_secs(30),
        }
    }
}

/// An event delivered to this member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEvent {
    pub shard: u16,
    /// The generation it was delivered under.
    pub gen: u64,
    /// Carries its offset, stream name and version.
    pub record: Record,
}

/// A shard's current assignment to this member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub gen: u64,
    /// The buckets and where each one's delivery started (`codec::NO_COMMIT`: at the
    /// log's first offset, nothing committed).
    pub buckets: Vec<(u16, u64)>,
}

/// What one shard said of a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Durable on both nodes, as the record at `offset` of the shard's log.
    Committed { offset: u64 },
    /// Refused: its generation is over (a newer assignment restarts from the committed
    /// positions).
    Skipped,
    /// No answer: the shard's connection ended first, the node refused it as one that is
    /// moving (no longer the leader, shutting down, not replicating), or none came
    /// within the request timeout. The next session restarts from the committed
    /// positions.
    Lost,
}

/// One shard's commit: everything yielded from `shard` under `gen` below `next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    pub shard: u16,
    pub gen: u64,
    pub next: u64,
    pub outcome: CommitOutcome,
}

/// What [`Consumer::next_delivery`] yields: the events, and what else the member saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Event(GroupEvent),
    /// A shard opened a generation for this member (`buckets` may be empty).
    Assigned {
        shard: u16,
        assignment: Assignment,
    },
    /// An automatic commit's answer.
    Committed(Commit),
    /// A shard's connection ended; it is being joined again.
    Rejoining {
        shard: u16,
        why: String,
    },
}

/// Counts over the consumer's life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    pub events: u64,
    pub assignments: u64,
    pub rejoins: u64,
    pub committed: u64,
    pub skipped: u64,
    pub lost: u64,
}

/// A member of a consumer group (see the module docs). Dropping it leaves the group: each
/// shard's task ends when it finds the consumer's end of its channel gone, closing its
/// connection.
pub struct Consumer {
    rx: mpsc::Receiver<Item>,
    /// Each shard's task, by shard.
    cmds: Vec<mpsc::Sender<CommitCmd>>,
    /// Items taken off the queue while a commit waited for its answers.
    stash: VecDeque<Item>,
    /// Automatic commits' answers, yielded before anything else.
    ready: VecDeque<Delivery>,
    ledger: Ledger,
    assignment: BTreeMap<u16, Assignment>,
    stats: ConsumerStats,
    auto_commit: bool,
    answer_within: Duration,
}

impl Consumer {
    /// Joins `group` as `member` on every shard of the nodes `addrs` (`"A,B"`), for the
    /// events of the streams whose names start with `prefix` (`""`: all). Returns once
    /// every shard answered with an assignment; fails at once on a refusal no retry cures
    /// (a bad name, a prefix or `k` other than the group's, `Forbidden`, a server without
    /// groups), else after `rejoin_within`.
    pub async fn join(
        addrs: &str,
        cfg: &ClientConfig,
        group: &str,
        member: &str,
        prefix: &str,
        opts: &ConsumerOptions,
    ) -> Result<Consumer, Error> {
        let count = Client::connect(addrs, cfg).await?.info().await.shard_count.max(1);
        let spec = Arc::new(Spec {
            addrs: split_addrs(addrs),
            cfg: cfg.clone(),
            group: group.to_string(),
            member: member.to_string(),
            prefix: prefix.to_string(),
            k: opts.k,
            heartbeat: opts.heartbeat,
            rejoin_within: opts.rejoin_within,
        });
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut c = Consumer {
            rx,
            cmds: Vec::new(),
            stash: VecDeque::new(),
            ready: VecDeque::new(),
            ledger: Ledger::default(),
            assignment: BTreeMap::new(),
            stats: ConsumerStats::default(),
            auto_commit: opts.auto_commit,
            answer_within: cfg.request_timeout,
        };
        let deadline = Instant::now() + opts.rejoin_within;
        for shard in 0..count {
            // On an error `c` is dropped, which leaves the shards already joined.
            let joined = member::join(&spec, shard, deadline).await?;
            let (cmd_tx, cmd_rx) = mpsc::channel(64);
            c.cmds.push(cmd_tx);
            tokio::spawn(member::run(spec.clone(), shard, joined, tx.clone(), cmd_rx));
        }
        Ok(c)
    }

    /// The next event (`None` once every shard was given up). With `auto_commit`, what
    /// was yielded is committed first when no event is waiting. `Err`: a shard could not
    /// be joined again within `rejoin_within` (the other shards go on), or an automatic
    /// commit failed.
    pub async fn next(&mut self) -> Result<Option<GroupEvent>, Error> {
        loop {
            match self.next_delivery().await? {
                None => return Ok(None),
                Some(Delivery::Event(e)) => return Ok(Some(e)),
                Some(_) => {}
            }
        }
    }

    /// [`Consumer::next`], with the assignments, the automatic commits' answers and the
    /// rejoins too, in the order they happened on each shard.
    pub async fn next_delivery(&mut self) -> Result<Option<Delivery>, Error> {
        loop {
            if let Some(d) = self.ready.pop_front() {
                return Ok(Some(d));
            }
            let item = match self.stash.pop_front().map(Ok).unwrap_or_else(|| self.rx.try_recv()) {
                Ok(item) => item,
                Err(mpsc::error::TryRecvError::Disconnected) => return Ok(None),
                Err(mpsc::error::TryRecvError::Empty) => {
                    if self.auto_commit && !self.ledger.due().is_empty() {
                        let done = self.commit().await?;
                        self.ready.extend(done.into_iter().map(Delivery::Committed));
                        continue;
                    }
                    match self.rx.recv().await {
                        Some(item) => item,
                        None => return Ok(None),
                    }
                }
            };
            return self.take(item).map(Some);
        }
    }

    /// Notes what an item yields.
    fn take(&mut self, item: Item) -> Result<Delivery, Error> {
        Ok(match item {
            Item::Assigned { shard, gen, buckets } => {
                self.ledger.assigned(shard, gen);
                self.stats.assignments += 1;
                let assignment = Assignment { gen, buckets };
                self.assignment.insert(shard, assignment.clone());
                Delivery::Assigned { shard, assignment }
            }
            Item::Event(e) => {
                self.ledger.yielded(e.shard, e.gen, e.record.offset);
                self.stats.events += 1;
                Delivery::Event(e)
            }
            Item::Lost { shard, why } => {
                self.ledger.lost(shard);
                self.assignment.remove(&shard);
                self.stats.rejoins += 1;
                Delivery::Rejoining { shard, why }
            }
            Item::Failed(e) => return Err(e),
        })
    }

    /// Commits, per shard, the offset after the last event yielded from it under its
    /// current generation (nothing for a shard with nothing new), and waits for the
    /// answers. A commit refused because its generation is over is
    /// [`CommitOutcome::Skipped`], one whose connection ended first
    /// [`CommitOutcome::Lost`]: neither is an error (the events come again). `Err`: a
    /// refusal no retry cures (a protocol violation).
    pub async fn commit(&mut self) -> Result<Vec<Commit>, Error> {
        let mut waits = Vec::new();
        for d in self.ledger.due() {
            self.ledger.sent(d);
            let (reply, rx) = oneshot::channel();
            let cmd = CommitCmd { gen: d.gen, next: d.next, reply };
            let sent = match self.cmds.get(d.shard as usize) {
                Some(tx) => tx.send(cmd).await.is_ok(),
                None => false,
            };
            waits.push((d, sent.then_some(rx)));
        }
        let mut out = Vec::with_capacity(waits.len());
        for (Due { shard, gen, next }, rx) in waits {
            let outcome = match rx {
                Some(rx) => self.answer(rx).await?,
                None => CommitOutcome::Lost,
            };
            match outcome {
                CommitOutcome::Committed { .. } => self.stats.committed += 1,
                CommitOutcome::Skipped => self.stats.skipped += 1,
                CommitOutcome::Lost => self.stats.lost += 1,
            }
            out.push(Commit { shard, gen, next, outcome });
        }
        Ok(out)
    }

    /// Waits for a commit's answer, keeping what arrives meanwhile for `next` (the shard
    /// tasks read nothing more while the queue is full, the answer included).
    async fn answer(&mut self, mut rx: oneshot::Receiver<Result<Answer, Error>>) -> Result<CommitOutcome, Error> {
        let timeout = tokio::time::sleep(self.answer_within);
        tokio::pin!(timeout);
        let mut open = true;
        loop {
            tokio::select! {
                r = &mut rx => return match r {
                    Ok(Ok(Answer::Committed { offset })) => Ok(CommitOutcome::Committed { offset }),
                    Ok(Ok(Answer::Skipped)) => Ok(CommitOutcome::Skipped),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Ok(CommitOutcome::Lost),
                },
                item = self.rx.recv(), if open => match item {
                    Some(item) => self.stash.push_back(item),
                    None => open = false,
                },
                _ = &mut timeout => return Ok(CommitOutcome::Lost),
            }
        }
    }

    /// Per shard, the assignment `next` has yielded up to (a shard being joined again
    /// has none).
    pub fn assignment(&self) -> &BTreeMap<u16, Assignment> {
        &self.assignment
    }

    pub fn stats(&self) -> &ConsumerStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests;
