//! Push streams: a `Tail` of the shard or a `Subscribe` to a stream or a prefix turns
//! the connection into a stream of `Records` frames, committed records as they become
//! durable, until the client closes it (or retention or the policy ends it).

use std::cell::Cell;
use std::rc::Rc;

use corelog_client::codec::{ErrorCode, Response, StreamReq};

use super::super::outbox::Outbox;
use super::reads::stream_offsets;
use super::{check_stream, push_out_of_range, resource, Fail};
use crate::access::Access;
use crate::authz::Op;
use crate::shard::{Refused, Shard};
use crate::streamread::Found;
use corelog_runtime::tls_io;

/// How often a running `Tail` or `Subscribe` is checked against the policy.
pub(super) const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Bytes per `Records` push on a tail.
pub(super) const TAIL_CHUNK: usize = 256 * 1024;

/// `Subscribe`: where the push stream starts and what it keeps. None: it ended before
/// it began (`OutOfRange` answered); a refusal ends the connection (nothing may follow).
pub(super) async fn subscribe(
    shard: &Shard,
    out: &Outbox,
    at: (u64, u16),
    stream: bool,
    name: &[u8],
    from: u64,
) -> Result<Option<(u64, Filter)>, Fail> {
    let (req_id, version) = at;
    match subscription(shard, stream, name, from).await {
        Ok(f) => Ok(Some(f)),
        Err(Refused::Error(code, msg)) => Err((code, msg, req_id)),
        Err(Refused::WrongVersion { msg, .. }) => Err((ErrorCode::BadRequest, msg, req_id)),
        Err(Refused::OutOfRange { first, what }) => {
            push_out_of_range(out, version, req_id, first, &what);
            Ok(None)
        }
    }
}

/// The start offset and filter of a `Subscribe`. Only a leader serves subscriptions: a
/// follower's log may be cut below what it has pushed (the handshake's truncation).
pub(super) async fn subscription(
    shard: &Shard,
    stream: bool,
    name: &[u8],
    from: u64,
) -> Result<(u64, Filter), Refused> {
    if let Some((code, msg)) = shard.refuse() {
        return Err(Refused::Error(code, msg));
    }
    if !stream {
        let prefix = std::str::from_utf8(name)
            .map_err(|e| Refused::Error(ErrorCode::BadRequest, format!("prefix is not UTF-8 ({e})")))?;
        let first = shard.log().first_offset();
        if from < first {
            return Err(Refused::OutOfRange { first, what: format!("offset {from}") });
        }
        return Ok((from, Filter::Prefix(prefix.to_string())));
    }
    let (name, _) = check_stream(shard, StreamReq { name, expect_kind: 0, expected: 0 })?;
    // From the committed event with version `from`, or — if there is none yet — from
    // the committed end: offsets below it are never handed out again, so every later
    // event of the stream is there or above (staged offsets may be, and are not used).
    let committed = shard.committed();
    let start = match stream_offsets(shard, name, from, committed, 1).await {
        Ok(Found::Events { offsets, .. }) => offsets.first().copied(),
        Ok(Found::Gone { first }) => {
            return Err(Refused::OutOfRange { first, what: format!("version {from} of stream {name:?}") })
        }
        Err(e) => return Err(Refused::Error(ErrorCode::Internal, format!("stream index: {e}"))),
    };
    let start = start.unwrap_or(committed);
    // The offsets were looked up below the committed end: a subscription never starts
    // past what a reader may see.
    assert!(start <= committed, "a subscription starts at {start}, past the committed end {committed}");
    Ok((start, Filter::Stream { name: name.to_string(), from_version: from }))
}

/// A push stream: from which offset, which records, answering which request.
pub(super) struct Push {
    pub(super) req_id: u64,
    pub(super) version: u16,
    pub(super) from: u64,
    pub(super) filter: Option<Filter>,
}

