//! Leader side of a shard pair: dial the follower, agree on where its log diverges,
//! stream batches (live from memory, or catch-up from the segments), and take its acks.
//! Memory stays bounded while the follower is slow or away: nothing is queued per
//! follower; the link reads from `Shard::recent` (bounded) or from disk, at the pace
//! of the socket.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelog_client::codec::{ErrorCode, Repl, Role, REPL_PROTOCOL_VERSION};
use corelog_client::record;
use glommio::net::TcpStream;

use super::catchup::CatchUp;
use super::{handshake, next_frame, parse};
use crate::net::tls;
use crate::shard::Shard;
use corelog_runtime::sync::deadline;
use corelog_runtime::tls_io::{self, Writer};
use corelog_runtime::watchdog::Watchdog;

/// Bytes per catch-up read from the segments.
const CATCH_UP_CHUNK: usize = 1024 * 1024;

pub struct LinkConfig {
    pub peer: SocketAddr,
    pub tls: tls::ClientTls,
    pub server_name: String,
    /// The shard's directory (for the repair mark).
    pub dir: std::path::PathBuf,
}

/// Runs for the life of the shard; reconnects with a bounded back-off.
pub async fn run(shard: Rc<Shard>, cfg: LinkConfig) {
    let mut backoff = Duration::from_millis(50);
    let mut last_err = String::new();
    let epoch = shard.epoch();
    loop {
        if shard.role() != Role::Leader {
            return;
        }
        // A leader's epoch never moves backwards (a new one is a new incarnation).
        assert!(shard.epoch() >= epoch, "shard {}: epoch went back from {epoch} to {}", shard.id(), shard.epoch());
        let r = link_once(&shard, &cfg).await;
        shard.follower_lost();
        match r {
            Ok(()) => backoff = Duration::from_millis(50),
            Err(e) => {
                if e != last_err {
                    log::warn!("shard {}: replication to {}: {e}", shard.id(), cfg.peer);
                    last_err = e;
                }
            }
        }
        glommio::timer::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
        debug_assert!(backoff <= Duration::from_secs(1), "replication back-off {backoff:?} above its cap");
    }
}

/// How often a coordinated follower's shard looks for the order to lead in place.
const ORDER_POLL: Duration = Duration::from_millis(2);

/// Coordinator mode, on a follower: waits for the coordinator to win a term, leads it
/// in place (`Shard::promote`: no restart, whatever the log's length), then runs the
/// link to the new follower as [`run`].
pub async fn run_when_elected(shard: Rc<Shard>, cfg: LinkConfig) {
    let ctl = shard.cfg().ctl.clone();
    let epoch = loop {
        if let Some(e) = ctl.lead_order() {
            break e;
        }
        if ctl.stopping() {
            return; // the process re-executes instead
        }
        glommio::timer::sleep(ORDER_POLL).await;
    };
    let t = Instant::now();
    match shard.promote(&cfg.dir, epoch).await {
        Ok(floor) => {
            // `promote`'s postcondition: leading the ordered epoch, its floor the log's end.
            assert_eq!(shard.epoch(), epoch, "shard {}: promoted, but not to the ordered epoch", shard.id());
            assert!(floor <= shard.log().next_offset(), "shard {}: commit floor {floor} beyond the log", shard.id());
            log::info!(
                "shard {}: leads epoch {epoch} in place from offset {floor} ({} µs after the order; no restart)",
                shard.id(),
                t.elapsed().as_micros()
            )
        }
        Err(e) => crate::fatal(&format!("shard {}: taking over as leader of epoch {epoch}: {e}", shard.id())),
    }
    run(shard, cfg).await
}

/// The follower holds records this leader had made durable and no longer has (its
/// storage dropped writes): mark the shard (it must not lead again before it has them
/// back), stop acknowledging, and in coordinator mode hand leadership to the follower.
async fn lost_writes(shard: &Shard, cfg: &LinkConfig, why: &str) -> String {
    let end = shard.log().next_offset();
    if let Err(e) = crate::control::write_repair_mark(&cfg.dir, end) {
        crate::fatal(&format!("shard {}: marking the shard after lost writes: {e}", shard.id()));
    }
    shard.fence(&format!("the follower says this node lost writes ({why})"));
    assert_ne!(shard.role(), Role::Leader, "shard {}: still leading after losing writes", shard.id());
    if shard.cfg().ctl.coordinated() {
        crate::reexec::reexec_on_executor(&shard.cfg().ctl, "this node lost writes its follower holds").await;
    }
    format!("marked needs-repair from offset {end}: {why}")
}

