//! A consumer group member's connection: after `GroupJoin` the server pushes the
//! member's assignments and the records of its buckets; the member sends commits and
//! heartbeats. Closing the connection leaves the group (docs/protocol.md §11).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

use corelog_client::codec::{
    decode_frame_max, ErrorCode, GroupReq, GroupResp, Request, Response, GROUPS_VERSION, MAX_REQUEST_FRAME, NO_COMMIT,
};
use corelog_client::record::RecordRef;

use super::super::outbox::Outbox;
use super::push::{select, Filter, TAIL_CHUNK};
use super::{answer_later, Fail};
use crate::group::table::GroupCell;
use crate::group::{bucket_of, Bucket, Refusal};
use crate::grouplog::{self, now_ms};
use crate::shard::{Refused, Shard};
use corelog_runtime::tls_io;

/// A member's key in its group: its id, this process's start (nanoseconds since the
/// epoch) and a number counted on this executor. A member that reconnects before its old
/// connection is seen closed holds two sessions, and the old one leaving takes nothing
/// from the new one; and a session after a restart or a take-over never carries the key
/// of an owner in the generation folded from the log (it would be handed that owner's
/// buckets under that old generation, fenced by nothing).
fn session_key(member: &str) -> String {
    thread_local!(static NEXT: Cell<u64> = const { Cell::new(0) });
    static BOOT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let boot = BOOT.get_or_init(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        t.as_nanos() as u64
    });
    let n = NEXT.with(|n| {
        n.set(n.get() + 1);
        n.get()
    });
    // Room for the suffix (at most 1 + 16 + 1 + 20 bytes) within `MAX_MEMBER_ID`, cut on a
    // character boundary.
    let cut = (0..=member.len().min(88)).rev().find(|&i| member.is_char_boundary(i)).unwrap_or(0);
    let key = format!("{}#{boot:x}.{n}", &member[..cut]);
    debug_assert!(key.len() <= crate::group::MAX_MEMBER_ID, "a member key of {} bytes", key.len());
    key
}

/// What a join asks for.
pub(super) struct Join {
    pub(super) group: String,
    pub(super) member: String,
    pub(super) prefix: String,
    pub(super) k: u8,
}

impl Join {
    /// The join a connection's first group request must be.
    pub(super) fn of(g: GroupReq<'_>, req_id: u64) -> Result<Join, Fail> {
        match g {
            GroupReq::Join { group, member, prefix, k } => {
                Ok(Join { group: group.into(), member: member.into(), prefix: prefix.into(), k })
            }
            _ => {
                let msg = "GroupCommit and GroupHeartbeat follow a GroupJoin on the same connection".into();
                Err((ErrorCode::Unexpected, msg, req_id))
            }
        }
    }
}

