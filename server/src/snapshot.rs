//! Index snapshots: the stream index and the producers' table as they stand at a trim
//! point, so that a shard whose old segments retention deleted still rebuilds both.
//!
//! `index-<first offset, 20 digits>.snap` in the shard directory holds the state the
//! records below `first` leave behind: every stream with its next version, every
//! producer with its window (docs/format.md §6). It is written (temp file, fsync,
//! rename, directory fsync) before any segment below `first` is deleted; the previous
//! snapshot goes last. At boot [`plan`] picks the snapshot at which a segment starts,
//! finishes a trim a crash interrupted (segments below it), and drops stale snapshots;
//! the boot scan then feeds the records from `first` on, as it does for a whole log.
//!
//! Size: per stream its name + 9 bytes, per producer 26 bytes + 8 per remembered
//! position (≤ `producers::WINDOW`). Written once per trim.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::index::LogIndex;
use crate::le::{checked_body, Reader};
use crate::producers::{Saved, WINDOW};
use crate::wal::recovery::{list_segments, sync_dir};

const MAGIC: &[u8; 8] = b"CLSNAP01";

pub fn file_name(first: u64) -> String {
    format!("index-{first:020}.snap")
}

/// The snapshot of `index`, which must hold exactly the records below `first`.
pub fn encode(first: u64, index: &LogIndex) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&first.to_le_bytes());
    let owned = index.streams.next_versions();
    let mut streams: Vec<(&str, u64)> = owned.iter().map(|(n, v)| (&**n, *v)).collect();
    streams.sort_unstable(); // the same index always gives the same bytes
    encode_streams(&streams, &mut out);
    encode_producers(&index.producers.saved(), &mut out);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Streams and their next versions: a count, then each.
pub fn encode_streams(streams: &[(&str, u64)], out: &mut Vec<u8>) {
    out.extend_from_slice(&(streams.len() as u64).to_le_bytes());
    for (name, next) in streams {
        assert!(!name.is_empty() && name.len() <= 255, "stream names are checked before they are stored");
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&next.to_le_bytes());
    }
}

/// Producers' windows (oldest last offset first): a count, then each.
pub fn encode_producers(producers: &[Saved], out: &mut Vec<u8>) {
    out.extend_from_slice(&(producers.len() as u64).to_le_bytes());
    for p in producers {
        out.extend_from_slice(&p.id.to_le_bytes());
        out.extend_from_slice(&p.next_seq.to_le_bytes());
        out.extend_from_slice(&p.last_offset.to_le_bytes());
        out.extend_from_slice(&(p.offsets.len() as u16).to_le_bytes());
        for o in &p.offsets {
            out.extend_from_slice(&o.to_le_bytes());
        }
    }
}

/// Decodes what `encode_streams` wrote, handing each (name, next version) to `each`.
pub fn decode_streams(r: &mut Reader<'_>, each: &mut dyn FnMut(&str, u64) -> Result<(), String>) -> Result<(), String> {
    for _ in 0..r.u64()? {
        let n = r.u8()? as usize;
        let name = std::str::from_utf8(r.take(n)?).map_err(|_| "a stream name is not UTF-8")?;
        if name.is_empty() {
            return Err("an empty stream name".into());
        }
        each(name, r.u64()?)?;
    }
    Ok(())
}

/// Decodes what `encode_producers` wrote; every position must be below `first`.
pub fn decode_producers(r: &mut Reader<'_>, first: u64) -> Result<Vec<Saved>, String> {
    let mut out = Vec::new();
    for _ in 0..r.u64()? {
        let (id, next_seq, last_offset) = (r.u64()?, r.u64()?, r.u64()?);
        let n = r.u16()? as usize;
        if n > WINDOW {
            return Err(format!("producer {id:#x}: {n} positions, more than {WINDOW}"));
        }
        let offsets = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        if offsets.iter().chain([&last_offset]).any(|&o| o >= first) {
            return Err(format!("producer {id:#x}: a position at or above the snapshot's offset {first}"));
        }
        out.push(Saved { id, next_seq, last_offset, offsets });
    }
    Ok(out)
}