fn fence(shard: &Shard, why: &str) -> String {
    shard.fence(why);
    format!("fenced: {why}")
}

/// One replication link to the follower, to its end: the handshake (our `Hello`, its
/// `Hello`, a `Welcome` naming where the logs agree, its `Joined` proving its last
/// record is ours), then batches shipped while a task reads its acknowledgements.
async fn link_once(shard: &Rc<Shard>, cfg: &LinkConfig) -> Result<(), String> {
    let sock =
        TcpStream::connect_timeout(cfg.peer, Duration::from_secs(2)).await.map_err(|e| format!("connect: {e}"))?;
    let _ = sock.set_nodelay(true);
    let t = tls::connect(&cfg.tls, &cfg.server_name)?;
    // The whole handshake (TLS, Hello, Welcome, Joined) by then: a frozen or half-open
    // follower cannot stall the link for ever; the link is retried with back-off.
    let done_by = Instant::now() + shard.cfg().handshake_timeout;
    let (mut rd, mut wr) = deadline(done_by, tls_io::establish_as(sock, t, "replication"))
        .await
        .ok_or_else(|| late(shard))?
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let epoch = shard.epoch();
    let mut out = Vec::new();
    Repl::Hello {
        version: REPL_PROTOCOL_VERSION,
        shard: shard.id(),
        shard_count: shard.cfg().shard_count,
        epoch,
        next_offset: shard.log().next_offset(),
        last_epoch: shard.log().last_epoch(),
    }
    .encode(&mut out);
    wr.write(&out).await.map_err(|e| e.to_string())?;
    let mut used = 0;
    let (f_next, f_last_epoch) = follower_hello(shard, cfg, (&mut rd, &mut wr, &mut used), done_by, epoch).await?;
    // Kafka-style divergence: the largest epoch we have that is not above the
    // follower's last; the follower also cuts at that epoch's end in its own log.
    let (common_epoch, truncate_to) = shard.log().with_history(|h| handshake::welcome(h, f_next, f_last_epoch));
    assert!(common_epoch <= epoch, "a Welcome names epoch {common_epoch}, above ours {epoch}");
    out.clear();
    Repl::Welcome { epoch, truncate_to, common_epoch }.encode(&mut out);
    wr.write(&out).await.map_err(|e| e.to_string())?;
    let start = joined(shard, (&mut rd, &mut wr, &mut used), done_by, truncate_to).await?;
    // The follower continues inside our log: at or below the cut we named, which is at
    // or below our end (`handshake::welcome`).
    assert!(
        start <= truncate_to && truncate_to <= shard.log().next_offset(),
        "shard {}: follower joins at {start}, cut at {truncate_to}, our end {}",
        shard.id(),
        shard.log().next_offset()
    );
    log::info!(
        "shard {}: follower {} joined at offset {start} (leader at {}), epoch {epoch}",
        shard.id(),
        cfg.peer,
        shard.log().next_offset()
    );
    shard.follower_joined(start);
    let dead = Rc::new(Cell::new(false));
    let acks = read_acks(shard, rd, used, dead.clone());
    let sent = ship(shard, &mut wr, start, &dead).await;
    dead.set(true);
    wr.close().await;
    let acked = acks.await;
    sent.and(acked)
}

fn late(shard: &Shard) -> String {
    format!("handshake not done within {:?}", shard.cfg().handshake_timeout)
}

