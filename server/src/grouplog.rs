//! A consumer group's stream in its shard's log (`$g/<group>/<shard>`): opening a group
//! folds the stream from its last `State` event; every event the group's state machine
//! returns is appended there, replicated and acknowledged like any append, before what it
//! decides is used; a coordinator task per group ends silent sessions and opens
//! generations (`group` is the pure state machine, `group::table` the shard's cells).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelog_client::codec::{ErrorCode, Expect};
use corelog_client::record;
use corelog_runtime::sync::Event as Wake;

use crate::group::table::{stream_name, GroupCell, DEFAULT_K};
use crate::group::{self, Event, Group, SNAPSHOT_EVERY};
use crate::shard::{AckForm, Answer, AppendReq, Outcome, Refused, Shard, Taken};
use crate::streamread::{self, Found};

/// Events read per step of the fold's walk back to the last `State`.
const FOLD_CHUNK: u64 = 2 * SNAPSHOT_EVERY as u64;
/// Steps of that walk before the stream is called damaged: `SNAPSHOT_EVERY` bounds the
/// events after a `State`.
const FOLD_STEPS: u32 = 4;

/// Milliseconds on this node's monotonic clock (sessions never leave the node).
pub fn now_ms() -> u64 {
    thread_local!(static START: Instant = Instant::now());
    START.with(|s| s.elapsed().as_millis() as u64)
}

/// The group's cell on this shard: the open one, or a new one folded from the group's
/// stream (after a start or a take-over: no session survives; members join again). A
/// join whose subscription differs from the group's is refused.
pub async fn open(shard: &Rc<Shard>, name: &str, prefix: &str, k: u8) -> Result<Rc<GroupCell>, Refused> {
    let bad = |m: String| Refused::Error(ErrorCode::BadRequest, m);
    let cell = match shard.groups().get(name) {
        Some(c) => c,
        None => {
            let folded = fold(shard, name).await.map_err(|e| Refused::Error(ErrorCode::Internal, e))?;
            let k = folded.as_ref().map_or(if k == 0 { DEFAULT_K } else { k as u16 }, |(k, _)| *k);
            let cfg = group::Config {
                shard: shard.id(),
                shard_count: shard.cfg().shard_count,
                k,
                session_ms: shard.cfg().groups.session_ms,
                settle_ms: shard.cfg().groups.settle_ms,
            };
            let mut g = Group::new(cfg);
            g.prefix = prefix.to_string();
            for e in folded.map(|(_, events)| events).unwrap_or_default() {
                if let Err(why) = g.apply(&e) {
                    log::error!("shard {}: group {name:?}: event not folded: {why}", shard.id());
                }
            }
            g.resume();
            // Another join may have opened it while this one read.
            if let Some(c) = shard.groups().get(name) {
                c
            } else {
                let c = Rc::new(GroupCell::new(name, g));
                if !shard.groups().insert(c.clone()) {
                    let msg = format!("shard {} serves {} groups already", shard.id(), group::table::MAX_GROUPS);
                    return Err(Refused::Error(ErrorCode::Overloaded, msg));
                }
                glommio::spawn_local(coordinate(shard.clone(), c.clone())).detach();
                c
            }
        }
    };
    let (have_prefix, have) = (cell.state.borrow().prefix.clone(), cell.state.borrow().k());
    if have_prefix != prefix {
        return Err(bad(format!("group {name:?} reads prefix {have_prefix:?}, not {prefix:?}")));
    }
    if k != 0 && k as u16 != have {
        return Err(bad(format!("group {name:?} has {have} buckets per shard, not {k}")));
    }
    Ok(cell)
}

