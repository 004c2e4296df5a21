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

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::codec::{self, decode_frame, ErrorCode, Hint, Leadership, Request, Response, Role, PROTOCOL_VERSION};
use crate::leadership::{Seen, Target, PROBE_ID};
use crate::record::Records;
use crate::tls;

/// Requests one connection may have queued toward its writer.
const MAX_QUEUED_REQUESTS: usize = 4096;
/// Back-off between attempts: from 20 ms, doubling, at most 100 ms.
const BACKOFF_START: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub enum Error {
    Io(std::io::Error),
    Tls(String),
    Codec(codec::CodecError),
    /// The server answered with an error frame (`hint`: a version-3 refusal's, see
    /// docs/protocol.md §6.3).
    Server {
        code: u16,
        message: String,
        hint: Option<Hint>,
    },
    /// The connection closed before the answer arrived (the request may have been sent:
    /// outcome unknown for an append).
    Closed,
    Protocol(String),
    /// No node could be reached (nothing was sent).
    Unreachable(String),
    /// The request was never handed to a connection (it had closed): nothing was sent.
    NotSent,
    /// No answer within the request timeout (outcome unknown for an append).
    Timeout(Duration),
    /// The connection was given up while the request waited: its node went silent for
    /// a whole lease, or answered a probe that it no longer leads with a live lease. It
    /// cannot acknowledge the request any more within its lease; the request may still
    /// be in its log (outcome unknown).
    Abandoned(String),
    /// An idempotent producer refuses appends after one failed for good (nothing sent).
    ProducerStopped(String),
    /// A stream append's expected version did not hold: nothing was written. `current`
    /// is the stream's version (its last event's; `None`: the stream has no event).
    WrongExpectedVersion {
        current: Option<u64>,
        message: String,
    },
    /// What was asked for was deleted by retention: `first` is the first offset (a
    /// shard read or tail) or stream version (a stream read or subscription) still held.
    OutOfRange {
        first: u64,
        message: String,
    },
    /// Refused by the client before anything was sent: a bad argument or configuration
    /// (an address without a port, a server name the node's certificate does not carry,
    /// a stream name, a payload too large). Not retried; the message names the value.
    Invalid(String),
    /// An append gave up with `last` after an earlier attempt got no definite answer (it
    /// may still be written): the outcome is unknown whatever `last` says.
    InDoubt {
        attempts: u32,
        last: Box<Error>,
    },
}

/// What a failed append may have left behind, over all its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No attempt of it is in the log, nor can one land later.
    NotWritten,
    /// It is in the log, though the call failed (`StaleSequence`: the original is).
    Written,
    /// It may or may not be in the log (read the log to find out).
    Unknown,
}

