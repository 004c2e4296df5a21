//! What a shard writes when its log moves on to a new segment: the sealed segment's index
//! file (`wal::segidx`) and a checkpoint of the derived state at the new segment's first
//! offset (`checkpoint`), so that a start reads neither the sealed segment nor anything
//! before it. Both are written off the executor, one seal after the other, while the
//! writer goes on in the new segment; nothing waits for them (a start without them scans
//! more, never less). Leader and follower alike: each seals its own segments.
//!
//! A cut (a follower's log cut back at a rejoin) first lets the running seal finish and
//! removes every checkpoint above the cut, then rebuilds the derived state from disk.

use std::io;
use std::rc::Rc;

use crate::checkpoint;
use crate::shard::Shard;
use crate::wal::log::Sealed;
use crate::wal::segidx;

/// Rolls the log to a new segment and starts writing the sealed one's index and the
/// checkpoint at the new segment (call between batches, before the write that needs it).
/// `shorten`: once its index file is written, the sealed segment's file is cut to its
/// written end (a roll before it is full, at a clean stop: its preallocated rest would
/// stay allocated for as long as the segment lives).
/// The sealed segment's stream runs leave the stream index for its index file; reads are
/// served from memory until the file is written.
pub(crate) async fn roll(shard: &Rc<Shard>, shorten: bool) -> io::Result<()> {
    let sealed = shard.log().roll().await?;
    let at = shard.log().next_offset();
    let seg = match &sealed {
        Sealed::Indexed(s) => s.first_offset,
        Sealed::Unscanned { first_offset, .. } => *first_offset,
    };
    let producers = shard.with_durable_producers(|p| p.saved());
    let epochs = shard.log().epochs_below(at);
    let (runs, run_bytes, heads, rebase) = shard.update_index(|ix| {
        let (runs, bytes) = ix.streams.seal(seg, at);
        (runs, bytes, ix.streams.heads_job(), ix.streams.prepare_rebase())
    });
    let run_bytes = Rc::new(run_bytes);
    shard.log().runs_pending(seg, run_bytes.clone());
    let prev = shard.take_sealing();
    let (dir, id) = (shard.log().dir().to_path_buf(), shard.id());
    let (metrics, log, me) = (shard.metrics().clone(), shard.log().clone(), Rc::downgrade(shard));
    let bytes = (*run_bytes).clone();
    let task = glommio::spawn_local(async move {
        if let Some(p) = prev {
            p.await;
        }
        let blocking = move || {
            let ckpt = checkpoint::encode(at, heads.write(), &producers, &epochs);
            write(id, &dir, sealed, (runs, bytes), at, &ckpt.bytes, shorten)?;
            let (src, paged) = ckpt.src(&dir, at);
            Ok::<_, String>(rebase(src, paged))
        };
        match glommio::executor().spawn_blocking(blocking).await {
            Ok(rebase) => {
                log.runs_written(seg);
                metrics.checkpoints.increment(1);
                // The stream index lets go of what the checkpoint now holds.
                if let Some(shard) = me.upgrade() {
                    shard.update_index(|ix| ix.streams.rebase(rebase));
                }
            }
            Err(e) => {
                metrics.checkpoint_errors.increment(1);
                log::warn!("shard {id}: {e}; its stream runs stay in memory, the next start scans more of the log");
            }
        }
    });
    shard.set_sealing(task);
    Ok(())
}

/// Writes a sealed segment's index, then the checkpoint after it, then removes the
/// older checkpoints (blocking).
fn write(
    id: u16,
    dir: &std::path::Path,
    sealed: Sealed,
    runs: (u32, Vec<u8>),
    at: u64,
    ckpt: &[u8],
    shorten: bool,
) -> Result<(), String> {
    let mut ix = match sealed {
        Sealed::Indexed(ix) => ix,
        Sealed::Unscanned { first_offset, next_offset, path } => {
            crate::boot::scan_sealed(id, &[(first_offset, path.clone())], next_offset)?
                .ok_or_else(|| format!("{} does not scan as a whole sealed segment", path.display()))?
        }
    };
    (ix.runs, ix.run_bytes) = runs;
    (ix.runs_len, ix.runs_crc) = (ix.run_bytes.len() as u32, crc32fast::hash(&ix.run_bytes));
    segidx::write(dir, &ix)?;
    if shorten {
        // Nothing reads past the last batch of a sealed segment (its index says where it
        // ends; a scan stops at the end of the data).
        let path = dir.join(crate::wal::recovery::segment_name(ix.first_offset));
        let cut = || -> std::io::Result<()> {
            let f = std::fs::OpenOptions::new().write(true).open(&path)?;
            f.set_len(ix.end_pos)?;
            f.sync_all()
        };
        cut().map_err(|e| format!("cut {} to {} bytes: {e}", path.display(), ix.end_pos))?;
    }
    checkpoint::write(dir, at, ckpt)?;
    checkpoint::remove(dir, |o| o < at)?;
    Ok(())
}

/// Before the log is cut at `offset`: no seal still writing, no checkpoint above it.
pub(crate) async fn before_cut(shard: &Shard, offset: u64) -> io::Result<()> {
    let pending = shard.take_sealing();
    if let Some(t) = pending {
        t.await;
    }
    let dir = shard.log().dir().to_path_buf();
    glommio::executor()
        .spawn_blocking(move || checkpoint::remove(&dir, |o| o > offset))
        .await
        .map(|_| ())
        .map_err(io::Error::other)
}

/// After the log was cut back to `end` (nothing staged): the derived state rebuilt from
/// what is on disk now, as a start would (`boot::derive`: the newest checkpoint at or
/// below the cut, the index files after it, the records of the last segment), for the
/// shard's index and its written-records producers' table.
pub(crate) async fn after_cut(shard: &Shard, end: u64) -> io::Result<()> {
    let dir = shard.log().dir().to_path_buf();
    let (id, max) = (shard.id(), shard.with_durable_producers(|p| p.max()));
    let index = glommio::executor()
        .spawn_blocking(move || crate::boot::derive(id, &dir, max))
        .await
        .map_err(io::Error::other)?;
    if index.streams.is_empty() && index.producers.is_empty() && end > 0 {
        log::debug!("shard {id}: no derived state below {end}");
    }
    shard.with_durable_producers(|p| *p = index.producers.copy());
    shard.update_index(|ix| *ix = index);
    Ok(())
}
