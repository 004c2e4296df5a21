//! Checkpoints: what a shard derives from its log, as it stands at the start of a segment,
//! so that a start loads it and reads only the segments from there on.
//!
//! `checkpoint-<offset:020>.ckpt` in the shard directory is written each time the
//! writer seals a segment and starts the next at `offset` (leader and follower alike):
//! every stream's next version, run count and skip pointers (`streams/`), every
//! idempotent producer's window, and the epoch history below `offset`. The stream events
//! of the sealed segments are in their index files (`wal::segidx`); the records from
//! `offset` on are scanned at start. Written as
//! `<name>.tmp`, fsynced, renamed, the directory fsynced; the previous checkpoint is
//! deleted only after that, so a crash at any point leaves one whole checkpoint (or the
//! older one) behind. A checkpoint that does not decode, or disagrees with the segment
//! indexes below it, is not used: the start scans from an older one, or from the log's
//! first segment (format.md §10).
//!
//! Size: per stream its name + 14 bytes + 20 per pointer (≤ 2 + log2 of its runs), per
//! producer 26 bytes + 8 per remembered position, 12 bytes per epoch.

use std::path::{Path, PathBuf};

use crate::le::{checked_body, Reader};
use crate::producers::Saved;
use crate::snapshot::{decode_producers, encode_producers, list_numbered, write_durably};
use crate::streams::Streams;
use crate::wal::recovery::sync_dir;

const MAGIC: &[u8; 8] = b"CLCKPT01";

/// Where the stream heads start in a checkpoint's bytes (after the magic and the offset).
pub const HEADS_AT: usize = 16;

pub fn file_name(offset: u64) -> String {
    format!("checkpoint-{offset:020}.ckpt")
}

/// The derived state of a shard's records below `offset`.
pub struct Checkpoint {
    pub offset: u64,
    /// Every stream with an event below `offset`: next version, runs and skip pointers
    /// (`Streams::encode_heads`), no event offsets.
    pub streams: Streams,
    pub producers: Vec<Saved>,
    /// (epoch, first offset written under it) below `offset`, ascending.
    pub epochs: Vec<(u32, u64)>,
}

/// A checkpoint's bytes. `streams` must stand at `offset` (its last segment starts
/// there: `Streams::seal` ran), `producers` be the windows of the records below it.
pub fn encode(offset: u64, streams: &Streams, producers: &[Saved], epochs: &[(u32, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + streams.len() * 48);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&offset.to_le_bytes());
    debug_assert_eq!(out.len(), HEADS_AT);
    streams.encode_heads(&mut out);
    encode_producers(producers, &mut out);
    out.extend_from_slice(&(epochs.len() as u32).to_le_bytes());
    for (e, o) in epochs {
        out.extend_from_slice(&e.to_le_bytes());
        out.extend_from_slice(&o.to_le_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

pub fn decode(b: &[u8]) -> Result<Checkpoint, String> {
    decode_owned(b.to_vec())
}

/// Decodes a checkpoint whose buffer its stream index keeps (`Streams::from_heads`).
fn decode_owned(b: Vec<u8>) -> Result<Checkpoint, String> {
    let mut r = Reader(checked_body(&b)?);
    if r.take(8)? != MAGIC {
        return Err("not a checkpoint (bad magic)".into());
    }
    let offset = r.u64()?;
    let heads = Streams::walk_heads(&mut r, offset, HEADS_AT)?;
    let producers = decode_producers(&mut r, offset)?;
    let n = r.u32()? as usize;
    let mut epochs = Vec::with_capacity(n.min(r.rest() / 12));
    for _ in 0..n {
        epochs.push((r.u32()?, r.u64()?));
    }
    if !epochs.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1) || epochs.last().is_some_and(|e| e.1 >= offset) {
        return Err("epoch history out of order or not below the checkpoint".into());
    }
    if r.rest() > 0 {
        return Err(format!("{} bytes after the last entry", r.rest()));
    }
    let streams = Streams::from_heads(heads, b)?;
    Ok(Checkpoint { offset, streams, producers, epochs })
}

/// Writes a checkpoint's bytes durably (blocking: call it off the executor).
pub fn write(dir: &Path, offset: u64, bytes: &[u8]) -> Result<PathBuf, String> {
    write_durably(dir, &file_name(offset), bytes)
}

/// The checkpoints in `dir`, ascending by offset.
pub fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, String> {
    list_numbered(dir, "checkpoint-", ".ckpt")
}

/// Reads and decodes a checkpoint file, checking it is the one its name says.
pub fn read(path: &Path, offset: u64) -> Result<Checkpoint, String> {
    let b = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let c = decode_owned(b).map_err(|e| format!("{}: {e}", path.display()))?;
    if c.offset != offset {
        return Err(format!("{}: holds offset {}, named {offset}", path.display(), c.offset));
    }
    Ok(c)
}

/// Deletes every checkpoint in `dir` whose offset `gone` says (blocking).
pub fn remove(dir: &Path, gone: impl Fn(u64) -> bool) -> Result<usize, String> {
    let mut n = 0;
    for (o, p) in list(dir)? {
        if gone(o) {
            std::fs::remove_file(&p).map_err(|e| format!("remove {}: {e}", p.display()))?;
            n += 1;
        }
    }
    if n > 0 {
        sync_dir(dir)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_every_flipped_byte_is_refused() {
        let mut st = Streams::default();
        st.note_all(&[("a", 0, 10), ("order-42", 0, 20), ("a", 1, 30)]);
        st.seal(0, 1_000);
        st.note("é", 0, 1_000).unwrap(); // staged past the checkpoint: not in it
        let producers = vec![
            Saved { id: 9, next_seq: 70, last_offset: 900, offsets: (837..=900).collect() },
            Saved { id: 1, next_seq: 1, last_offset: 950, offsets: vec![950] },
        ];
        let epochs = vec![(1, 0), (3, 500), (4, 990)];
        let b = encode(1_000, &st, &producers, &epochs);
        let c = decode(&b).unwrap();
        assert_eq!((c.offset, c.producers.clone(), c.epochs.clone()), (1_000, producers.clone(), epochs.clone()));
        assert_eq!(
            (c.streams.current("a"), c.streams.current("order-42"), c.streams.current("é")),
            (Some(1), Some(0), None)
        );
        assert_eq!(c.streams.locate("a").unwrap().runs, 1);
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(decode(&d).is_err(), "flipped byte {i} went unnoticed");
        }
        assert!(decode(&b[..b.len() - 1]).is_err());
        let mut late = epochs.clone();
        late.push((5, 1_000));
        assert!(decode(&encode(1_000, &st, &producers, &late)).is_err(), "an epoch at the checkpoint's offset");
    }
}
