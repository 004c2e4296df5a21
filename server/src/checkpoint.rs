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
//! older one) behind. A checkpoint whose header and metadata do not check out, or that
//! disagrees with the segment indexes below it, is not used: the start scans from an
//! older one, or from the log's first segment (format.md §10).
//!
//! A start reads the header and the metadata (producers, epochs, the directory of the
//! stream heads' pages) and nothing per stream: the heads stay in the file, sorted by name
//! in 4 KiB pages, each checked when it is read (`streams/pages.rs`).
//!
//! Size: per stream its name + 14 bytes + 20 per pointer (≤ 2 + log2 of its runs), per
//! 4 KiB page 4 bytes of CRC and ≈ 30 of directory, per producer 26 bytes + 8 per
//! remembered position, 12 bytes per epoch.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::le::{checked_body, Reader};
use crate::producers::Saved;
use crate::snapshot::{decode_producers, encode_producers, list_numbered, write_durably};
use crate::streams::{Dir, Paged, Src, Streams, Written};
use crate::wal::recovery::sync_dir;

const MAGIC: &[u8; 8] = b"CLCKPT02";
/// The form before pages (format.md §10), still read: the first start after an upgrade.
const MAGIC_UNPAGED: &[u8; 8] = b"CLCKPT01";

/// Magic, offset, the metadata's length; the metadata; its CRC; then the pages.
const HEADER: usize = 20;

pub fn file_name(offset: u64) -> String {
    format!("checkpoint-{offset:020}.ckpt")
}

/// The derived state of a shard's records below `offset`.
pub struct Checkpoint {
    pub offset: u64,
    /// Every stream with an event below `offset`: next version, runs and skip pointers
    /// (`Streams::heads_job`), no event offsets; read from the pages where they lie.
    pub streams: Streams,
    pub producers: Vec<Saved>,
    /// (epoch, first offset written under it) below `offset`, ascending.
    pub epochs: Vec<(u32, u64)>,
}

/// A checkpoint's bytes, where its pages start in them, and what a rebase needs of them.
pub struct Encoded {
    pub bytes: Vec<u8>,
    pub pages_at: usize,
    pub paged: Paged,
}

impl Encoded {
    /// Where a roll's new base reads these pages: the file just written at `offset` in
    /// `dir` (memory then holds nothing per stream; the pages are in the page cache), or
    /// these bytes if it cannot be opened.
    pub fn src(self, dir: &Path, offset: u64) -> (Src, Paged) {
        let path = dir.join(file_name(offset));
        let src = match File::open(&path) {
            Ok(f) => Src::File { file: Arc::new(f), at: self.pages_at as u64, path: Arc::new(path) },
            Err(_) => Src::Mem { bytes: Arc::new(self.bytes), at: self.pages_at },
        };
        (src, self.paged)
    }
}