impl Error {
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server { code, .. } => ErrorCode::from_u16(*code),
            Error::WrongExpectedVersion { .. } => Some(ErrorCode::WrongExpectedVersion),
            Error::OutOfRange { .. } => Some(ErrorCode::OutOfRange),
            Error::InDoubt { last, .. } => last.code(),
            _ => None,
        }
    }

    /// Whether a failed append may be in the log.
    pub fn outcome(&self) -> Outcome {
        use ErrorCode::*;
        match self {
            Error::Unreachable(_)
            | Error::NotSent
            | Error::Tls(_)
            | Error::Invalid(_)
            | Error::ProducerStopped(_)
            | Error::WrongExpectedVersion { .. }
            | Error::OutOfRange { .. } => Outcome::NotWritten,
            Error::Codec(codec::CodecError::PayloadTooLarge(_)) => Outcome::NotWritten,
            Error::Server { .. } => match self.code() {
                Some(
                    NotLeader | Unavailable | Fenced | BadFrame | TooLarge | UnknownOpcode | BadVersion | NoSuchShard
                    | Overloaded | ShuttingDown | BadHandshake | SequenceGap | UnknownProducer | WrongShard
                    | BadRequest | Forbidden,
                ) => Outcome::NotWritten,
                Some(StaleSequence) => Outcome::Written,
                _ => Outcome::Unknown,
            },
            _ => Outcome::Unknown,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o: {e}"),
            Error::Tls(e) => write!(f, "tls: {e}"),
            Error::Codec(e) => write!(f, "protocol: {e}"),
            Error::Server { code, message, .. } => {
                let name = ErrorCode::from_u16(*code).map(|c| format!("{c:?}")).unwrap_or_default();
                write!(f, "server error {code} {name}: {message}")
            }
            Error::Closed => write!(f, "connection closed before the answer"),
            Error::Protocol(m) => write!(f, "protocol: {m}"),
            Error::Unreachable(m) => write!(f, "no node reachable: {m}"),
            Error::NotSent => write!(f, "connection closed before the request was sent"),
            Error::Timeout(d) => write!(f, "no answer within {d:?}"),
            Error::Abandoned(why) => write!(f, "connection abandoned while the request waited: {why}"),
            Error::ProducerStopped(m) => write!(f, "{m}"),
            Error::WrongExpectedVersion { message, .. } => write!(f, "server error 21 WrongExpectedVersion: {message}"),
            Error::OutOfRange { message, .. } => write!(f, "server error 7 OutOfRange: {message}"),
            Error::Invalid(m) => write!(f, "{m}"),
            Error::InDoubt { attempts, last } => write!(
                f,
                "{last} (outcome unknown: an earlier of {attempts} attempts got no answer and may still be written)"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// Where an event was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub shard: u16,
    pub offset: u64,
}

/// A record read back, CRC verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: u64,
    pub epoch: u32,
    /// Set on records of idempotent appends.
    pub producer: Option<crate::codec::ProducerSeq>,
    /// Set on events appended to a stream: its name and the event's version there.
    pub stream: Option<StreamVersion>,
    pub payload: Vec<u8>,
}

/// An event's stream and its version in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamVersion {
    pub name: String,
    pub version: u64,
}

/// What the server said in its `HelloOk`.
#[derive(Debug, Clone, Copy)]
pub struct ServerInfo {
    pub shard: u16,
    pub shard_count: u16,
    pub role: Role,
    pub epoch: u32,
    /// The node's view of leadership (protocol version 3; `None` from older servers).
    pub leadership: Option<Leadership>,
}

/// How to reach a server: mTLS (the default) or plaintext (`--insecure` servers only).
#[derive(Clone)]
pub struct ClientConfig {
    tls: Option<(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
    pub(crate) failover_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

const FAILOVER_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl ClientConfig {
    pub fn mtls(
        ca: impl AsRef<Path>,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
        server_name: &str,
    ) -> Result<Self, Error> {
        let cfg = tls::client_config(ca.as_ref(), Some((cert.as_ref(), key.as_ref()))).map_err(Error::Tls)?;
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| Error::Tls(format!("server name {server_name}: {e}")))?;
        Ok(ClientConfig::with_tls(Some((Arc::new(cfg), name))))
    }

    fn with_tls(tls: Option<(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>) -> Self {
        ClientConfig {
            tls,
            failover_timeout: FAILOVER_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
        }
    }

    /// How long an append keeps looking for a leader that takes it (default 5 s).
    pub fn with_failover_timeout(mut self, d: Duration) -> Self {
        self.failover_timeout = d;
        self
    }

    /// How long opening a connection may take — TCP, TLS and the `HelloOk` — before the
    /// next address is tried (default 3 s).
    pub fn with_connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// How long a request waits for its answer (default 30 s; then outcome unknown).
    pub fn with_request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }
    /// From an already built rustls config (e.g. one with no client certificate, for tests).
    pub fn from_rustls(cfg: Arc<rustls::ClientConfig>, server_name: &str) -> Result<Self, Error> {
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| Error::Tls(format!("server name {server_name}: {e}")))?;
        Ok(ClientConfig::with_tls(Some((cfg, name))))
    }
    pub fn insecure() -> Self {
        ClientConfig::with_tls(None)
    }
}

pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A connection after its `Hello`: the reader and writer halves and the server's `HelloOk`
/// (`version`: the protocol version it was opened with).
pub(crate) struct Greeted {
    pub reader: FrameReader<tokio::io::ReadHalf<Box<dyn Stream>>>,
    pub writer: tokio::io::WriteHalf<Box<dyn Stream>>,
    pub info: ServerInfo,
    pub version: u16,
}

/// Opens a connection and says `Hello`, then `then` in the same write (its answer is left
/// to the caller): with this build's protocol version, and once more on a new connection
/// with [`codec::FALLBACK_VERSION`] when the server refuses that with `BadVersion` — a
/// server older than this client, as half-way through a rolling upgrade
/// (docs/operations.md §15).
pub(crate) async fn greet(addr: &str, cfg: &ClientConfig, then: Option<&Request<'_>>) -> Result<Greeted, Error> {
    match greet_with(addr, cfg, then, PROTOCOL_VERSION).await {
        Err(Error::Server { code, .. }) if code == ErrorCode::BadVersion as u16 => {
            greet_with(addr, cfg, then, codec::FALLBACK_VERSION).await
        }
        r => r,
    }
}

async fn greet_with(
    addr: &str,
    cfg: &ClientConfig,
    then: Option<&Request<'_>>,
    version: u16,
) -> Result<Greeted, Error> {
    let stream = open(addr, cfg).await?;
    let (r, mut writer) = tokio::io::split(stream);
    let mut reader = FrameReader::new(r);
    let mut out = Vec::new();
    Request::Hello { version }.encode(0, &mut out);
    if let Some(req) = then {
        req.encode(1, &mut out);
    }
    writer.write_all(&out).await?;
    let reply = reader.next().await?.ok_or(Error::Closed)?;
    let info = match reply.response()? {
        Response::HelloOk { shard, shard_count, role, epoch, leadership, .. } => {
            ServerInfo { shard, shard_count, role, epoch, leadership }
        }
        _ => return Err(Error::Protocol("expected HelloOk".into())),
    };
    Ok(Greeted { reader, writer, info, version })
}

pub(crate) async fn open(addr: &str, cfg: &ClientConfig) -> Result<Box<dyn Stream>, Error> {
    check_addr(addr)?;
    let tcp = tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| Error::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")))??;
    tcp.set_nodelay(true)?;
    match &cfg.tls {
        None => Ok(Box::new(tcp)),
        Some((c, name)) => {
            let conn = tokio_rustls::TlsConnector::from(c.clone());
            let s = conn.connect(name.clone(), tcp).await.map_err(|e| {
                let bad_cert = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()).is_some_and(|r| {
                    matches!(r, rustls::Error::InvalidCertificate(_))
                });
                if bad_cert {
                    // No retry cures a certificate that does not match: say which setting.
                    Error::Invalid(format!(
                        "{addr}: TLS with server name {:?} failed: {e} (check the server name and the CA, or the client certificate)",
                        name.to_str()
                    ))
                } else {
                    Error::Tls(e.to_string())
                }
            })?;
            Ok(Box::new(s))
        }
    }
}

/// `Error::Invalid` unless `addr` is `host:port`.
pub(crate) fn check_addr(addr: &str) -> Result<(), Error> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => Ok(()),
        _ => Err(Error::Invalid(format!("address {addr:?} is not host:port"))),
    }
}

/// What an append does after an attempt failed (docs/protocol.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing was written there: try again, on another node (or the leader named).
    Move,
    /// The attempt may have landed: an idempotent append is sent again, a plain one not.
    Lost,
    /// An idempotent append waits for an earlier sequence of its producer.
    Wait,
    /// A definite answer no retry changes.
    Stop,
}

