//! One client connection: decode requests, hand appends to the shard, answer in order.
//!
//! Ordering: appends of one connection go to one shard and are acknowledged in offset
//! order, so their answers leave in request order. A `Read` waits until the
//! connection's earlier appends are answered (a barrier) so its answer cannot overtake
//! them. A `Tail` turns the connection into a push stream: nothing may follow it.
//! Any malformed frame gets an `Error` frame and the connection is closed.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use corelog_client::codec::{
    self, decode_frame_max, ErrorCode, Hint, LeaderState, Leadership, Request, Response, Role, StreamReq,
    LEADERSHIP_VERSION, MAX_REQUEST_FRAME, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use corelog_client::record::{self, check_stream_name};
use glommio::net::TcpStream;

use super::outbox::Outbox;
use super::tls_io;
use crate::access::Access;
use crate::authz::{Op, Resource};
use crate::shard::{AckForm, Answer, AppendReq, Refused, Shard, Taken};
use crate::streamread::Found;
use crate::sync::deadline;

/// How often a running `Tail` or `Subscribe` is checked against the policy.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(1);
/// Appends one connection may have unanswered before we stop reading from it.
pub const MAX_INFLIGHT_PER_CONN: u32 = 1024;
/// Bytes per `Records` push on a tail.
const TAIL_CHUNK: usize = 256 * 1024;

/// Serves one client connection to its end.
///
/// Memory: this future lives as long as the connection (36,000 of them per process), and
/// an async fn's state is as large as its largest await plus its arguments, which are
/// never overlapped. So the TLS session comes boxed (1,168 bytes inline, twice: here and
/// in the spawning task), and the handshake runs boxed (≈ 4 KiB of state, held only for
/// the handshake's duration, not for the connection's life). Likewise every request but
/// an append awaits a boxed future (reads, stream reads, tails, subscriptions, trims,
/// a duplicate's answer): inline, the largest of them set every connection's size
/// (2,704 B for this future against 1,464 B boxed), for an allocation per such request.
/// `benches/ab.sh` with `BIG=1` measures the leader's RSS per connection (mem36k).
pub async fn serve(shard: Rc<Shard>, sock: TcpStream, tls: Option<Box<rustls::Connection>>) {
    let _ = sock.set_nodelay(true);
    // The TLS handshake and the first frame (`Hello`) must arrive by then: a silent or
    // half-open connection cannot hold a socket and its buffers for ever.
    let hello_by = Instant::now() + shard.cfg().handshake_timeout;
    let peer = shard.cfg().authz.as_ref().and_then(|_| sock.peer_addr().ok());
    let mut principal = None;
    let seen = |der: &[u8]| {
        if let Some(a) = &shard.cfg().authz {
            principal = a.mapping.principal(der);
        }
    };
    let handshake = Box::pin(tls_io::establish_seen(sock, tls.map(|c| *c), "client", seen));
    let (mut rd, wr) = match deadline(hello_by, handshake).await {
        Some(Ok(x)) => x,
        Some(Err(_)) => {
            shard.metrics().tls_failures.increment(1);
            return;
        }
        None => {
            shard.metrics().handshake_timeouts.increment(1);
            return;
        }
    };
    shard.metrics().connections.increment(1.0);
    shard.conn_opened();
    let out = Rc::new(Outbox::default());
    let writer = {
        let out = out.clone();
        glommio::spawn_local(async move { out.write_loop(wr).await })
    };
    // A graceful shutdown stops reading once every append taken is answered, and so does
    // a take-over in place for a connection greeted as a follower's; what is buffered is
    // still sent and the session closed (below).
    let greeted = Cell::new(None);
    let closing = async {
        shard.closing(&greeted).await;
        Ok(())
    };
    let mut access = shard.cfg().authz.as_ref().map(|_| Box::new(Access::new(principal, peer)));
    let conn = Conn { hello_by, greeted: &greeted, access: &mut access };
    let result = futures_lite::future::or(read_loop(&shard, &mut rd, &out, conn), closing).await;
    match result {
        Err((code, msg, req_id)) => out.push_error(req_id, code, &msg),
        // The client closed its sending side: what it sent is still answered (every
        // append gets its answer or an error by the ack deadline) unless it is gone.
        Ok(()) => out.answered().await,
    }
    out.close();
    writer.await;
    shard.metrics().connections.decrement(1.0);
    shard.conn_closed();
}

