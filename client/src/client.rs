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
//! `Client` into as many tasks as you like. An append answered `NotLeader` is retried once
//! on the leader the follower names (the write was not taken, so the retry is safe).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::codec::{self, decode_frame, ErrorCode, Request, Response, Role, PROTOCOL_VERSION};
use crate::record::Records;
use crate::tls;

/// Requests one connection may have queued toward its writer.
const MAX_QUEUED_REQUESTS: usize = 4096;

#[derive(Debug)]
pub enum Error {
    Io(std::io::Error),
    Tls(String),
    Codec(codec::CodecError),
    /// The server answered with an error frame.
    Server {
        code: u16,
        message: String,
    },
    /// The connection closed before the answer arrived.
    Closed,
    Protocol(String),
}

impl Error {
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server { code, .. } => ErrorCode::from_u16(*code),
            _ => None,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o: {e}"),
            Error::Tls(e) => write!(f, "tls: {e}"),
            Error::Codec(e) => write!(f, "protocol: {e}"),
            Error::Server { code, message } => {
                let name = ErrorCode::from_u16(*code).map(|c| format!("{c:?}")).unwrap_or_default();
                write!(f, "server error {code} {name}: {message}")
            }
            Error::Closed => write!(f, "connection closed"),
            Error::Protocol(m) => write!(f, "protocol: {m}"),
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
    pub payload: Vec<u8>,
}

/// What the server said in its `HelloOk`.
#[derive(Debug, Clone, Copy)]
pub struct ServerInfo {
    pub shard: u16,
    pub shard_count: u16,
    pub role: Role,
    pub epoch: u32,
}

/// How to reach a server: mTLS (the default) or plaintext (`--insecure` servers only).
#[derive(Clone)]
pub struct ClientConfig {
    tls: Option<(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
}

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
        Ok(ClientConfig { tls: Some((Arc::new(cfg), name)) })
    }
    /// From an already built rustls config (e.g. one with no client certificate, for tests).
    pub fn from_rustls(cfg: Arc<rustls::ClientConfig>, server_name: &str) -> Result<Self, Error> {
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| Error::Tls(format!("server name {server_name}: {e}")))?;
        Ok(ClientConfig { tls: Some((cfg, name)) })
    }
    pub fn insecure() -> Self {
        ClientConfig { tls: None }
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

async fn open(addr: &str, cfg: &ClientConfig) -> Result<Box<dyn Stream>, Error> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    match &cfg.tls {
        None => Ok(Box::new(tcp)),
        Some((c, name)) => {
            let conn = tokio_rustls::TlsConnector::from(c.clone());
            let s = conn.connect(name.clone(), tcp).await.map_err(|e| Error::Tls(e.to_string()))?;
            Ok(Box::new(s))
        }
    }
}

/// An owned frame as received.
struct Reply {
    op: u8,
    req_id: u64,
    body: Vec<u8>,
}

impl Reply {
    fn response(&self) -> Result<Response<'_>, Error> {
        let f = codec::Frame { op: self.op, req_id: 0, body: &self.body };
        match Response::parse(&f).map_err(Error::Codec)? {
            Response::Error { code, message } => Err(Error::Server { code, message: message.to_string() }),
            r => Ok(r),
        }
    }
}

struct Cmd {
    frame: Vec<u8>,
    reply: oneshot::Sender<Result<Reply, Error>>,
}

