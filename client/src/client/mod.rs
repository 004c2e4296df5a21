//! The async client library, on tokio (the runtime most Rust applications use).
//!
//! ```no_run
//! # async fn demo() -> Result<(), corelog_client::Error> {
//! use corelog_client::{Client, ClientConfig};
//! let cfg = ClientConfig::mtls("certs/ca.pem", "certs/client.pem", "certs/client.key", "localhost")?;
//! let client = Client::connect("127.0.0.1:9400", &cfg).await?;
//! let pos = client.append(b"Hello World").await?;
//! let records = client.read(pos.shard, pos.offset, 4096).await?;
//! assert_eq!(records[0].payload, b"Hello World");
//! # Ok(()) }
//! ```
//!
//! One connection carries many requests at once (pipelined, answered in order): clone the
//! `Client` into as many tasks as you like.
//!
//! Several nodes: `Client::connect("A,B", cfg)` connects to the first that answers (in
//! order). An append follows leadership by itself for up to
//! `ClientConfig::with_failover_timeout` (default 5 s, back-off 20 ms doubling to 100 ms,
//! or the retry hint a refusal gives) by the rules of docs/protocol.md §6.3
//! (`leadership.rs`): it remembers the highest epoch any answer showed and never uses a
//! node that leads an older one, whose lease has lapsed, or that went silent while
//! leading; on `NotLeader` it goes to the node the answer names (even one not in the
//! list) unless that name is stale or went silent — then, like when no node holds a live
//! lease, it asks the same node again after the hint; on `Unavailable`/`Fenced` or when
//! no connection could be opened or the request could not be handed to one, it tries the
//! next address — all cases where nothing was written, so the retry is safe. When a
//! connection breaks after the request was sent and before its answer, the append fails
//! with an error whose [`Error::outcome`] is [`Outcome::Unknown`] and is **not** retried
//! (a retry could store the event twice); the next call reconnects. `OutcomeUnknown` and
//! `ReplicationTimeout` answers are unknown outcomes too. Against nodes that advertise a
//! lease (coordinator mode), a connection on which a request has waited half a lease
//! with nothing received is probed (a `Hello`, answered at once by a live node); silent
//! for a whole lease, or answering that it no longer leads with a live lease, it is
//! abandoned: what waits there fails as [`Error::Abandoned`] (unknown outcome) and the
//! node is not tried again until a newer epoch shows or its suspicion expires. A request
//! unanswered for `with_request_timeout` (default 30 s) fails as unknown and drops its
//! connection.
//!
//! [`Error::outcome`] classifies any failed append, over all its attempts
//! (docs/protocol.md §6). [`Outcome::NotWritten`]: no attempt of it can be in the log, now
//! or later — refused before it was taken (`NotLeader`, `Unavailable`, `Fenced`,
//! `BadFrame`, `TooLarge`, `UnknownOpcode`, `BadVersion`, `NoSuchShard`, `Overloaded`,
//! `ShuttingDown`, `BadHandshake`, a bad argument or configuration: [`Error::Invalid`]), or
//! never sent (connect/TLS/Hello failure, connection closed before the request was handed
//! to it). [`Outcome::Written`]: it is in the log though the call failed (`StaleSequence`).
//! [`Outcome::Unknown`]: everything else — the connection lost after sending (`Closed`,
//! `Io`), no answer in time, `OutcomeUnknown`, `ReplicationTimeout`, `Internal`, a protocol
//! violation, and [`Error::InDoubt`]: a call whose last attempt was refused after an
//! earlier one was lost in flight; read the log to find out.
//!
//! Cancellation: dropping the future of an append before its request was handed to the
//! connection withdraws it (not written); after that the request goes out and may be
//! written — a dropped append's outcome is unknown (wrap it in `tokio::time::timeout` and
//! treat `Elapsed` as unknown, or use a [`crate::Producer`]).
//!
//! The pieces, from the bottom up: `error` (what a call can fail with and what it may have
//! left in the log), `values` (what calls return), `addrs` (address lists and shards'
//! direct ports), `config` (TLS and timeouts), `frames` (whole frames off a socket),
//! `greet` (TCP, TLS and the `Hello`), `conn` (one pipelined connection and its
//! watchdog), `attempts` (one append's retries), `tail` (a live tail); this file: the
//! [`Client`] that picks the connection and follows leadership.

