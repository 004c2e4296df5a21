//! One record: a fixed 24-byte header, optional extension fields, then the payload. The
//! same bytes are written to disk, shipped to the follower and returned to readers, so a
//! reader can verify the CRC end to end. Layout (all little-endian), specified in
//! docs/format.md §3:
//!
//! | off | size | field                                                        |
//! |-----|------|--------------------------------------------------------------|
//! | 0   | 2    | magic `b"CR"`                                                |
//! | 2   | 1    | format version: 1 (no extension) or 2 (flags name extensions) |
//! | 3   | 1    | flags: 0 in version 1; bit 0 = producer extension in version 2 |
//! | 4   | 4    | body length: extension bytes + payload bytes                 |
//! | 8   | 8    | offset (position in the shard, gap-free from 0)              |
//! | 16  | 4    | epoch under which the leader wrote it                        |
//! | 20  | 4    | CRC-32/IEEE (crc32fast) of bytes 0..20 and the body          |
//! | 24  | 16   | (flag bit 0) producer id u64, producer sequence u64          |
//!
//! A plain append is written as version 1, byte for byte as before extensions existed;
//! only a record that carries an extension is version 2.

use crate::codec::MAX_PAYLOAD;

pub const RECORD_MAGIC: [u8; 2] = *b"CR";
pub const FORMAT_VERSION: u8 = 1;
/// Version of a record carrying extension fields (named by its flags).
pub const FORMAT_VERSION_EXT: u8 = 2;
pub const RECORD_HEADER_LEN: usize = 24;
/// Flag bit: the producer extension (id, sequence) follows the header.
pub const FLAG_PRODUCER: u8 = 0x01;
/// Flag bits a reader understands.
pub const KNOWN_FLAGS: u8 = FLAG_PRODUCER;
/// Bytes of the producer extension.
pub const PRODUCER_EXT_LEN: usize = 16;
/// Largest extension area (all known extensions present).
pub const MAX_EXT_LEN: usize = PRODUCER_EXT_LEN;
/// Largest body (extensions + payload).
pub const MAX_BODY: usize = MAX_PAYLOAD + MAX_EXT_LEN;

/// An idempotent append's identity: the producer and its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerSeq {
    pub id: u64,
    pub seq: u64,
}

/// A decoded record borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub offset: u64,
    pub epoch: u32,
    /// The stored CRC-32 (bytes 20..24): with `offset` and `epoch`, a record's identity.
    pub crc: u32,
    /// Set on records of idempotent appends (format version 2, flag bit 0).
    pub producer: Option<ProducerSeq>,
    pub payload: &'a [u8],
}