type Fail = (ErrorCode, String, u64);

/// What `read_loop` knows of its connection besides the shard and the streams.
struct Conn<'a> {
    hello_by: Instant,
    greeted: &'a Cell<Option<Role>>,
    /// The principal and its rights, when a policy is in force (boxed: most nodes run
    /// without one, and every connection's future would carry it inline).
    access: &'a mut Option<Box<Access>>,
}

/// Ok when the connection may make `req` (always without a policy); else the `Forbidden`
/// refusal. A stream name that is not UTF-8 is checked in its lossy form (the request is
/// refused for that name anyway).
fn permit(shard: &Shard, access: &mut Option<Box<Access>>, req: &Request<'_>) -> Result<(), Refused> {
    let (Some(authz), Some(access)) = (&shard.cfg().authz, access.as_mut()) else { return Ok(()) };
    let named = |prefix: bool, n| Some((prefix, String::from_utf8_lossy(n)));
    let (op, names) = match req {
        Request::Hello { .. } => return Ok(()),
        Request::Append { .. } | Request::Append2 { stream: None, .. } => (Op::Append, None),
        Request::Append2 { stream: Some(s), .. } => (Op::Append, named(false, s.name)),
        Request::ReadStream { name, .. } => (Op::Read, named(false, name)),
        Request::Subscribe { stream, name, .. } => (Op::Read, named(!stream, name)),
        Request::Read { .. } | Request::Tail { .. } | Request::IndexSnapshot { .. } => (Op::Read, None),
        Request::Trim { .. } => (Op::Admin, None),
    };
    access.check(authz, op, resource(&names)).map_err(|msg| Refused::Error(ErrorCode::Forbidden, msg))
}

/// The resource a request names: the shard (None), a stream, or a prefix (`(true, _)`).
fn resource<S: AsRef<str>>(names: &Option<(bool, S)>) -> Resource<'_> {
    match names {
        None => Resource::Shard,
        Some((true, prefix)) => Resource::Prefix(prefix.as_ref()),
        Some((false, name)) => Resource::Stream(name.as_ref()),
    }
}

/// Decodes and serves requests in order until the client closes, a request ends the
/// connection (an error, a push stream's end), or the shard closes it.
async fn read_loop(shard: &Rc<Shard>, rd: &mut tls_io::Reader, out: &Rc<Outbox>, conn: Conn<'_>) -> Result<(), Fail> {
    let Conn { hello_by, greeted, access } = conn;
    let mut version = None; // the protocol version of the connection's Hello
    loop {
        // Decode every whole frame in the buffer.
        while let Some((frame, used)) =
            decode_frame_max(rd.data(), MAX_REQUEST_FRAME).map_err(|e| (e.code(), e.to_string(), 0))?
        {
            let req_id = frame.req_id;
            let req = Request::parse(&frame).map_err(|e| (e.code(), e.to_string(), req_id))?;
            let v = match (version, &req) {
                (_, Request::Hello { version: v }) => *v,
                (Some(v), _) => v,
                (None, _) => return Err((ErrorCode::BadHandshake, "first frame must be Hello".into(), req_id)),
            };
            if shard.greeted_other(greeted.get()) {
                // Greeted as a follower's, and the shard took over since: this request is
                // not served (nothing written); the connection closes like a restarted
                // follower's would, and the client reconnects to the leader.
                return Ok(());
            }
            if let Err(refused) = permit(shard, access, &req) {
                // Answered in order, and the connection stays: nothing was done. A client
                // that sends denied requests and reads nothing holds a bounded buffer.
                out.room().await;
                answer_later(shard, out, (req_id, v), refused).await;
                rd.consume(used);
                continue;
            }
            let at = (req_id, v);
            match req {
                Request::Hello { version: v } => {
                    hello(shard, out, greeted, req_id, v)?;
                    version = Some(v);
                }
                Request::Append { payload } => append(shard, out, at, AppendReq::default(), AckForm::V1, payload).await,
                Request::Append2 { producer, stream, payload } => {
                    need_v2(v, "Append2", req_id)?;
                    let form = AckForm::V2 { duplicate: false, version: None };
                    match stream.map(|s| check_stream(shard, s)).transpose() {
                        Ok(stream) => append(shard, out, at, AppendReq { producer, stream }, form, payload).await,
                        Err(e) => answer_later(shard, out, at, e).await,
                    }
                }
                Request::ReadStream { name, from_version, max_count, max_bytes } => {
                    need_v2(v, "ReadStream", req_id)?;
                    match check_stream(shard, StreamReq { name, expect_kind: 0, expected: 0 }) {
                        Ok((name, _)) => {
                            let q = StreamRead { req_id, version: v, from: from_version, max_count, max_bytes };
                            Box::pin(read_stream(shard, out, name, q)).await?
                        }
                        Err(e) => answer_later(shard, out, at, e).await,
                    }
                }
                Request::Read { shard: s, from, max_bytes } => {
                    check_shard(shard, s, req_id)?;
                    Box::pin(read(shard, out, at, from, max_bytes)).await?
                }
                Request::Trim { shard: s, before } => {
                    need_v2(v, "Trim", req_id)?;
                    check_shard(shard, s, req_id)?;
                    Box::pin(trim(shard, out, req_id, before)).await
                }
                Request::IndexSnapshot { shard: s, at: snap_at } => {
                    need_v2(v, "IndexSnapshot", req_id)?;
                    check_shard(shard, s, req_id)?;
                    Box::pin(index_snapshot(shard, out, req_id, snap_at)).await
                }
                Request::Tail { shard: s, from } => {
                    check_shard(shard, s, req_id)?;
                    rd.consume(used);
                    let push = Push { req_id, version: v, from, filter: None };
                    return Box::pin(push_until_closed(shard, rd, out, push, access)).await;
                }
                Request::Subscribe { stream, name, from } => {
                    need_v2(v, "Subscribe", req_id)?;
                    let Some((from, filter)) = Box::pin(subscribe(shard, out, at, stream, name, from)).await? else {
                        return Ok(());
                    };
                    rd.consume(used);
                    let push = Push { req_id, version: v, from, filter: Some(filter) };
                    return Box::pin(push_until_closed(shard, rd, out, push, access)).await;
                }
            }
            rd.consume(used);
        }
        if !fill(shard, rd, version.is_some(), hello_by).await? {
            return Ok(());
        }
    }
}

