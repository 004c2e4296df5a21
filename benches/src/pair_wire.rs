//! What `pair_floor` and `pair_floor_glommio` share, without I/O: the bare pair's
//! shipment format (`[count: u32 LE][count × REQ bytes]`, acknowledged by its 4-byte
//! count) and the data file they write in 4 KiB blocks.

use std::io::{self, Write};

/// One durable write: a batch of requests fits in one block.
pub const BLOCK: usize = 4096;
/// The data file is a ring of this many blocks (16 MiB), zeroed before the run, so every
/// timed write is an overwrite (as corelog's zeroed-ahead segments).
pub const FILE_BLOCKS: u64 = 4096;
/// A request: the load generator's default payload.
pub const REQ: usize = 100;

/// The first whole shipment at the front of `buf`: its requests and its length on the
/// wire; `None` while the rest of it is still on its way.
pub fn shipment(buf: &[u8]) -> Option<(&[u8], usize)> {
    let count = u32::from_le_bytes(buf.get(..4)?.try_into().unwrap()) as usize;
    assert!(count >= 1 && count * REQ <= BLOCK, "shipment of {count} requests");
    let len = 4 + count * REQ;
    Some((buf.get(4..len)?, len))
}

/// Creates `path` as `FILE_BLOCKS` zeroed blocks, written and synced with buffered I/O;
/// the caller reopens it for Direct I/O.
pub fn zeroed_file(path: &str) -> io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(&vec![0u8; BLOCK * FILE_BLOCKS as usize])?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shipment_is_whole_or_waits() {
        let mut wire = 2u32.to_le_bytes().to_vec();
        wire.extend_from_slice(&[7u8; 2 * REQ]);
        wire.extend_from_slice(&1u32.to_le_bytes());
        assert_eq!(shipment(&wire[..3]), None);
        assert_eq!(shipment(&wire[..4 + REQ]), None);
        let (reqs, len) = shipment(&wire).unwrap();
        assert_eq!((reqs.len(), len), (2 * REQ, 4 + 2 * REQ));
        assert_eq!(shipment(&wire[len..]), None, "the second shipment has no requests yet");
    }
}
