//! The replication port of one shard (every node listens on it). A follower takes the
//! leader's batches, verifies every record (CRC, gap-free offsets), writes them through
//! the same group-commit path and acks its durable end. A leader that is dialled by a
//! peer with a higher epoch is fenced; a peer with a lower epoch is refused.

use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use corelog_client::codec::{ErrorCode, Repl, Role, REPL_PROTOCOL_VERSION};
use corelog_client::record;
use glommio::net::{TcpListener, TcpStream};

use super::{catchup, handshake, next_frame, parse, seed};
use crate::control;
use crate::net::tls;
use crate::shard::Shard;
use crate::wal::batch::{MAX_BATCH_BYTES, MAX_BATCH_RECORDS};
use corelog_runtime::sync::deadline;
use corelog_runtime::tls_io::{self, Writer};
use corelog_runtime::watchdog::Watchdog;

pub async fn accept_loop(shard: Rc<Shard>, listener: TcpListener, tls_cfg: tls::ServerTls, shard_dir: PathBuf) {
    let generation = Rc::new(Cell::new(0u64));
    loop {
        let sock = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("shard {}: replication accept failed: {e}", shard.id());
                glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (shard, g, dir) = (shard.clone(), generation.clone(), shard_dir.clone());
        let t = tls::accept(&tls_cfg);
        glommio::spawn_local(async move {
            let peer = sock.peer_addr().map(|a| a.to_string()).unwrap_or_default();
            if let Err(e) = serve(&shard, sock, t, &g, &dir).await {
                log::warn!("shard {}: replication from {peer}: {e}", shard.id());
            }
        })
        .detach();
    }
}

async fn refuse(wr: &mut Writer, code: ErrorCode, msg: String) -> String {
    let mut out = Vec::new();
    Repl::Error { code: code as u16, message: &msg }.encode(&mut out);
    let _ = wr.write(&out).await;
    wr.close().await;
    format!("refused ({code:?}): {msg}")
}

/// One replication link from a leader, to its end: the leader's `Hello` checked, the
/// logs agreed (`Welcome`: the epoch adopted and our log cut to the common prefix, or a
/// `Seed` of an empty follower), then its batches applied and acknowledged.
async fn serve(
    shard: &Rc<Shard>,
    sock: TcpStream,
    t: Option<rustls::Connection>,
    gen: &Rc<Cell<u64>>,
    dir: &std::path::Path,
) -> Result<(), String> {
    let _ = sock.set_nodelay(true);
    // TLS and the leader's Hello by then, or the connection is dropped unread.
    let hello_by = Instant::now() + shard.cfg().handshake_timeout;
    let (mut rd, mut wr) = deadline(hello_by, tls_io::establish_as(sock, t, "replication"))
        .await
        .ok_or_else(|| timed_out(shard))?
        .map_err(|e| {
            shard.metrics().tls_failures.increment(1);
            format!("TLS handshake failed: {e}")
        })?;
    let mut used = 0;
    let (leader_epoch, leader_end) = leader_hello(shard, (&mut rd, &mut wr, &mut used), hello_by, dir).await?;
    // The newest authenticated leader connection wins; older ones stop applying.
    gen.set(gen.get() + 1);
    let my_gen = gen.get();
    assert!(my_gen > 0, "shard {}: link generations start at 1", shard.id());
    agree(shard, (&mut rd, &mut wr, &mut used), leader_epoch, (gen, my_gen), dir).await?;
    follow(shard, (rd, wr, used), (leader_epoch, leader_end), (gen, my_gen), dir).await
}

fn timed_out(shard: &Shard) -> String {
    shard.metrics().handshake_timeouts.increment(1);
    format!("no TLS handshake and Hello within {:?}", shard.cfg().handshake_timeout)
}

