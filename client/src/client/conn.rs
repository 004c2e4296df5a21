//! One connection ([`Conn`]): a writer task that numbers requests and coalesces them into
//! one write, a reader task that hands each answer to the request due (answers come in
//! request order), and — against nodes that advertise a lease — a watchdog that probes
//! the connection and abandons it when it goes silent.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, Notify};

use super::config::ClientConfig;
use super::error::Error;
use super::frames::{FrameReader, Reply};
use super::greet::{greet, Greeted, Stream};
use super::values::ServerInfo;
use crate::codec::{self, Request, Response, CLIENT_VERSION};
use crate::leadership::{Seen, PROBE_ID};

/// Requests one connection may have queued toward its writer.
const MAX_QUEUED_REQUESTS: usize = 4096;

struct Cmd {
    frame: Vec<u8>,
    /// `None`: a probe (a `Hello` with `PROBE_ID`), answered out of turn.
    reply: Option<oneshot::Sender<Result<Reply, Error>>>,
    /// An append: the watchdog may probe and abandon the connection while it waits. A
    /// read holds the node's reading of the connection (a probe is answered after it),
    /// so while one waits the watchdog waits too.
    watch: bool,
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

/// State behind a lock that a connection's tasks share: its waiting requests among
/// themselves, leadership's view with the client too.
type Shared<T> = Arc<std::sync::Mutex<T>>;

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
    pub(super) async fn open(
        addr: &str,
        cfg: &ClientConfig,
        timeout: Duration,
        seen: Shared<Seen>,
    ) -> Result<Conn, Error> {
        match tokio::time::timeout(timeout, Conn::open_now(addr, cfg, seen)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no HelloOk within {timeout:?}"),
            ))),
        }
    }

    /// Greets the node, learns what its `HelloOk` says of leadership, then starts the
    /// connection's tasks: the writer, the watchdog where the node advertises a lease,
    /// and the reader.
    async fn open_now(addr: &str, cfg: &ClientConfig, seen: Shared<Seen>) -> Result<Conn, Error> {
        let Greeted { reader, writer, info, version } = greet(addr, cfg, None).await?;
        seen.lock().unwrap().learn(info.leadership);
        let waiting: Shared<Waiting> = Default::default();
        let (tx, rx) = mpsc::channel::<Cmd>(MAX_QUEUED_REQUESTS);
        let kill = Arc::new(Notify::new());
        tokio::spawn(write_requests(writer, rx, waiting.clone()));
        // Any role: a follower answers at once, so one that goes silent is gone too (a
        // restarting process's connections can outlive it for a while, unanswered).
        if let Some((probe_after, silent)) = watch_limits(version, &seen) {
            tokio::spawn(watchdog(waiting.clone(), kill.clone(), tx.downgrade(), probe_after, silent));
        }
        let peer = Peer { addr: addr.to_string(), epoch: info.epoch, seen };
        tokio::spawn(read_answers(reader, waiting, kill, peer));
        Ok(Conn { tx, info, addr: addr.to_string() })
    }

    /// Sends a request and waits for its answer; `watch`: it is an append (see `Cmd`).
    pub(super) async fn call(&self, frame: Vec<u8>, timeout: Duration, watch: bool) -> Result<Reply, Error> {
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

/// The writer task: numbers requests (1, 2, ...; answers must carry the same ids, in the
/// same order), puts each in line for its answer, and writes whatever is queued at once.
async fn write_requests(mut w: WriteHalf<Box<dyn Stream>>, mut rx: mpsc::Receiver<Cmd>, waiting: Shared<Waiting>) {
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
            let mut w = waiting.lock().unwrap();
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
    // Every handle is gone (or the socket failed): let the server close its side, which
    // ends the reader task too.
    let _ = w.shutdown().await;
}

/// When the watchdog probes and when it gives up, `(probe_after, silent)`, from the lease
/// leadership's view knows; `None`: no watchdog (no lease known). A server older than version 3 tells
/// nothing of leases and would refuse the probe's version: no watchdog on its connections.
fn watch_limits(version: u16, seen: &Shared<Seen>) -> Option<(Duration, Duration)> {
    if version < codec::LEADERSHIP_VERSION {
        return None;
    }
    let s = seen.lock().unwrap();
    s.probe_after().zip(s.silent_limit())
}

/// The node at the other end, as the reader judges it: where it is, the epoch it greeted
/// with, and leadership's view to update.
struct Peer {
    addr: String,
    epoch: u32,
    seen: Shared<Seen>,
}

/// The reader task: hands each answer to the request due, judges the answers to probes,
/// and when the connection ends (or the watchdog kills it) fails whoever still waits.
async fn read_answers(
    mut reader: FrameReader<ReadHalf<Box<dyn Stream>>>,
    waiting: Shared<Waiting>,
    kill: Arc<Notify>,
    peer: Peer,
) {
    loop {
        let r = tokio::select! {
            r = reader.next() => r,
            _ = kill.notified() => break,
        };
        if let Ok(Some(reply)) = &r {
            let mut w = waiting.lock().unwrap();
            (w.heard, w.probing) = (Some(Instant::now()), None);
            if reply.op == codec::op::HELLO_OK && reply.req_id == PROBE_ID {
                if let Err(why) = judge_probe(reply, &peer) {
                    w.abandoned = Some(why);
                    break;
                }
                continue;
            }
        }
        let waiter = waiting.lock().unwrap().queue.pop_front();
        if !deliver(r, waiter) {
            break;
        }
    }
    fail_waiting(&waiting, &peer);
}

/// A probe's answer: does the node still lead, with a live lease? `Err`: why not.
fn judge_probe(reply: &Reply, peer: &Peer) -> Result<(), String> {
    match reply.response() {
        Ok(Response::HelloOk { role, epoch, leadership, .. }) => {
            peer.seen.lock().unwrap().usable(&peer.addr, role, epoch, leadership, Instant::now())
        }
        _ => Err("bad answer to a probe".to_string()),
    }
}

/// Hands what was read to the request due; whether the connection goes on (an answer
/// with the id due: yes; one out of order, a read error or the end: no).
fn deliver(r: Result<Option<Reply>, Error>, waiter: Option<(u64, Instant, Waiter, bool)>) -> bool {
    match (r, waiter) {
        (Ok(Some(reply)), Some((id, _, w, _))) if reply.req_id == id => {
            let _ = w.send(Ok(reply));
            true
        }
        (Ok(Some(reply)), Some((id, _, w, _))) => {
            let msg = format!("answer for request {} arrived where {id} was due", reply.req_id);
            let _ = w.send(Err(Error::Protocol(msg)));
            false
        }
        (Err(e), Some((_, _, w, _))) => {
            let _ = w.send(Err(e));
            false
        }
        _ => false,
    }
}

/// The connection ended: fails whoever still waits (`Abandoned` if it was given up, else
/// `Closed`); a node given up on is a suspect.
fn fail_waiting(waiting: &Shared<Waiting>, peer: &Peer) {
    let mut w = waiting.lock().unwrap();
    w.closed = true;
    if w.abandoned.is_some() {
        peer.seen.lock().unwrap().suspect(&peer.addr, peer.epoch, Instant::now());
    }
    let why = w.abandoned.clone();
    for (_, _, tx, _) in w.queue.drain(..) {
        let _ = tx.send(Err(why.clone().map_or(Error::Closed, Error::Abandoned)));
    }
}

/// Watches a connection to a leader that advertises a lease: when a request has waited
/// `probe_after` with nothing received, sends a probe (a `Hello`, answered at once by a
/// live node even behind waiting appends; the reader judges the answer); when nothing
/// has arrived for `silent` while a request waits, abandons the connection. Ends with
/// the connection (it holds no sender that keeps the writer alive).
async fn watchdog(
    waiting: Shared<Waiting>,
    kill: Arc<Notify>,
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
            Request::Hello { version: CLIENT_VERSION }.encode(PROBE_ID, &mut frame);
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
