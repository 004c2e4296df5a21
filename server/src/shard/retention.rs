//! Retention: deleting a shard's oldest whole segments, by size (`--retain-bytes`), by
//! age (`--retain-hours`) or on request (`corelog admin trim`, the `Trim` request).
//!
//! A trim never deletes the segment being written, nor any record its peer may still
//! need (`Shard::trim_floor`): a leader keeps what its follower has not confirmed, a
//! follower what its leader has not shown durable. Before a segment goes, the index
//! snapshot at the new first offset is saved (`snapshot.rs`): the stream versions and
//! producers' windows the deleted records leave behind, rebuilt from the previous
//! snapshot and the records being deleted (read once more). Then the segments are
//! unlinked oldest first and the directory synced; a crash anywhere in between is
//! finished by the next boot (`snapshot::plan`). Reads below the first offset get
//! `OutOfRange` with it. Each node applies its own settings: leader and follower each
//! trim their copy, within the floor.

use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use crate::index::LogIndex;
use crate::shard::Shard;
use crate::snapshot;

/// How often a shard with a retention setting checks its segments: the disk holds at
/// most the retained bytes, the segment being written and what this much time of
/// appends adds.
pub const CHECK_EVERY: Duration = Duration::from_millis(200);
/// Bytes read per chunk while the trimmed records are fed to the snapshot's index.
const FEED_CHUNK: usize = 1024 * 1024;

#[derive(Clone, Copy, Debug, Default)]
pub struct Policy {
    /// Keep at most about this many bytes of segment files (the segment being written
    /// always stays, so a shard holds at least one segment).
    pub bytes: Option<u64>,
    /// Delete a segment once its last write is older than this.
    pub age: Option<Duration>,
}

impl Policy {
    pub fn any(&self) -> bool {
        self.bytes.is_some() || self.age.is_some()
    }
}

/// One segment as the policy sees it.
#[derive(Clone, Debug)]
pub struct SegStat {
    pub first: u64,
    pub bytes: u64,
    /// Its last write.
    pub modified: SystemTime,
}

/// The new first offset (a segment start) after deleting the oldest segments that the
/// policy or `before` (delete segments wholly below it) lets go and that lie wholly
/// below `floor`; None when nothing goes. Never the last segment.
pub fn cut(segs: &[SegStat], p: &Policy, before: Option<u64>, floor: u64, now: SystemTime) -> Option<u64> {
    let total: u64 = segs.iter().map(|s| s.bytes).sum();
    let mut freed = 0;
    let mut k = 0;
    while k + 1 < segs.len() {
        let next_first = segs[k + 1].first;
        if next_first > floor {
            break;
        }
        let by_size = p.bytes.is_some_and(|b| total - freed > b);
        let by_age = p.age.is_some_and(|a| now.duration_since(segs[k].modified).is_ok_and(|d| d > a));
        let asked = before.is_some_and(|b| next_first <= b);
        if !(by_size || by_age || asked) {
            break;
        }
        freed += segs[k].bytes;
        k += 1;
    }
    (k > 0).then(|| segs[k].first)
}

/// Runs the policy every `CHECK_EVERY` for the life of the shard.
pub async fn run(shard: Rc<Shard>) {
    let mut last_err = String::new();
    loop {
        glommio::timer::sleep(CHECK_EVERY).await;
        if shard.cfg().ctl.stopping() {
            return;
        }
        match trim(&shard, None).await {
            Ok(_) => last_err.clear(),
            Err(e) if e != last_err => {
                log::warn!("shard {}: retention: {e}", shard.id());
                last_err = e;
            }
            Err(_) => {}
        }
    }
}

/// Deletes what the policy (and `before`, if given) lets go; one trim at a time.
/// Returns the shard's first offset afterwards.
pub async fn trim(shard: &Rc<Shard>, before: Option<u64>) -> Result<u64, String> {
    let _turn = shard.trim_turn().await;
    trim_once(shard, before).await
}