/// The leader's `Hello`: protocol, shard, an epoch not below ours, this node following,
/// and a log end not below what the leader had made durable here. Returns the leader's
/// epoch and log end.
async fn leader_hello(
    shard: &Shard,
    (rd, wr, used): (&mut tls_io::Reader, &mut Writer, &mut usize),
    hello_by: Instant,
    dir: &std::path::Path,
) -> Result<(u32, u64), String> {
    let f = deadline(hello_by, next_frame(rd, used))
        .await
        .ok_or_else(|| timed_out(shard))??
        .ok_or("closed before Hello")?;
    let Repl::Hello { version, shard: s, shard_count, epoch, next_offset: leader_end, .. } = parse(&f)? else {
        return Err(refuse(wr, ErrorCode::BadHandshake, "first frame must be Hello".into()).await);
    };
    if version != REPL_PROTOCOL_VERSION {
        return Err(refuse(
            wr,
            ErrorCode::BadVersion,
            format!("replication protocol {version}, ours {REPL_PROTOCOL_VERSION}"),
        )
        .await);
    }
    if s != shard.id() || shard_count != shard.cfg().shard_count {
        let msg =
            format!("peer shard {s}/{shard_count} does not match ours {}/{}", shard.id(), shard.cfg().shard_count);
        return Err(refuse(wr, ErrorCode::BadHandshake, msg).await);
    }
    let mine = shard.epoch();
    if epoch < mine {
        return Err(refuse(wr, ErrorCode::Fenced, format!("stale epoch {epoch}: this node is at epoch {mine}")).await);
    }
    if shard.role() != Role::Follower {
        if epoch > mine {
            shard.fence(&format!("a leader with epoch {epoch} > ours {mine} dialled us"));
        }
        return Err(refuse(
            wr,
            ErrorCode::Unexpected,
            format!("this node is not a follower ({})", shard.role().name()),
        )
        .await);
    }
    // A leader whose log ends below what it had made durable (and we hold) lost
    // writes: its handshake would cut them here. Refuse; see docs/operations.md 7.1.
    let floor = control::read_leader_floor(dir)?;
    if leader_end < floor {
        let msg = format!(
            "LOST WRITES: the leader's log ends at offset {leader_end}, but it had made every offset below {floor} durable (this follower holds them): its storage lost writes. Refusing to let it cut them; promote this node (its log is complete) and let the other follow it"
        );
        log::info!("shard {}: {msg}", shard.id());
        return Err(refuse(wr, ErrorCode::Diverged, msg).await);
    }
    // Nothing awaited since the checks: the leader is not behind us in epoch nor in what
    // it had made durable here, and we still follow.
    assert!(epoch >= shard.epoch() && leader_end >= floor, "shard {}: leader Hello accepted unchecked", shard.id());
    Ok((epoch, leader_end))
}

/// Our `Hello` (a settled log end) and the leader's answer: a `Welcome` (the epoch
/// adopted, durable before any cut or record of it, then our log cut to where the two
/// agree) or a `Seed` (an empty follower of a trimmed leader: received whole, then this
/// process starts over on it).
async fn agree(
    shard: &Rc<Shard>,
    (rd, wr, used): (&mut tls_io::Reader, &mut Writer, &mut usize),
    leader_epoch: u32,
    (gen, my_gen): (&Cell<u64>, u64),
    dir: &std::path::Path,
) -> Result<(), String> {
    // Report a settled end: wait for batches of an earlier connection to hit the disk.
    while shard.assigned() != shard.log().next_offset() {
        shard.changed().await;
    }
    let mut out = Vec::new();
    Repl::Hello {
        version: REPL_PROTOCOL_VERSION,
        shard: shard.id(),
        shard_count: shard.cfg().shard_count,
        epoch: shard.epoch(),
        next_offset: shard.log().next_offset(),
        last_epoch: shard.log().last_epoch(),
    }
    .encode(&mut out);
    wr.write(&out).await.map_err(|e| e.to_string())?;
    {
        let f = next_frame(rd, used).await?.ok_or("closed before Welcome")?;
        let (epoch, truncate_to, common_epoch) = match parse(&f)? {
            Repl::Welcome { epoch, truncate_to, common_epoch } => (epoch, truncate_to, common_epoch),
            Repl::Seed { first_offset, total, at: 0, bytes } => {
                let first = (first_offset, total, bytes.to_vec());
                if gen.get() != my_gen {
                    return Err("superseded by a newer leader connection".into());
                }
                shard.adopt_epoch(dir, leader_epoch)?;
                seed::receive(shard, rd, used, first, dir).await?;
                crate::reexec::stop_and_exec_on_executor(&shard.cfg().ctl).await;
                unreachable!("re-executed or stopped");
            }
            _ => return Err("expected Welcome".into()),
        };
        if epoch != leader_epoch {
            return Err(format!("Welcome epoch {epoch} differs from Hello epoch {leader_epoch}"));
        }
        if gen.get() != my_gen {
            return Err("superseded by a newer leader connection".into());
        }
        // The epoch is durable before any cut or record of it: a leader whose epoch we
        // accepted can never be outbid by a restarted incarnation of itself.
        let before = shard.epoch();
        shard.adopt_epoch(dir, epoch)?;
        assert!(
            shard.epoch() >= before && shard.epoch() >= epoch,
            "shard {}: epoch {} after adopting {epoch} from {before}",
            shard.id(),
            shard.epoch()
        );
        let truncate_to = shard.log().with_history(|h| handshake::follower_cut(h, truncate_to, common_epoch));
        let first = shard.log().first_offset();
        if truncate_to < first {
            let msg = format!(
                "the leader's log diverges from ours at offset {truncate_to}, below our first offset {first} (retention deleted older segments): this node cannot follow it; start it with an empty data directory to have it rebuilt (docs/operations.md §17)"
            );
            log::error!("shard {}: {msg}", shard.id());
            return Err(refuse(wr, ErrorCode::Diverged, msg).await);
        }
        if truncate_to < shard.log().next_offset() {
            let before = shard.log().next_offset();
            let end = shard
                .truncate(truncate_to)
                .await
                .unwrap_or_else(|e| crate::fatal(&format!("shard {}: truncate failed: {e}", shard.id())));
            assert!(end <= truncate_to, "shard {}: cut to {truncate_to} left the log ending at {end}", shard.id());
            log::info!(
                "shard {}: dropped records {end}..{before} the leader does not have (never acknowledged)",
                shard.id()
            );
        }
    }
    Ok(())
}