mod addrs;
mod attempts;
mod config;
mod conn;
mod error;
mod frames;
mod greet;
mod tail;
mod values;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Mutex;

use addrs::check_addr;
pub use addrs::shard_addr;
pub(crate) use addrs::split_addrs;
pub(crate) use attempts::{Attempts, Step};
pub use config::ClientConfig;
pub(crate) use conn::{answer, Conn};
pub use error::{Error, Outcome};
pub(crate) use frames::Reply;
pub(crate) use greet::{greet, greet_with, Greeted};
pub use tail::Tail;
pub(crate) use values::to_records;
pub use values::{Position, Record, ServerInfo, StreamVersion};

use crate::codec::{self, ErrorCode, Request, Response, Role};
use crate::leadership::{Seen, Target};

/// A handle to a cluster's nodes (one connection at a time); cheap to clone, safe to use
/// from many tasks.
#[derive(Clone)]
pub struct Client {
    /// The client addresses as given (for clients of other shards, `for_shard`).
    pub(crate) given: Arc<String>,
    /// Clients of other shards' direct ports, made on first use.
    pub(crate) by_shard: Arc<std::sync::Mutex<std::collections::HashMap<u16, Client>>>,
    addrs: Arc<Vec<String>>,
    /// Index into `addrs` of the node to try next when the connection must change.
    next: Arc<AtomicUsize>,
    /// A leader named by `NotLeader` that is not in `addrs`: tried first, once.
    hint: Arc<std::sync::Mutex<Option<String>>>,
    conn: Arc<Mutex<Option<Arc<Conn>>>>,
    pub(crate) cfg: ClientConfig,
    /// Connected to the direct ports of this shard (`connect_shard`): a leader named by
    /// `NotLeader` (a client address) is reached on its direct port for the shard too.
    pub(crate) shard: Option<u16>,
    /// The cluster's shard count once a `HelloOk` said it (0: not yet); shared with the
    /// clients of other shards made from this one.
    pub(crate) shard_count: Arc<std::sync::atomic::AtomicU16>,
    /// What answers showed about leadership (epochs, the lease, suspects); shared with
    /// the clients of other shards made from this one.
    pub(crate) seen: Arc<std::sync::Mutex<Seen>>,
}

impl Client {
    /// Connects to the first reachable node of `addr` (`host:port`, or several separated
    /// by commas).
    pub async fn connect(addr: &str, cfg: &ClientConfig) -> Result<Client, Error> {
        Client::open(addr, split_addrs(addr), cfg, None).await
    }

    /// A client over `addrs` (from `given`), connected to the first that answers.
    async fn open(given: &str, addrs: Vec<String>, cfg: &ClientConfig, shard: Option<u16>) -> Result<Client, Error> {
        let c = Client::lazy(given, addrs, cfg, shard, Default::default(), Default::default())?;
        c.connection().await?;
        Ok(c)
    }

    /// A client over `addrs` that connects on first use. `Error::Invalid` if there is no
    /// address or one is not `host:port`.
    pub(crate) fn lazy(
        given: &str,
        addrs: Vec<String>,
        cfg: &ClientConfig,
        shard: Option<u16>,
        shard_count: Arc<std::sync::atomic::AtomicU16>,
        seen: Arc<std::sync::Mutex<Seen>>,
    ) -> Result<Client, Error> {
        if addrs.is_empty() {
            return Err(Error::Invalid(format!("no address in {given:?}")));
        }
        for a in &addrs {
            check_addr(a)?;
        }
        Ok(Client {
            given: Arc::new(given.to_string()),
            by_shard: Default::default(),
            addrs: Arc::new(addrs),
            next: Arc::new(AtomicUsize::new(0)),
            hint: Default::default(),
            conn: Arc::new(Mutex::new(None)),
            cfg: cfg.clone(),
            shard,
            shard_count,
            seen,
        })
    }