pub(crate) fn step(e: &Error) -> Step {
    use ErrorCode::*;
    match e {
        Error::Unreachable(_) | Error::NotSent | Error::Tls(_) => Step::Move,
        Error::Io(_) | Error::Closed | Error::Timeout(_) | Error::Abandoned(_) => Step::Lost,
        Error::Server { .. } => match e.code() {
            Some(NotLeader | Unavailable | Fenced | ShuttingDown | Overloaded) => Step::Move,
            Some(OutcomeUnknown | ReplicationTimeout) => Step::Lost,
            Some(SequenceGap | UnknownProducer) => Step::Wait,
            _ => Step::Stop,
        },
        _ => Step::Stop,
    }
}

/// One append's attempts, the one retry path of plain appends, stream appends and
/// producers: the failover budget, the back-off (20 ms doubling to 100 ms, or a refusal's
/// retry hint), and whether an attempt may have landed (then the call can no longer say
/// `NotWritten`).
pub(crate) struct Attempts {
    budget: Duration,
    pub(crate) deadline: Option<Instant>,
    backoff: Duration,
    /// The last retry hint a refusal gave (a take-over under way): later pauses of this
    /// append use it too (the node is restarting: refused connections are cheap to retry).
    hint: Option<Duration>,
    pub(crate) sent: u32,
    pub(crate) in_doubt: bool,
}

impl Attempts {
    /// The budget starts now (`start`), or at the first failure (a producer's).
    pub(crate) fn new(cfg: &ClientConfig, start: bool) -> Attempts {
        let deadline = start.then(|| Instant::now() + cfg.failover_timeout);
        Attempts {
            budget: cfg.failover_timeout,
            deadline,
            backoff: BACKOFF_START,
            hint: None,
            sent: 0,
            in_doubt: false,
        }
    }

    pub(crate) fn start(&mut self) -> Instant {
        *self.deadline.get_or_insert_with(|| Instant::now() + self.budget)
    }

    /// Notes an attempt's failure; its step.
    pub(crate) fn failed(&mut self, e: &Error) -> Step {
        let s = step(e);
        if s == Step::Lost {
            self.in_doubt = true;
        }
        s
    }

    /// [`Attempts::failed`] for an attempt on `conn`. A connection to a follower never
    /// writes an append (a node that takes over closes the connections greeted as a
    /// follower's first; other role changes restart its process): an attempt lost there
    /// was not written, and is answered as such.
    pub(crate) fn failed_on(&mut self, conn: &Conn, e: Error) -> (Step, Error) {
        if conn.info.role == Role::Follower && step(&e) == Step::Lost && !matches!(e, Error::Server { .. }) {
            let why = format!(
                "{}: a follower's connection ended before its answer ({e}); a follower writes nothing",
                conn.addr
            );
            return (Step::Move, Error::Unreachable(why));
        }
        (self.failed(&e), e)
    }

    /// `e` as the call's error, with the outcome over all attempts.
    pub(crate) fn fail(&self, e: Error) -> Error {
        if self.in_doubt && e.outcome() == Outcome::NotWritten {
            Error::InDoubt { attempts: self.sent, last: Box::new(e) }
        } else {
            e
        }
    }

    /// Sleeps the back-off, or the retry hint `e` carries (a take-over under way: ask
    /// again soon, without growing the back-off); `Err` (the call's error) when the
    /// budget would end first.
    pub(crate) async fn pause(&mut self, e: Error) -> Result<(), Error> {
        let end = self.start();
        let hinted = match &e {
            Error::Server { hint: Some(h), .. } if h.retry_ms > 0 => Some(Duration::from_millis(h.retry_ms as u64)),
            _ => None,
        };
        let hinted = hinted.or(self.hint);
        self.hint = hinted;
        let wait = hinted.unwrap_or(self.backoff);
        if Instant::now() + wait >= end {
            return Err(self.fail(e));
        }
        tokio::time::sleep(wait).await;
        if hinted.is_none() {
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        }
        Ok(())
    }
}

