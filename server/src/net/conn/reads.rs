//! The requests that read: a shard's records (`Read`), a stream's events
//! (`ReadStream`), a piece of the derived state's snapshot (`IndexSnapshot`), and the
//! one that deletes (`Trim`). Each is answered after the connection's earlier appends.

use std::rc::Rc;

use corelog_client::codec::{self, ErrorCode, Response};
use corelog_client::record;

use super::super::outbox::Outbox;
use super::{push_out_of_range, Fail};
use crate::shard::Shard;
use crate::streamread::Found;

/// `Read`: committed records of the shard from `from`, after the connection's earlier
/// appends are answered; unsent answers stay bounded.
pub(super) async fn read(shard: &Shard, out: &Outbox, at: (u64, u16), from: u64, max_bytes: u32) -> Result<(), Fail> {
    let (req_id, version) = at;
    out.answered_with_room().await;
    let first = shard.log().first_offset();
    if from < first {
        push_out_of_range(out, version, req_id, first, &format!("offset {from}"));
        return Ok(());
    }
    let max = max_bytes.min(codec::MAX_READ_BYTES) as usize;
    let end = shard.committed();
    let (recs, count) =
        shard.log().read(from, end, max).await.map_err(|e| (ErrorCode::Internal, e.to_string(), req_id))?;
    assert!(from + count as u64 <= end.max(from), "a read answers only committed records");
    let r = Response::Records { shard: shard.id(), next_offset: from + count as u64, count, records: &recs };
    out.push(|b| r.encode(req_id, b));
    Ok(())
}

/// `Trim`: deletes whole segments below `before` (`retention::trim`).
pub(super) async fn trim(shard: &Rc<Shard>, out: &Outbox, req_id: u64, before: u64) {
    out.answered().await;
    match crate::shard::retention::trim(shard, Some(before)).await {
        Ok(first) => out.push(|b| Response::Trimmed { shard: shard.id(), first_offset: first }.encode(req_id, b)),
        Err(e) => out.push_error(req_id, ErrorCode::Internal, &e),
    }
}

/// `IndexSnapshot`: one piece of the snapshot of the derived state at the log's first
/// offset (a seed of an empty follower or a backup of a trimmed log).
pub(super) async fn index_snapshot(shard: &Shard, out: &Outbox, req_id: u64, at: u64) {
    out.answered_with_room().await;
    // A log that starts at 0 has no snapshot: nothing is below it.
    let first = shard.log().first_offset();
    let piece = match first {
        0 => Ok((0, Vec::new())),
        _ => crate::snapshot::piece_off_executor(shard.log().dir(), first, at, codec::MAX_READ_BYTES as usize).await,
    };
    match piece {
        Ok((total, bytes)) => out.push(|b| {
            debug_assert!(bytes.len() <= codec::MAX_READ_BYTES as usize, "a snapshot piece above the read limit");
            Response::IndexSnapshotPiece { shard: shard.id(), first_offset: first, total, at, bytes: &bytes }
                .encode(req_id, b)
        }),
        Err(e) => out.push_error(req_id, ErrorCode::Internal, &e),
    }
}

/// A `ReadStream`'s fields besides the stream.
pub(super) struct StreamRead {
    pub(super) req_id: u64,
    pub(super) version: u16,
    pub(super) from: u64,
    pub(super) max_count: u32,
    pub(super) max_bytes: u32,
}

/// A `ReadStream`: committed events of one stream, after every earlier answer.
pub(super) async fn read_stream(shard: &Rc<Shard>, out: &Rc<Outbox>, name: &str, q: StreamRead) -> Result<(), Fail> {
    let StreamRead { req_id, version, from, max_count, max_bytes } = q;
    out.answered_with_room().await;
    let max = max_count.min(codec::MAX_READ_COUNT) as usize;
    let gone = |first| push_out_of_range(out, version, req_id, first, &format!("version {from} of stream {name:?}"));
    let internal = |e: std::io::Error| (ErrorCode::Internal, e.to_string(), req_id);
    let (offsets, end_version) =
        match stream_offsets(shard, name, from, shard.committed(), max).await.map_err(internal)? {
            Found::Events { offsets, end_version } => (offsets, end_version),
            Found::Gone { first } => {
                gone(first);
                return Ok(());
            }
        };
    let max_bytes = max_bytes.min(codec::MAX_READ_BYTES) as usize;
    assert!(offsets.len() <= max, "the stream index gave {} offsets for at most {max}", offsets.len());
    let (recs, count) = match shard.log().read_offsets(&offsets, max_bytes).await {
        Ok(r) => r,
        // Trimmed while it was read.
        Err(_) if offsets.first().is_some_and(|&o| o < shard.log().first_offset()) => {
            match stream_offsets(shard, name, from, shard.committed(), 1).await.map_err(internal)? {
                Found::Gone { first } => gone(first),
                Found::Events { .. } => gone(from.saturating_add(1)),
            }
            return Ok(());
        }
        Err(e) => return Err(internal(e)),
    };
    // Every record is the event asked for: an index entry damaged in a way its checksum
    // missed would point elsewhere, and that is never served as the stream's.
    let mut at = 0;
    for i in 0..count as u64 {
        let (offset, ext, n) = record::peek(&recs[at..]).map_err(|e| internal(std::io::Error::other(e.to_string())))?;
        if ext.stream.is_none_or(|s| s.name != name || s.version != from + i) {
            let msg = format!(
                "the stream index points at offset {offset} for version {} of stream {name:?}, which is not there",
                from + i
            );
            log::error!("shard {}: {msg}", shard.id());
            return Err(internal(std::io::Error::other(msg)));
        }
        at += n;
    }
    assert!(count as usize <= offsets.len(), "{count} records read for {} offsets", offsets.len());
    debug_assert_eq!(at, recs.len(), "the records read hold exactly {count} records");
    let next_version = from.min(end_version) + count as u64;
    out.push(|b| {
        Response::StreamRecords { shard: shard.id(), next_version, end_version, count, records: &recs }
            .encode(req_id, b)
    });
    Ok(())
}

/// The offsets of stream `name`'s events from version `from`, below offset `end`, at
/// most `max` (`streamread`).
pub(super) async fn stream_offsets(
    shard: &Shard,
    name: &str,
    from: u64,
    end: u64,
    max: usize,
) -> std::io::Result<Found> {
    match shard.with_index(|t| t.streams.locate(name)) {
        Some(l) => crate::streamread::offsets(shard.log(), &l, from, end, max).await,
        None => Ok(Found::Events { offsets: Vec::new(), end_version: 0 }),
    }
}