/// The follower's `Hello`: same protocol and shard, an epoch not above ours (else we
/// are fenced), a log that is not below our first offset (an empty one is seeded with
/// our snapshot instead, and the link ends). Returns its log end and last epoch.
async fn follower_hello(
    shard: &Rc<Shard>,
    cfg: &LinkConfig,
    (rd, wr, used): (&mut tls_io::Reader, &mut Writer, &mut usize),
    done_by: Instant,
    epoch: u32,
) -> Result<(u64, u32), String> {
    assert_eq!(epoch, shard.epoch(), "shard {}: a leader's epoch changed during its handshake", shard.id());
    let mut out = Vec::new();
    let f = deadline(done_by, next_frame(rd, used)).await.ok_or_else(|| late(shard))??;
    let f = f.ok_or("follower closed during handshake")?;
    match parse(&f)? {
        Repl::Hello { version, shard: s, shard_count, epoch: fe, next_offset, last_epoch } => {
            if version != REPL_PROTOCOL_VERSION || s != shard.id() || shard_count != shard.cfg().shard_count {
                return Err(format!("follower mismatch: version {version}, shard {s}, shard count {shard_count}"));
            }
            if fe > epoch {
                return Err(fence(shard, &format!("follower has epoch {fe} > ours {epoch}")));
            }
            let first = shard.log().first_offset();
            if next_offset < first && last_epoch == 0 {
                // It holds no record: seeded with our snapshot at `first`, it
                // restarts there and joins again (`seed`).
                log::info!(
                    "shard {}: follower {} holds no record and ends at {next_offset}, below our first offset {first}: seeding it with the index snapshot at {first}",
                    shard.id(),
                    cfg.peer
                );
                let bytes = super::seed::send(shard, wr, first).await?;
                wr.close().await;
                return Err(format!(
                    "seeded the follower at offset {first} ({bytes} bytes of index snapshot); it restarts and joins again"
                ));
            }
            if next_offset < first {
                let why = format!(
                    "the follower's log ends at offset {next_offset}, below this leader's first offset {first} (retention deleted older segments): it cannot catch up; start it with an empty data directory to have it rebuilt from this leader (docs/operations.md §17)"
                );
                out.clear();
                Repl::Error { code: ErrorCode::Diverged as u16, message: &why }.encode(&mut out);
                let _ = wr.write(&out).await;
                wr.close().await;
                return Err(why);
            }
            assert!(
                next_offset >= first,
                "shard {}: a follower ending at {next_offset} below {first} joins",
                shard.id()
            );
            Ok((next_offset, last_epoch))
        }
        Repl::Error { code, message } if code == ErrorCode::Fenced as u16 => Err(fence(shard, message)),
        Repl::Error { code, message } if code == ErrorCode::Diverged as u16 && message.starts_with("LOST WRITES") => {
            Err(lost_writes(shard, cfg, message).await)
        }
        Repl::Error { code, message } => Err(format!("follower refused: {code} {message}")),
        _ => Err("unexpected frame from follower during handshake".into()),
    }
}

/// The follower's `Joined`: it cut its log to at most `truncate_to` and its last record
/// is ours, byte for byte. Returns where it continues.
async fn joined(
    shard: &Shard,
    (rd, wr, used): (&mut tls_io::Reader, &mut Writer, &mut usize),
    done_by: Instant,
    truncate_to: u64,
) -> Result<u64, String> {
    let mut out = Vec::new();
    let f = deadline(done_by, next_frame(rd, used)).await.ok_or_else(|| late(shard))??;
    let f = f.ok_or("follower closed during handshake")?;
    match parse(&f)? {
        Repl::Joined { next_offset, last_epoch, last_crc } if next_offset <= truncate_to => {
            // The follower's last record must be ours, byte for byte (epoch and CRC;
            // the CRC covers offset, epoch and payload). Logs that agree on their
            // last common record agree on every record before it: each epoch has
            // one writer (see `Shard`).
            let ours = shard.log().last_record_id(next_offset).await.map_err(|e| format!("reading our record: {e}"))?;
            if let Err(why) = handshake::same_last_record(next_offset, (last_epoch, last_crc), ours) {
                out.clear();
                Repl::Error { code: ErrorCode::Diverged as u16, message: &why }.encode(&mut out);
                let _ = wr.write(&out).await;
                wr.close().await;
                shard.metrics().diverged.increment(1);
                return Err(format!("DIVERGED: {why}; refusing the link (nothing is acknowledged)"));
            }
            assert!(
                next_offset <= truncate_to,
                "shard {}: Joined at {next_offset} past the cut {truncate_to}",
                shard.id()
            );
            Ok(next_offset)
        }
        other => Err(format!("expected Joined ≤ {truncate_to} after Welcome, got {other:?}")),
    }
}

/// Reads the follower's acknowledgements until the link ends (then `dead` is set and
/// the shipper woken).
fn read_acks(
    shard: &Rc<Shard>,
    mut rd: tls_io::Reader,
    used: usize,
    dead: Rc<Cell<bool>>,
) -> glommio::Task<Result<(), String>> {
    let shard = shard.clone();
    glommio::spawn_local(async move {
        let mut used = used;
        let r: Result<(), String> = async {
            // One timer for the loop, not one per ack (see `watchdog`).
            let mut silent = Watchdog::new();
            loop {
                let limit = shard.cfg().repl_timeout;
                let f = silent
                    .within(Instant::now(), limit, next_frame(&mut rd, &mut used))
                    .await
                    .ok_or_else(|| format!("follower silent for {limit:?}: dropping the link"))??;
                let f = f.ok_or("follower closed")?;
                match parse(&f)? {
                    // The follower's word, not our invariant: an ack beyond what was ever
                    // shipped ends the link (`follower_acked` asserts on its argument).
                    Repl::Ack { next_offset } if next_offset > shard.assigned() => {
                        return Err(format!(
                            "follower acked offset {next_offset}, beyond the {} offsets assigned",
                            shard.assigned()
                        ))
                    }
                    Repl::Ack { next_offset } => shard.follower_acked(next_offset),
                    Repl::Error { code, message } if code == ErrorCode::Fenced as u16 => {
                        return Err(fence(&shard, message))
                    }
                    Repl::Error { code, message } => return Err(format!("follower error {code}: {message}")),
                    other => return Err(format!("unexpected frame from follower: {other:?}")),
                }
            }
        }
        .await;
        dead.set(true);
        shard.nudge_shipper();
        r
    })
}

