//! Where TLS records start and end in the bytes fed to rustls before the hand-off.
//!
//! rustls keeps a partial record it cannot decrypt yet in its own buffer, and those bytes
//! are gone from the socket; the kernel must start at a record boundary. Knowing how many
//! bytes the current record still misses, the caller reads exactly those (never past the
//! record) before handing the socket to the kernel.

/// Bytes of a TLS record header: type, legacy version (2), length (2).
const HEADER_LEN: usize = 5;

/// Tracks the record framing of a byte stream (only the headers are read).
#[derive(Default, Debug)]
pub struct Frames {
    hdr: [u8; HEADER_LEN],
    /// Header bytes seen of the next record (always below `HEADER_LEN` between calls).
    hdr_len: usize,
    /// Body bytes of the current record not yet seen (at most a u16 length).
    body_left: usize,
}

impl Frames {
    /// The next bytes of the stream, in order.
    pub fn feed(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.body_left > 0 {
                let k = self.body_left.min(b.len());
                self.body_left -= k;
                b = &b[k..];
            } else {
                let k = (HEADER_LEN - self.hdr_len).min(b.len());
                self.hdr[self.hdr_len..self.hdr_len + k].copy_from_slice(&b[..k]);
                self.hdr_len += k;
                b = &b[k..];
                if self.hdr_len == HEADER_LEN {
                    self.hdr_len = 0;
                    self.body_left = u16::from_be_bytes([self.hdr[3], self.hdr[4]]) as usize;
                }
            }
        }
        // The peer's lengths are not checked here (rustls refuses an oversized record);
        // these hold whatever it sent.
        debug_assert!(self.hdr_len < HEADER_LEN, "kTLS frames: {} header bytes held", self.hdr_len);
        debug_assert!(self.body_left <= u16::MAX as usize, "kTLS frames: body of {} bytes", self.body_left);
        debug_assert!(self.hdr_len == 0 || self.body_left == 0, "kTLS frames: inside a header and a body at once");
    }

    /// Bytes still missing from the current record (0 at a record boundary).
    pub fn missing(&self) -> usize {
        if self.body_left > 0 {
            self.body_left
        } else if self.hdr_len > 0 {
            HEADER_LEN - self.hdr_len
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_track_record_boundaries() {
        let mut f = Frames::default();
        assert_eq!(f.missing(), 0);
        // A whole record: header (type 23, 0x0303, length 3) + 3 bytes.
        f.feed(&[23, 3, 3, 0, 3, 1, 2, 3]);
        assert_eq!(f.missing(), 0);
        // Header split in two pieces.
        f.feed(&[23, 3]);
        assert_eq!(f.missing(), 3);
        f.feed(&[3, 0x01]);
        assert_eq!(f.missing(), 1);
        f.feed(&[0x00]); // length 256
        assert_eq!(f.missing(), 256);
        f.feed(&[0; 200]);
        assert_eq!(f.missing(), 56);
        // The rest of this record and the start of the next one in one piece.
        let mut b = vec![0u8; 56];
        b.extend_from_slice(&[21, 3, 3, 0, 2, 1]);
        f.feed(&b);
        assert_eq!(f.missing(), 1);
        f.feed(&[0]);
        assert_eq!(f.missing(), 0);
        // Zero-length record.
        f.feed(&[23, 3, 3, 0, 0]);
        assert_eq!(f.missing(), 0);
    }
}
