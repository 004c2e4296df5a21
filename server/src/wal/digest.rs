//! The digest of a run of record bytes (a segment's, a whole log's), as the scan, the
//! live log, the index files and `corelog inspect` compute it.

/// The digest `corelog inspect` prints, over any run of record bytes: two CRC-32s, the
/// second started from a fixed seed (format.md §7). Fed batch by batch.
#[derive(Clone)]
pub struct Digest(crc32fast::Hasher, crc32fast::Hasher);

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Digest({:016x})", self.value())
    }
}

impl Default for Digest {
    fn default() -> Self {
        Digest(crc32fast::Hasher::new(), crc32fast::Hasher::new_with_initial(0x5bd1_e995))
    }
}

impl Digest {
    pub fn update(&mut self, records: &[u8]) {
        self.0.update(records);
        self.1.update(records);
    }

    pub fn value(&self) -> u64 {
        ((self.0.clone().finalize() as u64) << 32) | self.1.clone().finalize() as u64
    }
}
