//! One shard's membership: a connection to the shard's leader (its direct port) that
//! joins the group, forwards the pushes to the consumer's queue, sends the consumer's
//! commits and the heartbeats, and — when the connection ends — joins again on a new
//! one, following leadership, until a deadline.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use super::GroupEvent;
use crate::client::{greet_with, shard_addr, to_records, ClientConfig, Error, Greeted, Reply};
use crate::codec::{ErrorCode, GroupReq, GroupResp, Request, Response, GROUPS_VERSION};

/// The join's request id: `greet_with` sends the request after the `Hello` with id 1, and
/// the server pushes the group's frames under it.
const JOIN_ID: u64 = 1;
/// The pause before joining again after a refusal without a retry hint, or after a
/// round of nodes that could not be reached.
const RETRY: Duration = Duration::from_millis(100);

/// What a member joins with, and how it keeps its sessions.
pub(crate) struct Spec {
    /// The nodes' client addresses.
    pub addrs: Vec<String>,
    pub cfg: ClientConfig,
    pub group: String,
    pub member: String,
    pub prefix: String,
    pub k: u8,
    pub heartbeat: Duration,
    pub rejoin_within: Duration,
}

/// What a shard's task hands the consumer, in the order the shard's connection said it.
pub(crate) enum Item {
    Assigned {
        shard: u16,
        gen: u64,
        buckets: Vec<(u16, u64)>,
    },
    Event(GroupEvent),
    /// The shard's connection ended; the task is joining again.
    Lost {
        shard: u16,
        why: String,
    },
    /// The task gave up on the shard: no join within the deadline, or one refused for good.
    Failed(Error),
}

/// A commit's answer. A dropped sender: none (the connection ended first, or the node
/// refused it as one that is moving).
pub(crate) enum Answer {
    Committed {
        offset: u64,
    },
    /// Refused `StaleGeneration`: a newer assignment restarts from the committed positions.
    Skipped,
}

/// The consumer asks the shard's task to commit under `gen` up to `next`.
pub(crate) struct CommitCmd {
    pub gen: u64,
    pub next: u64,
    pub reply: oneshot::Sender<Result<Answer, Error>>,
}

/// A connection on which the join was answered with an assignment.
pub(crate) struct Joined {
    conn: Greeted,
    gen: u64,
    buckets: Vec<(u16, u64)>,
}

/// What to do after a join attempt failed.
enum Next {
    /// Join at the leader a `NotLeader` named (a client address).
    Named(String),
    /// Join again (at the next node) after this pause.
    Retry(Duration),
    /// A refusal no retry cures (a bad name, a prefix or k other than the group's,
    /// `Forbidden`, a server without groups).
    Fatal,
}

fn next_after(e: &Error, shard: u16) -> Next {
    match e {
        Error::Server { code, message, hint } => match ErrorCode::from_u16(*code) {
            Some(ErrorCode::NotLeader) if shard_addr(message, shard).is_ok() => Next::Named(message.clone()),
            Some(
                ErrorCode::NotLeader
                | ErrorCode::Unavailable
                | ErrorCode::ShuttingDown
                | ErrorCode::Fenced
                | ErrorCode::Overloaded
                | ErrorCode::ReplicationTimeout
                | ErrorCode::OutcomeUnknown
                | ErrorCode::StaleGeneration,
            ) => {
                Next::Retry(hint.filter(|h| h.retry_ms > 0).map_or(RETRY, |h| Duration::from_millis(h.retry_ms.into())))
            }
            _ => Next::Fatal,
        },
        Error::Codec(_) | Error::Protocol(_) | Error::Invalid(_) => Next::Fatal,
        _ => Next::Retry(RETRY),
    }
}