/// `Joined` with our last record's identity, then the leader's batches applied until
/// the link ends, with an acker task confirming what is durable here.
async fn follow(
    shard: &Rc<Shard>,
    (mut rd, mut wr, mut used): (tls_io::Reader, Writer, usize),
    (leader_epoch, leader_end): (u32, u64),
    (gen, my_gen): (&Rc<Cell<u64>>, u64),
    dir: &std::path::Path,
) -> Result<(), String> {
    let start = shard.log().next_offset();
    assert!(start >= shard.log().first_offset(), "shard {}: log ends at {start} below its start", shard.id());
    let (last_epoch, last_crc) =
        shard.log().last_record_id(start).await.map_err(|e| format!("reading our last record: {e}"))?.unwrap_or((0, 0));
    let mut out = Vec::new();
    Repl::Joined { next_offset: start, last_epoch, last_crc }.encode(&mut out);
    wr.write(&out).await.map_err(|e| e.to_string())?;
    log::info!("shard {}: following leader at epoch {leader_epoch} from offset {start}", shard.id());
    let done = Rc::new(Cell::new(false));
    let pinged = Rc::new(Cell::new(false));
    // A shard marked needs-repair has every acknowledged record back once it holds the
    // leader's durable end as of this handshake (every earlier ack is below it, every
    // later one needs our own ack).
    let repaired = control::is_marked(dir).then(|| (leader_end, dir.to_path_buf()));
    let floor = Rc::new(Floor::new(dir.to_path_buf(), control::read_leader_floor(dir)?, start.min(leader_end)));
    let acker =
        glommio::spawn_local(ack_loop(shard.clone(), wr, start, done.clone(), pinged.clone(), repaired, floor.clone()));
    let behind = catchup::Behind::new(shard, start, leader_end);
    let r = apply(shard, &mut rd, &mut used, leader_epoch, (gen, my_gen), &pinged, (&floor, behind)).await;
    shard.leader_link_lost();
    done.set(true);
    shard.nudge();
    acker.await;
    r
}

async fn apply(
    shard: &Rc<Shard>,
    rd: &mut tls_io::Reader,
    used: &mut usize,
    epoch: u32,
    (gen, my_gen): (&Cell<u64>, u64),
    pinged: &Cell<bool>,
    (floor, mut behind): (&Floor, Option<catchup::Behind>),
) -> Result<(), String> {
    // One timer for the loop, not one per batch (see `watchdog`).
    let mut silent = Watchdog::new();
    loop {
        let f = silent
            .within(Instant::now(), shard.cfg().repl_timeout, next_frame(rd, used))
            .await
            .ok_or_else(|| format!("leader silent for {:?}: dropping the link", shard.cfg().repl_timeout))??;
        let Some(f) = f else { return Err("leader closed the link".into()) };
        let (be, first_offset, count, records) = match parse(&f)? {
            Repl::Batch { epoch, first_offset, count, records } => (epoch, first_offset, count, records),
            Repl::Ping => {
                pinged.set(true);
                shard.nudge();
                continue;
            }
            Repl::Error { code, message } => return Err(format!("leader ended the link: error {code}: {message}")),
            other => return Err(format!("expected Batch, got {other:?}")),
        };
        if be != epoch || gen.get() != my_gen || !shard.following() {
            return Err(format!("stopping: batch epoch {be}, link epoch {epoch}, superseded {}", gen.get() != my_gen));
        }
        if first_offset != shard.assigned() {
            return Err(format!("batch at offset {first_offset} but our log continues at {}", shard.assigned()));
        }
        if count == 0 || records.len() > MAX_BATCH_BYTES || count > MAX_BATCH_RECORDS {
            return Err(format!(
                "batch at {first_offset} with {count} records / {} bytes is outside the limits",
                records.len()
            ));
        }
        record::verify_run(records, first_offset, count)
            .map_err(|e| format!("corrupt batch at {first_offset}: {e}"))?;
        shard.check_replicated(records).map_err(|e| format!("batch at {first_offset} refused: {e}"))?;
        shard.wait_stage_space(records.len()).await;
        if gen.get() != my_gen || !shard.following() || first_offset != shard.assigned() {
            return Err("superseded while waiting for room".into());
        }
        shard.stage_replicated(first_offset, count, records);
        assert_eq!(shard.assigned(), first_offset + count as u64, "shard {}: a batch staged out of place", shard.id());
        // Epochs only move up under a link: ours is at least the one it adopted.
        assert!(epoch <= shard.epoch(), "shard {}: applying epoch {epoch} above ours {}", shard.id(), shard.epoch());
        floor.leader_durable_below(first_offset);
        // What the leader has shown durable is something we staged: the floor persisted
        // on its word never claims records this node does not hold or write.
        assert!(
            floor.leader_durable.get() < shard.assigned(),
            "shard {}: leader floor {} at or past our written end {}",
            shard.id(),
            floor.leader_durable.get(),
            shard.assigned()
        );
        if let Some(b) = &mut behind {
            if !b.staged(shard, count, records.len(), first_offset + count as u64) {
                behind = None;
            }
        }
    }
}

