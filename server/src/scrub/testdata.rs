//! Test segments for the scrub's unit tests: batches built as the log writes them and
//! the index file a start would write for them.

use corelog_client::record;

use super::report::Damage;
use super::segcheck::SegCheck;
use crate::wal::batch;
use crate::wal::segidx::SegIdx;

/// A sealed segment of `batches` batches of `per` records from offset `first`
/// (records of 100 + i bytes), `LEN` bytes long: (bytes, each batch's position, the
/// index file a start would write for it).
pub(super) fn segment(first: u64, batches: usize, per: u32) -> (Vec<u8>, Vec<u64>, SegIdx) {
    let mut out = Vec::new();
    let mut at = Vec::new();
    let mut o = first;
    for _ in 0..batches {
        let mut recs = Vec::new();
        for _ in 0..per {
            record::encode(o, 1, &vec![(o % 251) as u8; 100 + (o % 7) as usize], &mut recs);
            o += 1;
        }
        let h =
            batch::BatchHeader { first_offset: o - per as u64, count: per, records_len: recs.len() as u32, epoch: 1 };
        let mut b = vec![0u8; batch::span(recs.len()) as usize];
        batch::encode_into(&h, &recs, &mut b);
        at.push(out.len() as u64);
        out.extend_from_slice(&b);
    }
    assert!(out.len() <= LEN);
    out.resize(LEN, 0);
    let ix = index_of(&out, first, o);
    (out, at, ix)
}

/// The index file a start would write for `bytes` (scanned from a file).
fn index_of(bytes: &[u8], first: u64, next: u64) -> SegIdx {
    let dir = std::env::temp_dir().join(format!("scrub-unit-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(crate::wal::recovery::segment_name(first));
    std::fs::write(&path, bytes).unwrap();
    let ix = crate::boot::scan_sealed(0, &[(first, path)], next).unwrap().expect("a whole segment");
    std::fs::remove_dir_all(&dir).unwrap();
    ix
}

/// Feeds `bytes` in pieces of `step` bytes.
pub(super) fn check(bytes: &[u8], first: u64, next: u64, idx: Option<SegIdx>, step: usize) -> Vec<Damage> {
    let mut c = SegCheck::new(first, next, idx);
    for piece in bytes.chunks(step) {
        c.feed(piece);
        if c.done() {
            break;
        }
    }
    c.finish()
}

const LEN: usize = 64 * 4096;