/// A checkpoint's bytes. `heads` must be the stream index's at `offset` (its last segment
/// starts there: `Streams::seal` ran, then `Streams::heads_job`), `producers` the windows
/// of the records below it.
pub fn encode(offset: u64, heads: Written, producers: &[Saved], epochs: &[(u32, u64)]) -> Encoded {
    let mut out = Vec::with_capacity(4096 + heads.pages.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    encode_producers(producers, &mut out);
    out.extend_from_slice(&(epochs.len() as u32).to_le_bytes());
    for (e, o) in epochs {
        out.extend_from_slice(&e.to_le_bytes());
        out.extend_from_slice(&o.to_le_bytes());
    }
    heads.encode_dir(&mut out);
    let meta = u32::try_from(out.len() - HEADER).expect("a checkpoint's metadata is under 4 GiB");
    out[16..HEADER].copy_from_slice(&meta.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    let pages_at = out.len();
    out.extend_from_slice(&heads.pages);
    Encoded { bytes: out, pages_at, paged: heads.paged }
}

/// The metadata's length as the header at the front of `b` says, bounded by the file's
/// length `total`.
fn meta_len(b: &[u8], total: u64) -> Result<usize, String> {
    let mut r = Reader(b);
    if r.take(8)? != MAGIC {
        return Err("not a checkpoint of this format (bad magic)".into());
    }
    r.u64()?;
    let n = r.u32()? as usize;
    if (HEADER + n + 4) as u64 > total {
        return Err(format!("metadata of {n} bytes in a file of {total}"));
    }
    Ok(n)
}

/// Decodes the header and metadata (`head`: up to and including its CRC) of a checkpoint
/// of `total` bytes whose pages `src` reads.
fn decode_meta(head: &[u8], total: u64, src: impl FnOnce(usize) -> Src) -> Result<Checkpoint, String> {
    let mut r = Reader(checked_body(head)?);
    r.take(8)?;
    let offset = r.u64()?;
    r.u32()?;
    let producers = decode_producers(&mut r, offset)?;
    let epochs = decode_epochs(&mut r, offset)?;
    let dir = Dir::decode(&mut r, total - head.len() as u64)?;
    if r.rest() > 0 {
        return Err(format!("{} bytes after the last entry", r.rest()));
    }
    let streams = Streams::from_pages(src(head.len()), dir, offset);
    Ok(Checkpoint { offset, streams, producers, epochs })
}

/// Decodes a checkpoint in the form before pages (`CLCKPT01`, format.md §10): the whole
/// file read and checked, the streams sorted and paged in memory.
fn decode_unpaged(b: &[u8]) -> Result<Checkpoint, String> {
    let mut r = Reader(checked_body(b)?);
    r.take(8)?;
    let offset = r.u64()?;
    let streams = Streams::from_unpaged(&mut r, offset)?;
    let producers = decode_producers(&mut r, offset)?;
    let epochs = decode_epochs(&mut r, offset)?;
    if r.rest() > 0 {
        return Err(format!("{} bytes after the last entry", r.rest()));
    }
    Ok(Checkpoint { offset, streams, producers, epochs })
}

fn decode_epochs(r: &mut Reader<'_>, offset: u64) -> Result<Vec<(u32, u64)>, String> {
    let n = r.u32()? as usize;
    let mut epochs = Vec::with_capacity(n.min(r.rest() / 12));
    for _ in 0..n {
        epochs.push((r.u32()?, r.u64()?));
    }
    if !epochs.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1) || epochs.last().is_some_and(|e| e.1 >= offset) {
        return Err("epoch history out of order or not below the checkpoint".into());
    }
    Ok(epochs)
}

/// Decodes a checkpoint's bytes (the pages are checked when read: `Checkpoint::verify`).
pub fn decode(b: &[u8]) -> Result<Checkpoint, String> {
    let head = HEADER + meta_len(b, b.len() as u64)? + 4;
    let all = Arc::new(b.to_vec());
    decode_meta(&b[..head], b.len() as u64, |at| Src::Mem { bytes: all, at })
}

impl Checkpoint {
    /// Reads every page of the stream heads and checks it (`inspect`; a start has it done
    /// in the background).
    pub fn verify(&self) -> Result<(), String> {
        self.streams.verify_heads()
    }
}

/// Writes a checkpoint's bytes durably (blocking: call it off the executor).
pub fn write(dir: &Path, offset: u64, bytes: &[u8]) -> Result<PathBuf, String> {
    write_durably(dir, &file_name(offset), bytes)
}

/// The checkpoints in `dir`, ascending by offset.
pub fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, String> {
    list_numbered(dir, "checkpoint-", ".ckpt")
}

/// Reads a checkpoint file's header and metadata, checking it is the one its name says;
/// its stream heads stay in the file, read a page at a time when asked.
pub fn read(path: &Path, offset: u64) -> Result<Checkpoint, String> {
    let err = |e: std::io::Error| format!("read {}: {e}", path.display());
    let file = File::open(path).map_err(err)?;
    let total = file.metadata().map_err(err)?.len();
    let mut head = vec![0u8; HEADER.min(total as usize)];
    file.read_exact_at(&mut head, 0).map_err(err)?;
    if head.starts_with(MAGIC_UNPAGED) {
        let b = std::fs::read(path).map_err(err)?;
        let c = decode_unpaged(&b).map_err(|e| format!("{}: {e}", path.display()))?;
        return named(path, offset, c);
    }
    let n = meta_len(&head, total).map_err(|e| format!("{}: {e}", path.display()))?;
    head.resize(HEADER + n + 4, 0);
    file.read_exact_at(&mut head[HEADER..], HEADER as u64).map_err(err)?;
    let (file, path_arc) = (Arc::new(file), Arc::new(path.to_path_buf()));
    let c = decode_meta(&head, total, |at| Src::File { file, at: at as u64, path: path_arc })
        .map_err(|e| format!("{}: {e}", path.display()))?;
    named(path, offset, c)
}

fn named(path: &Path, offset: u64, c: Checkpoint) -> Result<Checkpoint, String> {
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
        let b = encode(1_000, st.heads_job().write(), &producers, &epochs).bytes;
        let c = decode(&b).unwrap();
        c.verify().unwrap();
        assert_eq!((c.offset, c.producers.clone(), c.epochs.clone()), (1_000, producers.clone(), epochs.clone()));
        assert_eq!(
            (c.streams.current("a"), c.streams.current("order-42"), c.streams.current("é")),
            (Some(1), Some(0), None)
        );
        assert_eq!(c.streams.locate("a").unwrap().runs, 1);
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(decode(&d).and_then(|c| c.verify()).is_err(), "flipped byte {i} went unnoticed");
        }
        assert!(decode(&b[..b.len() - 1]).is_err());
        let mut late = epochs.clone();
        late.push((5, 1_000));
        assert!(
            decode(&encode(1_000, st.heads_job().write(), &producers, &late).bytes).is_err(),
            "an epoch at the checkpoint's offset"
        );
        // From a file: the same, its pages read where they lie.
        let dir = std::env::temp_dir().join(format!("corelog-ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write(&dir, 1_000, &b).unwrap();
        let c = read(&path, 1_000).unwrap();
        c.verify().unwrap();
        assert_eq!((c.streams.current("a"), c.epochs.clone()), (Some(1), epochs));
        assert!(read(&path, 999).is_err(), "named for another offset");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A checkpoint of the form before pages (what an upgraded node finds) is read: its
    /// streams, in no order, sorted and paged; a name twice is refused.
    #[test]
    fn a_checkpoint_without_pages_is_read() {
        let entry = |name: &str, versions: u64| {
            let mut st = Streams::default();
            for v in 0..versions {
                st.note(name, v, v).unwrap();
            }
            st.seal(0, 100);
            let p = st.heads_job().write().pages;
            p[..p.len() - 4].to_vec() // one page: its entries, then its CRC
        };
        let v1 = |entries: &[Vec<u8>]| {
            let mut b = MAGIC_UNPAGED.to_vec();
            b.extend_from_slice(&100u64.to_le_bytes());
            b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
            entries.iter().for_each(|e| b.extend_from_slice(e));
            encode_producers(&[], &mut b);
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&0u64.to_le_bytes());
            let crc = crc32fast::hash(&b);
            b.extend_from_slice(&crc.to_le_bytes());
            b
        };
        let dir = std::env::temp_dir().join(format!("corelog-ckpt1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write(&dir, 100, &v1(&[entry("zeta", 3), entry("alpha", 1), entry("mid", 2)])).unwrap();
        let c = read(&path, 100).unwrap();
        c.verify().unwrap();
        assert_eq!(c.epochs, vec![(1, 0)]);
        let got: Vec<_> = ["alpha", "mid", "zeta", "nope"].iter().map(|n| c.streams.current(n)).collect();
        assert_eq!(got, vec![Some(0), Some(1), Some(2), None]);
        let path = write(&dir, 100, &v1(&[entry("a", 1), entry("a", 2)])).unwrap();
        let e = read(&path, 100).err().expect("a name twice");
        assert!(e.contains("twice"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