/// Acks the durable end whenever it advances; clears the shard's repair mark once the
/// end reaches `repaired.0`.
async fn ack_loop(
    shard: Rc<Shard>,
    mut wr: Writer,
    mut acked: u64,
    done: Rc<Cell<bool>>,
    pinged: Rc<Cell<bool>>,
    mut repaired: Option<(u64, PathBuf)>,
    floor: Rc<Floor>,
) {
    let mut out = Vec::with_capacity(32);
    // A node taking over acks nothing more: what it writes next is its own epoch's.
    while !done.get() && shard.following() {
        let end = shard.log().next_offset();
        // Acked ≤ durable ≤ written: what we ack is on our disk, and our disk holds only
        // what was staged.
        assert!(end <= shard.assigned(), "shard {}: durable end {end} past written {}", shard.id(), shard.assigned());
        floor.maybe_persist(end);
        shard.set_peer_durable(floor.leader_durable.get().min(end));
        if let Some((at, dir)) = repaired.take_if(|(at, _)| end >= *at) {
            match control::clear_repair_mark(&dir) {
                Ok(()) => log::warn!(
                    "shard {}: repaired: holds the leader's end {at} (every acknowledged record); needs-repair mark cleared",
                    shard.id()
                ),
                Err(e) => crate::fatal(&format!("shard {}: clearing the repair mark: {e}", shard.id())),
            }
        }
        if end > acked || pinged.replace(false) {
            out.clear();
            Repl::Ack { next_offset: end }.encode(&mut out);
            if wr.write(&out).await.is_err() {
                break;
            }
            acked = end;
            continue;
        }
        shard.changed().await;
    }
    wr.close().await;
}

/// The leader floor of one link (control::read_leader_floor): what the leader has shown
/// to be durable on its side, persisted at most once a second (off the executor), so a
/// leader that loses writes older than that cannot cut them from this node.
struct Floor {
    dir: PathBuf,
    /// The leader's durable end is above this (first offset of its latest batch).
    leader_durable: Cell<u64>,
    written: Rc<Cell<u64>>,
    writing: Rc<Cell<bool>>,
    last: Cell<Instant>,
}

const FLOOR_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Floor {
    fn new(dir: PathBuf, written: u64, known: u64) -> Floor {
        Floor {
            dir,
            leader_durable: Cell::new(known),
            written: Rc::new(Cell::new(written)),
            writing: Rc::new(Cell::new(false)),
            last: Cell::new(Instant::now().checked_sub(FLOOR_EVERY).unwrap_or_else(Instant::now)),
        }
    }

    fn leader_durable_below(&self, first_offset: u64) {
        self.leader_durable.set(self.leader_durable.get().max(first_offset));
    }

    /// Persists min(leader durable, our durable end) when it grew and a second passed.
    fn maybe_persist(&self, our_end: u64) {
        let v = self.leader_durable.get().min(our_end);
        if v <= self.written.get() || self.writing.get() || self.last.get().elapsed() < FLOOR_EVERY {
            return;
        }
        self.last.set(Instant::now());
        self.writing.set(true);
        let (dir, written, writing) = (self.dir.clone(), self.written.clone(), self.writing.clone());
        glommio::spawn_local(async move {
            let d = dir.clone();
            match glommio::executor().spawn_blocking(move || control::write_leader_floor(&d, v)).await {
                Ok(()) => {
                    // One write at a time (`writing`), each above the last: the floor on
                    // disk only rises.
                    assert!(v > written.get(), "leader floor {v} written over {}", written.get());
                    written.set(v)
                }
                Err(e) => log::warn!("{}: writing the leader floor: {e}", dir.display()),
            }
            writing.set(false);
        })
        .detach();
    }
}
