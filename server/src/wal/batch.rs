//! The on-disk batch frame: one group-commit write = one batch, starting on a fresh
//! 4 KiB block, zero-padded to the next block. Layout in docs/format.md.
//!
//! | off | size | field                                              |
//! |-----|------|----------------------------------------------------|
//! | 0   | 4    | magic `b"CLGB"`                                    |
//! | 4   | 1    | format version (1)                                 |
//! | 5   | 1    | flags (0)                                          |
//! | 6   | 2    | reserved (0)                                       |
//! | 8   | 8    | first record offset                                |
//! | 16  | 4    | record count                                       |
//! | 20  | 4    | records length in bytes (after this header)        |
//! | 24  | 4    | epoch of the node that wrote the batch             |
//! | 28  | 4    | CRC-32/IEEE of bytes 0..28 and the records bytes   |

pub const BATCH_MAGIC: [u8; 4] = *b"CLGB";
pub const BATCH_VERSION: u8 = 1;
pub const BATCH_HEADER_LEN: usize = 32;
pub const BLOCK: u64 = 4096;
/// Largest records length of one batch (bounds one write and one recovery window).
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Largest record count of one batch.
pub const MAX_BATCH_RECORDS: u32 = 32 * 1024;

pub fn align_up(v: u64) -> u64 {
    v.div_ceil(BLOCK) * BLOCK
}

/// Bytes one batch takes on disk, padding included.
pub fn span(records_len: usize) -> u64 {
    align_up((BATCH_HEADER_LEN + records_len) as u64)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub first_offset: u64,
    pub count: u32,
    pub records_len: u32,
    pub epoch: u32,
}

/// Writes header + records into `out` (which must be `span(records.len())` long) and
/// zeroes the padding.
pub fn encode_into(h: &BatchHeader, records: &[u8], out: &mut [u8]) {
    assert_eq!(h.records_len as usize, records.len());
    assert_eq!(out.len() as u64, span(records.len()));
    out[0..4].copy_from_slice(&BATCH_MAGIC);
    out[4] = BATCH_VERSION;
    out[5] = 0;
    out[6..8].copy_from_slice(&[0, 0]);
    out[8..16].copy_from_slice(&h.first_offset.to_le_bytes());
    out[16..20].copy_from_slice(&h.count.to_le_bytes());
    out[20..24].copy_from_slice(&h.records_len.to_le_bytes());
    out[24..28].copy_from_slice(&h.epoch.to_le_bytes());
    let mut c = crc32fast::Hasher::new();
    c.update(&out[0..28]);
    c.update(records);
    out[28..32].copy_from_slice(&c.finalize().to_le_bytes());
    let end = BATCH_HEADER_LEN + records.len();
    out[BATCH_HEADER_LEN..end].copy_from_slice(records);
    out[end..].fill(0);
}

/// Parses the header of the batch at the front of `buf` without checking its CRC (the
/// live log's reads, whose records carry their own CRCs): `None` unless it is a batch
/// header whose records lie within `buf`.
pub fn header(buf: &[u8]) -> Option<BatchHeader> {
    let h = header_fields(buf)?;
    (buf.len() >= BATCH_HEADER_LEN + h.records_len as usize).then_some(h)
}

/// Parses and CRC-checks the batch at the front of `buf` (`buf` may extend past it).
/// Returns `None` for anything that is not a whole valid batch.
pub fn decode(buf: &[u8]) -> Option<BatchHeader> {
    let h = header(buf)?;
    let end = BATCH_HEADER_LEN + h.records_len as usize;
    let crc = u32::from_le_bytes(buf[28..32].try_into().unwrap());
    let mut c = crc32fast::Hasher::new();
    c.update(&buf[0..28]);
    c.update(&buf[BATCH_HEADER_LEN..end]);
    (c.finalize() == crc).then_some(h)
}

/// The fields of a batch header (magic, version, flags and bounds checked) from its 32
/// bytes alone, the records not read: what a start checks of a sealed segment's last batch.
pub fn header_fields(buf: &[u8]) -> Option<BatchHeader> {
    if buf.len() < BATCH_HEADER_LEN || buf[0..4] != BATCH_MAGIC || buf[4] != BATCH_VERSION || buf[5..8] != [0, 0, 0] {
        return None;
    }
    let h = BatchHeader {
        first_offset: u64::from_le_bytes(buf[8..16].try_into().unwrap()),
        count: u32::from_le_bytes(buf[16..20].try_into().unwrap()),
        records_len: u32::from_le_bytes(buf[20..24].try_into().unwrap()),
        epoch: u32::from_le_bytes(buf[24..28].try_into().unwrap()),
    };
    (h.records_len as usize <= MAX_BATCH_BYTES).then_some(h)
}

/// The CRC field of a batch header (`buf` holds at least the header).
pub fn stored_crc(buf: &[u8]) -> u32 {
    u32::from_le_bytes(buf[28..32].try_into().expect("a batch header"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_padding() {
        let recs = vec![7u8; 100];
        let h = BatchHeader { first_offset: 3, count: 1, records_len: 100, epoch: 2 };
        let mut out = vec![0xAAu8; span(100) as usize];
        encode_into(&h, &recs, &mut out);
        assert_eq!(out.len(), 4096);
        assert!(out[132..].iter().all(|b| *b == 0));
        assert_eq!(decode(&out), Some(h));
        out[50] ^= 1;
        assert_eq!(decode(&out), None);
    }
}
