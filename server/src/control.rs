//! Control plane: per-shard epoch files, the data-dir lock, offline promotion.
//!
//! The epoch of shard i lives in `<data-dir>/shard-<i>/epoch` (decimal, one line),
//! replaced atomically (write temp, fsync, rename, fsync dir). A node never accepts
//! replication or client writes from a lower epoch than the one on its disk.
//! `promoted-epoch` beside it (same format) is written by `admin promote`: the records
//! of epochs below it are the history the promoted node inherited (docs/format.md).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::wal::recovery::sync_dir;

/// Epoch of a fresh data directory.
pub const INITIAL_EPOCH: u32 = 1;

pub fn shard_dir(data_dir: &Path, shard: u16) -> PathBuf {
    data_dir.join(format!("shard-{shard}"))
}

pub fn read_epoch(shard_dir: &Path) -> Result<u32, String> {
    Ok(read_number(shard_dir, "epoch")?.unwrap_or(INITIAL_EPOCH))
}

pub fn write_epoch(shard_dir: &Path, epoch: u32) -> Result<(), String> {
    write_number(shard_dir, "epoch", epoch)
}

/// The epoch `admin promote` gave this shard, if it was ever promoted.
pub fn read_promoted_epoch(shard_dir: &Path) -> Result<Option<u32>, String> {
    read_number(shard_dir, "promoted-epoch")
}

fn read_number(shard_dir: &Path, name: &str) -> Result<Option<u32>, String> {
    let p = shard_dir.join(name);
    match std::fs::read_to_string(&p) {
        Ok(s) => s.trim().parse().map(Some).map_err(|e| format!("bad {name} file {}: {e}", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("read {}: {e}", p.display())),
    }
}

fn write_number(shard_dir: &Path, name: &str, value: u32) -> Result<(), String> {
    let tmp = shard_dir.join(format!("{name}.tmp"));
    let fin = shard_dir.join(name);
    let r = (|| {
        let mut f = File::create(&tmp)?;
        writeln!(f, "{value}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, &fin)
    })();
    r.map_err(|e| format!("write {}: {e}", fin.display()))?;
    sync_dir(shard_dir)
}

/// An exclusive lock on a shard directory, held for the life of the process.
pub struct ShardLock {
    _file: File,
}

pub fn lock_shard(shard_dir: &Path) -> Result<ShardLock, String> {
    let p = shard_dir.join("LOCK");
    let f = File::create(&p).map_err(|e| format!("create {}: {e}", p.display()))?;
    // SAFETY: flock on a valid fd.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "{} is in use by another corelog process (lock {} held)",
            shard_dir.display(),
            p.display()
        ));
    }
    Ok(ShardLock { _file: f })
}

/// Shard directories present under a data dir, sorted by id.
pub fn list_shards(data_dir: &Path) -> Result<Vec<u16>, String> {
    let rd = std::fs::read_dir(data_dir).map_err(|e| format!("read {}: {e}", data_dir.display()))?;
    let mut v: Vec<u16> =
        rd.flatten().filter_map(|e| e.file_name().to_str()?.strip_prefix("shard-")?.parse().ok()).collect();
    v.sort();
    Ok(v)
}

/// Offline promotion: sets every shard's epoch to `epoch`, or one above the highest on
/// disk. This node only knows its own disk: if the other node ever led at a higher
/// epoch than this one saw, pass an `epoch` above that one (see docs/operations.md).
/// The node must be stopped (the shard locks are taken). Returns the new epoch.
pub fn promote(data_dir: &Path, epoch: Option<u32>) -> Result<u32, String> {
    let shards = list_shards(data_dir)?;
    if shards.is_empty() {
        return Err(format!("{} holds no shard directory", data_dir.display()));
    }
    let mut locks = Vec::new();
    let mut max = 0;
    for s in &shards {
        let d = shard_dir(data_dir, *s);
        locks.push(lock_shard(&d)?);
        max = max.max(read_epoch(&d)?);
    }
    let new = match epoch {
        Some(e) if e <= max => return Err(format!("--epoch {e} must be above the epoch on disk ({max})")),
        Some(e) => e,
        None => max + 1,
    };
    for s in &shards {
        let d = shard_dir(data_dir, *s);
        write_number(&d, "promoted-epoch", new)?;
        write_epoch(&d, new)?;
    }
    Ok(new)
}