/// An owned frame as received.
pub(crate) struct Reply {
    op: u8,
    req_id: u64,
    body: Vec<u8>,
}

impl Reply {
    pub(crate) fn response(&self) -> Result<Response<'_>, Error> {
        let f = codec::Frame { op: self.op, req_id: 0, body: &self.body };
        match Response::parse(&f).map_err(Error::Codec)? {
            Response::Error { code, message } => Err(Error::Server { code, message: message.to_string(), hint: None }),
            Response::Refusal { code, message, hint } => {
                Err(Error::Server { code, message: message.to_string(), hint: Some(hint) })
            }
            Response::WrongVersion { current, message } => {
                Err(Error::WrongExpectedVersion { current, message: message.to_string() })
            }
            Response::OutOfRange { first, message } => Err(Error::OutOfRange { first, message: message.to_string() }),
            r => Ok(r),
        }
    }
}

struct Cmd {
    frame: Vec<u8>,
    /// `None`: a probe (a `Hello` with `PROBE_ID`), answered out of turn.
    reply: Option<oneshot::Sender<Result<Reply, Error>>>,
    /// An append: the watchdog may probe and abandon the connection while it waits. A
    /// read holds the node's reading of the connection (a probe is answered after it),
    /// so while one waits the watchdog waits too.
    watch: bool,
}