/// Streams records from `cursor` until the link dies or we stop leading.
async fn ship(shard: &Rc<Shard>, wr: &mut Writer, mut cursor: u64, dead: &Cell<bool>) -> Result<(), String> {
    let mut out = Vec::with_capacity(CATCH_UP_CHUNK + 64);
    let mut catching_up: Option<CatchUp> = None;
    let mut idle = Watchdog::new();
    // A leader's epoch is fixed while it leads (a new epoch is a new incarnation or a
    // follower's take-over, never a change under a running link).
    let epoch = shard.epoch();
    while !dead.get() {
        if shard.role() != Role::Leader {
            return Err("no longer leading".into());
        }
        assert_eq!(shard.epoch(), epoch, "shard {}: the epoch changed while leading", shard.id());
        assert!(
            cursor <= shard.assigned(),
            "shard {}: shipping from {cursor}, beyond the offsets assigned",
            shard.id()
        );
        out.clear();
        if let Some((first, count, recs, at)) = from_recent(shard, cursor) {
            if let Some(c) = catching_up.take() {
                c.done(cursor);
            }
            // Batches leave gap-free: each starts where the previous one ended.
            assert!(
                first == cursor && count > 0,
                "shard {}: recent batch at {first} ({count}) for cursor {cursor}",
                shard.id()
            );
            Repl::Batch { epoch, first_offset: first, count, records: &recs[at..] }.encode(&mut out);
            cursor = first + count as u64;
        } else if cursor < shard.log().next_offset() {
            let c = catching_up.get_or_insert_with(|| CatchUp::start(shard, cursor));
            c.pace().await;
            let (recs, count) = shard
                .log()
                .read(cursor, shard.log().next_offset(), CATCH_UP_CHUNK)
                .await
                .map_err(|e| format!("catch-up read at {cursor}: {e}"))?;
            if count == 0 {
                return Err(format!("catch-up read at {cursor} returned nothing"));
            }
            Repl::Batch { epoch, first_offset: cursor, count, records: &recs }.encode(&mut out);
            cursor += count as u64;
            assert!(
                cursor <= shard.log().next_offset(),
                "shard {}: catch-up shipped to {cursor}, past the durable end {}",
                shard.id(),
                shard.log().next_offset()
            );
            c.sent(shard, count, recs.len(), cursor);
        } else {
            if let Some(c) = catching_up.take() {
                c.done(cursor);
            }
            // Idle: a Ping every fifth of the link timeout keeps the follower's Acks
            // (and so our view of its liveness) coming.
            if idle.within(Instant::now(), shard.cfg().repl_timeout / 5, shard.shipped()).await.is_some() {
                continue;
            }
            Repl::Ping.encode(&mut out);
        }
        wr.write(&out).await.map_err(|e| format!("send: {e}"))?;
    }
    Ok(())
}

/// The records from `cursor` to the end of the recent batch holding it, if in memory.
fn from_recent(shard: &Shard, cursor: u64) -> Option<(u64, u32, Rc<Vec<u8>>, usize)> {
    shard.with_recent(|recent| {
        let i = recent.partition_point(|r| r.first_offset + r.count as u64 <= cursor);
        let r = recent.get(i)?;
        if r.first_offset > cursor {
            return None; // evicted: read it from disk
        }
        if r.first_offset == cursor {
            return Some((cursor, r.count, r.records.clone(), 0));
        }
        // Cursor inside the batch: skip the records before it.
        let mut p = 0;
        for rec in record::Records::new(&r.records).flatten() {
            if rec.offset == cursor {
                let skipped = (cursor - r.first_offset) as u32;
                assert!(skipped < r.count, "cursor {cursor} past the recent batch at {} ({})", r.first_offset, r.count);
                return Some((cursor, r.count - skipped, r.records.clone(), p));
            }
            p += rec.encoded_len();
            debug_assert!(p <= r.records.len(), "a recent batch's records overrun it at {p}");
        }
        None
    })
}