/// Turns the connection into a push stream (`Tail`, `Subscribe`) until the client closes
/// it; any byte it sends ends the stream with `Unexpected`.
pub(super) async fn push_until_closed(
    shard: &Rc<Shard>,
    rd: &mut tls_io::Reader,
    out: &Rc<Outbox>,
    p: Push,
    access: &mut Option<Box<Access>>,
) -> Result<(), Fail> {
    let req_id = p.req_id;
    if !rd.data().is_empty() {
        return Err((ErrorCode::Unexpected, "no request may follow Tail or Subscribe".into(), req_id));
    }
    // What the push reads, for the policy: the shard (None), one stream, or a prefix.
    let reads = match &p.filter {
        None => None,
        Some(Filter::Stream { name, .. }) => Some((false, name.clone())),
        Some(Filter::Prefix(prefix)) => Some((true, prefix.clone())),
    };
    let stop = Rc::new(Cell::new(false));
    let ended = Rc::new(corelog_runtime::sync::Event::default());
    let done = Rc::new(Cell::new(false));
    let t = {
        let (shard, out, stop, ended, done) = (shard.clone(), out.clone(), stop.clone(), ended.clone(), done.clone());
        glommio::spawn_local(async move {
            tail(shard, out, p, stop).await;
            done.set(true);
            ended.notify();
        })
    };
    // Anything after a Tail is a protocol error; a close ends the tail; so does the push
    // stream ending by itself (`OutOfRange`, a read error): the connection then closes.
    let client = async {
        match rd.fill().await {
            Ok(true) => Err((ErrorCode::Unexpected, "no request may follow Tail or Subscribe".into(), req_id)),
            _ => Ok(()),
        }
    };
    let by_itself = async {
        while !done.get() {
            ended.wait().await;
        }
        Ok(())
    };
    // Under a policy, a push the policy no longer allows ends with `Forbidden` within
    // `RECHECK` of the change (a check between changes is one atomic load).
    let revoked = async {
        let (Some(authz), Some(access)) = (&shard.cfg().authz, access.as_mut()) else {
            return std::future::pending().await;
        };
        loop {
            glommio::timer::sleep(RECHECK).await;
            if let Err(msg) = access.check(authz, Op::Read, resource(&reads)) {
                return Err((ErrorCode::Forbidden, msg, req_id));
            }
        }
    };
    let r = futures_lite::future::or(futures_lite::future::or(client, by_itself), revoked).await;
    // Stop the push stream first, so that the error (sent by the caller) is the last
    // frame of the connection.
    stop.set(true);
    shard.nudge();
    out.nudge();
    t.await;
    assert!(done.get(), "a push stream's task ended without saying so");
    r
}

/// Which records a subscription pushes.
pub(super) enum Filter {
    /// Events of one stream from a version on.
    Stream { name: String, from_version: u64 },
    /// Events of every stream whose name starts with this.
    Prefix(String),
}

impl Filter {
    pub(super) fn keeps(&self, r: &corelog_client::record::RecordRef<'_>) -> bool {
        match (self, r.stream) {
            (_, None) => false,
            (Filter::Stream { name, from_version }, Some(s)) => s.name == name && s.version >= *from_version,
            // Reserved names (the server's own streams) only for a prefix that names them.
            (Filter::Prefix(p), Some(s)) => {
                s.name.starts_with(p.as_str()) && (p.starts_with('$') || !s.name.starts_with('$'))
            }
        }
    }
}

/// The records of `recs` that `filter` keeps (all with none), and how many.
pub(super) fn filtered<'a>(recs: &'a [u8], count: u32, filter: Option<&Filter>) -> (std::borrow::Cow<'a, [u8]>, u32) {
    let Some(f) = filter else { return (recs.into(), count) };
    let (kept, n) = select(recs, count, |r| f.keeps(r));
    (kept.into(), n)
}

/// The `count` records of `recs` that `keep` keeps, and how many.
pub(super) fn select(
    recs: &[u8],
    count: u32,
    keep: impl Fn(&corelog_client::record::RecordRef<'_>) -> bool,
) -> (Vec<u8>, u32) {
    let (mut kept, mut n, mut p) = (Vec::new(), 0, 0);
    // Verified by the log's read: a decoding error cannot happen here.
    while let Ok((r, len)) = corelog_client::record::decode(&recs[p..]) {
        if keep(&r) {
            kept.extend_from_slice(&recs[p..p + len]);
            n += 1;
        }
        p += len;
    }
    debug_assert_eq!(p, recs.len(), "records verified by the log's read decode to their end");
    assert!(n <= count, "a filter kept {n} of {count} records");
    (kept, n)
}

/// Pushes committed records from `from` as they become durable (only those `filter`
/// keeps), until the connection closes. Bounded by `MAX_OUT_BYTES` of unsent responses.
/// Ends with `OutOfRange` if retention deletes what it has yet to push (a slow reader).
pub(super) async fn tail(shard: Rc<Shard>, out: Rc<Outbox>, p: Push, stop: Rc<Cell<bool>>) {
    let Push { req_id, version, from: mut at, filter } = p;
    while !out.closed() && !stop.get() {
        let first = shard.log().first_offset();
        if at < first {
            push_out_of_range(&out, version, req_id, first, &format!("offset {at}"));
            return;
        }
        if out.full() {
            out.drained().await;
            continue;
        }
        let end = shard.committed();
        if at >= end {
            shard.changed().await;
            continue;
        }
        match shard.log().read(at, end, TAIL_CHUNK).await {
            Ok((recs, count)) if count > 0 => {
                debug_assert!(at >= first, "a push stream reads at {at}, below the log's start {first}");
                at += count as u64;
                assert!(at <= end, "a push stream sends only committed records");
                let (recs, count) = filtered(&recs, count, filter.as_ref());
                if count > 0 {
                    let r = Response::Records { shard: shard.id(), next_offset: at, count, records: &recs };
                    out.push(|b| r.encode(req_id, b));
                }
            }
            Ok(_) => shard.changed().await,
            Err(e) => {
                out.push_error(req_id, ErrorCode::Internal, &e.to_string());
                return;
            }
        }
    }
}