/// Reads whole frames from a stream, keeping leftovers between calls.
pub(crate) struct FrameReader<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub(crate) fn new(r: R) -> Self {
        FrameReader { r, buf: Vec::with_capacity(64 * 1024), start: 0 }
    }
    pub(crate) async fn next(&mut self) -> Result<Option<Reply>, Error> {
        loop {
            if let Some((f, used)) = decode_frame(&self.buf[self.start..]).map_err(Error::Codec)? {
                let reply = Reply { op: f.op, req_id: f.req_id, body: f.body.to_vec() };
                self.start += used;
                return Ok(Some(reply));
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.r.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Where a request's answer goes.
type Waiter = oneshot::Sender<Result<Reply, Error>>;

/// Requests sent and not yet answered, in order (each with when it was handed to the
/// socket). `closed` is set by the reader when it stops: from then on the writer
/// answers new requests with `Closed` itself (otherwise a request queued just after the
/// reader's final drain would wait forever).
#[derive(Default)]
struct Waiting {
    queue: VecDeque<(u64, Instant, Waiter, bool)>,
    closed: bool,
    /// When the last frame arrived (None: none since the `HelloOk`).
    heard: Option<Instant>,
    /// A probe was sent then and nothing has arrived since.
    probing: Option<Instant>,
    /// Why the connection was given up (what still waits fails as `Abandoned`).
    abandoned: Option<String>,
}

/// One connection: a writer task and a reader task matching answers to requests in
/// order, and — against nodes that advertise a lease — a watchdog that probes and
/// abandons it when it goes silent (see the module docs).
pub(crate) struct Conn {
    tx: mpsc::Sender<Cmd>,
    pub(crate) info: ServerInfo,
    /// The address it was opened to.
    pub(crate) addr: String,
}

impl Conn {
    /// Connects, handshakes and says Hello, all within `timeout`.
    async fn open(
        addr: &str,
        cfg: &ClientConfig,
        timeout: Duration,
        seen: Arc<std::sync::Mutex<Seen>>,
    ) -> Result<Conn, Error> {
        match tokio::time::timeout(timeout, Conn::open_now(addr, cfg, seen)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no HelloOk within {timeout:?}"),
            ))),
        }
    }

    async fn open_now(addr: &str, cfg: &ClientConfig, seen: Arc<std::sync::Mutex<Seen>>) -> Result<Conn, Error> {
        let Greeted { mut reader, writer: mut w, info, version } = greet(addr, cfg, None).await?;
        seen.lock().unwrap().learn(info.leadership);
        let waiting: Arc<std::sync::Mutex<Waiting>> = Default::default();
        let (tx, mut rx) = mpsc::channel::<Cmd>(MAX_QUEUED_REQUESTS);
        let w_waiting = waiting.clone();
        let kill = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(async move {
            // The writer numbers requests (1, 2, ...); answers must carry the same ids,
            // in the same order.
            let mut next_id = 1u64;
            let mut frames = Vec::new();
            while let Some(cmd) = rx.recv().await {
                frames.clear();
                let mut queue = |mut c: Cmd, frames: &mut Vec<u8>| {
                    let Some(reply) = c.reply else {
                        frames.extend_from_slice(&c.frame); // a probe: nobody waits in line
                        return;
                    };
                    c.frame[5..13].copy_from_slice(&next_id.to_le_bytes());
                    let mut w = w_waiting.lock().unwrap();
                    if w.closed {
                        let _ = reply.send(Err(Error::NotSent));
                        return;
                    }
                    w.queue.push_back((next_id, Instant::now(), reply, c.watch));
                    drop(w);
                    next_id += 1;
                    frames.extend_from_slice(&c.frame);
                };
                queue(cmd, &mut frames);
                // Coalesce whatever else is queued into one write.
                while let Ok(more) = rx.try_recv() {
                    queue(more, &mut frames);
                }
                if w.write_all(&frames).await.is_err() || w.flush().await.is_err() {
                    break;
                }
            }
            // Every handle is gone (or the socket failed): let the server close its side,
            // which ends the reader task too.
            let _ = w.shutdown().await;
        });
        // A server older than version 3 tells nothing of leases and would refuse the
        // probe's version: no watchdog on its connections (as before version 3).
        let limits = if version >= codec::LEADERSHIP_VERSION {
            let s = seen.lock().unwrap();
            s.probe_after().zip(s.silent_limit())
        } else {
            None
        };
        // Any role: a follower answers at once, so one that goes silent is gone too (a
        // restarting process's connections can outlive it for a while, unanswered).
        if let Some((probe_after, silent)) = limits {
            let (waiting, kill, tx) = (waiting.clone(), kill.clone(), tx.downgrade());
            tokio::spawn(watchdog(waiting, kill, tx, probe_after, silent));
        }
        let r_waiting = waiting.clone();
        let (r_kill, r_addr, r_epoch) = (kill.clone(), addr.to_string(), info.epoch);
        tokio::spawn(async move {
            let waiting = r_waiting;
            loop {
                let r = tokio::select! {
                    r = reader.next() => r,
                    _ = r_kill.notified() => break,
                };
                if let Ok(Some(reply)) = &r {
                    let mut w = waiting.lock().unwrap();
                    (w.heard, w.probing) = (Some(Instant::now()), None);
                    if reply.op == codec::op::HELLO_OK && reply.req_id == PROBE_ID {
                        // A probe's answer: does the node still lead, with a live lease?
                        let verdict = match reply.response() {
                            Ok(Response::HelloOk { role, epoch, leadership, .. }) => {
                                seen.lock().unwrap().usable(&r_addr, role, epoch, leadership, Instant::now())
                            }
                            _ => Err("bad answer to a probe".to_string()),
                        };
                        if let Err(why) = verdict {
                            w.abandoned = Some(why);
                            break;
                        }
                        continue;
                    }
                }
                let waiter = waiting.lock().unwrap().queue.pop_front();
                match (r, waiter) {
                    (Ok(Some(reply)), Some((id, _, w, _))) if reply.req_id == id => {
                        let _ = w.send(Ok(reply));
                    }
                    (Ok(Some(reply)), Some((id, _, w, _))) => {
                        let msg = format!("answer for request {} arrived where {id} was due", reply.req_id);
                        let _ = w.send(Err(Error::Protocol(msg)));
                        break;
                    }
                    (Err(e), Some((_, _, w, _))) => {
                        let _ = w.send(Err(e));
                        break;
                    }
                    _ => break,
                }
            }
            // Fail whoever still waits; a node given up on is a suspect.
            let mut w = waiting.lock().unwrap();
            w.closed = true;
            if w.abandoned.is_some() {
                seen.lock().unwrap().suspect(&r_addr, r_epoch, Instant::now());
            }
            let why = w.abandoned.clone();
            for (_, _, tx, _) in w.queue.drain(..) {
                let _ = tx.send(Err(why.clone().map_or(Error::Closed, Error::Abandoned)));
            }
        });
        Ok(Conn { tx, info, addr: addr.to_string() })
    }

    /// Sends a request and waits for its answer; `watch`: it is an append (see `Cmd`).
    async fn call(&self, frame: Vec<u8>, timeout: Duration, watch: bool) -> Result<Reply, Error> {
        let rx = self.send(frame, watch).await?;
        answer(rx, timeout).await
    }

    /// Hands a request to the writer (requests leave in the order of these calls);
    /// `watch`: it is an append (see `Cmd`).
    pub(crate) async fn send(
        &self,
        frame: Vec<u8>,
        watch: bool,
    ) -> Result<oneshot::Receiver<Result<Reply, Error>>, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Cmd { frame, reply: Some(reply), watch }).await.map_err(|_| Error::NotSent)?;
        Ok(rx)
    }
}