/// Reads more of the request stream; false when the client closed it (or it broke).
/// Before the `Hello` it must come by `hello_by`.
async fn fill(shard: &Shard, rd: &mut tls_io::Reader, said_hello: bool, hello_by: Instant) -> Result<bool, Fail> {
    let filled = if said_hello {
        rd.fill().await
    } else {
        match deadline(hello_by, rd.fill()).await {
            Some(r) => r,
            None => {
                shard.metrics().handshake_timeouts.increment(1);
                let msg = format!("no Hello within {:?} of connecting", shard.cfg().handshake_timeout);
                return Err((ErrorCode::BadHandshake, msg, 0));
            }
        }
    };
    Ok(filled.unwrap_or(false))
}

/// `Hello`: answered at once, also behind appends still waiting: a client probes a
/// silent connection with a repeated Hello (protocol.md §6). The first one fixes the
/// role the connection was greeted as.
fn hello(shard: &Shard, out: &Outbox, greeted: &Cell<Option<Role>>, req_id: u64, v: u16) -> Result<(), Fail> {
    if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&v) {
        let msg = format!(
            "protocol version {v} unsupported; this server speaks {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}"
        );
        return Err((ErrorCode::BadVersion, msg, req_id));
    }
    if greeted.get().is_none() {
        greeted.set(Some(shard.role()));
    }
    let r = Response::HelloOk {
        version: v,
        shard: shard.id(),
        shard_count: shard.cfg().shard_count,
        role: shard.role(),
        epoch: shard.epoch(),
        leadership: (v >= LEADERSHIP_VERSION).then(|| leadership(shard)),
    };
    out.push(|b| r.encode(req_id, b));
    Ok(())
}

/// `Read`: committed records of the shard from `from`, after the connection's earlier
/// appends are answered; unsent answers stay bounded.
async fn read(shard: &Shard, out: &Outbox, at: (u64, u16), from: u64, max_bytes: u32) -> Result<(), Fail> {
    let (req_id, version) = at;
    out.answered_with_room().await;
    let first = shard.log().first_offset();
    if from < first {
        push_out_of_range(out, version, req_id, first, &format!("offset {from}"));
        return Ok(());
    }
    let max = max_bytes.min(codec::MAX_READ_BYTES) as usize;
    let (recs, count) = shard
        .log()
        .read(from, shard.committed(), max)
        .await
        .map_err(|e| (ErrorCode::Internal, e.to_string(), req_id))?;
    let r = Response::Records { shard: shard.id(), next_offset: from + count as u64, count, records: &recs };
    out.push(|b| r.encode(req_id, b));
    Ok(())
}

