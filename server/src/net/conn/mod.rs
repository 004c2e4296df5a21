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
    self, decode_frame_max, ErrorCode, GroupReq, Hint, LeaderState, Leadership, Request, Response, Role, StreamReq,
    LEADERSHIP_VERSION, MAX_REQUEST_FRAME, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use corelog_client::record::check_stream_name;
use glommio::net::TcpStream;

use super::outbox::Outbox;
use crate::access::Access;
use crate::authz::{Op, Resource};
use crate::shard::{AckForm, Answer, AppendReq, Refused, Shard, Taken};
use corelog_runtime::sync::deadline;
use corelog_runtime::tls_io;

mod group;
mod push;
mod reads;

use push::{push_until_closed, subscribe, Push};
use reads::{index_snapshot, read, read_stream, trim, StreamRead};

/// Appends one connection may have unanswered before we stop reading from it.
pub const MAX_INFLIGHT_PER_CONN: u32 = 1024;

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
        Ok(()) => {
            out.answered().await;
            assert!(
                out.closed() || out.inflight() == 0,
                "a connection closes with {} appends unanswered",
                out.inflight()
            );
        }
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
    // `serve` makes the connection's access exactly when a policy is in force.
    debug_assert_eq!(shard.cfg().authz.is_some(), access.is_some(), "a connection's access without its policy");
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
        Request::Group(GroupReq::Join { prefix, .. }) => (Op::Read, named(true, prefix.as_bytes())),
        // Checked once, at the join that made the connection a member's.
        Request::Group(_) => return Ok(()),
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
            debug_assert!(used <= rd.data().len(), "a frame of {used} bytes decoded from {}", rd.data().len());
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
                    match check_read_stream(shard, name) {
                        Ok(name) => {
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
                Request::Group(g) => {
                    let j = group::Join::of(g, req_id)?;
                    rd.consume(used);
                    return Box::pin(group::member(shard, rd, out, at, j)).await;
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
    // `read_loop` served every whole frame first, and refuses one announced above the
    // limit: what stays buffered is less than one request, so a connection holds a
    // bounded buffer however it sends.
    assert!(
        rd.data().len() < MAX_REQUEST_FRAME,
        "shard {}: {} request bytes buffered before reading more",
        shard.id(),
        rd.data().len()
    );
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
    debug_assert!(greeted.get().is_some(), "a Hello answered, the role it greeted unset");
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
    if name.starts_with('$') {
        return Err(bad(format!("stream {name:?}: names starting with '$' are reserved for the server")));
    }
    let expect = s.expect().map_err(bad)?;
    let home = codec::stream_shard(s.name, shard.cfg().shard_count);
    debug_assert!(home < shard.cfg().shard_count, "stream {name:?} homed on shard {home}, outside the node");
    if home != shard.id() {
        let msg = format!(
            "stream {name:?} lives on shard {home}; this connection is served by shard {} (reach shard {home} on its direct port, client port + 1 + {home})",
            shard.id()
        );
        return Err(Refused::Error(ErrorCode::WrongShard, msg));
    }
    Ok((name, expect))
}

/// A `ReadStream`'s name: a stream `check_stream` allows, or a consumer group's own
/// stream on this shard (`$g/<group>/<shard>`, read-only: `corelog group describe`).
fn check_read_stream<'a>(shard: &Shard, name: &'a [u8]) -> Result<&'a str, Refused> {
    let own = std::str::from_utf8(name).ok().filter(|n| {
        n.starts_with("$g/")
            && n.len() <= corelog_client::record::MAX_STREAM_NAME
            && n.ends_with(&format!("/{}", shard.id()))
    });
    match own {
        Some(n) => Ok(n),
        None => check_stream(shard, StreamReq { name, expect_kind: 0, expected: 0 }).map(|(n, _)| n),
    }
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
    // A barrier: the refusal leaves after every earlier answer (or to a closed socket).
    assert!(out.closed() || out.inflight() == 0, "a refusal overtakes {} appends", out.inflight());
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
    assert!(
        out.closed() || out.inflight() < MAX_INFLIGHT_PER_CONN,
        "{} appends of one connection in flight before one more is taken",
        out.inflight()
    );
    let answer: Rc<dyn Answer> = out.clone();
    loop {
        let taken = shard.append(req, form, payload, &answer, req_id).await;
        if taken == Ok(Taken::Staged) {
            assert!(
                out.closed() || out.inflight() <= MAX_INFLIGHT_PER_CONN,
                "{} appends of one connection in flight, above {MAX_INFLIGHT_PER_CONN}",
                out.inflight()
            );
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

fn check_shard(shard: &Shard, s: u16, req_id: u64) -> Result<(), Fail> {
    debug_assert!(shard.id() < shard.cfg().shard_count, "shard {} of {}", shard.id(), shard.cfg().shard_count);
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
