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
//! (`ClientConfig::with_failover_timeout`) counted from the first failure. `SequenceGap`
//! and `UnknownProducer` while retrying mean an earlier sequence has not been sent again
//! yet; they are retried too (nothing was written).
//!
//! Every append of a producer goes to one shard (its state lives there): the producer
//! talks to that shard's direct port on each node (client port + 1 + shard). At most
//! `WINDOW` appends are in flight. An append that fails for good — the budget spent, or an
//! error that is not retried — stops the producer: later sequences could never follow it,
//! so every later call fails with [`Error::ProducerStopped`]; start a new producer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, Semaphore};

use crate::client::{answer, Client, ClientConfig, Error, Position};
use crate::codec::{self, ErrorCode, ProducerSeq, Response};

/// Appends of one producer in flight at most: the positions a shard remembers per producer.
pub const WINDOW: usize = 64;

/// A successful idempotent append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub position: Position,
    pub sequence: u64,
    /// The shard had it already (an earlier attempt was written): `position` is that one's.
    pub duplicate: bool,
}

/// An idempotent producer bound to one shard; cheap to share (`Arc`) across tasks.
pub struct Producer {
    client: Client,
    id: u64,
    shard: u16,
    next_seq: Mutex<u64>,
    window: Semaphore,
    stopped: AtomicBool,
    retries: std::sync::atomic::AtomicU64,
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
        Ok(Producer {
            client,
            id,
            shard,
            next_seq: Mutex::new(next_seq),
            window: Semaphore::new(WINDOW),
            stopped: AtomicBool::new(false),
            retries: Default::default(),
        })
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
        if payload.len() > codec::MAX_PAYLOAD {
            return Err(Error::Codec(codec::CodecError::PayloadTooLarge(payload.len())));
        }
        let _slot = self.window.acquire().await.expect("the semaphore is never closed");
        // Sequence numbers and first sends in the same order, under one lock.
        let (seq, frame, first) = {
            let mut next = self.next_seq.lock().await;
            if self.stopped.load(Ordering::Acquire) {
                return Err(self.stopped_error());
            }
            let seq = *next;
            *next += 1;
            let mut frame = Vec::with_capacity(payload.len() + codec::FRAME_HEADER_LEN + codec::APPEND2_MAX_HEADER);
            codec::encode_append2(0, Some(ProducerSeq { id: self.id, seq }), payload, &mut frame);
            let first = match self.client.connection().await {
                Ok(conn) => conn.send(frame.clone()).await.map(|rx| (conn, rx)),
                Err(e) => Err(e),
            };
            (seq, frame, first)
        };
        let r = self.complete(seq, frame, first).await;
        if r.is_err() {
            self.stopped.store(true, Ordering::Release);
        }
        r
    }

    async fn complete(
        &self,
        seq: u64,
        frame: Vec<u8>,
        first: Result<
            (Arc<crate::client::Conn>, tokio::sync::oneshot::Receiver<Result<crate::client::Reply, Error>>),
            Error,
        >,
    ) -> Result<Appended, Error> {
        let timeout = self.client.cfg.request_timeout;
        let mut give_up: Option<Instant> = None;
        let mut backoff = Duration::from_millis(20);
        let mut attempt = Some(first);
        loop {
            let sent = match attempt.take() {
                Some(s) => s,
                None => match self.client.connection().await {
                    Ok(conn) => conn.send(frame.clone()).await.map(|rx| (conn, rx)),
                    Err(e) => Err(e),
                },
            };
            let (conn, err) = match sent {
                Err(e) => (None, e),
                Ok((conn, rx)) => match answer(rx, timeout).await.and_then(|r| match r.response()? {
                    Response::Appended2 { shard, offset, duplicate } => {
                        Ok(Appended { position: Position { shard, offset }, sequence: seq, duplicate })
                    }
                    _ => Err(Error::Protocol("expected Appended2".into())),
                }) {
                    Ok(a) => return Ok(a),
                    Err(e) => (Some(conn), e),
                },
            };
            if !retried(&err) {
                return Err(err);
            }
            if let Some(conn) = &conn {
                match (&err, err.code()) {
                    (_, Some(ErrorCode::SequenceGap | ErrorCode::UnknownProducer)) => {}
                    (Error::Server { message, .. }, Some(ErrorCode::NotLeader)) if !message.is_empty() => {
                        self.client.move_on(conn, Some(message)).await
                    }
                    _ => self.client.move_on(conn, None).await,
                }
            }
            let now = Instant::now();
            let end = *give_up.get_or_insert(now + self.client.cfg.failover_timeout);
            if now + backoff >= end {
                return Err(err);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(200));
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn stopped_error(&self) -> Error {
        Error::ProducerStopped(format!(
            "producer {:#018x} stopped after an append failed for good; later sequences cannot follow it: start a new producer",
            self.id
        ))
    }
}

/// Whether an idempotent append is sent again after this error: everything where it may
/// not be in the log and sending it again cannot store it twice.
fn retried(e: &Error) -> bool {
    use ErrorCode::*;
    match e {
        Error::Io(_) | Error::Closed | Error::NotSent | Error::Timeout(_) | Error::Unreachable(_) | Error::Tls(_) => {
            true
        }
        Error::Server { .. } => matches!(
            e.code(),
            Some(
                NotLeader
                    | Unavailable
                    | Fenced
                    | OutcomeUnknown
                    | ReplicationTimeout
                    | SequenceGap
                    | UnknownProducer
                    | ShuttingDown
                    | Overloaded
            )
        ),
        _ => false,
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