async fn trim_once(shard: &Rc<Shard>, before: Option<u64>) -> Result<u64, String> {
    let log = shard.log();
    let old_first = log.first_offset();
    let segs = stats(log.segment_paths(), log.segment_bytes(), shard.cfg().retain.age.is_some())?;
    let Some(first) = cut(&segs, &shard.cfg().retain, before, shard.trim_floor(), SystemTime::now()) else {
        return Ok(old_first);
    };
    assert!(first > old_first && first <= log.next_offset(), "cut {first} outside {old_first}..");
    // The index the records below `first` leave: the previous snapshot's, fed the
    // records being deleted.
    let max = shard.with_index(|t| t.producers.max());
    let mut base = if old_first == 0 {
        LogIndex::versions_only(max)
    } else {
        let path = log.dir().join(snapshot::file_name(old_first));
        let b = std::fs::read(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        snapshot::decode(&b, max).map_err(|e| format!("{}: {e}", path.display()))?.1
    };
    let mut at = old_first;
    while at < first {
        let (recs, count) = log.read(at, first, FEED_CHUNK).await.map_err(|e| format!("read at {at}: {e}"))?;
        if count == 0 {
            return Err(format!("no record at {at} below the trim point {first}"));
        }
        base.note_run(&recs).map_err(|e| format!("feeding the snapshot: {e}"))?;
        at += count as u64;
    }
    let bytes = snapshot::encode(first, &base);
    drop(base);
    let dir = log.dir().to_path_buf();
    let d = dir.clone();
    glommio::executor().spawn_blocking(move || snapshot::write(&d, first, &bytes)).await?;
    let n = log.drop_below(first).map_err(|e| format!("deleting segments below {first}: {e}"))?;
    if old_first > 0 {
        let old = dir.join(snapshot::file_name(old_first));
        std::fs::remove_file(&old).map_err(|e| format!("remove {}: {e}", old.display()))?;
    }
    shard.metrics().trimmed_segments.increment(n as u64);
    shard.metrics().first_offset.set(first as f64);
    log::info!("shard {}: trimmed {n} segment(s): the log now starts at offset {first} (was {old_first})", shard.id());
    Ok(first)
}

/// Segments are preallocated to `size`; their modification times are read (a stat per
/// segment) only for an age policy.
fn stats(paths: Vec<(u64, PathBuf)>, size: u64, mtime: bool) -> Result<Vec<SegStat>, String> {
    paths
        .into_iter()
        .map(|(first, p)| {
            let modified = if mtime {
                let m = std::fs::metadata(&p).map_err(|e| format!("stat {}: {e}", p.display()))?;
                m.modified().map_err(|e| format!("mtime of {}: {e}", p.display()))?
            } else {
                SystemTime::UNIX_EPOCH
            };
            Ok(SegStat { first, bytes: size, modified })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(n: u64, now: SystemTime) -> Vec<SegStat> {
        // Segment i holds offsets 100 i .. 100 (i + 1), 10 bytes, last written i hours ago
        // counted from the newest.
        (0..n)
            .map(|i| SegStat { first: 100 * i, bytes: 10, modified: now - Duration::from_secs(3600 * (n - 1 - i)) })
            .collect()
    }

    #[test]
    fn cut_by_size_age_request_and_floor() {
        let now = SystemTime::now();
        let s = segs(5, now);
        let none = Policy::default();
        let bytes = |b| Policy { bytes: Some(b), age: None };
        assert_eq!(cut(&s, &none, None, u64::MAX, now), None);
        assert_eq!(cut(&s, &bytes(30), None, u64::MAX, now), Some(200), "50 bytes, keep 30: two go");
        assert_eq!(cut(&s, &bytes(0), None, u64::MAX, now), Some(400), "the last segment always stays");
        assert_eq!(cut(&s, &bytes(0), None, 250, now), Some(200), "not past the floor");
        assert_eq!(cut(&s, &bytes(0), None, 99, now), None);
        let age = Policy { bytes: None, age: Some(Duration::from_secs(3600 * 2 + 60)) };
        assert_eq!(cut(&s, &age, None, u64::MAX, now), Some(200), "written 4 and 3 hours ago go");
        assert_eq!(cut(&s, &none, Some(350), u64::MAX, now), Some(300), "wholly below 350");
        assert_eq!(cut(&s, &none, Some(99), u64::MAX, now), None);
        assert_eq!(cut(&s[..1], &bytes(0), Some(u64::MAX), u64::MAX, now), None);
    }
}