/// Serves a member from its join to the end of its connection.
pub(super) async fn member(
    shard: &Rc<Shard>,
    rd: &mut tls_io::Reader,
    out: &Rc<Outbox>,
    at: (u64, u16),
    j: Join,
) -> Result<(), Fail> {
    let req_id = at.0;
    if at.1 < GROUPS_VERSION {
        let msg = format!("consumer groups need protocol version {GROUPS_VERSION}; this connection said {}", at.1);
        return Err((ErrorCode::BadVersion, msg, req_id));
    }
    let refuse = |m: String| Refused::Error(ErrorCode::BadRequest, m);
    let checked = if j.group.is_empty() || j.member.is_empty() {
        Err(refuse("a group name and a member id must not be empty".into()))
    } else if j.prefix.starts_with('$') {
        Err(refuse(format!("prefix {:?}: names starting with '$' are reserved", j.prefix)))
    } else if j.k > crate::group::MAX_K as u8 {
        Err(refuse(format!("k {} above {}", j.k, crate::group::MAX_K)))
    } else if let Some(r) = shard.refuse() {
        Err(Refused::Error(r.0, r.1))
    } else {
        grouplog::open(shard, &j.group, &j.prefix, j.k).await
    };
    let cell = match checked {
        Ok(c) => c,
        Err(r) => {
            answer_later(shard, out, at, r).await;
            return Ok(());
        }
    };
    let key = session_key(&j.member);
    let joined = cell.state.borrow_mut().join(&key, now_ms());
    if let Err(r) = joined {
        let code = if r == Refusal::Full { ErrorCode::Overloaded } else { ErrorCode::BadRequest };
        answer_later(shard, out, at, Refused::Error(code, format!("join refused: {r:?}"))).await;
        return Ok(());
    }
    cell.changed.notify();
    let stop = Rc::new(Cell::new(false));
    let ended = Rc::new(corelog_runtime::sync::Event::default());
    let task = {
        let (shard, out, cell, key, stop, ended) =
            (shard.clone(), out.clone(), cell.clone(), key.clone(), stop.clone(), ended.clone());
        glommio::spawn_local(async move {
            let r = deliver(&shard, &out, &cell, &key, req_id, &stop).await;
            stop.set(true);
            ended.notify();
            r
        })
    };
    let requests = requests(shard, rd, out, &cell, &key);
    let by_itself = async {
        while !stop.get() {
            ended.wait().await;
        }
        Ok(())
    };
    let r = futures_lite::future::or(requests, by_itself).await;
    stop.set(true);
    cell.changed.notify();
    out.nudge();
    shard.nudge();
    let delivered = task.await;
    cell.state.borrow_mut().leave(&key, now_ms());
    cell.changed.notify();
    match (r, delivered) {
        (Err(e), _) => Err(e),
        (Ok(()), Err((code, msg))) => Err((code, msg, req_id)),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// The member's requests: commits (answered in order) and heartbeats; anything else
/// ends the connection. Ok when the client closed it.
async fn requests(
    shard: &Shard,
    rd: &mut tls_io::Reader,
    out: &Outbox,
    cell: &GroupCell,
    key: &str,
) -> Result<(), Fail> {
    loop {
        while let Some((frame, used)) =
            decode_frame_max(rd.data(), MAX_REQUEST_FRAME).map_err(|e| (e.code(), e.to_string(), 0))?
        {
            let req_id = frame.req_id;
            match Request::parse(&frame).map_err(|e| (e.code(), e.to_string(), req_id))? {
                Request::Group(GroupReq::Heartbeat { gen }) => {
                    // A stale generation is told by the next `GroupAssigned`.
                    let _ = cell.state.borrow_mut().heartbeat(key, gen, now_ms());
                }
                Request::Group(GroupReq::Commit { gen, next }) => {
                    commit(shard, out, cell, key, req_id, (gen, next)).await?
                }
                _ => {
                    let msg = "a group member's connection carries only GroupCommit and GroupHeartbeat".into();
                    return Err((ErrorCode::Unexpected, msg, req_id));
                }
            }
            rd.consume(used);
        }
        if !rd.fill().await.unwrap_or(false) {
            return Ok(());
        }
    }
}

async fn commit(
    shard: &Shard,
    out: &Outbox,
    cell: &GroupCell,
    key: &str,
    req_id: u64,
    c: (u64, u64),
) -> Result<(), Fail> {
    let (gen, next) = c;
    match grouplog::commit(shard, cell, key, gen, next).await {
        Ok(Ok(offset)) => {
            shard.metrics().group_commits.increment(1);
            out.push(|b| Response::Group(GroupResp::Committed { gen, next, offset }).encode(req_id, b));
            Ok(())
        }
        Ok(Err(r)) => {
            let current = cell.state.borrow().gen();
            let msg = format!("commit of generation {gen} refused ({r:?}); the group is at generation {current}");
            out.push_error(req_id, ErrorCode::StaleGeneration, &msg);
            Ok(())
        }
        Err(e) => Err((ErrorCode::OutcomeUnknown, format!("the commit's outcome is unknown: {e}"), req_id)),
    }
}

/// Pushes the member's assignments and the records of its buckets, each generation from
/// its buckets' committed positions, until `stop`, the member's session ends or the
/// group breaks (an error: the member joins again).
async fn deliver(
    shard: &Shard,
    out: &Outbox,
    cell: &GroupCell,
    key: &str,
    req_id: u64,
    stop: &Cell<bool>,
) -> Result<(), (ErrorCode, String)> {
    let mut sent = 0;
    loop {
        let changed = cell.changed.wait();
        if stop.get() || out.closed() {
            return Ok(());
        }
        if cell.broken.get() {
            return Err((ErrorCode::StaleGeneration, "the group's state is reloading: join again".into()));
        }
        let (gen, assigned, pending) = {
            let g = cell.state.borrow();
            if !g.is_member(key) {
                return Err((ErrorCode::StaleGeneration, "the member's session ended: join again".into()));
            }
            (g.gen(), g.assigned(key), g.rebalancing())
        };
        // A member that joined after this generation opened waits for the next one.
        if gen == sent || gen != cell.durable_gen.get() || (assigned.is_empty() && pending) {
            changed.await;
            continue;
        }
        drop(changed);
        sent = gen;
        let (shard_count, k) = (shard.cfg().shard_count, cell.state.borrow().k());
        let buckets: Vec<(u16, u64)> = assigned.iter().map(|&(b, n)| (b, n.unwrap_or(NO_COMMIT))).collect();
        let a = Response::Group(GroupResp::Assigned { gen, shard_count, k: k as u8, buckets });
        out.push(|b| a.encode(req_id, b));
        shard.metrics().group_rebalances.increment(1);
        let starts: BTreeMap<Bucket, u64> = assigned.iter().map(|&(b, n)| (b, n.unwrap_or(0))).collect();
        push_gen(shard, out, cell, (key, gen, req_id), &starts, stop).await?;
    }
}

/// The records of one generation: from the lowest start of the member's buckets, those
/// of its buckets at or above each bucket's start, until the generation changes.
async fn push_gen(
    shard: &Shard,
    out: &Outbox,
    cell: &GroupCell,
    who: (&str, u64, u64),
    starts: &BTreeMap<Bucket, u64>,
    stop: &Cell<bool>,
) -> Result<(), (ErrorCode, String)> {
    let (key, gen, req_id) = who;
    let Some(mut at) = starts.values().copied().min() else { return Ok(()) };
    let (n, k) = (shard.cfg().shard_count, cell.state.borrow().k());
    let filter = Filter::Prefix(cell.state.borrow().prefix.clone());
    loop {
        let (changed, more) = (cell.changed.wait(), shard.changed());
        let moved = cell.state.borrow().gen() != gen || !cell.state.borrow().is_member(key);
        if stop.get() || out.closed() || cell.broken.get() || moved {
            return Ok(());
        }
        let first = shard.log().first_offset();
        if at < first {
            // Retention deleted records this group had not committed: they are lost to it.
            log::warn!("shard {}: group {:?} skips offsets {at}..{first}, deleted by retention", shard.id(), cell.name);
            at = first;
        }
        if out.full() {
            drop((changed, more));
            out.drained().await;
            continue;
        }
        let end = shard.committed();
        if at >= end {
            futures_lite::future::or(changed, more).await;
            continue;
        }
        let (recs, count) =
            shard.log().read(at, end, TAIL_CHUNK).await.map_err(|e| (ErrorCode::Internal, e.to_string()))?;
        if count == 0 {
            continue;
        }
        at += count as u64;
        assert!(at <= end, "a group push sends only committed records");
        // The group's streams (never reserved ones: a group's prefix cannot name them), in
        // the member's buckets, from each bucket's start.
        let keep = |r: &RecordRef<'_>| {
            filter.keeps(r)
                && r.stream.is_some_and(|s| {
                    starts.get(&bucket_of(s.name.as_bytes(), n, k)).is_some_and(|&from| r.offset >= from)
                })
        };
        let (kept, count) = select(&recs, count, keep);
        if count > 0 {
            shard.metrics().group_delivered.increment(count as u64);
            let r = Response::Group(GroupResp::Records { gen, next_offset: at, count, records: &kept });
            out.push(|b| r.encode(req_id, b));
        }
    }
}
