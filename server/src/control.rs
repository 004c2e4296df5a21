//! Control plane: per-shard epoch files, the data-dir lock, offline promotion.
//!
//! The epoch of shard i lives in `<data-dir>/shard-<i>/epoch` (decimal, one line),
//! replaced atomically (write temp, fsync, rename, fsync dir). A node never accepts
//! replication or client writes from a lower epoch than the one on its disk.
//! `promoted-epoch` beside it (same format) is written by `admin promote`: the records
//! of epochs below it are the history the promoted node inherited (docs/format.md).
//! `needs-repair` (same format, an offset) marks a shard that may lack acknowledged
//! records from that offset on: it never leads or serves alone until it has caught up
//! with a leader (see `write_repair_mark`).

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

const REPAIR_MARK: &str = "needs-repair";

/// Shard directories of this process that carry a repair mark (read by the coordinator).
static MARKED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The offset from which this shard may lack acknowledged records, if it is marked.
/// Also registers the mark for [`any_repair_mark`].
pub fn read_repair_mark(shard_dir: &Path) -> Result<Option<u64>, String> {
    let m = read_number(shard_dir, REPAIR_MARK)?;
    if m.is_some() {
        note_mark(shard_dir, true);
    }
    Ok(m)
}

/// Marks the shard: it may lack acknowledged records from `from` on (a damaged batch at
/// the end of its log was, or is about to be, cut). Written durably before the cut; it
/// keeps the node from leading or serving alone, across restarts, until it has followed
/// a leader past that leader's end (`clear_repair_mark`), or an operator accepted the
/// loss (`corelog admin accept-loss`).
pub fn write_repair_mark(shard_dir: &Path, from: u64) -> Result<(), String> {
    write_number(shard_dir, REPAIR_MARK, from)?;
    note_mark(shard_dir, true);
    Ok(())
}

pub fn clear_repair_mark(shard_dir: &Path) -> Result<(), String> {
    let p = shard_dir.join(REPAIR_MARK);
    match std::fs::remove_file(&p) {
        Ok(()) => sync_dir(shard_dir)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("remove {}: {e}", p.display())),
    }
    note_mark(shard_dir, false);
    Ok(())
}

/// Whether a shard of this process is marked (it must not take leadership).
pub fn any_repair_mark() -> bool {
    !MARKED.lock().unwrap().is_empty()
}

pub fn is_marked(shard_dir: &Path) -> bool {
    MARKED.lock().unwrap().iter().any(|d| d == shard_dir)
}

const LEADER_FLOOR: &str = "leader-floor";

/// Follower: every offset below this was durable on its leader (the leader forms a batch
/// only after the previous one's fdatasync, so a shipped batch's first offset is below
/// the leader's durable end) and is durable here. Such records are never legitimately
/// cut on either node; a leader whose log ends below this lost writes. 0 when unknown.
pub fn read_leader_floor(shard_dir: &Path) -> Result<u64, String> {
    Ok(read_number(shard_dir, LEADER_FLOOR)?.unwrap_or(0))
}

/// Persists the floor (atomic replace). Called from a blocking thread: serialised here.
pub fn write_leader_floor(shard_dir: &Path, floor: u64) -> Result<(), String> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap();
    write_number(shard_dir, LEADER_FLOOR, floor)
}

fn note_mark(shard_dir: &Path, on: bool) {
    let mut m = MARKED.lock().unwrap();
    m.retain(|d| d != shard_dir);
    if on {
        m.push(shard_dir.to_path_buf());
    }
}

fn read_number<T: std::str::FromStr>(shard_dir: &Path, name: &str) -> Result<Option<T>, String>
where
    T::Err: std::fmt::Display,
{
    let p = shard_dir.join(name);
    match std::fs::read_to_string(&p) {
        Ok(s) => s.trim().parse().map(Some).map_err(|e| format!("bad {name} file {}: {e}", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("read {}: {e}", p.display())),
    }
}

fn write_number<T: std::fmt::Display>(shard_dir: &Path, name: &str, value: T) -> Result<(), String> {
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
/// `corelog admin accept-loss`: cuts a damaged last batch and clears the repair mark of
/// one shard of a stopped node. Says what was given up.
pub fn accept_loss(data_dir: &Path, shard: u16) -> Result<String, String> {
    let dir = shard_dir(data_dir, shard);
    if !dir.is_dir() {
        return Err(format!("{} is not a shard directory", dir.display()));
    }
    let _lock = lock_shard(&dir)?;
    let scan = crate::wal::recovery::scan(shard, &dir).map_err(|e| e.to_string())?;
    let mark = read_repair_mark(&dir)?;
    let mut said = Vec::new();
    if let Some(d) = &scan.damage {
        let t = scan.torn.as_ref().expect("a damaged tail has bytes to zero");
        crate::wal::recovery::repair(t)?;
        said.push(format!("cut the {d}; the log now ends at offset {}", scan.next_offset));
    }
    if let Some(m) = mark {
        clear_repair_mark(&dir)?;
        said.push(format!("cleared the needs-repair mark (records from offset {m} may have been lost)"));
    }
    let floor = read_leader_floor(&dir)?;
    if said.is_empty() && floor == 0 {
        return Err(format!(
            "shard {shard} of {} has no damaged last batch, no repair mark and no leader floor: nothing to accept",
            data_dir.display()
        ));
    }
    if floor > 0 {
        let p = dir.join(LEADER_FLOOR);
        std::fs::remove_file(&p).map_err(|e| format!("remove {}: {e}", p.display()))?;
        sync_dir(&dir)?;
        said.push(format!("forgot the leader floor {floor} (a leader ending below it is accepted again)"));
    }
    if scan.damage.is_some() || mark.is_some() {
        said.push(format!("offsets from {} will be handed out again", scan.next_offset));
    }
    Ok(format!("shard {shard}: {}", said.join("; ")))
}

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