/// `Trim`: deletes whole segments below `before` (`retention::trim`).
async fn trim(shard: &Rc<Shard>, out: &Outbox, req_id: u64, before: u64) {
    out.answered().await;
    match crate::shard::retention::trim(shard, Some(before)).await {
        Ok(first) => out.push(|b| Response::Trimmed { shard: shard.id(), first_offset: first }.encode(req_id, b)),
        Err(e) => out.push_error(req_id, ErrorCode::Internal, &e),
    }
}

/// `IndexSnapshot`: one piece of the snapshot of the derived state at the log's first
/// offset (a seed of an empty follower or a backup of a trimmed log).
async fn index_snapshot(shard: &Shard, out: &Outbox, req_id: u64, at: u64) {
    out.answered_with_room().await;
    // A log that starts at 0 has no snapshot: nothing is below it.
    let first = shard.log().first_offset();
    let piece = match first {
        0 => Ok((0, Vec::new())),
        _ => crate::snapshot::piece_off_executor(shard.log().dir(), first, at, codec::MAX_READ_BYTES as usize).await,
    };
    match piece {
        Ok((total, bytes)) => out.push(|b| {
            Response::IndexSnapshotPiece { shard: shard.id(), first_offset: first, total, at, bytes: &bytes }
                .encode(req_id, b)
        }),
        Err(e) => out.push_error(req_id, ErrorCode::Internal, &e),
    }
}

/// `Subscribe`: where the push stream starts and what it keeps. None: it ended before
/// it began (`OutOfRange` answered); a refusal ends the connection (nothing may follow).
async fn subscribe(
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

fn need_v2(version: u16, what: &str, req_id: u64) -> Result<(), Fail> {
    if version >= 2 {
        return Ok(());
    }
    let msg = format!("{what} needs protocol version 2; this connection said Hello with {version}");
    Err((ErrorCode::BadVersion, msg, req_id))
}

/// A stream request's fields: a valid name of a stream this shard holds, a known
/// expect kind. A bad field is refused (nothing done) without ending the connection.
fn check_stream<'a>(shard: &Shard, s: StreamReq<'a>) -> Result<(&'a str, codec::Expect), Refused> {
    let bad = |m: String| Refused::Error(ErrorCode::BadRequest, m);
    let name = check_stream_name(s.name).map_err(bad)?;
    let expect = s.expect().map_err(bad)?;
    let home = codec::stream_shard(s.name, shard.cfg().shard_count);
    if home != shard.id() {
        let msg = format!(
            "stream {name:?} lives on shard {home}; this connection is served by shard {} (reach shard {home} on its direct port, client port + 1 + {home})",
            shard.id()
        );
        return Err(Refused::Error(ErrorCode::WrongShard, msg));
    }
    Ok((name, expect))
}

/// This node's view of leadership, as a version-3 `HelloOk` tells it.
fn leadership(shard: &Shard) -> Leadership {
    let ctl = &shard.cfg().ctl;
    let (epoch, follower_view) = ctl.view();
    let state = match (ctl.coordinated(), shard.role()) {
        (false, _) => LeaderState::Unknown,
        (true, Role::Leader) if ctl.may_ack(Instant::now()) => LeaderState::Live,
        (true, Role::Leader | Role::Fenced) => LeaderState::Lapsed,
        (true, Role::Follower) => follower_view,
    };
    Leadership { lease_ms: ctl.lease_ms(), epoch: epoch.max(shard.epoch()), state }
}

/// The hint a version-3 refusal carries: the newest epoch known, whether a leader holds
/// a live lease, and — when none does — how soon to ask again (a sixteenth of the lease:
/// a take-over is under way, and the new leader is ready a few such steps later).
fn hint(shard: &Shard) -> Hint {
    let l = leadership(shard);
    let retry_ms = match l.state {
        LeaderState::Lapsed => (l.lease_ms / 16).clamp(10, 200) as u16,
        _ => 0,
    };
    Hint { epoch: l.epoch, state: l.state, retry_ms }
}