/// Watches a connection to a leader that advertises a lease: when a request has waited
/// `probe_after` with nothing received, sends a probe (a `Hello`, answered at once by a
/// live node even behind waiting appends; the reader judges the answer); when nothing
/// has arrived for `silent` while a request waits, abandons the connection. Ends with
/// the connection (it holds no sender that keeps the writer alive).
async fn watchdog(
    waiting: Arc<std::sync::Mutex<Waiting>>,
    kill: Arc<tokio::sync::Notify>,
    tx: mpsc::WeakSender<Cmd>,
    probe_after: Duration,
    silent: Duration,
) {
    let tick = (probe_after / 4).max(Duration::from_millis(5));
    loop {
        tokio::time::sleep(tick).await;
        let now = Instant::now();
        let probe = {
            let mut w = waiting.lock().unwrap();
            if w.closed || w.abandoned.is_some() {
                return;
            }
            let Some(&(_, sent, _, _)) = w.queue.front() else { continue };
            if w.queue.iter().any(|&(_, _, _, watch)| !watch) {
                continue; // a read holds the node's reading: a probe would wait behind it
            }
            // Quiet since the later of the last frame and the oldest request's send.
            let quiet = now.saturating_duration_since(w.heard.map_or(sent, |h| h.max(sent)));
            if quiet >= silent {
                w.abandoned = Some(format!("nothing received for {quiet:?} (the lease is {silent:?})"));
                kill.notify_one();
                return;
            }
            let due = quiet >= probe_after && w.probing.is_none();
            if due {
                w.probing = Some(now);
            }
            due
        };
        if probe {
            let Some(tx) = tx.upgrade() else { return };
            let mut frame = Vec::new();
            Request::Hello { version: PROTOCOL_VERSION }.encode(PROBE_ID, &mut frame);
            if tx.try_send(Cmd { frame, reply: None, watch: false }).is_err() {
                // A full queue: the writer is stuck behind the socket; the silence decides.
                continue;
            }
        }
    }
}

/// Waits for the answer to a request handed over with `Conn::send`.
pub(crate) async fn answer(rx: oneshot::Receiver<Result<Reply, Error>>, timeout: Duration) -> Result<Reply, Error> {
    match tokio::time::timeout(timeout, rx).await {
        Ok(r) => r.map_err(|_| Error::Closed)?,
        Err(_) => Err(Error::Timeout(timeout)),
    }
}

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

