//! Seeding a follower whose log cannot continue from the leader's: it holds no record and
//! ends below the leader's first offset `F` (retention deleted the segments it would
//! need), such as a node that lost its disk and starts with an empty data directory.
//!
//! In place of `Welcome` the leader sends its index snapshot at `F` (docs/format.md §8:
//! each stream's next version and each producer's window for the records below `F`) in
//! `Repl::Seed` pieces. The follower writes it as `index-F.snap`, creates an empty segment
//! starting at `F` (both durable, in that order), and re-executes: the start opens a log
//! that begins at `F` with the snapshot's state — exactly what a boot after a trim at `F`
//! opens — and joins again at `F`, from where the leader catches it up from its segments.
//! A follower killed in between starts again from an empty log (a snapshot without its
//! segment is stale, `snapshot::plan`) or from `F` (both written): never a log that
//! claims records it does not hold.

use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::rc::Rc;

use corelog_client::codec::{Repl, MAX_REPL_BATCH_BYTES};

use super::{next_frame, parse};
use crate::shard::Shard;
use crate::snapshot;
use crate::wal::recovery::{segment_name, sync_dir};
use corelog_runtime::tls_io::{Reader, Writer};

/// The largest index snapshot a follower takes (about 30 M streams).
pub const MAX_SEED_BYTES: u64 = 1 << 30;
/// Bytes of snapshot per `Seed` frame.
const PIECE: usize = 1 << 20;
const _: () = assert!(PIECE <= MAX_REPL_BATCH_BYTES);

/// Leader: sends the index snapshot at `first` (this log's first offset) in pieces.
/// A trim that replaces the snapshot meanwhile fails the send; the link is made again and
/// the follower seeded at the new first offset.
pub async fn send(shard: &Shard, wr: &mut Writer, first: u64) -> Result<u64, String> {
    let mut out = Vec::with_capacity(PIECE + 64);
    let (mut at, mut total) = (0u64, None);
    while total.is_none_or(|t| at < t) {
        let (t, bytes) = snapshot::piece_off_executor(shard.log().dir(), first, at, PIECE).await?;
        if *total.get_or_insert(t) != t || (bytes.is_empty() && at < t) {
            return Err(format!("the index snapshot at {first} changed while it was sent"));
        }
        out.clear();
        Repl::Seed { first_offset: first, total: t, at, bytes: &bytes }.encode(&mut out);
        // A follower that stops reading cannot hold the link for longer than this.
        corelog_runtime::sync::deadline(std::time::Instant::now() + shard.cfg().repl_timeout, wr.write(&out))
            .await
            .ok_or_else(|| format!("the follower took no piece of the snapshot for {:?}", shard.cfg().repl_timeout))?
            .map_err(|e| format!("sending the index snapshot: {e}"))?;
        at += bytes.len() as u64;
        // `snapshot::piece` reads at most a piece, and nothing past the file's end.
        assert!(bytes.len() <= PIECE && at <= t, "snapshot piece of {} bytes ends at {at} of {t}", bytes.len());
    }
    Ok(at)
}

/// Follower: the first piece arrived (`first`, `total`, and its bytes at 0); takes the
/// rest, then writes the snapshot and the segment at `first`. The caller re-executes.
pub async fn receive(
    shard: &Rc<Shard>,
    rd: &mut Reader,
    used: &mut usize,
    (first, total, piece): (u64, u64, Vec<u8>),
    dir: &Path,
) -> Result<(), String> {
    // `agree` adopted the leader's epoch (which only a follower does) just before.
    assert!(shard.following(), "shard {}: a seed taken by a node that does not follow", shard.id());
    if shard.log().next_offset() != shard.log().first_offset() || shard.assigned() != shard.log().next_offset() {
        return Err("the leader sent a seed, but this log holds records: refused".into());
    }
    if first <= shard.log().first_offset() || total > MAX_SEED_BYTES {
        return Err(format!(
            "a seed at offset {first} of {total} bytes: refused (our log starts at {})",
            shard.log().first_offset()
        ));
    }
    let mut bytes = piece;
    while (bytes.len() as u64) < total {
        let at = bytes.len() as u64;
        let frame = next_frame(rd, used).await?.ok_or("the leader closed during the seed")?;
        let Repl::Seed { first_offset, total: t, at: a, bytes: more } = parse(&frame)? else {
            return Err("expected the next Seed piece".into());
        };
        if (first_offset, t, a) != (first, total, at) {
            return Err(format!(
                "seed piece at {a} of {t} (offset {first_offset}); expected {at} of {total} ({first})"
            ));
        }
        bytes.extend_from_slice(more);
    }
    let streams = install(dir, first, &bytes, shard.log().segment_bytes())?;
    // The segments below `first` hold nothing; a start would remove them too (as an
    // interrupted trim's, `snapshot::plan`).
    for (_, old) in shard.log().segment_paths().iter().filter(|(o, _)| *o < first) {
        std::fs::remove_file(old).map_err(|e| format!("remove {}: {e}", old.display()))?;
    }
    sync_dir(dir)?;
    log::info!(
        "shard {}: seeded from the leader at offset {first}: index snapshot of {total} bytes ({} streams); restarting to open the log there",
        shard.id(),
        streams
    );
    Ok(())
}

/// A new log in the shard directory `dir` that starts at `first` with the index snapshot
/// `bytes`, decoded first (its CRC, names, windows): the snapshot, then an empty segment
/// at `first`, each durable before the next (a follower seeded by its leader, a backup of
/// a trimmed log). Returns the snapshot's number of streams.
pub fn install(dir: &Path, first: u64, bytes: &[u8], segment_bytes: u64) -> Result<usize, String> {
    let (at, index) = snapshot::decode(bytes, usize::MAX).map_err(|e| format!("the index snapshot sent: {e}"))?;
    if at != first {
        return Err(format!("the index snapshot sent holds offset {at}, sent as {first}"));
    }
    snapshot::write(dir, first, bytes)?;
    create_segment(&dir.join(segment_name(first)), segment_bytes)?;
    sync_dir(dir)?;
    Ok(index.streams.len())
}

/// An empty segment: preallocated, all zeros, durable (what a roll-over creates).
fn create_segment(path: &Path, bytes: u64) -> Result<(), String> {
    let err = |e: std::io::Error| format!("create {}: {e}", path.display());
    // Not `create_new`: an attempt that failed after this step left it, empty.
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(err)?;
    // SAFETY: a valid descriptor and a length; fallocate(2) touches nothing else.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, bytes as libc::off_t) };
    if r != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    f.sync_all().map_err(err)
}