/// Decodes a snapshot: (first offset, the index at it, counting versions only).
pub fn decode(b: &[u8], max_producers: usize) -> Result<(u64, LogIndex), String> {
    let mut r = Reader(checked_body(b)?);
    if r.take(8)? != MAGIC {
        return Err("not an index snapshot (bad magic)".into());
    }
    let first = r.u64()?;
    let mut index = LogIndex::versions_only(max_producers);
    decode_streams(&mut r, &mut |name, next| {
        index.streams.restore(name, next);
        Ok(())
    })?;
    for p in decode_producers(&mut r, first)? {
        index.producers.restore(p)?;
    }
    if r.rest() > 0 {
        return Err(format!("{} bytes after the last entry", r.rest()));
    }
    Ok((first, index))
}

/// Writes the snapshot at `first` durably (blocking: call it off the executor).
pub fn write(dir: &Path, first: u64, bytes: &[u8]) -> Result<(), String> {
    write_durably(dir, &file_name(first), bytes).map(drop)
}

/// Writes `dir/name` so that a crash leaves either the whole file or none by that name:
/// `<name>.tmp`, fsynced, renamed, the directory fsynced (snapshots and checkpoints alike).
pub fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let w = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    w().map_err(|e| format!("write {}: {e}", path.display()))?;
    sync_dir(dir)?;
    Ok(path)
}

/// Bytes from `at` (at most `max`) of the snapshot at `first` in `dir`, and its size: what
/// a follower being seeded and a backup of a trimmed log are sent, piece by piece. Reads
/// blocking: on an executor use `piece_off_executor`.
pub fn piece(dir: &Path, first: u64, at: u64, max: usize) -> Result<(u64, Vec<u8>), String> {
    use std::os::unix::fs::FileExt;
    let path = dir.join(file_name(first));
    let err = |e: std::io::Error| format!("read {}: {e}", path.display());
    let f = std::fs::File::open(&path).map_err(err)?;
    let total = f.metadata().map_err(err)?.len();
    let n = total.saturating_sub(at).min(max as u64) as usize;
    let mut bytes = vec![0u8; n];
    f.read_exact_at(&mut bytes, at).map_err(err)?;
    Ok((total, bytes))
}

/// `piece` on glommio's blocking-thread pool, for an executor: a snapshot of a million
/// streams is tens of MB, and a piece that is not in the page cache would stall every
/// connection and the commit loop of the shard while it is read.
pub async fn piece_off_executor(dir: &Path, first: u64, at: u64, max: usize) -> Result<(u64, Vec<u8>), String> {
    let dir = dir.to_path_buf();
    glommio::executor().spawn_blocking(move || piece(&dir, first, at, max)).await
}

/// The snapshots in `dir`, ascending.
pub fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, String> {
    list_numbered(dir, "index-", ".snap")
}

/// The files `<prefix><number><suffix>` in `dir`, ascending by number.
pub fn list_numbered(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<(u64, PathBuf)>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    let mut v = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| e.to_string())?;
        let name = ent.file_name().to_string_lossy().to_string();
        if let Some(n) = name.strip_prefix(prefix).and_then(|n| n.strip_suffix(suffix)) {
            if let Ok(n) = n.parse::<u64>() {
                v.push((n, ent.path()));
            }
        }
    }
    v.sort();
    Ok(v)
}

/// What a shard directory's segments and snapshots say about where its log starts.
#[derive(Debug, Default)]
pub struct Plan {
    /// The snapshot the log starts at (None: the log starts at offset 0).
    pub snapshot: Option<(u64, PathBuf)>,
    /// Segments below it: a trim a crash interrupted (deleted by `apply`).
    pub unfinished: Vec<PathBuf>,
    /// Snapshots of earlier trims, or of a trim that deleted nothing yet.
    pub stale: Vec<PathBuf>,
}

/// Reads (never changes) the directory: which snapshot the log starts at.
pub fn plan(dir: &Path) -> Result<Plan, String> {
    let segs = list_segments(dir).map_err(|e| e.to_string())?;
    let mut snaps = list(dir)?;
    let starts = |o: u64| segs.iter().any(|(f, _)| *f == o);
    let mut p = Plan::default();
    if let Some(i) = snaps.iter().rposition(|(o, _)| starts(*o)) {
        let (at, path) = snaps.remove(i);
        p.unfinished = segs.iter().filter(|(f, _)| *f < at).map(|(_, s)| s.clone()).collect();
        p.snapshot = Some((at, path));
    } else if let Some((f, _)) = segs.first().filter(|(f, _)| *f > 0) {
        return Err(format!(
            "{}: the log starts at offset {f} (older segments were deleted) but {} is missing: the stream versions and producer state of the deleted records are lost; refusing to start",
            dir.display(),
            file_name(*f)
        ));
    }
    p.stale = snaps.into_iter().map(|(_, s)| s).collect();
    Ok(p)
}