/// Answers a refused request once every earlier answer of the connection has left.
/// `at`: the request id and the connection's protocol version.
async fn answer_later(shard: &Shard, out: &Rc<Outbox>, at: (u64, u16), r: Refused) {
    let (req_id, version) = at;
    out.answered().await;
    match r {
        Refused::Error(code, msg) if version >= LEADERSHIP_VERSION && codec::carries_hint(code as u16) => {
            out.push(|b| codec::encode_refusal(req_id, code as u16, &msg, hint(shard), b))
        }
        Refused::Error(code, msg) => out.push_error(req_id, code, &msg),
        Refused::WrongVersion { current, msg } => out.push(|b| codec::encode_wrong_version(req_id, current, &msg, b)),
        Refused::OutOfRange { first, what } => push_out_of_range(out, 2, req_id, first, &what),
    }
}

/// Answers that `what` was deleted by retention and `first` is the first still held
/// (after the message on a version-2 connection; version 1 gets the plain error).
fn push_out_of_range(out: &Outbox, version: u16, req_id: u64, first: u64, what: &str) {
    let msg = format!("{what} was deleted by retention; the first still held is {first}");
    if version >= 2 {
        out.push(|b| codec::encode_out_of_range(req_id, first, &msg, b));
    } else {
        out.push_error(req_id, ErrorCode::OutOfRange, &msg);
    }
}

/// One append (either version). Errors and duplicates are answered after every earlier
/// answer of the connection (answers leave in request order). `at`: the request id and
/// the connection's protocol version.
async fn append(
    shard: &Rc<Shard>,
    out: &Rc<Outbox>,
    at: (u64, u16),
    req: AppendReq<'_>,
    form: AckForm,
    payload: &[u8],
) {
    let req_id = at.0;
    out.wait(MAX_INFLIGHT_PER_CONN - 1, false).await;
    let answer: Rc<dyn Answer> = out.clone();
    loop {
        let taken = shard.append(req, form, payload, &answer, req_id).await;
        if taken == Ok(Taken::Staged) {
            return;
        }
        match taken {
            Ok(_) => {
                out.answered().await;
                let p = req.producer.expect("only idempotent appends are duplicates");
                if Box::pin(shard.answer_duplicate(p, req.stream.map(|s| s.0), &answer, req_id)).await {
                    return;
                }
                // The original's offset was handed out again meanwhile: append it anew.
            }
            Err(r) => return answer_later(shard, out, at, r).await,
        }
    }
}

/// A `ReadStream`'s fields besides the stream.
struct StreamRead {
    req_id: u64,
    version: u16,
    from: u64,
    max_count: u32,
    max_bytes: u32,
}

/// A `ReadStream`: committed events of one stream, after every earlier answer.
async fn read_stream(shard: &Rc<Shard>, out: &Rc<Outbox>, name: &str, q: StreamRead) -> Result<(), Fail> {
    let StreamRead { req_id, version, from, max_count, max_bytes } = q;
    out.answered_with_room().await;
    let max = max_count.min(codec::MAX_READ_COUNT) as usize;
    let gone = |first| push_out_of_range(out, version, req_id, first, &format!("version {from} of stream {name:?}"));
    let internal = |e: std::io::Error| (ErrorCode::Internal, e.to_string(), req_id);
    let (offsets, end_version) =
        match stream_offsets(shard, name, from, shard.committed(), max).await.map_err(internal)? {
            Found::Events { offsets, end_version } => (offsets, end_version),
            Found::Gone { first } => {
                gone(first);
                return Ok(());
            }
        };
    let max_bytes = max_bytes.min(codec::MAX_READ_BYTES) as usize;
    let (recs, count) = match shard.log().read_offsets(&offsets, max_bytes).await {
        Ok(r) => r,
        // Trimmed while it was read.
        Err(_) if offsets.first().is_some_and(|&o| o < shard.log().first_offset()) => {
            match stream_offsets(shard, name, from, shard.committed(), 1).await.map_err(internal)? {
                Found::Gone { first } => gone(first),
                Found::Events { .. } => gone(from.saturating_add(1)),
            }
            return Ok(());
        }
        Err(e) => return Err(internal(e)),
    };
    // Every record is the event asked for: an index entry damaged in a way its checksum
    // missed would point elsewhere, and that is never served as the stream's.
    let mut at = 0;
    for i in 0..count as u64 {
        let (offset, ext, n) = record::peek(&recs[at..]).map_err(|e| internal(std::io::Error::other(e.to_string())))?;
        if ext.stream.is_none_or(|s| s.name != name || s.version != from + i) {
            let msg = format!(
                "the stream index points at offset {offset} for version {} of stream {name:?}, which is not there",
                from + i
            );
            log::error!("shard {}: {msg}", shard.id());
            return Err(internal(std::io::Error::other(msg)));
        }
        at += n;
    }
    let next_version = from.min(end_version) + count as u64;
    out.push(|b| {
        Response::StreamRecords { shard: shard.id(), next_version, end_version, count, records: &recs }
            .encode(req_id, b)
    });
    Ok(())
}

