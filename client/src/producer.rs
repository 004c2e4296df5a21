//! The idempotent producer: appends that are never stored twice, and whose unknown
//! outcomes are resolved by sending them again.
//!
//! ```no_run
//! # async fn demo() -> Result<(), corelog_client::Error> {
//! use corelog_client::{ClientConfig, Producer};
//! let cfg = ClientConfig::mtls("certs/ca.pem", "certs/client.pem", "certs/client.key", "localhost")?;
//! let p = Producer::connect("127.0.0.1:9400,127.0.0.1:9500", &cfg, 0).await?;
//! let a = p.append(b"order-42 created").await?;
//! println!("{} {} (sequence {})", a.position.shard, a.position.offset, a.sequence);
//! # Ok(()) }
//! ```
//!
//! A producer has a random 64-bit id and numbers its appends 0, 1, 2, … (protocol
//! `Append2`, docs/protocol.md §4). The shard remembers each producer's next sequence and
//! the positions of its last 64, so an append sent again is answered with the position it
//! got the first time instead of being written twice. That lets the producer retry what a
//! plain append must give up on: a connection lost after sending, a request timeout,
//! `OutcomeUnknown`, `ReplicationTimeout` — after reconnecting, following `NotLeader`, or
//! failing over to another address, for up to the client's failover budget
//! (`ClientConfig::with_failover_timeout`) counted from the first failure. Retries go
//! out in sequence order: an append is sent again only once every lower sequence of the
//! producer has settled, so retries never refuse each other for ever. `SequenceGap` and
//! `UnknownProducer` mean an earlier sequence has not arrived yet; they are retried the
//! same way (nothing was written).
//!
//! Every append of a producer goes to one shard (its state lives there): the producer
//! talks to that shard's direct port on each node (client port + 1 + shard). A new
//! sequence is sent only within `WINDOW` of the lowest one not yet settled (the shard
//! remembers that many positions per producer), and not while an earlier one waits to be
//! sent again (so that after a failure the producer drains its retries, then pipelines
//! again). An append that fails for good — the budget spent, or an
//! error that is not retried — stops the producer: later sequences could never follow it,
//! so every later call fails with [`Error::ProducerStopped`]; start a new producer. The
//! error says the outcome over all the append's attempts: if one was lost in flight and
//! none got a definite answer before the budget ended, it is [`Error::InDoubt`]
//! (outcome unknown), never a `NotWritten` error. Dropping an append's future stops the
//! producer too (the sequence may or may not be written; later ones could not follow).
//!
//! Streams: [`Producer::append_to`] appends to a stream of the producer's shard
//! ([`Producer::connect_for_stream`] picks the shard of a stream). With `Expect::Any` it
//! pipelines like `append`. A conditional append (`NoStream`, `Exact`) goes alone — sent
//! when nothing else of the producer is in flight, and nothing new is sent until it is
//! answered — so that a `WrongExpectedVersion` refusal (nothing written) hands its
//! sequence back and the producer goes on; a retry of a conditional append that was
//! written is answered as a duplicate with its original position and version.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;

use tokio::sync::{oneshot, Mutex, Notify};

use crate::client::{answer, Attempts, Client, ClientConfig, Conn, Error, Position, Reply, Step};
use crate::codec::{self, Expect, ProducerSeq, Response, StreamReq};
use crate::leadership::Target;

/// Appends of one producer in flight at most: the positions a shard remembers per producer.
pub const WINDOW: usize = 64;

/// A successful idempotent append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub position: Position,
    pub sequence: u64,
    /// The shard had it already (an earlier attempt was written): `position` is that one's.
    pub duplicate: bool,
    /// The event's version in its stream (`append_to`).
    pub version: Option<u64>,
}