impl RecordRef<'_> {
    /// Bytes of the whole encoded record (header, extensions, payload).
    pub fn encoded_len(&self) -> usize {
        encoded_len_ex(self.producer.is_some(), self.payload.len())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    Truncated,
    BadMagic,
    BadVersion(u8),
    /// Version 2 with flag bits this reader does not know (or none at all).
    BadFlags(u8),
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
            RecordError::BadFlags(v) => write!(f, "unknown record flags 0x{v:02x}"),
            RecordError::PayloadTooLarge(n) => write!(f, "record body length {n} too large"),
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

/// Bytes of an encoded record, with or without the producer extension.
pub fn encoded_len_ex(producer: bool, payload_len: usize) -> usize {
    RECORD_HEADER_LEN + if producer { PRODUCER_EXT_LEN } else { 0 } + payload_len
}

/// Appends one encoded plain record (version 1) to `out`.
pub fn encode(offset: u64, epoch: u32, payload: &[u8], out: &mut Vec<u8>) {
    encode_ex(offset, epoch, None, payload, out)
}

/// Appends one encoded record to `out`: version 1 without a producer, else version 2.
pub fn encode_ex(offset: u64, epoch: u32, producer: Option<ProducerSeq>, payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= MAX_PAYLOAD, "record payload above MAX_PAYLOAD");
    let start = out.len();
    let ext = if producer.is_some() { PRODUCER_EXT_LEN } else { 0 };
    out.extend_from_slice(&RECORD_MAGIC);
    match producer {
        None => out.extend_from_slice(&[FORMAT_VERSION, 0]),
        Some(_) => out.extend_from_slice(&[FORMAT_VERSION_EXT, FLAG_PRODUCER]),
    }
    out.extend_from_slice(&((ext + payload.len()) as u32).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    let crc_at = out.len();
    out.extend_from_slice(&[0u8; 4]);
    if let Some(p) = producer {
        out.extend_from_slice(&p.id.to_le_bytes());
        out.extend_from_slice(&p.seq.to_le_bytes());
    }
    out.extend_from_slice(payload);
    let mut h = crc32fast::Hasher::new();
    h.update(&out[start..crc_at]);
    h.update(&out[crc_at + 4..]);
    out[crc_at..crc_at + 4].copy_from_slice(&h.finalize().to_le_bytes());
}

/// The header fields of the record at the front of `buf`, checked for shape but not
/// for its CRC: (offset, producer, total length). For records already verified (the
/// boot scan's second look, the replication path).
pub fn peek(buf: &[u8]) -> Result<(u64, Option<ProducerSeq>, usize), RecordError> {
    let (total, ext) = shape(buf)?;
    let offset = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    Ok((offset, producer_ext(&buf[RECORD_HEADER_LEN..RECORD_HEADER_LEN + ext]), total))
}

/// Checks magic, version, flags and lengths; returns (total length, extension length).
fn shape(buf: &[u8]) -> Result<(usize, usize), RecordError> {
    if buf.len() < RECORD_HEADER_LEN {
        return Err(RecordError::Truncated);
    }
    if buf[0..2] != RECORD_MAGIC {
        return Err(RecordError::BadMagic);
    }
    let ext = match (buf[2], buf[3]) {
        (FORMAT_VERSION, 0) => 0,
        (FORMAT_VERSION, _) => return Err(RecordError::BadVersion(buf[2])),
        (FORMAT_VERSION_EXT, f) if f != 0 && f & !KNOWN_FLAGS == 0 => PRODUCER_EXT_LEN,
        (FORMAT_VERSION_EXT, f) => return Err(RecordError::BadFlags(f)),
        (v, _) => return Err(RecordError::BadVersion(v)),
    };
    let len = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    if len as usize > MAX_PAYLOAD + ext || (len as usize) < ext {
        return Err(RecordError::PayloadTooLarge(len));
    }
    let total = RECORD_HEADER_LEN + len as usize;
    if buf.len() < total {
        return Err(RecordError::Truncated);
    }
    Ok((total, ext))
}

fn producer_ext(ext: &[u8]) -> Option<ProducerSeq> {
    (ext.len() == PRODUCER_EXT_LEN).then(|| ProducerSeq {
        id: u64::from_le_bytes(ext[0..8].try_into().unwrap()),
        seq: u64::from_le_bytes(ext[8..16].try_into().unwrap()),
    })
}

/// Decodes and verifies the record at the front of `buf`; returns it and its length.
pub fn decode(buf: &[u8]) -> Result<(RecordRef<'_>, usize), RecordError> {
    let (total, ext) = shape(buf)?;
    let offset = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    let epoch = u32::from_le_bytes(buf[16..20].try_into().unwrap());
    let crc = u32::from_le_bytes(buf[20..24].try_into().unwrap());
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[0..20]);
    h.update(&buf[RECORD_HEADER_LEN..total]);
    if h.finalize() != crc {
        return Err(RecordError::BadCrc { offset });
    }
    let producer = producer_ext(&buf[RECORD_HEADER_LEN..RECORD_HEADER_LEN + ext]);
    let payload = &buf[RECORD_HEADER_LEN + ext..total];
    Ok((RecordRef { offset, epoch, crc, producer, payload }, total))
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

    #[test]
    fn producer_extension_roundtrip_and_versions() {
        let p = ProducerSeq { id: 0xfeed, seq: 41 };
        let mut buf = Vec::new();
        encode(1, 1, b"plain", &mut buf);
        assert_eq!(buf[2], FORMAT_VERSION, "a plain record stays version 1");
        let plain = buf.len();
        encode_ex(2, 1, Some(p), b"idem", &mut buf);
        assert_eq!(buf.len() - plain, encoded_len_ex(true, 4));
        assert_eq!(buf[plain + 2], FORMAT_VERSION_EXT);
        let recs: Vec<_> = Records::new(&buf).map(|r| r.unwrap()).collect();
        assert_eq!(recs[0].producer, None);
        assert_eq!(recs[1].producer, Some(p));
        assert_eq!(recs[1].payload, b"idem");
        assert_eq!(recs[1].encoded_len(), buf.len() - plain);
        assert_eq!(peek(&buf[plain..]).unwrap(), (2, Some(p), buf.len() - plain));
        assert_eq!(verify_run(&buf, 1, 2), Ok(1));
        // The extension is under the CRC.
        let mut bad = buf.clone();
        bad[plain + RECORD_HEADER_LEN + 9] ^= 1;
        assert_eq!(decode(&bad[plain..]), Err(RecordError::BadCrc { offset: 2 }));
        // Unknown flags, flags in version 1, a version-2 record without flags.
        for (v, f, e) in [
            (2u8, 0x80u8, RecordError::BadFlags(0x80)),
            (1, 1, RecordError::BadVersion(1)),
            (2, 0, RecordError::BadFlags(0)),
            (3, 0, RecordError::BadVersion(3)),
        ] {
            let mut b = buf[plain..].to_vec();
            b[2] = v;
            b[3] = f;
            assert_eq!(decode(&b), Err(e));
        }
        // A body shorter than its extension.
        let mut b = buf[plain..].to_vec();
        b[4..8].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(decode(&b), Err(RecordError::PayloadTooLarge(3)));
    }
}