fn check_shard(shard: &Shard, s: u16, req_id: u64) -> Result<(), Fail> {
    if s == shard.id() {
        return Ok(());
    }
    let msg = if s < shard.cfg().shard_count {
        format!(
            "this connection is served by shard {}; shard {s} is served on its direct port (client port + 1 + {s})",
            shard.id()
        )
    } else {
        format!("no shard {s}: the node has {} shard(s)", shard.cfg().shard_count)
    };
    Err((ErrorCode::NoSuchShard, msg, req_id))
}

/// The offsets of stream `name`'s events from version `from`, below offset `end`, at
/// most `max` (`streamread`).
async fn stream_offsets(shard: &Shard, name: &str, from: u64, end: u64, max: usize) -> std::io::Result<Found> {
    match shard.with_index(|t| t.streams.locate(name)) {
        Some(l) => crate::streamread::offsets(shard.log(), &l, from, end, max).await,
        None => Ok(Found::Events { offsets: Vec::new(), end_version: 0 }),
    }
}

/// The start offset and filter of a `Subscribe`. Only a leader serves subscriptions: a
/// follower's log may be cut below what it has pushed (the handshake's truncation).
async fn subscription(shard: &Shard, stream: bool, name: &[u8], from: u64) -> Result<(u64, Filter), Refused> {
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
    Ok((start.unwrap_or(committed), Filter::Stream { name: name.to_string(), from_version: from }))
}

/// A push stream: from which offset, which records, answering which request.
struct Push {
    req_id: u64,
    version: u16,
    from: u64,
    filter: Option<Filter>,
}

/// Turns the connection into a push stream (`Tail`, `Subscribe`) until the client closes
/// it; any byte it sends ends the stream with `Unexpected`.
async fn push_until_closed(
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
    let ended = Rc::new(crate::sync::Event::default());
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
    r
}

/// Which records a subscription pushes.
enum Filter {
    /// Events of one stream from a version on.
    Stream { name: String, from_version: u64 },
    /// Events of every stream whose name starts with this.
    Prefix(String),
}

impl Filter {
    fn keeps(&self, r: &corelog_client::record::RecordRef<'_>) -> bool {
        match (self, r.stream) {
            (_, None) => false,
            (Filter::Stream { name, from_version }, Some(s)) => s.name == name && s.version >= *from_version,
            (Filter::Prefix(p), Some(s)) => s.name.starts_with(p.as_str()),
        }
    }
}

/// The records of `recs` that `filter` keeps (all with none), and how many.
fn filtered<'a>(recs: &'a [u8], count: u32, filter: Option<&Filter>) -> (std::borrow::Cow<'a, [u8]>, u32) {
    let Some(f) = filter else { return (recs.into(), count) };
    let mut kept = Vec::new();
    let mut n = 0;
    let mut p = 0;
    // Verified by the log's read: a decoding error cannot happen here.
    while let Ok((r, len)) = corelog_client::record::decode(&recs[p..]) {
        if f.keeps(&r) {
            kept.extend_from_slice(&recs[p..p + len]);
            n += 1;
        }
        p += len;
    }
    (kept.into(), n)
}

/// Pushes committed records from `from` as they become durable (only those `filter`
/// keeps), until the connection closes. Bounded by `MAX_OUT_BYTES` of unsent responses.
/// Ends with `OutOfRange` if retention deletes what it has yet to push (a slow reader).
async fn tail(shard: Rc<Shard>, out: Rc<Outbox>, p: Push, stop: Rc<Cell<bool>>) {
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
                at += count as u64;
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
