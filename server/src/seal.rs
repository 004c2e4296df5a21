//! What a shard writes when its log moves on to a new segment: the sealed segment's index
//! file (`wal::segidx`) and a checkpoint of the derived state at the new segment's first
//! offset (`checkpoint`), so that a start reads neither the sealed segment nor anything
//! before it. Both are written off the executor, one seal after the other, while the
//! writer goes on in the new segment; nothing waits for them (a start without them scans
//! more, never less). Leader and follower alike: each seals its own segments.
//!
//! A cut (a follower's log cut back at a rejoin) first lets the running seal finish and
//! removes every checkpoint above the cut, then rebuilds the written-records producers'
//! table from the newest checkpoint below it.

use std::io;
use std::rc::Rc;

use crate::checkpoint::{self, Checkpoint};
use crate::producers::Producers;
use crate::shard::Shard;
use crate::wal::log::Sealed;
use crate::wal::segidx::{self, StreamRun};

/// Rolls the log to a new segment and starts writing the sealed one's index and the
/// checkpoint at the new segment (call between batches, before the write that needs it).
pub(crate) async fn roll(shard: &Rc<Shard>) -> io::Result<()> {
    let sealed = shard.log.roll().await?;
    let at = shard.log.next_offset();
    let (streams, runs) = shard.with_index(|ix| {
        let runs = match &sealed {
            Sealed::Indexed(s) => ix.streams.runs_between(s.first_offset, at),
            Sealed::Unscanned { .. } => Vec::new(),
        };
        (ix.streams.heads_at(at), runs)
    });
    let ckpt = Checkpoint {
        offset: at,
        streams,
        producers: shard.durable_producers.borrow().saved(),
        epochs: shard.log.epochs_below(at),
    };
    let prev = shard.sealing.borrow_mut().take();
    let (dir, id) = (shard.log.dir().to_path_buf(), shard.id());
    let metrics = shard.metrics.clone();
    let task = glommio::spawn_local(async move {
        if let Some(p) = prev {
            p.await;
        }
        match glommio::executor().spawn_blocking(move || write(id, &dir, sealed, runs, ckpt)).await {
            Ok(()) => metrics.checkpoints.increment(1),
            Err(e) => {
                metrics.checkpoint_errors.increment(1);
                log::warn!("shard {id}: {e}; the next start scans more of the log");
            }
        }
    });
    *shard.sealing.borrow_mut() = Some(task);
    Ok(())
}

/// Writes a sealed segment's index, then the checkpoint after it, then removes the
/// older checkpoints (blocking).
fn write(id: u16, dir: &std::path::Path, sealed: Sealed, runs: Vec<StreamRun>, ckpt: Checkpoint) -> Result<(), String> {
    let ix = match sealed {
        Sealed::Indexed(mut ix) => {
            ix.streams = runs;
            ix
        }
        Sealed::Unscanned { first_offset, next_offset, path } => {
            crate::boot::scan_sealed(id, &[(first_offset, path.clone())], next_offset)?
                .ok_or_else(|| format!("{} does not scan as a whole sealed segment", path.display()))?
        }
    };
    segidx::write(dir, &ix)?;
    checkpoint::write(dir, &ckpt)?;
    checkpoint::remove(dir, |o| o < ckpt.offset)?;
    Ok(())
}

/// Before the log is cut at `offset`: no seal still writing, no checkpoint above it.
pub(crate) async fn before_cut(shard: &Shard, offset: u64) -> io::Result<()> {
    let pending = shard.sealing.borrow_mut().take();
    if let Some(t) = pending {
        t.await;
    }
    let dir = shard.log.dir().to_path_buf();
    glommio::executor()
        .spawn_blocking(move || checkpoint::remove(&dir, |o| o > offset))
        .await
        .map(|_| ())
        .map_err(io::Error::other)
}

/// After the log was cut back to `end` (nothing staged): the producers' table of the
/// records written, from the newest checkpoint at or below `end` (else the log's first
/// offset) and the records from there to `end`; the shard's index takes the same table.
pub(crate) async fn after_cut(shard: &Shard, end: u64) -> io::Result<()> {
    let dir = shard.log.dir().to_path_buf();
    let max = shard.durable_producers.borrow().max();
    let first = shard.log.first_offset();
    let base = glommio::executor()
        .spawn_blocking(move || base_below(&dir, end, first, max))
        .await
        .map_err(io::Error::other)?;
    let (mut at, mut table) = base;
    while at < end {
        let (recs, n) = shard.log.read(at, end, 1 << 20).await?;
        if n == 0 {
            return Err(io::Error::other(format!("no record at offset {at} below the cut at {end}")));
        }
        table.note_run(&recs);
        at += n as u64;
    }
    shard.update_index(|ix| ix.producers = table.copy());
    *shard.durable_producers.borrow_mut() = table;
    Ok(())
}

/// (offset, producers' table) of the newest checkpoint at or below `end`, else of the
/// log's start (`first`: the trim's index snapshot there, or empty).
fn base_below(dir: &std::path::Path, end: u64, first: u64, max: usize) -> Result<(u64, Producers), String> {
    for (o, path) in checkpoint::list(dir)?.into_iter().rev().filter(|(o, _)| *o <= end && *o >= first) {
        if let Ok(c) = checkpoint::read(&path, o) {
            let mut t = Producers::new(max);
            for p in c.producers {
                t.restore(p)?;
            }
            return Ok((o, t));
        }
    }
    if first == 0 {
        return Ok((0, Producers::new(max)));
    }
    let path = dir.join(crate::snapshot::file_name(first));
    let b = std::fs::read(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let (_, ix) = crate::snapshot::decode(&b, max).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((first, ix.producers))
}
