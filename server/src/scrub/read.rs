//! One read of a sealed segment: up to [`CHUNK`] bytes with Direct I/O (the device's
//! bytes, not a cached copy), through the executor's ring or, where the device refuses
//! that, a plain `O_DIRECT` pread off the executor.

use std::path::{Path, PathBuf};

use super::CHUNK;
use crate::wal::batch::BLOCK;

/// Up to `CHUNK` bytes at `pos` (fewer at the end of the file), read with Direct I/O.
pub(super) async fn read(file: &glommio::io::DmaFile, path: &Path, pos: u64) -> std::io::Result<Vec<u8>> {
    match file.read_at_aligned(pos, CHUNK).await.map_err(std::io::Error::from) {
        Ok(r) => Ok(r.to_vec()),
        // Refused at submission (a device-mapper table without poll support, loaded under
        // the running node): a plain O_DIRECT pread, off the executor.
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            let path: PathBuf = path.to_path_buf();
            glommio::executor().spawn_blocking(move || read_plain(&path, pos)).await
        }
        Err(e) => Err(std::io::Error::new(e.kind(), format!("read {} at byte {pos}: {e}", path.display()))),
    }
}

fn read_plain(path: &Path, pos: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path)?;
    // O_DIRECT wants a block-aligned buffer: a block-aligned window of a larger one.
    let mut v = vec![0u8; CHUNK + BLOCK as usize];
    let skip = v.as_ptr().align_offset(BLOCK as usize);
    assert!(skip < BLOCK as usize, "scrub: no {BLOCK}-byte aligned window in the read buffer (offset {skip})");
    let buf = &mut v[skip..skip + CHUNK];
    let mut n = 0;
    while n < CHUNK {
        let k = f.read_at(&mut buf[n..], pos + n as u64).map_err(|e| {
            std::io::Error::new(e.kind(), format!("read {} at byte {}: {e}", path.display(), pos + n as u64))
        })?;
        if k == 0 {
            break;
        }
        n += k;
    }
    Ok(buf[..n].to_vec())
}
