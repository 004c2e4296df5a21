//! One record: a fixed 24-byte header, optional extension fields, then the payload. The
//! same bytes are written to disk, shipped to the follower and returned to readers, so a
//! reader can verify the CRC end to end. Layout (all little-endian), specified in
//! docs/format.md §3:
//!
//! | off | size | field                                                         |
//! |-----|------|---------------------------------------------------------------|
//! | 0   | 2    | magic `b"CR"`                                                 |
//! | 2   | 1    | format version: 1 (no extension) or 2 (flags name extensions)  |
//! | 3   | 1    | flags: 0 in version 1; in version 2 bit 0 = producer, bit 1 = stream |
//! | 4   | 4    | body length: extension bytes + payload bytes                  |
//! | 8   | 8    | offset (position in the shard, gap-free from 0)               |
//! | 16  | 4    | epoch under which the leader wrote it                         |
//! | 20  | 4    | CRC-32/IEEE (crc32fast) of bytes 0..20 and the body           |
//! | 24  | 16   | (flag bit 0) producer id u64, producer sequence u64           |
//! | then| 9+n  | (flag bit 1) stream version u64, name length n u8 (1..=255), name (UTF-8) |
//!
//! A plain append is written as version 1, byte for byte as before extensions existed;
//! only a record that carries an extension is version 2.

/// Largest payload of one event. A bound of the record itself: the protocol's requests
/// (`codec`) carry at most one record's payload, so the codec takes it from here.
pub const MAX_PAYLOAD: usize = 64 * 1024;
pub const RECORD_MAGIC: [u8; 2] = *b"CR";
pub const FORMAT_VERSION: u8 = 1;
/// Version of a record carrying extension fields (named by its flags).
pub const FORMAT_VERSION_EXT: u8 = 2;
pub const RECORD_HEADER_LEN: usize = 24;
/// Flag bit: the producer extension (id, sequence) follows the header.
pub const FLAG_PRODUCER: u8 = 0x01;
/// Flag bit: the stream extension (version, name) follows (after the producer's).
pub const FLAG_STREAM: u8 = 0x02;
/// Flag bits a reader understands.
pub const KNOWN_FLAGS: u8 = FLAG_PRODUCER | FLAG_STREAM;
/// Bytes of the producer extension.
pub const PRODUCER_EXT_LEN: usize = 16;
/// Longest stream name, in bytes (UTF-8).
pub const MAX_STREAM_NAME: usize = 255;
/// Bytes of the stream extension besides the name: version u64, name length u8.
pub const STREAM_EXT_FIXED: usize = 9;
/// Largest extension area (all known extensions present, longest name).
pub const MAX_EXT_LEN: usize = PRODUCER_EXT_LEN + STREAM_EXT_FIXED + MAX_STREAM_NAME;
/// Largest body (extensions + payload).
pub const MAX_BODY: usize = MAX_PAYLOAD + MAX_EXT_LEN;

/// An idempotent append's identity: the producer and its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerSeq {
    pub id: u64,
    pub seq: u64,
}

/// A record's place in its stream: the stream's name and the event's version there
/// (0 for the stream's first event, then 1, 2, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamPos<'a> {
    pub name: &'a str,
    pub version: u64,
}

/// The extension fields of a record (all absent: a plain version-1 record).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ext<'a> {
    pub producer: Option<ProducerSeq>,
    pub stream: Option<StreamPos<'a>>,
}

impl Ext<'_> {
    /// Bytes these extensions take in a record.
    pub fn len(&self) -> usize {
        self.producer.map_or(0, |_| PRODUCER_EXT_LEN) + self.stream.map_or(0, |s| STREAM_EXT_FIXED + s.name.len())
    }
    pub fn is_empty(&self) -> bool {
        self.producer.is_none() && self.stream.is_none()
    }
    fn flags(&self) -> u8 {
        self.producer.map_or(0, |_| FLAG_PRODUCER) | self.stream.map_or(0, |_| FLAG_STREAM)
    }
}

/// Whether `name` may name a stream: 1 to `MAX_STREAM_NAME` bytes of UTF-8. The error
/// says why not.
pub fn check_stream_name(name: &[u8]) -> Result<&str, String> {
    if name.is_empty() {
        return Err("stream name is empty (1 to 255 bytes of UTF-8)".into());
    }
    if name.len() > MAX_STREAM_NAME {
        return Err(format!("stream name of {} bytes is too long (at most {MAX_STREAM_NAME})", name.len()));
    }
    std::str::from_utf8(name).map_err(|e| format!("stream name is not UTF-8 ({e})"))
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
    /// Set on records appended to a stream (format version 2, flag bit 1).
    pub stream: Option<StreamPos<'a>>,
    pub payload: &'a [u8],
}

