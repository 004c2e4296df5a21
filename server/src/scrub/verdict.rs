//! What the bytes at one batch position of a sealed segment are: a whole batch in line
//! with the log and the segment's index file, damage (and what), or the file's end.
//! Sans state: the segment check says where the batch is ([`Place`]) and keeps the rest.

use corelog_client::record;

use crate::wal::batch::{self, BATCH_HEADER_LEN, BLOCK, MAX_BATCH_BYTES};
use crate::wal::segidx::SegIdx;

/// What the bytes at a batch position are.
pub(super) enum Verdict {
    /// Not all fed yet.
    More,
    /// A valid batch: its record count, span, CRC field and records length.
    Whole { count: u64, span: u64, crc: u32, records_len: u32 },
    /// Damaged (what is wrong): the next batch may still be found by the index.
    Bad(String),
    /// The file ends inside or before it: nothing more to find.
    Cut(String),
}

/// Where a batch is expected, as the segment check knows it.
pub(super) struct Place<'a> {
    /// Its byte position in the segment.
    pub(super) pos: u64,
    /// The segment's first offset (its index file's batches are relative to it).
    pub(super) first: u64,
    /// The offset the log continues at: the batch's first.
    pub(super) expected: u64,
    /// The next segment's first offset: where this one's records must end.
    pub(super) next: u64,
    /// Its number among the segment's batches, and the segment's index file if it has one.
    pub(super) bi: usize,
    pub(super) idx: Option<&'a SegIdx>,
}

/// What lies at `at.pos`, as far as the bytes fed tell (`a`: those from `at.pos` on;
/// `eof`: no more follow).
pub(super) fn judge(a: &[u8], eof: bool, at: &Place<'_>) -> Verdict {
    assert!(
        at.first <= at.expected && at.expected <= at.next,
        "scrub: the log continues at {} outside the segment's offsets {}..{}",
        at.expected,
        at.first,
        at.next
    );
    let pos = at.pos;
    let cut = || {
        Verdict::Cut(format!("the file ends at byte {} inside or before the batch at byte {pos}", pos + a.len() as u64))
    };
    if a.len() < BATCH_HEADER_LEN {
        return if eof { cut() } else { Verdict::More };
    }
    if a[0..4] != batch::BATCH_MAGIC || a[4] != batch::BATCH_VERSION {
        return Verdict::Bad("no batch header here (magic or version)".into());
    }
    let records_len = u32::from_le_bytes(a[20..24].try_into().expect("4 bytes")) as usize;
    if records_len > MAX_BATCH_BYTES {
        return Verdict::Bad(format!(
            "the batch header claims {records_len} bytes of records (at most {MAX_BATCH_BYTES})"
        ));
    }
    match a.get(..BATCH_HEADER_LEN + records_len) {
        Some(whole) => check_batch(whole, at).unwrap_or_else(Verdict::Bad),
        None if eof => cut(),
        None => Verdict::More,
    }
}

/// Checks the batch at `at.pos` (`a` holds exactly its header and records): whole, or
/// what is wrong.
fn check_batch(a: &[u8], at: &Place<'_>) -> Result<Verdict, String> {
    if batch::header(a).is_none() {
        return Err("the batch header's flags or reserved bytes are not zero".into());
    }
    let Some(h) = batch::decode(a) else {
        // Say which record, if one: the batch CRC covers the records too.
        return Err(match record::Records::new(&a[BATCH_HEADER_LEN..]).find_map(Result::err) {
            Some(e) => format!("batch CRC mismatch; {e}"),
            None => "batch CRC mismatch; its records' own CRCs hold: the batch header is damaged".into(),
        });
    };
    if h.first_offset != at.expected {
        return Err(format!("the batch holds offset {} where the log continues at {}", h.first_offset, at.expected));
    }
    if h.first_offset + h.count as u64 > at.next {
        return Err(format!(
            "the batch holds offsets {}..{}, past the next segment's first offset {}",
            h.first_offset,
            h.first_offset + h.count as u64,
            at.next
        ));
    }
    let recs = &a[BATCH_HEADER_LEN..];
    record::verify_run(recs, h.first_offset, h.count)
        .map_err(|e| format!("batch CRC valid but records invalid: {e}"))?;
    let span = batch::span(h.records_len as usize);
    if let Some(ix) = at.idx {
        let l = ix.batches.get(at.first, at.bi);
        if (l.pos, l.first_offset, l.count, l.span) != (at.pos, h.first_offset, h.count, span) {
            return Err(format!(
                "disagrees with its index file, which puts batch {} at byte {} with offsets {}..{} in {} bytes; the segment has offsets {}..{} in {span} bytes there",
                at.bi,
                l.pos,
                l.first_offset,
                l.first_offset + l.count as u64,
                l.span,
                h.first_offset,
                h.first_offset + h.count as u64,
            ));
        }
    }
    // The scan that follows moves by `span`: it must pass this batch and land on a block.
    assert!(
        span.is_multiple_of(BLOCK) && span >= (BATCH_HEADER_LEN + h.records_len as usize) as u64,
        "scrub: a batch of {} bytes of records spans {span} bytes",
        h.records_len
    );
    Ok(Verdict::Whole { count: h.count as u64, span, crc: batch::stored_crc(a), records_len: h.records_len })
}

#[cfg(test)]
mod tests {
    use crate::scrub::testdata::{check, segment};

    #[test]
    fn damage_the_frame_checks_find_is_named() {
        let (seg, at, ix) = segment(0, 10, 2);
        let cases: [(usize, u8, &str); 6] = [
            (0, 0xff, "magic"),
            (5, 1, "flags"),
            (9, 1, "the batch header is damaged"),
            (25, 1, "the batch header is damaged"),
            (29, 1, "the batch header is damaged"),
            (22, 0x40, "claims"),
        ];
        for (byte, xor, want) in cases {
            let mut s = seg.clone();
            s[at[4] as usize + byte] ^= xor;
            let found = check(&s, 0, 20, Some(ix.clone()), 3000);
            assert_eq!(found.len(), 1, "header byte {byte}: {found:?}");
            assert_eq!((found[0].pos, found[0].offsets), (at[4], Some((8, 10))), "header byte {byte}");
            assert!(found[0].what.contains(want), "header byte {byte}: {}", found[0].what);
        }
    }
}