/// Sequences handed out and not yet settled.
struct Seqs {
    next: u64,
    /// Sent (or being sent) and not yet answered for good.
    pending: BTreeSet<u64>,
    /// Pending sequences whose last attempt failed and that wait to be sent again. While
    /// any does, no new sequence is sent: it would only be refused (`SequenceGap`) behind
    /// them and join the queue, and the producer would never get back to pipelining.
    failed: BTreeSet<u64>,
    /// A conditional stream append is in flight: nothing else is sent meanwhile.
    exclusive: bool,
    /// Conditional stream appends waiting for the producer to drain: no new sequence is
    /// handed to anything else meanwhile (else steady pipelining would starve them).
    want_exclusive: usize,
}

type Sent = Result<(Arc<Conn>, oneshot::Receiver<Result<Reply, Error>>), Error>;

/// An idempotent producer bound to one shard; cheap to share (`Arc`) across tasks.
pub struct Producer {
    client: Client,
    id: u64,
    shard: u16,
    /// Never held across an await (a dropped append settles its sequence in `Drop`).
    seqs: std::sync::Mutex<Seqs>,
    /// Held from taking a sequence to handing its first attempt to the connection, so
    /// that first sends leave in sequence order.
    send_order: Mutex<()>,
    /// A pending sequence settled (or the producer stopped): retries check their turn.
    turn: Notify,
    stopped: AtomicBool,
    retries: AtomicU64,
    /// The node's shard count (streams are placed by it), from the first `HelloOk`.
    shard_count: u16,
}

impl Producer {
    /// A new producer (random id, sequence 0) for `shard` of the nodes in `addrs`
    /// (client addresses, comma-separated).
    pub async fn connect(addrs: &str, cfg: &ClientConfig, shard: u16) -> Result<Producer, Error> {
        Producer::resume(addrs, cfg, shard, rand_id(), 0).await
    }

    /// A producer continuing an id at `next_seq` (e.g. after the process restarted and
    /// read its last sequence back from the log).
    pub async fn resume(
        addrs: &str,
        cfg: &ClientConfig,
        shard: u16,
        id: u64,
        next_seq: u64,
    ) -> Result<Producer, Error> {
        let client = Client::connect_shard(addrs, shard, cfg).await?;
        let shard_count = client.info().await.shard_count.max(1);
        Ok(Producer {
            client,
            id,
            shard,
            seqs: std::sync::Mutex::new(Seqs {
                next: next_seq,
                pending: BTreeSet::new(),
                failed: BTreeSet::new(),
                exclusive: false,
                want_exclusive: 0,
            }),
            send_order: Mutex::new(()),
            shard_count,
            turn: Notify::new(),
            stopped: AtomicBool::new(false),
            retries: AtomicU64::new(0),
        })
    }

