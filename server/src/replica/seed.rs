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

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::rc::Rc;

use corelog_client::codec::{Repl, MAX_REPL_BATCH_BYTES};

use super::{next_frame, parse};
use crate::net::tls_io::{Reader, Writer};
use crate::shard::Shard;
use crate::snapshot;
use crate::wal::recovery::{segment_name, sync_dir};

/// The largest index snapshot a follower takes (about 30 M streams).
pub const MAX_SEED_BYTES: u64 = 1 << 30;
/// Bytes of snapshot per `Seed` frame.
const PIECE: usize = 1 << 20;
const _: () = assert!(PIECE <= MAX_REPL_BATCH_BYTES);

/// Leader: sends the index snapshot at `first` (this log's first offset) in pieces.
pub async fn send(shard: &Shard, wr: &mut Writer, first: u64) -> Result<u64, String> {
    let path = shard.log.dir().join(snapshot::file_name(first));
    // Opened once: a trim that replaces the snapshot meanwhile unlinks it, the data stays.
    let f = std::fs::File::open(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let total = f.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
    let mut buf = vec![0u8; PIECE];
    let mut out = Vec::with_capacity(PIECE + 64);
    let mut at = 0u64;
    while at < total {
        let n = (total - at).min(PIECE as u64) as usize;
        f.read_exact_at(&mut buf[..n], at).map_err(|e| format!("read {}: {e}", path.display()))?;
        out.clear();
        Repl::Seed { first_offset: first, total, at, bytes: &buf[..n] }.encode(&mut out);
        // A follower that stops reading cannot hold the link for longer than this.
        crate::sync::deadline(std::time::Instant::now() + shard.cfg.repl_timeout, wr.write(&out))
            .await
            .ok_or_else(|| format!("the follower took no piece of the snapshot for {:?}", shard.cfg.repl_timeout))?
            .map_err(|e| format!("sending the index snapshot: {e}"))?;
        at += n as u64;
    }
    Ok(total)
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
    if shard.log.next_offset() != shard.log.first_offset() || shard.assigned() != shard.log.next_offset() {
        return Err("the leader sent a seed, but this log holds records: refused".into());
    }
    if first <= shard.log.first_offset() || total > MAX_SEED_BYTES {
        return Err(format!(
            "a seed at offset {first} of {total} bytes: refused (our log starts at {})",
            shard.log.first_offset()
        ));
    }
    let name = snapshot::file_name(first);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(|e| format!("create {}: {e}", tmp.display()))?;
    let io = |e: std::io::Error| format!("write {}: {e}", tmp.display());
    f.write_all(&piece).map_err(io)?;
    let mut at = piece.len() as u64;
    while at < total {
        let frame = next_frame(rd, used).await?.ok_or("the leader closed during the seed")?;
        let Repl::Seed { first_offset, total: t, at: a, bytes } = parse(&frame)? else {
            return Err("expected the next Seed piece".into());
        };
        if (first_offset, t, a) != (first, total, at) {
            return Err(format!(
                "seed piece at {a} of {t} (offset {first_offset}); expected {at} of {total} ({first})"
            ));
        }
        f.write_all(bytes).map_err(io)?;
        at += bytes.len() as u64;
    }
    f.sync_all().map_err(io)?;
    drop(f);
    // The whole snapshot read back and decoded (its CRC, names, windows) before use.
    let mut bytes = Vec::new();
    std::fs::File::open(&tmp).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(io)?;
    let (at_offset, index) = snapshot::decode(&bytes, usize::MAX).map_err(|e| format!("the leader's seed: {e}"))?;
    if at_offset != first {
        return Err(format!("the leader's seed holds offset {at_offset}, sent as {first}"));
    }
    std::fs::rename(&tmp, dir.join(&name)).map_err(|e| format!("rename {}: {e}", tmp.display()))?;
    sync_dir(dir)?;
    create_segment(&dir.join(segment_name(first)), shard.log.segment_bytes())?;
    sync_dir(dir)?;
    // The segments below `first` hold nothing; a start would remove them too (as an
    // interrupted trim's, `snapshot::plan`).
    for (_, old) in shard.log.segment_paths().iter().filter(|(o, _)| *o < first) {
        std::fs::remove_file(old).map_err(|e| format!("remove {}: {e}", old.display()))?;
    }
    sync_dir(dir)?;
    log::info!(
        "shard {}: seeded from the leader at offset {first}: index snapshot of {total} bytes ({} streams); restarting to open the log there",
        shard.id(),
        index.streams.len()
    );
    Ok(())
}

/// A new log in the empty shard directory `dir` that starts at `first` with the index
/// snapshot `bytes` (checked first): the snapshot, then an empty segment at `first`, each
/// durable before the next (a backup of a trimmed log, `backup`).
pub fn install(dir: &Path, first: u64, bytes: &[u8], segment_bytes: u64) -> Result<(), String> {
    let (at, _) = snapshot::decode(bytes, usize::MAX).map_err(|e| format!("the node's index snapshot: {e}"))?;
    if at != first {
        return Err(format!("the node's index snapshot holds offset {at}, sent as {first}"));
    }
    snapshot::write(dir, first, bytes)?;
    create_segment(&dir.join(segment_name(first)), segment_bytes)?;
    sync_dir(dir)
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
