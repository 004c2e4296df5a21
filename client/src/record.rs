//! One record: a fixed 24-byte header followed by the payload. The same bytes are written
//! to disk, shipped to the follower and returned to readers, so a reader can verify the
//! CRC end to end. Layout (all little-endian), specified in docs/format.md:
//!
//! | off | size | field                                                    |
//! |-----|------|----------------------------------------------------------|
//! | 0   | 2    | magic `b"CR"`                                            |
//! | 2   | 1    | format version (1)                                       |
//! | 3   | 1    | flags (0)                                                |
//! | 4   | 4    | payload length                                           |
//! | 8   | 8    | offset (position in the shard, gap-free from 0)          |
//! | 16  | 4    | epoch under which the leader wrote it                    |
//! | 20  | 4    | CRC-32/IEEE (crc32fast) of bytes 0..20 and the payload   |

use crate::codec::MAX_PAYLOAD;

pub const RECORD_MAGIC: [u8; 2] = *b"CR";
pub const FORMAT_VERSION: u8 = 1;
pub const RECORD_HEADER_LEN: usize = 24;

/// A decoded record borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub offset: u64,
    pub epoch: u32,
    /// The stored CRC-32 (bytes 20..24): with `offset` and `epoch`, a record's identity.
    pub crc: u32,
    pub payload: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    Truncated,
    BadMagic,
    BadVersion(u8),
    PayloadTooLarge(u32),
    BadCrc {
        offset: u64,
    },
    /// Offsets are gap-free: this record has the wrong one.
    OffsetGap {
        expected: u64,
        found: u64,
    },
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Truncated => write!(f, "record truncated"),
            RecordError::BadMagic => write!(f, "bad record magic"),
            RecordError::BadVersion(v) => write!(f, "unknown record format version {v}"),
            RecordError::PayloadTooLarge(n) => write!(f, "record payload length {n} too large"),
            RecordError::BadCrc { offset } => write!(f, "CRC mismatch in record {offset}"),
            RecordError::OffsetGap { expected, found } => {
                write!(f, "offset gap: expected {expected}, found {found}")
            }
        }
    }
}

impl std::error::Error for RecordError {}

pub fn encoded_len(payload_len: usize) -> usize {
    RECORD_HEADER_LEN + payload_len
}

/// Appends one encoded record to `out`.
pub fn encode(offset: u64, epoch: u32, payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= MAX_PAYLOAD, "record payload above MAX_PAYLOAD");
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC);
    out.push(FORMAT_VERSION);
    out.push(0);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&out[start..start + 20]);
    h.update(payload);
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.extend_from_slice(payload);
}

/// Decodes and verifies the record at the front of `buf`; returns it and its length.
pub fn decode(buf: &[u8]) -> Result<(RecordRef<'_>, usize), RecordError> {
    if buf.len() < RECORD_HEADER_LEN {
        return Err(RecordError::Truncated);
    }
    if buf[0..2] != RECORD_MAGIC {
        return Err(RecordError::BadMagic);
    }
    if buf[2] != FORMAT_VERSION || buf[3] != 0 {
        return Err(RecordError::BadVersion(buf[2]));
    }
    let len = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    if len as usize > MAX_PAYLOAD {
        return Err(RecordError::PayloadTooLarge(len));
    }
    let total = RECORD_HEADER_LEN + len as usize;
    if buf.len() < total {
        return Err(RecordError::Truncated);
    }
    let offset = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    let epoch = u32::from_le_bytes(buf[16..20].try_into().unwrap());
    let crc = u32::from_le_bytes(buf[20..24].try_into().unwrap());
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[0..20]);
    h.update(&buf[RECORD_HEADER_LEN..total]);
    if h.finalize() != crc {
        return Err(RecordError::BadCrc { offset });
    }
    Ok((RecordRef { offset, epoch, crc, payload: &buf[RECORD_HEADER_LEN..total] }, total))
}

/// Verifies that `buf` holds exactly `count` records with offsets `first..first+count`,
/// every CRC valid. Returns the epoch of the last record (0 if none).
pub fn verify_run(buf: &[u8], first: u64, count: u32) -> Result<u32, RecordError> {
    let mut at = 0;
    let mut last_epoch = 0;
    for i in 0..count as u64 {
        let (r, n) = decode(&buf[at..])?;
        let expected = first.checked_add(i).ok_or(RecordError::OffsetGap { expected: u64::MAX, found: r.offset })?;
        if r.offset != expected {
            return Err(RecordError::OffsetGap { expected, found: r.offset });
        }
        last_epoch = r.epoch;
        at += n;
    }
    if at != buf.len() {
        return Err(RecordError::Truncated);
    }
    Ok(last_epoch)
}

/// Iterates over records packed back to back (e.g. a `Records` response body).
pub struct Records<'a> {
    rest: &'a [u8],
}

impl<'a> Records<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Records { rest: buf }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RecordRef<'a>, RecordError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match decode(self.rest) {
            Ok((r, n)) => {
                self.rest = &self.rest[n..];
                Some(Ok(r))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_crc() {
        let mut buf = Vec::new();
        encode(5, 1, b"hello", &mut buf);
        encode(6, 1, b"", &mut buf);
        assert_eq!(buf.len(), 2 * RECORD_HEADER_LEN + 5);
        assert_eq!(verify_run(&buf, 5, 2), Ok(1));
        let got: Vec<_> = Records::new(&buf).map(|r| r.unwrap().payload.to_vec()).collect();
        assert_eq!(got, vec![b"hello".to_vec(), vec![]]);
        let mut bad = buf.clone();
        bad[RECORD_HEADER_LEN + 1] ^= 1;
        assert_eq!(decode(&bad), Err(RecordError::BadCrc { offset: 5 }));
        assert!(matches!(verify_run(&buf, 4, 2), Err(RecordError::OffsetGap { .. })));
        assert_eq!(verify_run(&buf, 5, 1), Err(RecordError::Truncated));
    }
}