/// The group's events from its last `State` on (None: the stream holds none), with the
/// group's k. Reads at most `FOLD_STEPS` chunks back from the stream's end.
async fn fold(shard: &Shard, name: &str) -> Result<Option<(u16, Vec<Event>)>, String> {
    let stream = stream_name(name, shard.id());
    let Some(loc) = shard.with_index(|t| t.streams.locate(&stream)) else { return Ok(None) };
    let end = shard.committed();
    let io = |e: std::io::Error| format!("reading {stream:?}: {e}");
    let end_version = match streamread::offsets(shard.log(), &loc, u64::MAX, end, 0).await.map_err(io)? {
        Found::Events { end_version, .. } => end_version,
        Found::Gone { .. } => return Ok(None),
    };
    let mut lo = end_version;
    let mut tail: Vec<Event> = Vec::new();
    for _ in 0..FOLD_STEPS {
        if lo == 0 {
            break;
        }
        let from = lo.saturating_sub(FOLD_CHUNK);
        let (from, offsets) = match streamread::offsets(shard.log(), &loc, from, end, (lo - from) as usize).await {
            Ok(Found::Events { offsets, .. }) => (from, offsets),
            Ok(Found::Gone { first }) if first < lo => {
                match streamread::offsets(shard.log(), &loc, first, end, (lo - first) as usize).await.map_err(io)? {
                    Found::Events { offsets, .. } => (first, offsets),
                    Found::Gone { .. } => return Ok(None),
                }
            }
            Ok(Found::Gone { .. }) => break,
            Err(e) => return Err(io(e)),
        };
        let mut chunk = read_events(shard, &offsets).await?;
        let state = chunk.iter().rposition(|e| matches!(e, Event::State { .. }));
        chunk.extend(tail);
        tail = chunk;
        if let Some(at) = state {
            let Event::State { k, .. } = &tail[at] else { unreachable!("rposition found a State") };
            let k = *k;
            return Ok(Some((k, tail.split_off(at))));
        }
        lo = from;
    }
    if tail.is_empty() {
        return Ok(None);
    }
    Err(format!("{stream:?}: no State event in its last {} events", tail.len()))
}

/// The group events at `offsets` (all of them, in order).
async fn read_events(shard: &Shard, offsets: &[u64]) -> Result<Vec<Event>, String> {
    let mut events = Vec::with_capacity(offsets.len());
    let mut at = 0;
    while at < offsets.len() {
        let (recs, count) = shard.log().read_offsets(&offsets[at..], 1 << 20).await.map_err(|e| e.to_string())?;
        assert!(
            count > 0 && count as usize <= offsets.len() - at,
            "{count} records read for {} offsets",
            offsets.len()
        );
        let mut p = 0;
        for _ in 0..count {
            let (r, n) = record::decode(&recs[p..]).map_err(|e| e.to_string())?;
            events.push(Event::decode(r.payload)?);
            p += n;
        }
        at += count as usize;
    }
    Ok(events)
}

/// The outcome of one internal append.
#[derive(Default)]
struct Once {
    outcome: RefCell<Option<Result<u64, String>>>,
    done: Wake,
}

impl Answer for Once {
    fn taken(&self) {}
    fn answer(&self, _req_id: u64, _shard: u16, outcome: Outcome<'_>) {
        let r = match outcome {
            Outcome::Appended { offset, .. } => Ok(offset),
            Outcome::Failed { code, msg } => Err(format!("{code:?}: {msg}")),
        };
        assert!(self.outcome.replace(Some(r)).is_none(), "an append answered twice");
        self.done.notify();
    }
}

/// An event staged in the log, its outcome to come.
pub struct Pending(Rc<Once>);

impl Pending {
    /// The event's offset once durable on every replica; an error breaks the group.
    pub async fn durable(self, cell: &GroupCell) -> Result<u64, String> {
        while self.0.outcome.borrow().is_none() {
            self.0.done.wait().await;
        }
        let r = self.0.outcome.borrow_mut().take().expect("checked above");
        if r.is_err() {
            cell.break_off();
        }
        r
    }
}

/// Stages `event` in the group's stream. The caller holds `cell.writing` (events reach
/// the log in the order they were applied) and applied the event already: a refusal
/// breaks the group, whose memory is now ahead of its log.
pub async fn stage(shard: &Shard, cell: &GroupCell, event: &Event) -> Result<Pending, String> {
    let stream = stream_name(&cell.name, shard.id());
    let once = Rc::new(Once::default());
    let answer: Rc<dyn Answer> = once.clone();
    let req = AppendReq { producer: None, stream: Some((&stream, Expect::Any)) };
    let form = AckForm::V2 { duplicate: false, version: None };
    match shard.append(req, form, &event.encode(), &answer, 0).await {
        Ok(Taken::Staged) => Ok(Pending(once)),
        Ok(Taken::Duplicate) => unreachable!("a group event carries no producer"),
        Err(r) => {
            cell.break_off();
            Err(match r {
                Refused::Error(code, msg) => format!("{code:?}: {msg}"),
                other => format!("{other:?}"),
            })
        }
    }
}