/// `"A,B"` → `["A", "B"]`.
pub(crate) fn split_addrs(addrs: &str) -> Vec<String> {
    addrs.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect()
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

/// The direct address of `shard` given a node's client address `host:port`.
pub fn shard_addr(addr: &str, shard: u16) -> Result<String, Error> {
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| Error::Invalid(format!("address {addr:?} has no port")))?;
    let port: u16 = port.parse().map_err(|_| Error::Invalid(format!("bad port in {addr:?}")))?;
    let p =
        port.checked_add(1 + shard).ok_or_else(|| Error::Invalid(format!("port overflow: {addr:?} shard {shard}")))?;
    Ok(format!("{host}:{p}"))
}

pub(crate) fn to_records(buf: &[u8]) -> Result<Vec<Record>, Error> {
    Records::new(buf)
        .map(|r| {
            r.map(|r| Record {
                offset: r.offset,
                epoch: r.epoch,
                producer: r.producer,
                stream: r.stream.map(|s| StreamVersion { name: s.name.to_string(), version: s.version }),
                payload: r.payload.to_vec(),
            })
            .map_err(|e| Error::Protocol(format!("bad record from server: {e}")))
        })
        .collect()
}

/// A live tail: records pushed by the server as they become durable, in offset order.
/// It holds a connection of its own.
pub struct Tail {
    reader: FrameReader<tokio::io::ReadHalf<Box<dyn Stream>>>,
    _writer: tokio::io::WriteHalf<Box<dyn Stream>>,
    pending: VecDeque<Record>,
    /// The offset the next record received must have.
    fetched: u64,
    /// The offset after the last record handed out.
    next_offset: u64,
}

impl Tail {
    /// Tails `shard` of the node whose client address is `addr` (connects to the shard's
    /// direct port); with several addresses (`"A,B"`), of the first that answers.
    pub async fn start(addr: &str, cfg: &ClientConfig, shard: u16, from: u64) -> Result<Tail, Error> {
        let mut errs = Vec::new();
        for a in split_addrs(addr) {
            let direct = shard_addr(&a, shard)?;
            match tokio::time::timeout(cfg.connect_timeout, Tail::start_at(&direct, cfg, shard, from)).await {
                Ok(Ok(t)) => return Ok(t),
                Ok(Err(e)) => errs.push(format!("{direct}: {e}")),
                Err(_) => errs.push(format!("{direct}: no answer in {:?}", cfg.connect_timeout)),
            }
        }
        Err(Error::Unreachable(if errs.is_empty() { format!("no address in {addr:?}") } else { errs.join("; ") }))
    }

    async fn start_at(direct: &str, cfg: &ClientConfig, shard: u16, from: u64) -> Result<Tail, Error> {
        let g = greet(direct, cfg, Some(&Request::Tail { shard, from })).await?;
        Ok(Tail { reader: g.reader, _writer: g.writer, pending: VecDeque::new(), fetched: from, next_offset: from })
    }

    /// The offset after the last record [`Tail::next`] handed out (`from` before the
    /// first): where a new tail resumes without skipping or repeating a record.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// The next record; `Ok(None)` when the server closed the tail.
    pub async fn next(&mut self) -> Result<Option<Record>, Error> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                self.next_offset = r.offset + 1;
                return Ok(Some(r));
            }
            let Some(reply) = self.reader.next().await? else {
                return Ok(None);
            };
            match reply.response()? {
                Response::Records { records, .. } => {
                    for r in to_records(records)? {
                        if r.offset != self.fetched {
                            return Err(Error::Protocol(format!(
                                "tail gap: expected {}, got {}",
                                self.fetched, r.offset
                            )));
                        }
                        self.fetched += 1;
                        self.pending.push_back(r);
                    }
                }
                _ => return Err(Error::Protocol("expected Records".into())),
            }
        }
    }
}
