//! The log's read path: records by offset range (tails, reads, the replication link's
//! catch-up), by offset list (a stream's events), a sealed segment's stream runs, and
//! the last record's identity. Reads go through io_uring with Direct I/O; a read the
//! kernel refuses falls back to a plain positioned read (`read_plain`).

use super::*;

impl Log {
    /// Reads the stream run entry at byte `pos` of segment `seg`'s index file: the run
    /// with the offsets of its events from the `skip`-th, at most `take` of them. Errors
    /// with `NotFound` when the segment is gone (retention).
    pub async fn read_run(&self, seg: u64, pos: u32, skip: u32, take: u32) -> io::Result<segidx::Run> {
        let bad = |e: String| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", segidx::file_name(seg)));
        let base = segidx::RUNS_AT as u64;
        let pending = self.pending_runs.borrow().get(&seg).cloned();
        if let Some(b) = pending {
            let at = (pos as u64).checked_sub(base).ok_or_else(|| bad(format!("no run at byte {pos}")))? as usize;
            let (mut run, _) =
                segidx::decode_run(b.get(at..).unwrap_or_default(), skip.saturating_add(take)).map_err(bad)?;
            run.rels.drain(..(skip as usize).min(run.rels.len()));
            return Ok(run);
        }
        if seg < self.first_offset() || !self.segments.borrow().iter().any(|s| s.first_offset == seg) {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("segment {seg} is gone")));
        }
        let f = self.index_file(seg).await?;
        // One read holds the entry's head (at most 1 + 255 + 17 + 32 × 20 bytes) and, often,
        // the offsets wanted; a second one reads the offsets when it does not.
        let first = f.read_at(pos as u64, 1024).await.map_err(io::Error::from)?;
        let (name_len, ptrs) = match first.first() {
            Some(&n) if first.len() > 1 + n as usize + 16 => (n as usize, first[1 + n as usize + 16] as usize),
            _ => return Err(bad(format!("run entry at byte {pos} cut short"))),
        };
        let head_len = segidx::run_head_len(name_len, ptrs);
        let mut bytes =
            first.get(..head_len).ok_or_else(|| bad(format!("run entry at byte {pos} cut short")))?.to_vec();
        let (probe, _) = segidx::decode_run(&bytes, 0).map_err(bad)?;
        let take = take.min(probe.count.saturating_sub(skip));
        if take == 0 {
            return Ok(probe);
        }
        let (from, len) = (head_len + 4 * skip as usize, 4 * take as usize);
        let rels = match first.get(from..from + len) {
            Some(r) => r.to_vec(),
            None => f.read_at(pos as u64 + from as u64, len).await.map_err(io::Error::from)?.to_vec(),
        };
        // Re-framed as an entry holding only those offsets.
        bytes[1 + name_len + 12..1 + name_len + 16].copy_from_slice(&take.to_le_bytes());
        bytes.extend_from_slice(&rels);
        let (mut run, _) = segidx::decode_run(&bytes, take).map_err(bad)?;
        run.count = probe.count;
        Ok(run)
    }

    pub(super) async fn index_file(&self, seg: u64) -> io::Result<Rc<glommio::io::BufferedFile>> {
        let cached = self.index_files.borrow().iter().position(|(s, _)| *s == seg);
        if let Some(i) = cached {
            let mut v = self.index_files.borrow_mut();
            let e = v.remove(i);
            v.push(e.clone());
            return Ok(e.1);
        }
        let path = self.dir.join(segidx::file_name(seg));
        let f = Rc::new(
            glommio::io::BufferedFile::open(&path)
                .await
                .map_err(|e| io::Error::new(io::ErrorKind::NotFound, format!("{}: {e}", path.display())))?,
        );
        let mut v = self.index_files.borrow_mut();
        if v.len() >= OPEN_INDEX_FILES {
            v.remove(0);
        }
        v.push((seg, f.clone()));
        Ok(f)
    }

    /// Locates the batch holding `offset` (which must be below `next_offset()`).
    pub(super) fn locate(&self, offset: u64) -> Option<(Rc<DmaFile>, Loc, usize, usize)> {
        let segs = self.segments.borrow();
        let si = segs.partition_point(|s| s.first_offset <= offset).checked_sub(1)?;
        let s = &segs[si];
        let (b, bi) = s.batches.locate(s.first_offset, offset - s.first_offset)?;
        Some((s.file.clone(), b, si, bi))
    }

    /// Reads records from `from`, up to `upto` (exclusive), about `max_bytes` (always at
    /// least one record when one exists). Returns (records bytes, count).
    ///
    /// Once it holds records it reads no batch whose records might not all fit: such a
    /// batch is left whole to the next call, so a sequential reader (a follower's
    /// catch-up, a backup, a subscriber) reads each batch from the disk once, not once
    /// for its head and again for its tail.
    pub async fn read(&self, from: u64, upto: u64, max_bytes: usize) -> io::Result<(Vec<u8>, u32)> {
        let upto = upto.min(self.next_offset());
        let mut out = Vec::new();
        let mut count = 0u32;
        let mut at = from;
        while at < upto && (out.is_empty() || out.len() < max_bytes) {
            let Some(found) = self.locate(at) else {
                break;
            };
            // The batch's span bounds its records' length from above.
            if !out.is_empty() && out.len() + (found.1.span as usize).saturating_sub(BATCH_HEADER_LEN) > max_bytes {
                break;
            }
            let recs = self.fetch_located(found).await?;
            let mut p = 0;
            let mut full = false;
            for r in record::Records::new(&recs) {
                let r = r.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("record {at}: {e}")))?;
                let len = r.encoded_len();
                if r.offset >= upto {
                    break;
                }
                if r.offset >= at {
                    if !out.is_empty() && out.len() + len > max_bytes {
                        full = true; // stop here: records must stay contiguous
                        break;
                    }
                    out.extend_from_slice(&recs[p..p + len]);
                    count += 1;
                    at = r.offset + 1;
                }
                p += len;
            }
            if full {
                break;
            }
        }
        Ok((out, count))
    }

    /// Reads the records at `offsets` (ascending, each below `next_offset()`), about
    /// `max_bytes` in all (at least one record when asked for any), reading at most
    /// `MAX_BATCHES_PER_PICK` batches (each once): a stream whose events are spread thin
    /// costs a bounded amount per request. Returns (records bytes, count) — a prefix of
    /// `offsets`.
    pub async fn read_offsets(&self, offsets: &[u64], max_bytes: usize) -> io::Result<(Vec<u8>, u32)> {
        let mut out = Vec::new();
        let mut i = 0;
        let mut batches = 0;
        while i < offsets.len() && (out.is_empty() || out.len() < max_bytes) && batches < MAX_BATCHES_PER_PICK {
            batches += 1;
            let at = offsets[i];
            let Some(recs) = self.fetch(at).await? else {
                return Err(io::Error::new(io::ErrorKind::NotFound, format!("no batch holds offset {at}")));
            };
            let mut p = 0;
            while p < recs.len() && i < offsets.len() {
                let (r, len) = record::decode(&recs[p..])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("batch of {at}: {e}")))?;
                if r.offset == offsets[i] {
                    if !out.is_empty() && out.len() + len > max_bytes {
                        return Ok((out, i as u32));
                    }
                    out.extend_from_slice(&recs[p..p + len]);
                    i += 1;
                }
                p += len;
            }
            if offsets.get(i) == Some(&at) {
                return Err(io::Error::new(io::ErrorKind::NotFound, format!("offset {at} not in its batch")));
            }
        }
        Ok((out, i as u32))
    }

    /// The records of the batch holding `at` (None: no batch holds it), read from disk.
    pub(super) async fn fetch(&self, at: u64) -> io::Result<Option<BatchBytes>> {
        match self.locate(at) {
            Some(found) => self.fetch_located(found).await.map(Some),
            None => Ok(None),
        }
    }

    /// `fetch` of a batch `locate` found.
    pub(super) async fn fetch_located(
        &self,
        (file, b, si, _): (Rc<DmaFile>, Loc, usize, usize),
    ) -> io::Result<BatchBytes> {
        let span = b.span as usize;
        let data = match file.read_at_aligned(b.pos, span).await.map_err(io::Error::from) {
            Ok(d) => Bytes::Polled(d),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => Bytes::Plain(self.read_plain(si, b.pos, span, &e)?),
            Err(e) => return Err(io::Error::new(e.kind(), e.to_string())),
        };
        // The index keeps no records length: the header says it (each record's CRC is
        // checked as it is decoded; the header must be the batch the index expects).
        let h = batch::header(data.as_slice()).filter(|h| {
            h.first_offset == b.first_offset && h.count == b.count && batch::span(h.records_len as usize) == b.span
        });
        let Some(h) = h else {
            let path = self.segments.borrow()[si].path.clone();
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} byte {}: not the batch of offsets {}..{} the index expects ({} bytes read)",
                    path.display(),
                    b.pos,
                    b.first_offset,
                    b.first_offset + b.count as u64,
                    data.len()
                ),
            ));
        };
        Ok(BatchBytes { data, records: BATCH_HEADER_LEN..BATCH_HEADER_LEN + h.records_len as usize })
    }

    /// A read the poll ring refused with EOPNOTSUPP, done with a plain `pread` on a
    /// second descriptor: a device-mapper table without poll support (an `error` or
    /// `flakey` target, some multipath setups) can be loaded under a running node, and
    /// glommio decided at open time to read this device through the poll ring. Blocking,
    /// but only on that degraded path; it says so once per process.
    pub(super) fn read_plain(&self, si: usize, pos: u64, span: usize, why: &io::Error) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        static SAID: std::sync::Once = std::sync::Once::new();
        let path = self.segments.borrow()[si].path.clone();
        SAID.call_once(|| {
            log::info!(
                "the device refuses polled reads ({why}); reading {} and the rest of this process's segments with plain reads",
                path.display()
            )
        });
        metrics::counter!("corelog_read_fallbacks_total").increment(1);
        // O_DIRECT like the polled path: the bytes come from the device, not a cache.
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path)?;
        let mut buf = AlignedBuf::new(span);
        let n = f
            .read_at(buf.as_mut(), pos)
            .map_err(|e| io::Error::new(e.kind(), format!("read {} at byte {pos}: {e}", path.display())))?;
        Ok(buf.as_mut()[..n].to_vec())
    }

    /// The identity (epoch, CRC) of the last record below `end` (≤ `next_offset()`), None
    /// when this log holds no record below `end` (it is 0, or at most the first offset:
    /// a log seeded or trimmed there): what the replication handshake compares.
    pub async fn last_record_id(&self, end: u64) -> io::Result<Option<(u32, u32)>> {
        if end <= self.first_offset() {
            return Ok(None);
        }
        let offset = end - 1;
        let (recs, count) = self.read(offset, end, 1).await?;
        if count != 1 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("record {offset} not found")));
        }
        let (r, _) = record::decode(&recs)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("record {offset}: {e}")))?;
        assert_eq!(r.offset, offset, "Log::read returned another record");
        Ok(Some((r.epoch, r.crc)))
    }
}

/// A batch as read: the buffer (polled or, on the fallback path, plain) and where its
/// records are in it. Derefs to the records.
pub(super) struct BatchBytes {
    data: Bytes,
    records: std::ops::Range<usize>,
}

pub(super) enum Bytes {
    Polled(glommio::io::ReadResult),
    Plain(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Polled(d) => d,
            Bytes::Plain(v) => v,
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }
}

impl std::ops::Deref for BatchBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data.as_slice()[self.records.clone()]
    }
}