impl RecordRef<'_> {
    /// Bytes of the whole encoded record (header, extensions, payload).
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_LEN + self.ext().len() + self.payload.len()
    }
    pub fn ext(&self) -> Ext<'_> {
        Ext { producer: self.producer, stream: self.stream }
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
    /// The stream extension is malformed (length past the body, empty or not UTF-8).
    BadStream,
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
            RecordError::BadStream => write!(f, "malformed stream extension"),
        }
    }
}

impl std::error::Error for RecordError {}

pub fn encoded_len(payload_len: usize) -> usize {
    RECORD_HEADER_LEN + payload_len
}

/// Appends one encoded plain record (version 1) to `out`.
pub fn encode(offset: u64, epoch: u32, payload: &[u8], out: &mut Vec<u8>) {
    encode_ex(offset, epoch, Ext::default(), payload, out)
}

/// Appends one encoded record to `out`: version 1 without extensions, else version 2.
pub fn encode_ex(offset: u64, epoch: u32, ext: Ext<'_>, payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= MAX_PAYLOAD, "record payload above MAX_PAYLOAD");
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC);
    if ext.is_empty() {
        out.extend_from_slice(&[FORMAT_VERSION, 0]);
    } else {
        out.extend_from_slice(&[FORMAT_VERSION_EXT, ext.flags()]);
    }
    out.extend_from_slice(&((ext.len() + payload.len()) as u32).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    let crc_at = out.len();
    out.extend_from_slice(&[0u8; 4]);
    if let Some(p) = ext.producer {
        out.extend_from_slice(&p.id.to_le_bytes());
        out.extend_from_slice(&p.seq.to_le_bytes());
    }
    if let Some(s) = ext.stream {
        assert!(!s.name.is_empty() && s.name.len() <= MAX_STREAM_NAME, "stream name length out of bounds");
        out.extend_from_slice(&s.version.to_le_bytes());
        out.push(s.name.len() as u8);
        out.extend_from_slice(s.name.as_bytes());
    }
    out.extend_from_slice(payload);
    let mut h = crc32fast::Hasher::new();
    h.update(&out[start..crc_at]);
    h.update(&out[crc_at + 4..]);
    out[crc_at..crc_at + 4].copy_from_slice(&h.finalize().to_le_bytes());
}

/// The header fields of the record at the front of `buf`, checked for shape but not
/// for its CRC: (offset, extensions, total length). For records already verified (the
/// boot scan's second look, the replication path).
pub fn peek(buf: &[u8]) -> Result<(u64, Ext<'_>, usize), RecordError> {
    let (total, ext) = shape(buf)?;
    let offset = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    Ok((offset, ext, total))
}

/// Checks magic, version, flags and lengths and parses the extensions; returns the
/// total length and the extensions.
fn shape(buf: &[u8]) -> Result<(usize, Ext<'_>), RecordError> {
    if buf.len() < RECORD_HEADER_LEN {
        return Err(RecordError::Truncated);
    }
    if buf[0..2] != RECORD_MAGIC {
        return Err(RecordError::BadMagic);
    }
    let flags = match (buf[2], buf[3]) {
        (FORMAT_VERSION, 0) => 0,
        (FORMAT_VERSION, _) => return Err(RecordError::BadVersion(buf[2])),
        (FORMAT_VERSION_EXT, f) if f != 0 && f & !KNOWN_FLAGS == 0 => f,
        (FORMAT_VERSION_EXT, f) => return Err(RecordError::BadFlags(f)),
        (v, _) => return Err(RecordError::BadVersion(v)),
    };
    let len = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    if len as usize > MAX_BODY {
        return Err(RecordError::PayloadTooLarge(len));
    }
    let total = RECORD_HEADER_LEN + len as usize;
    if buf.len() < total {
        return Err(RecordError::Truncated);
    }
    let body = &buf[RECORD_HEADER_LEN..total];
    let mut at = 0;
    let mut ext = Ext::default();
    if flags & FLAG_PRODUCER != 0 {
        let p = body.get(..PRODUCER_EXT_LEN).ok_or(RecordError::PayloadTooLarge(len))?;
        ext.producer = Some(ProducerSeq {
            id: u64::from_le_bytes(p[0..8].try_into().unwrap()),
            seq: u64::from_le_bytes(p[8..16].try_into().unwrap()),
        });
        at = PRODUCER_EXT_LEN;
    }
    if flags & FLAG_STREAM != 0 {
        let fixed = body.get(at..at + STREAM_EXT_FIXED).ok_or(RecordError::BadStream)?;
        let version = u64::from_le_bytes(fixed[0..8].try_into().unwrap());
        let n = fixed[8] as usize;
        let name = body.get(at + STREAM_EXT_FIXED..at + STREAM_EXT_FIXED + n).ok_or(RecordError::BadStream)?;
        let name = check_stream_name(name).map_err(|_| RecordError::BadStream)?;
        ext.stream = Some(StreamPos { name, version });
        at += STREAM_EXT_FIXED + n;
    }
    if len as usize - at > MAX_PAYLOAD {
        return Err(RecordError::PayloadTooLarge(len));
    }
    Ok((total, ext))
}