/// Finishes what `plan` found (boot only) and loads the snapshot: (index, first offset).
pub fn apply(dir: &Path, p: Plan, max_producers: usize) -> Result<(LogIndex, u64), String> {
    let rm = |f: &PathBuf| std::fs::remove_file(f).map_err(|e| format!("remove {}: {e}", f.display()));
    for f in p.unfinished.iter().chain(&p.stale) {
        rm(f)?;
    }
    if !p.unfinished.is_empty() || !p.stale.is_empty() {
        sync_dir(dir)?;
        log::info!(
            "{}: removed {} segment(s) of an interrupted trim and {} stale index snapshot(s)",
            dir.display(),
            p.unfinished.len(),
            p.stale.len()
        );
    }
    let Some((at, path)) = p.snapshot else { return Ok((LogIndex::new(max_producers), 0)) };
    let b = std::fs::read(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let (first, index) = decode(&b, max_producers).map_err(|e| format!("{}: {e}", path.display()))?;
    if first != at {
        return Err(format!("{}: holds offset {first}, named {at}", path.display()));
    }
    Ok((index, first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_client::record::ProducerSeq;

    #[test]
    fn roundtrip_and_damage() {
        let mut ix = LogIndex::new(8);
        ix.streams.note("order-1", 0, 3).unwrap();
        ix.streams.note("order-1", 1, 7).unwrap();
        ix.streams.note("é", 0, 8).unwrap();
        for s in 0..70 {
            ix.producers.note(ProducerSeq { id: 5, seq: s }, 10 + s);
        }
        ix.producers.note(ProducerSeq { id: 6, seq: 0 }, 90);
        let b = encode(100, &ix);
        let (first, back) = decode(&b, 8).unwrap();
        assert_eq!(first, 100);
        assert_eq!(back.streams.current("order-1"), Some(1));
        assert_eq!(back.streams.current("é"), Some(0));
        assert_eq!(back.producers.saved(), ix.producers.saved());
        assert_eq!(encode(100, &back), b, "a restored index snapshots the same");
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x40;
            assert!(decode(&d, 8).is_err(), "flipped byte {i} went unnoticed");
        }
        assert!(decode(&b[..b.len() - 1], 8).is_err());
        // A position at or above the snapshot's offset cannot be in it.
        let e = decode(&encode(50, &ix), 8).err().expect("refused");
        assert!(e.contains("at or above"), "{e}");
    }

    #[test]
    fn plan_picks_the_snapshot_a_segment_starts_at() {
        let d = std::env::temp_dir().join(format!("corelog-snap-plan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let touch = |n: &str| std::fs::write(d.join(n), b"").unwrap();
        let seg = crate::wal::recovery::segment_name;
        touch(&seg(0));
        touch(&seg(10));
        let p = plan(&d).unwrap();
        assert!(p.snapshot.is_none() && p.unfinished.is_empty() && p.stale.is_empty());
        // A trim to 20 that wrote its snapshot, deleted segment 0, then crashed.
        touch(&seg(20));
        touch(&file_name(20));
        std::fs::remove_file(d.join(seg(0))).unwrap();
        let p = plan(&d).unwrap();
        assert_eq!(p.snapshot.as_ref().map(|s| s.0), Some(20));
        assert_eq!(p.unfinished, vec![d.join(seg(10))]);
        // A snapshot no segment starts at (written, nothing deleted yet) is stale.
        touch(&file_name(25));
        let p = plan(&d).unwrap();
        assert_eq!(p.stale, vec![d.join(file_name(25))]);
        // Segments from 10 on with no snapshot for 10 (and none above): refused.
        std::fs::remove_file(d.join(file_name(20))).unwrap();
        std::fs::remove_file(d.join(file_name(25))).unwrap();
        assert!(plan(&d).unwrap_err().contains("index-00000000000000000010.snap is missing"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