/// A member's commit: applied, staged (with a snapshot every `SNAPSHOT_EVERY`), durable.
/// `Ok(Err(_))`: refused by the group (nothing written); `Err(_)`: the log refused or
/// failed, and the group broke.
pub async fn commit(
    shard: &Shard,
    cell: &GroupCell,
    member: &str,
    gen: u64,
    next: u64,
) -> Result<Result<u64, group::Refusal>, String> {
    let permit = cell.writing.acquire_permit(1).await.map_err(|e| e.to_string())?;
    let event = match cell.state.borrow_mut().commit(member, gen, next, now_ms()) {
        Ok(e) => e,
        Err(r) => return Ok(Err(r)),
    };
    let pending = stage(shard, cell, &event).await?;
    let snapshot = {
        let mut g = cell.state.borrow_mut();
        (g.commits_since_state() >= SNAPSHOT_EVERY).then(|| g.snapshot())
    };
    let snap = match snapshot {
        Some(s) => Some(stage(shard, cell, &s).await?),
        None => None,
    };
    drop(permit);
    let offset = pending.durable(cell).await?;
    if let Some(s) = snap {
        cell.state_written(s.durable(cell).await?);
    }
    Ok(Ok(offset))
}

/// The group's coordinator on this shard: ends silent sessions and opens generations
/// (each durable before it is announced), until the group breaks.
async fn coordinate(shard: Rc<Shard>, cell: Rc<GroupCell>) {
    while !cell.broken.get() {
        publish(&shard, &cell);
        if let Err(e) = keep_state(&shard, &cell).await {
            log::warn!("shard {}: group {:?}: its state could not be written again: {e}", shard.id(), cell.name);
        }
        // At least every `LAG_EVERY`, so that the lag gauges follow the log.
        let due = cell.state.borrow().next_deadline().unwrap_or(u64::MAX).min(now_ms() + LAG_EVERY);
        let wait = Duration::from_millis(due.saturating_sub(now_ms()));
        if !wait.is_zero() {
            futures_lite::future::or(glommio::timer::sleep(wait), cell.changed.wait()).await;
        }
        if let Err(e) = tick(&shard, &cell).await {
            log::warn!("shard {}: group {:?} stops until a member joins again: {e}", shard.id(), cell.name);
        }
    }
}

/// Writes the group's whole state again once the last `State` lies below the log's last
/// segment (see `GroupCell::state_at`).
async fn keep_state(shard: &Shard, cell: &GroupCell) -> Result<(), String> {
    if cell.state_at.get() >= shard.log().last_segment_first() || cell.state.borrow().gen() == 0 {
        return Ok(());
    }
    let permit = cell.writing.acquire_permit(1).await.map_err(|e| e.to_string())?;
    let snapshot = cell.state.borrow_mut().snapshot();
    let pending = stage(shard, cell, &snapshot).await?;
    drop(permit);
    cell.state_written(pending.durable(cell).await?);
    Ok(())
}

/// How often a group's lag is published at most.
const LAG_EVERY: u64 = 1_000;

fn publish(shard: &Shard, cell: &GroupCell) {
    let g = cell.state.borrow();
    let end = shard.committed();
    let lag = end - g.low_water().unwrap_or(shard.log().first_offset()).min(end);
    crate::metrics::group_lag(&cell.name, shard.id(), lag, g.members().count());
}

async fn tick(shard: &Shard, cell: &GroupCell) -> Result<(), String> {
    let permit = cell.writing.acquire_permit(1).await.map_err(|e| e.to_string())?;
    let Some(event) = cell.state.borrow_mut().tick(now_ms()) else { return Ok(()) };
    let Event::State { gen, .. } = event else { unreachable!("tick opens generations only") };
    let pending = stage(shard, cell, &event).await?;
    drop(permit);
    cell.state_written(pending.durable(cell).await?);
    if cell.durable_gen.get() < gen {
        cell.durable_gen.set(gen);
    }
    cell.changed.notify();
    Ok(())
}