/// Joins on `shard`: asks each node in turn (from the first) until one answers with an
/// assignment, going at once to the leader a `NotLeader` names (pausing when that leader
/// names another in turn), and pausing after other refusals (their retry hint, or
/// [`RETRY`]) and unreachable nodes; until `deadline`, then the last error. A refusal no
/// retry cures is returned at once.
pub(crate) async fn join(spec: &Spec, shard: u16, deadline: Instant) -> Result<Joined, Error> {
    let n = spec.addrs.len();
    let (mut i, mut named, mut was_named) = (0, None::<String>, false);
    loop {
        let (target, from_list) = match named.take() {
            Some(a) => (a, false),
            None => (spec.addrs[i % n].clone(), true),
        };
        let e = match attempt(spec, shard, &target).await {
            Ok(j) => return Ok(j),
            Err(e) => e,
        };
        let pause = match next_after(&e, shard) {
            Next::Fatal => return Err(e),
            Next::Named(a) => {
                named = Some(a);
                // Two nodes naming each other (a change of leader under way): pause.
                if was_named {
                    RETRY
                } else {
                    Duration::ZERO
                }
            }
            Next::Retry(d) => d,
        };
        was_named = !from_list;
        if from_list {
            i += 1;
        }
        if Instant::now() + pause >= deadline {
            return Err(e);
        }
        tokio::time::sleep(pause).await;
    }
}

/// One join at the node whose client address is `addr`: greets its direct port for
/// `shard` (protocol version 4) with the join, and waits for the assignment.
async fn attempt(spec: &Spec, shard: u16, addr: &str) -> Result<Joined, Error> {
    let direct = shard_addr(addr, shard)?;
    let req = GroupReq::Join { group: &spec.group, member: &spec.member, prefix: &spec.prefix, k: spec.k };
    let req = Request::Group(req);
    let greeting = greet_with(&direct, &spec.cfg, Some(&req), GROUPS_VERSION);
    let mut conn = tokio::time::timeout(spec.cfg.connect_timeout, greeting)
        .await
        .map_err(|_| Error::Timeout(spec.cfg.connect_timeout))??;
    let first = tokio::time::timeout(spec.cfg.request_timeout, conn.reader.next())
        .await
        .map_err(|_| Error::Timeout(spec.cfg.request_timeout))??
        .ok_or(Error::Closed)?;
    match first.response()? {
        Response::Group(GroupResp::Assigned { gen, buckets, .. }) => Ok(Joined { conn, gen, buckets }),
        _ => Err(Error::Protocol(format!("{direct}: the join was not answered with GroupAssigned"))),
    }
}

/// The shard's task: serves `joined` until its connection ends, then joins again within
/// `spec.rejoin_within`; ends when the consumer is gone or the shard is given up
/// (`Item::Failed`).
pub(crate) async fn run(
    spec: std::sync::Arc<Spec>,
    shard: u16,
    mut joined: Joined,
    tx: mpsc::Sender<Item>,
    mut cmds: mpsc::Receiver<CommitCmd>,
) {
    loop {
        let Some(why) = serve(&spec, shard, joined, &tx, &mut cmds).await else { return };
        if !push(&tx, &mut cmds, Item::Lost { shard, why: why.to_string() }).await {
            return;
        }
        let deadline = Instant::now() + spec.rejoin_within;
        let rejoined = {
            let attempt = join(&spec, shard, deadline);
            tokio::pin!(attempt);
            // Commits asked for meanwhile are of the ended session: answered lost.
            loop {
                tokio::select! {
                    r = &mut attempt => break r,
                    c = cmds.recv() => if c.is_none() { return },
                }
            }
        };
        joined = match rejoined {
            Ok(j) => j,
            Err(e) => {
                push(&tx, &mut cmds, Item::Failed(e)).await;
                return;
            }
        };
    }
}

/// Hands `item` to the consumer, answering commits as lost while the queue is full;
/// false when the consumer is gone.
async fn push(tx: &mpsc::Sender<Item>, cmds: &mut mpsc::Receiver<CommitCmd>, item: Item) -> bool {
    loop {
        tokio::select! {
            p = tx.reserve() => return match p {
                Ok(p) => {
                    p.send(item);
                    true
                }
                Err(_) => false,
            },
            c = cmds.recv() => if c.is_none() { return false },
        }
    }
}