    /// [`Client::connect`] with the addresses as a slice.
    pub async fn connect_any(addrs: &[String], cfg: &ClientConfig) -> Result<Client, Error> {
        Client::connect(&addrs.join(","), cfg).await
    }

    /// Connects to the direct port of `shard` (client port + 1 + shard), which is
    /// served by that shard's executor: use it to read or tail a given shard.
    pub async fn connect_shard(addr: &str, shard: u16, cfg: &ClientConfig) -> Result<Client, Error> {
        let direct: Result<Vec<String>, Error> = split_addrs(addr).iter().map(|a| shard_addr(a, shard)).collect();
        let direct = direct.map_err(|e| Error::Invalid(e.to_string()))?;
        Client::open(addr, direct, cfg, Some(shard)).await
    }

    pub async fn info(&self) -> ServerInfo {
        match self.connection().await {
            Ok(c) => c.info,
            Err(_) => ServerInfo { shard: 0, shard_count: 0, role: Role::Follower, epoch: 0, leadership: None },
        }
    }

    /// The current connection, or a new one to the first node (from `next`) that answers
    /// and may carry appends (docs/protocol.md §6.3): a leader named by `NotLeader`
    /// first, suspects only when every address is one, each within the connect timeout
    /// (a lease once one is known).
    pub(crate) async fn connection(&self) -> Result<Arc<Conn>, Error> {
        let mut g = self.conn.lock().await;
        if let Some(c) = g.as_ref() {
            return Ok(c.clone());
        }
        let mut errs = Vec::new();
        let mut bad = None;
        let now = Instant::now();
        let n = self.addrs.len();
        let from = self.next.load(Ordering::Relaxed);
        let hint = self.hint.lock().unwrap().take();
        let order = hint.map(|a| (None, a)).into_iter().chain((0..n).map(|k| {
            let i = (from + k) % n;
            (Some(i), self.addrs[i].clone())
        }));
        let (fresh, suspects): (Vec<_>, Vec<_>) = {
            let seen = self.seen.lock().unwrap();
            order.partition(|(_, a)| !seen.is_suspect(a, now))
        };
        for (i, a) in if fresh.is_empty() { suspects } else { fresh } {
            let timeout = self.seen.lock().unwrap().connect_timeout(self.cfg.connect_timeout);
            let why = match Conn::open(&a, &self.cfg, timeout, self.seen.clone()).await {
                Ok(c) => {
                    let (info, at) = (c.info, Instant::now());
                    match self.seen.lock().unwrap().usable(&a, info.role, info.epoch, info.leadership, at) {
                        Ok(()) => {
                            let c = Arc::new(c);
                            self.shard_count.store(c.info.shard_count, Ordering::Relaxed);
                            if let Some(i) = i {
                                self.next.store(i, Ordering::Relaxed);
                            }
                            *g = Some(c.clone());
                            return Ok(c);
                        }
                        Err(why) => why, // dropping `c` closes it
                    }
                }
                Err(e) => {
                    let seen = &mut self.seen.lock().unwrap();
                    if matches!(&e, Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut) && seen.lease.is_some()
                    {
                        // No answer within a lease: not tried again until it expires.
                        let epoch = seen.epoch;
                        seen.suspect(&a, epoch, Instant::now());
                    }
                    if matches!(e, Error::Invalid(_)) {
                        bad = Some(e);
                        continue;
                    }
                    e.to_string()
                }
            };
            errs.push(format!("{a}: {why}"));
            if let Some(i) = i {
                self.next.store(i + 1, Ordering::Relaxed);
            }
        }
        // A setting no retry can cure is said as such, not as an outage.
        Err(bad.unwrap_or_else(|| Error::Unreachable(errs.join("; "))))
    }