/// Reads whole frames from a stream, keeping leftovers between calls.
struct FrameReader<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    fn new(r: R) -> Self {
        FrameReader { r, buf: Vec::with_capacity(64 * 1024), start: 0 }
    }
    async fn next(&mut self) -> Result<Option<Reply>, Error> {
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

/// Requests sent and not yet answered, in order. `closed` is set by the reader when it
/// stops: from then on the writer answers new requests with `Closed` itself (otherwise
/// a request queued just after the reader's final drain would wait forever).
#[derive(Default)]
struct Waiting {
    queue: VecDeque<(u64, oneshot::Sender<Result<Reply, Error>>)>,
    closed: bool,
}

/// One connection: a writer task and a reader task matching answers to requests in order.
struct Conn {
    tx: mpsc::Sender<Cmd>,
    info: ServerInfo,
}

impl Conn {
    async fn open(addr: &str, cfg: &ClientConfig) -> Result<Conn, Error> {
        let stream = open(addr, cfg).await?;
        let (r, mut w) = tokio::io::split(stream);
        let mut reader = FrameReader::new(r);
        let mut hello = Vec::new();
        Request::Hello { version: PROTOCOL_VERSION }.encode(0, &mut hello);
        w.write_all(&hello).await?;
        let reply = reader.next().await?.ok_or(Error::Closed)?;
        let info = match reply.response()? {
            Response::HelloOk { shard, shard_count, role, epoch, .. } => ServerInfo { shard, shard_count, role, epoch },
            _ => return Err(Error::Protocol("expected HelloOk".into())),
        };
        let waiting: Arc<std::sync::Mutex<Waiting>> = Default::default();
        let (tx, mut rx) = mpsc::channel::<Cmd>(MAX_QUEUED_REQUESTS);
        let w_waiting = waiting.clone();
        tokio::spawn(async move {
            // The writer numbers requests (1, 2, ...); answers must carry the same ids,
            // in the same order.
            let mut next_id = 1u64;
            let mut frames = Vec::new();
            while let Some(cmd) = rx.recv().await {
                frames.clear();
                let mut queue = |mut c: Cmd, frames: &mut Vec<u8>| {
                    c.frame[5..13].copy_from_slice(&next_id.to_le_bytes());
                    let mut w = w_waiting.lock().unwrap();
                    if w.closed {
                        let _ = c.reply.send(Err(Error::Closed));
                        return;
                    }
                    w.queue.push_back((next_id, c.reply));
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
        });
        tokio::spawn(async move {
            loop {
                let r = reader.next().await;
                let waiter = waiting.lock().unwrap().queue.pop_front();
                match (r, waiter) {
                    (Ok(Some(reply)), Some((id, w))) if reply.req_id == id => {
                        let _ = w.send(Ok(reply));
                    }
                    (Ok(Some(reply)), Some((id, w))) => {
                        let msg = format!("answer for request {} arrived where {id} was due", reply.req_id);
                        let _ = w.send(Err(Error::Protocol(msg)));
                        break;
                    }
                    (Err(e), Some((_, w))) => {
                        let _ = w.send(Err(e));
                        break;
                    }
                    _ => break,
                }
            }
            // Fail whoever still waits.
            let mut w = waiting.lock().unwrap();
            w.closed = true;
            for (_, w) in w.queue.drain(..) {
                let _ = w.send(Err(Error::Closed));
            }
        });
        Ok(Conn { tx, info })
    }

    async fn call(&self, frame: Vec<u8>) -> Result<Reply, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Cmd { frame, reply }).await.map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

/// A handle to one server connection; cheap to clone, safe to use from many tasks.
#[derive(Clone)]
pub struct Client {
    conn: Arc<Mutex<Arc<Conn>>>,
    cfg: ClientConfig,
}

impl Client {
    pub async fn connect(addr: &str, cfg: &ClientConfig) -> Result<Client, Error> {
        let conn = Conn::open(addr, cfg).await?;
        Ok(Client { conn: Arc::new(Mutex::new(Arc::new(conn))), cfg: cfg.clone() })
    }

    /// Connects to the direct port of `shard` (client port + 1 + shard), which is
    /// served by that shard's executor: use it to read or tail a given shard.
    pub async fn connect_shard(addr: &str, shard: u16, cfg: &ClientConfig) -> Result<Client, Error> {
        Client::connect(&shard_addr(addr, shard)?, cfg).await
    }

    pub async fn info(&self) -> ServerInfo {
        self.conn.lock().await.info
    }

    async fn current(&self) -> Arc<Conn> {
        self.conn.lock().await.clone()
    }

    /// Appends one event; returns its position once it is durable on every replica.
    pub async fn append(&self, payload: &[u8]) -> Result<Position, Error> {
        if payload.len() > codec::MAX_PAYLOAD {
            return Err(Error::Codec(codec::CodecError::PayloadTooLarge(payload.len())));
        }
        let mut frame = Vec::with_capacity(payload.len() + codec::FRAME_HEADER_LEN);
        codec::encode_append(0, payload, &mut frame);
        let conn = self.current().await;
        let reply = conn.call(frame.clone()).await?;
        match reply.response() {
            Ok(Response::Appended { shard, offset }) => Ok(Position { shard, offset }),
            Err(Error::Server { code, message }) if code == ErrorCode::NotLeader as u16 && !message.is_empty() => {
                // Follow the leader once; the follower did not take the write.
                let leader = Conn::open(&message, &self.cfg).await?;
                let leader = Arc::new(leader);
                *self.conn.lock().await = leader.clone();
                match leader.call(frame).await?.response()? {
                    Response::Appended { shard, offset } => Ok(Position { shard, offset }),
                    _ => Err(Error::Protocol("expected Appended".into())),
                }
            }
            Err(e) => Err(e),
            Ok(_) => Err(Error::Protocol("expected Appended".into())),
        }
    }

    /// Reads durable records of `shard` from offset `from`, at most about `max_bytes`.
    pub async fn read(&self, shard: u16, from: u64, max_bytes: u32) -> Result<Vec<Record>, Error> {
        let mut frame = Vec::new();
        Request::Read { shard, from, max_bytes }.encode(0, &mut frame);
        let reply = self.current().await.call(frame).await?;
        match reply.response()? {
            Response::Records { records, .. } => to_records(records),
            _ => Err(Error::Protocol("expected Records".into())),
        }
    }
}

/// The direct address of `shard` given a node's client address `host:port`.
pub fn shard_addr(addr: &str, shard: u16) -> Result<String, Error> {
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| Error::Protocol(format!("address {addr} has no port")))?;
    let port: u16 = port.parse().map_err(|_| Error::Protocol(format!("bad port in {addr}")))?;
    let p = port.checked_add(1 + shard).ok_or_else(|| Error::Protocol("port overflow".into()))?;
    Ok(format!("{host}:{p}"))
}

fn to_records(buf: &[u8]) -> Result<Vec<Record>, Error> {
    Records::new(buf)
        .map(|r| {
            r.map(|r| Record { offset: r.offset, epoch: r.epoch, payload: r.payload.to_vec() })
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
    next_offset: u64,
}

impl Tail {
    /// Tails `shard` of the node whose client address is `addr` (connects to the shard's
    /// direct port).
    pub async fn start(addr: &str, cfg: &ClientConfig, shard: u16, from: u64) -> Result<Tail, Error> {
        let stream = open(&shard_addr(addr, shard)?, cfg).await?;
        let (r, mut w) = tokio::io::split(stream);
        let mut reader = FrameReader::new(r);
        let mut out = Vec::new();
        Request::Hello { version: PROTOCOL_VERSION }.encode(0, &mut out);
        Request::Tail { shard, from }.encode(1, &mut out);
        w.write_all(&out).await?;
        let hello = reader.next().await?.ok_or(Error::Closed)?;
        hello.response()?;
        Ok(Tail { reader, _writer: w, pending: VecDeque::new(), next_offset: from })
    }

    /// The next record; `Ok(None)` when the server closed the tail.
    pub async fn next(&mut self) -> Result<Option<Record>, Error> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Ok(Some(r));
            }
            let Some(reply) = self.reader.next().await? else {
                return Ok(None);
            };
            match reply.response()? {
                Response::Records { records, .. } => {
                    for r in to_records(records)? {
                        if r.offset != self.next_offset {
                            return Err(Error::Protocol(format!(
                                "tail gap: expected {}, got {}",
                                self.next_offset, r.offset
                            )));
                        }
                        self.next_offset += 1;
                        self.pending.push_back(r);
                    }
                }
                _ => return Err(Error::Protocol("expected Records".into())),
            }
        }
    }
}