/// The state of one joined connection.
struct Session {
    shard: u16,
    gen: u64,
    /// Items read and not yet in the consumer's queue: nothing more is read meanwhile.
    outbox: VecDeque<Item>,
    /// Commits sent, by request id.
    pending: HashMap<u64, CommitCmd>,
    next_id: u64,
}

/// Serves a joined connection: pushes to the queue, commits and heartbeats out. Returns
/// why the connection ended (`None`: the consumer is gone); commits waiting for an answer
/// then are dropped (lost).
async fn serve(
    spec: &Spec,
    shard: u16,
    joined: Joined,
    tx: &mpsc::Sender<Item>,
    cmds: &mut mpsc::Receiver<CommitCmd>,
) -> Option<Error> {
    let Joined { conn, gen, buckets } = joined;
    let (mut reader, mut writer) = (conn.reader, conn.writer);
    let mut s = Session { shard, gen, outbox: VecDeque::new(), pending: HashMap::new(), next_id: JOIN_ID + 1 };
    s.outbox.push_back(Item::Assigned { shard, gen, buckets });
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + spec.heartbeat, spec.heartbeat);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut frame = Vec::new();
    loop {
        frame.clear();
        tokio::select! {
            p = tx.reserve(), if !s.outbox.is_empty() => match (p, s.outbox.pop_front()) {
                (Ok(p), Some(item)) => p.send(item),
                _ => return None,
            },
            r = reader.next(), if s.outbox.is_empty() => {
                let reply = match r {
                    Ok(Some(reply)) => reply,
                    Ok(None) => return Some(Error::Closed),
                    Err(e) => return Some(e),
                };
                if let Err(e) = s.take(reply) {
                    return Some(e);
                }
            }
            _ = beat.tick() => Request::Group(GroupReq::Heartbeat { gen: s.gen }).encode(0, &mut frame),
            c = cmds.recv() => {
                let c = c?;
                Request::Group(GroupReq::Commit { gen: c.gen, next: c.next }).encode(s.next_id, &mut frame);
                s.pending.insert(s.next_id, c);
                s.next_id += 1;
            }
        }
        if !frame.is_empty() {
            if let Err(e) = writer.write_all(&frame).await {
                return Some(e.into());
            }
        }
    }
}

impl Session {
    /// A frame from the server: the join's pushes go to the outbox, a commit's answer to
    /// its waiter. `Err`: the session is over (an error frame under the join's id, such as
    /// `StaleGeneration` when the session ran out, or one no request is waiting for).
    fn take(&mut self, reply: Reply) -> Result<(), Error> {
        if reply.req_id == JOIN_ID {
            match reply.response()? {
                Response::Group(GroupResp::Assigned { gen, buckets, .. }) => {
                    self.gen = gen;
                    self.outbox.push_back(Item::Assigned { shard: self.shard, gen, buckets });
                }
                Response::Group(GroupResp::Records { gen, records, .. }) => {
                    let shard = self.shard;
                    let events = to_records(records)?.into_iter().map(|record| GroupEvent { shard, gen, record });
                    self.outbox.extend(events.map(Item::Event));
                }
                _ => return Err(Error::Protocol("a push other than GroupAssigned or GroupRecords".into())),
            }
            return Ok(());
        }
        let Some(c) = self.pending.remove(&reply.req_id) else {
            reply.response()?;
            return Err(Error::Protocol(format!("a frame for request {} that none waits for", reply.req_id)));
        };
        let answer = match reply.response() {
            Ok(Response::Group(GroupResp::Committed { offset, .. })) => Ok(Answer::Committed { offset }),
            Ok(_) => Err(Error::Protocol("a commit answered with other than GroupCommitted".into())),
            Err(e) if e.code() == Some(ErrorCode::StaleGeneration) => Ok(Answer::Skipped),
            // Refused by a node that is moving (no longer the leader, shutting down, not
            // replicating): not committed, like a commit whose connection ended.
            Err(e) if !matches!(next_after(&e, self.shard), Next::Fatal) => return Ok(()),
            Err(e) => Err(e),
        };
        let _ = c.reply.send(answer);
        Ok(())
    }
}