    /// Drops `old` if it is still the current connection (so that of many tasks that saw
    /// it fail, one replaces it); the next one goes to `to`: a leader named (an address
    /// from the list, or one outside it, tried once before the list), the same node, or
    /// the address after the current one.
    pub(crate) async fn move_on(&self, old: &Arc<Conn>, to: Target) {
        let mut g = self.conn.lock().await;
        if !g.as_ref().is_some_and(|c| Arc::ptr_eq(c, old)) {
            return;
        }
        *g = None;
        let to = match to {
            Target::Named(t) => Some(t),
            Target::Stay => Some(old.addr.clone()),
            Target::Other => None,
        };
        match to.map(|t| (self.addrs.iter().position(|a| *a == t), t)) {
            Some((Some(i), _)) => self.next.store(i, Ordering::Relaxed),
            Some((None, t)) => {
                *self.hint.lock().unwrap() = Some(t);
                self.next.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                self.next.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Where to go after the refusal `e` (nothing written) from `conn`: follows the rules
    /// of `leadership.rs`, then moves on.
    pub(crate) async fn after_refusal(&self, conn: &Arc<Conn>, e: &Error) {
        let (code, named, hint) = match e {
            Error::Server { code, message, hint } => (ErrorCode::from_u16(*code), message.as_str(), *hint),
            _ => (None, "", None),
        };
        // A leader named is a client address: this client reaches its shard directly.
        let named = match (code, self.shard) {
            (Some(ErrorCode::NotLeader), _) if named.is_empty() => String::new(),
            (Some(ErrorCode::NotLeader), Some(s)) => shard_addr(named, s).unwrap_or_default(),
            (Some(ErrorCode::NotLeader), None) => named.to_string(),
            _ => String::new(),
        };
        let target = self.seen.lock().unwrap().after_refusal(&conn.addr, code, &named, hint, Instant::now());
        if target != Target::Stay || !matches!(e, Error::Server { .. }) {
            self.move_on(conn, target).await;
        }
        // Stay: the connection is kept; the next attempt goes on it after the pause.
    }

    /// Appends one event; returns its position once it is durable on every replica.
    /// Follows leadership changes (see the module docs); a failed append says with
    /// [`Error::outcome`] whether it may be in the log.
    pub async fn append(&self, payload: &[u8]) -> Result<Position, Error> {
        if payload.len() > codec::MAX_PAYLOAD {
            return Err(Error::Codec(codec::CodecError::PayloadTooLarge(payload.len())));
        }
        let mut frame = Vec::with_capacity(payload.len() + codec::FRAME_HEADER_LEN);
        codec::encode_append(0, payload, &mut frame);
        let reply = self.submit(frame).await?;
        match reply.response()? {
            Response::Appended { shard, offset } => Ok(Position { shard, offset }),
            _ => Err(Error::Protocol("expected Appended".into())),
        }
    }

    /// Sends a request that writes nothing (a read) on the current connection; a failed
    /// call drops the connection (the next request opens another).
    pub(crate) async fn request(&self, req: &Request<'_>) -> Result<Reply, Error> {
        let mut frame = Vec::new();
        req.encode(0, &mut frame);
        let conn = self.connection().await?;
        match conn.call(frame, self.cfg.request_timeout, false).await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.move_on(&conn, Target::Other).await;
                Err(e)
            }
        }
    }

    /// Sends an append frame and returns its successful answer, following leadership
    /// while nothing was written (see the module docs).
    pub(crate) async fn submit(&self, frame: Vec<u8>) -> Result<Reply, Error> {
        self.submit_with(frame, &mut Attempts::new(&self.cfg, true)).await
    }

    /// [`Client::submit`] within `attempts` (a stream append shares them with finding
    /// its shard).
    pub(crate) async fn submit_with(&self, frame: Vec<u8>, attempts: &mut Attempts) -> Result<Reply, Error> {
        loop {
            // Opening connections counts against the budget too.
            let end = attempts.start();
            let conn = match tokio::time::timeout_at(end.into(), self.connection()).await {
                Ok(c) => c,
                Err(_) => Err(Error::Unreachable("failover budget spent connecting".into())),
            };
            let err = match conn {
                Err(e @ Error::Invalid(_)) => return Err(e),
                Err(e) => e,
                Ok(conn) => {
                    attempts.sent += 1;
                    let r = conn.call(frame.clone(), self.cfg.request_timeout, true).await;
                    let e = match r.and_then(|reply| reply.response().map(|_| ()).map(|()| reply)) {
                        Ok(reply) => return Ok(reply),
                        Err(e) => e,
                    };
                    let (step, e) = attempts.failed_on(&conn, e);
                    match step {
                        Step::Move => self.after_refusal(&conn, &e).await,
                        Step::Lost => {
                            if !matches!(e, Error::Server { .. }) {
                                self.move_on(&conn, Target::Other).await; // broken, hanging or abandoned
                            }
                            return Err(attempts.fail(e)); // never re-sent: it could be stored twice
                        }
                        Step::Wait | Step::Stop => return Err(attempts.fail(e)),
                    }
                    e
                }
            };
            // Nothing was written: safe to try again, elsewhere, until the budget ends.
            attempts.pause(err).await?;
        }
    }

    /// Reads durable records of `shard` from offset `from`, at most about `max_bytes`.
    pub async fn read(&self, shard: u16, from: u64, max_bytes: u32) -> Result<Vec<Record>, Error> {
        let reply = self.request(&Request::Read { shard, from, max_bytes }).await?;
        match reply.response()? {
            Response::Records { records, .. } => to_records(records),
            _ => Err(Error::Protocol("expected Records".into())),
        }
    }

    /// [`Client::read`] without decoding: how many records, and their bytes as the node
    /// sent them (the on-disk record encoding, not yet checked: `record::verify_run`).
    pub async fn read_raw(&self, shard: u16, from: u64, max_bytes: u32) -> Result<(u32, Vec<u8>), Error> {
        let reply = self.request(&Request::Read { shard, from, max_bytes }).await?;
        match reply.response()? {
            Response::Records { count, records, .. } => Ok((count, records.to_vec())),
            _ => Err(Error::Protocol("expected Records".into())),
        }
    }

    /// Asks the node this client is connected to (the first address that answers, leader
    /// or follower) to delete its whole segments of `shard` below `before`, within what
    /// its peer may still need (docs/operations.md §13). Returns the node's first offset
    /// of the shard afterwards.
    pub async fn trim(&self, shard: u16, before: u64) -> Result<u64, Error> {
        let reply = self.request(&Request::Trim { shard, before }).await?;
        match reply.response()? {
            Response::Trimmed { first_offset, .. } => Ok(first_offset),
            _ => Err(Error::Protocol("expected Trimmed".into())),
        }
    }

    /// The node's first offset of `shard` and its index snapshot there (empty when the
    /// log starts at 0), at most `max_bytes`: what a copy of the log from that offset
    /// needs besides the records (docs/format.md §8).
    pub async fn index_snapshot(&self, shard: u16, max_bytes: u64) -> Result<(u64, Vec<u8>), Error> {
        let (mut out, mut first): (Vec<u8>, Option<u64>) = (Vec::new(), None);
        loop {
            let at = out.len() as u64;
            let reply = self.request(&Request::IndexSnapshot { shard, at }).await?;
            let Response::IndexSnapshotPiece { first_offset, total, at: got, bytes, .. } = reply.response()? else {
                return Err(Error::Protocol("expected IndexSnapshotPiece".into()));
            };
            if total > max_bytes {
                return Err(Error::Protocol(format!("an index snapshot of {total} bytes, above {max_bytes}")));
            }
            if got != at || (bytes.is_empty() && at < total) {
                return Err(Error::Protocol(format!("snapshot piece at {got}, asked for {at} of {total}")));
            }
            if *first.get_or_insert(first_offset) != first_offset {
                return Err(Error::Protocol(
                    "the node trimmed the shard while its snapshot was read: try again".into(),
                ));
            }
            out.extend_from_slice(bytes);
            if out.len() as u64 == total {
                return Ok((first_offset, out));
            }
        }
    }
}