/// Decodes and verifies the record at the front of `buf`; returns it and its length.
pub fn decode(buf: &[u8]) -> Result<(RecordRef<'_>, usize), RecordError> {
    let offset = u64::from_le_bytes(buf.get(8..16).ok_or(RecordError::Truncated)?.try_into().unwrap());
    let (total, ext) = shape(buf)?;
    let epoch = u32::from_le_bytes(buf[16..20].try_into().unwrap());
    let crc = u32::from_le_bytes(buf[20..24].try_into().unwrap());
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[0..20]);
    h.update(&buf[RECORD_HEADER_LEN..total]);
    if h.finalize() != crc {
        return Err(RecordError::BadCrc { offset });
    }
    let payload = &buf[RECORD_HEADER_LEN + ext.len()..total];
    Ok((RecordRef { offset, epoch, crc, producer: ext.producer, stream: ext.stream, payload }, total))
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
        encode_ex(2, 1, Ext { producer: Some(p), stream: None }, b"idem", &mut buf);
        assert_eq!(buf.len() - plain, RECORD_HEADER_LEN + PRODUCER_EXT_LEN + 4);
        assert_eq!(buf[plain + 2], FORMAT_VERSION_EXT);
        let recs: Vec<_> = Records::new(&buf).map(|r| r.unwrap()).collect();
        assert_eq!(recs[0].producer, None);
        assert_eq!(recs[1].producer, Some(p));
        assert_eq!(recs[1].payload, b"idem");
        assert_eq!(recs[1].encoded_len(), buf.len() - plain);
        assert_eq!(peek(&buf[plain..]).unwrap(), (2, Ext { producer: Some(p), stream: None }, buf.len() - plain));
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

    #[test]
    fn stream_extension_roundtrip_alone_and_with_producer() {
        let p = ProducerSeq { id: 3, seq: 4 };
        let st = StreamPos { name: "order-42", version: 7 };
        let mut buf = Vec::new();
        encode_ex(10, 2, Ext { producer: None, stream: Some(st) }, b"created", &mut buf);
        let first = buf.len();
        assert_eq!(first, RECORD_HEADER_LEN + STREAM_EXT_FIXED + 8 + 7);
        encode_ex(11, 2, Ext { producer: Some(p), stream: Some(st) }, b"paid", &mut buf);
        let recs: Vec<_> = Records::new(&buf).map(|r| r.unwrap()).collect();
        assert_eq!((recs[0].producer, recs[0].stream, recs[0].payload), (None, Some(st), &b"created"[..]));
        assert_eq!((recs[1].producer, recs[1].stream, recs[1].payload), (Some(p), Some(st), &b"paid"[..]));
        assert_eq!(recs[1].encoded_len(), buf.len() - first);
        assert_eq!(buf[first + 3], FLAG_PRODUCER | FLAG_STREAM);
        assert_eq!(verify_run(&buf, 10, 2), Ok(2));
        // The name's length byte pointing past the body, a zero length, bad UTF-8.
        for (at, v) in [(RECORD_HEADER_LEN + 8, 200u8), (RECORD_HEADER_LEN + 8, 0), (RECORD_HEADER_LEN + 9, 0xff)] {
            let mut b = buf[..first].to_vec();
            b[at] = v;
            assert_eq!(decode(&b).map(|_| ()), Err(RecordError::BadStream), "byte {at} = {v}");
        }
        // The name is under the CRC.
        let mut b = buf[..first].to_vec();
        b[RECORD_HEADER_LEN + 10] = b'X';
        assert_eq!(decode(&b).map(|_| ()), Err(RecordError::BadCrc { offset: 10 }));
        // Longest name, largest payload: the largest record.
        let long = "é".repeat(127) + "x";
        assert_eq!(long.len(), MAX_STREAM_NAME);
        let mut big = Vec::new();
        let ext = Ext { producer: Some(p), stream: Some(StreamPos { name: &long, version: u64::MAX }) };
        encode_ex(0, 1, ext, &vec![1u8; MAX_PAYLOAD], &mut big);
        assert_eq!(big.len(), RECORD_HEADER_LEN + MAX_BODY);
        assert_eq!(decode(&big).unwrap().0.stream.unwrap().name, long);
        assert!(check_stream_name(&[b'a'; 256]).unwrap_err().contains("too long"));
        assert!(check_stream_name(b"").unwrap_err().contains("empty"));
        assert!(check_stream_name(&[0xc3, 0x28]).unwrap_err().contains("UTF-8"));
    }
}
