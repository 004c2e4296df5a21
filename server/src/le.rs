//! Little-endian fields read off the front of a byte slice: the decoders of the files a
//! shard derives from its log (segment indexes, index snapshots, checkpoints). Each read
//! fails with "truncated" instead of panicking on a short file.

pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    /// The bytes left (a decoder refuses trailing bytes).
    pub fn rest(&self) -> usize {
        self.0.len()
    }
}

/// Splits `b` into its body and checks the CRC-32/IEEE in its last 4 bytes.
pub fn checked_body(b: &[u8]) -> Result<&[u8], String> {
    let body_len = b.len().checked_sub(4).ok_or("shorter than its checksum")?;
    let (body, crc) = b.split_at(body_len);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err("checksum mismatch".into());
    }
    Ok(body)
}
