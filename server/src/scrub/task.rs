//! The per-shard scrubber: round and round the shard's sealed segments, each read in
//! [`CHUNK`]-byte pieces at the paced rate and fed to a [`SegCheck`]; a segment is
//! reported only when it is still sealed and unchanged after its last read.

use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::pacer::Pacer;
use super::read::read;
use super::report::{note, set_damaged, Damage, Known};
use super::segcheck::SegCheck;
use super::{CHUNK, START_AFTER};
use crate::shard::Shard;
use crate::wal::segidx;

/// How often a shard without sealed segments looks again.
const IDLE: Duration = Duration::from_secs(1);

/// Scrubs the shard's sealed segments, round and round, for the life of the process.
pub async fn run(shard: Rc<Shard>, bytes_per_s: u64) {
    let ctl = shard.cfg().ctl.clone();
    while !ctl.started() {
        if ctl.stopping() {
            return;
        }
        glommio::timer::sleep(Duration::from_millis(100)).await;
    }
    glommio::timer::sleep(START_AFTER).await;
    let id = shard.id();
    log::info!("shard {id}: scrubbing sealed segments at {:.1} MiB/s", bytes_per_s as f64 / (1u64 << 20) as f64);
    let mut pacer = Pacer::new(bytes_per_s);
    let mut known: Vec<Known> = Vec::new();
    let mut damaged = false;
    let mut last_err = String::new();
    loop {
        if ctl.stopping() {
            return;
        }
        let segs = shard.log().segment_paths();
        assert!(segs.windows(2).all(|w| w[0].0 < w[1].0), "scrub: the log's segments must ascend by first offset");
        let mut checked = 0;
        for w in segs.windows(2) {
            let ((first, path), next) = (&w[0], w[1].0);
            match scrub_segment(&shard, &mut pacer, *first, path, next).await {
                Outcome::Checked(found) => {
                    checked += 1;
                    last_err.clear();
                    note(&shard, &mut known, *first, path, found);
                    set_damaged(&shard, &mut damaged, !known.is_empty());
                }
                Outcome::Skipped if ctl.stopping() => return,
                Outcome::Skipped => {}
                Outcome::Failed(e) if e != last_err => {
                    log::warn!("shard {id}: scrub: {e}; trying again next round");
                    last_err = e;
                }
                Outcome::Failed(_) => {}
            }
        }
        // Segments retention deleted take their damage with them.
        let held = shard.log().segment_paths();
        known.retain(|k| held.iter().any(|(f, _)| *f == k.first));
        set_damaged(&shard, &mut damaged, !known.is_empty());
        if checked == 0 {
            // No sealed segment, or none could be read: nothing paced this round.
            glommio::timer::sleep(IDLE).await;
            continue;
        }
        shard.metrics().scrub_passes.increment(1);
    }
}

/// What became of one sealed segment's check.
enum Outcome {
    /// Read to its end (or to damage that ends its check): what was found.
    Checked(Vec<Damage>),
    /// Deleted or changed while it was read (retention, a follower's cut), or the node is
    /// stopping: nothing to say about it.
    Skipped,
    /// It could not be opened.
    Failed(String),
}

/// Checks one sealed segment: what it holds is reported only when, after its last read,
/// the log still holds it as a sealed segment and its file is the one that was read.
async fn scrub_segment(shard: &Rc<Shard>, pacer: &mut Pacer, first: u64, path: &Path, next: u64) -> Outcome {
    // Each segment file is named by its first offset: two cannot share one.
    assert!(first < next, "scrub: segment {first} followed by one at {next}");
    let log = shard.log();
    let sealed = || {
        let segs = log.segment_paths();
        segs.iter().position(|(f, _)| *f == first).is_some_and(|i| i + 1 < segs.len())
    };
    let Some(before) = identity(path).filter(|_| sealed()) else {
        return Outcome::Skipped;
    };
    let file = match glommio::io::DmaFile::open(path).await {
        Ok(f) => f,
        Err(_) if !sealed() => return Outcome::Skipped,
        Err(e) => return Outcome::Failed(format!("open {}: {e}", path.display())),
    };
    let dir = log.dir().to_path_buf();
    let idx = glommio::executor().spawn_blocking(move || segidx::read(&dir, first)).await;
    let mut pre = Vec::new();
    let idx = match idx {
        Ok(ix) => ix,
        Err(e) => {
            pre.push(Damage {
                pos: 0,
                offsets: None,
                what: format!("index file: {e}; the next start rebuilds it from the segment if the segment is whole"),
            });
            None
        }
    };
    let mut check = SegCheck::new(first, next, idx);
    let mut pos = 0u64;
    loop {
        let wait = pacer.take(CHUNK as u64, Instant::now());
        if !wait.is_zero() {
            glommio::timer::sleep(wait).await;
        }
        if shard.cfg().ctl.stopping() {
            let _ = file.close().await;
            return Outcome::Skipped;
        }
        match read(&file, path, pos).await {
            Ok(bytes) => {
                assert!(bytes.len() <= CHUNK, "scrub: a read of {} bytes, at most {CHUNK} asked", bytes.len());
                shard.metrics().scrub_bytes.increment(bytes.len() as u64);
                check.feed(&bytes);
                pos += bytes.len() as u64;
                if bytes.len() < CHUNK {
                    break;
                }
            }
            Err(e) => {
                check.read_failed(pos, &e);
                break;
            }
        }
        if check.done() {
            break;
        }
    }
    let _ = file.close().await;
    let mut found = pre;
    found.extend(check.finish());
    if sealed() && identity(path) == Some(before) {
        Outcome::Checked(found)
    } else {
        Outcome::Skipped
    }
}

/// Which file a path names and when it last changed: (inode, mtime ns, ctime ns, size).
fn identity(path: &Path) -> Option<(u64, i64, i64, i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec(), m.size()))
}