    /// A new producer for the shard that holds `stream`.
    pub async fn connect_for_stream(addrs: &str, cfg: &ClientConfig, stream: &str) -> Result<Producer, Error> {
        crate::record::check_stream_name(stream.as_bytes()).map_err(Error::Invalid)?;
        let count = Client::connect(addrs, cfg).await?.info().await.shard_count;
        Producer::connect(addrs, cfg, codec::stream_shard(stream.as_bytes(), count.max(1))).await
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn shard(&self) -> u16 {
        self.shard
    }

    /// Attempts sent again after a failure, so far.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Appends `payload` once: returns its position when durable on every replica.
    pub async fn append(&self, payload: &[u8]) -> Result<Appended, Error> {
        self.append_ex(None, payload).await
    }

    /// Appends `payload` once to `stream` (which must live on this producer's shard) if
    /// the stream meets `expect`. `Error::WrongExpectedVersion` leaves the producer usable.
    pub async fn append_to(&self, stream: &str, expect: Expect, payload: &[u8]) -> Result<Appended, Error> {
        crate::record::check_stream_name(stream.as_bytes()).map_err(Error::Invalid)?;
        let home = codec::stream_shard(stream.as_bytes(), self.shard_count);
        if home != self.shard {
            return Err(Error::Invalid(format!(
                "stream {stream:?} lives on shard {home}; this producer appends to shard {}",
                self.shard
            )));
        }
        self.append_ex(Some(StreamReq::new(stream, expect)), payload).await
    }

    async fn append_ex(&self, stream: Option<StreamReq<'_>>, payload: &[u8]) -> Result<Appended, Error> {
        if payload.len() > codec::MAX_PAYLOAD {
            return Err(Error::Codec(codec::CodecError::PayloadTooLarge(payload.len())));
        }
        let exclusive = stream.is_some_and(|s| s.expect() != Ok(Expect::Any));
        // Sequence numbers and first sends in the same order; a new sequence only within
        // `WINDOW` of the lowest unsettled one, whose position the shard must still
        // remember if it is a duplicate.
        let mut waiting = Waiting { p: self, on: false };
        let order = loop {
            let notified = self.turn.notified();
            tokio::pin!(notified);
            notified.as_mut().enable(); // registered before the check: no wake-up lost
            let order = self.send_order.lock().await;
            let wait = {
                let mut g = self.seqs.lock().unwrap();
                if self.stopped.load(Ordering::Acquire) {
                    return Err(self.stopped_error());
                }
                // A conditional append goes when nothing is in flight; a plain one not
                // while a conditional one is in flight or waiting for its turn.
                let busy = g.exclusive || if exclusive { !g.pending.is_empty() } else { g.want_exclusive > 0 };
                let full = g.pending.first().is_some_and(|&low| g.next - low >= WINDOW as u64);
                let wait = busy || !g.failed.is_empty() || full;
                if wait && exclusive && !waiting.on {
                    waiting.on = true;
                    g.want_exclusive += 1;
                }
                wait
            };
            if wait {
                drop(order);
                notified.await;
                continue;
            }
            break order;
        };
        let (seq, frame) = {
            let mut g = self.seqs.lock().unwrap();
            if waiting.on {
                waiting.on = false;
                g.want_exclusive -= 1;
            }
            let seq = g.next;
            g.next += 1;
            g.pending.insert(seq);
            g.exclusive = exclusive;
            let mut frame = Vec::with_capacity(payload.len() + codec::FRAME_HEADER_LEN + codec::APPEND2_MAX_HEADER);
            codec::encode_append2(0, Some(ProducerSeq { id: self.id, seq }), stream, payload, &mut frame);
            (seq, frame)
        };
        // From here a dropped future settles the sequence (and stops the producer).
        let mut settle = Settle { p: self, seq, exclusive, armed: true };
        let mut attempts = Attempts::new(&self.client.cfg, false);
        attempts.sent += 1;
        let first = self.send(&frame).await;
        drop(order);
        let r = self.complete(seq, &frame, first, &mut attempts).await;
        settle.armed = false;
        let mut g = self.seqs.lock().unwrap();
        match &r {
            // Refused at its only send, and nothing else was sent since: nothing with this
            // sequence can be written any more, so the sequence is free. (After a re-send
            // an earlier attempt might still be in flight somewhere: stop instead.)
            Err(Error::WrongExpectedVersion { .. }) if exclusive && attempts.sent == 1 && g.next == seq + 1 => {
                g.next = seq
            }
            Err(_) => self.stopped.store(true, Ordering::Release),
            Ok(_) => {}
        }
        g.pending.remove(&seq);
        g.failed.remove(&seq);
        if exclusive {
            g.exclusive = false;
        }
        drop(g);
        self.turn.notify_waiters();
        r
    }

    async fn send(&self, frame: &[u8]) -> Sent {
        let conn = self.client.connection().await?;
        let rx = conn.send(frame.to_vec(), true).await?;
        Ok((conn, rx))
    }

    /// Waits for the answer to `first`; after a failure that is retried, sends again —
    /// in sequence order: only the lowest pending sequence is re-sent, so that retries
    /// do not arrive out of order and refuse each other (`SequenceGap`) for ever. The
    /// error, if it gives up, carries the outcome over all attempts.
    async fn complete(&self, seq: u64, frame: &[u8], first: Sent, attempts: &mut Attempts) -> Result<Appended, Error> {
        let timeout = self.client.cfg.request_timeout;
        let mut sent = first;
        loop {
            let (conn, err) = match sent {
                Err(e) => (None, e),
                Ok((conn, rx)) => match answer(rx, timeout).await.and_then(|r| match r.response()? {
                    Response::Appended2 { shard, offset, duplicate, version } => {
                        Ok(Appended { position: Position { shard, offset }, sequence: seq, duplicate, version })
                    }
                    _ => Err(Error::Protocol("expected Appended2".into())),
                }) {
                    Ok(a) => return Ok(a),
                    Err(e) => (Some(conn), e),
                },
            };
            let (step, err) = match &conn {
                Some(c) => attempts.failed_on(c, err),
                None => (attempts.failed(&err), err),
            };
            if step == Step::Stop || matches!(err, Error::Invalid(_)) {
                return Err(attempts.fail(err));
            }
            self.seqs.lock().unwrap().failed.insert(seq);
            if let Some(conn) = &conn {
                match step {
                    Step::Wait => {}
                    Step::Move => self.client.after_refusal(conn, &err).await,
                    _ => self.client.move_on(conn, Target::Other).await,
                }
            }
            let end = attempts.start();
            // Re-send only once every lower sequence has settled. If one had to be waited
            // for, it just went through (or failed for good): no back-off then.
            let waited = match self.wait_turn(seq, end).await {
                Ok(w) => w,
                Err(true) => return Err(attempts.fail(self.stopped_error())),
                Err(false) => return Err(attempts.fail(err)),
            };
            if !waited {
                attempts.pause(err).await?;
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            attempts.sent += 1;
            sent = self.send(frame).await;
        }
    }

    /// Waits until `seq` is the lowest pending sequence. `Ok(true)`: a lower one had to
    /// be waited for. `Err(true)`: the producer stopped; `Err(false)`: `end` passed.
    async fn wait_turn(&self, seq: u64, end: Instant) -> Result<bool, bool> {
        let mut waited = false;
        loop {
            let notified = self.turn.notified();
            tokio::pin!(notified);
            notified.as_mut().enable(); // registered before the check: no wake-up lost
            if self.stopped.load(Ordering::Acquire) {
                return Err(true);
            }
            if self.seqs.lock().unwrap().pending.first() == Some(&seq) {
                return Ok(waited);
            }
            if tokio::time::timeout_at(end.into(), notified).await.is_err() {
                return Err(false);
            }
            waited = true;
        }
    }

    fn stopped_error(&self) -> Error {
        Error::ProducerStopped(format!(
            "producer {:#018x} stopped after an append failed for good; later sequences cannot follow it: start a new producer",
            self.id
        ))
    }
}

/// Settles a sequence whose append future was dropped before it completed: its attempt
/// may or may not be written and later sequences could not follow it, so the producer
/// stops (every later call: `ProducerStopped`) instead of waiting for it for ever.
struct Settle<'a> {
    p: &'a Producer,
    seq: u64,
    exclusive: bool,
    armed: bool,
}

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.p.stopped.store(true, Ordering::Release);
        let mut g = self.p.seqs.lock().unwrap_or_else(|e| e.into_inner());
        g.pending.remove(&self.seq);
        g.failed.remove(&self.seq);
        if self.exclusive {
            g.exclusive = false;
        }
        drop(g);
        self.p.turn.notify_waiters();
    }
}

/// A conditional append counted in `want_exclusive` while it waits; uncounted if dropped.
struct Waiting<'a> {
    p: &'a Producer,
    on: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.on {
            self.p.seqs.lock().unwrap_or_else(|e| e.into_inner()).want_exclusive -= 1;
            self.p.turn.notify_waiters();
        }
    }
}

/// A random producer id (std's randomly keyed hasher, the clock and the process id).
fn rand_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod send_check {
    /// Appends of a shared producer or client can be spawned on a multi-threaded runtime
    /// (a compile-time check).
    #[allow(dead_code)]
    fn appends_are_send(p: &'static super::Producer, c: &'static crate::Client) {
        fn is_send<T: Send>(_: T) {}
        is_send(p.append(b""));
        is_send(p.append_to("s", crate::Expect::Any, b""));
        is_send(c.append(b""));
        is_send(c.append_to("s", crate::Expect::Any, b""));
    }
}
