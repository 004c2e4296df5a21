//! Reading a segment file at boot and offline, with ordinary positioned reads through a
//! bounded window. Never mmap: through a mapping a device read error arrives as SIGBUS
//! and kills the process; here it is an error that names the file and the byte offset.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::batch::BLOCK;

/// Bytes read at once (and held): at least one whole batch span (1 MiB + header).
pub const WINDOW: usize = 8 << 20;

/// A read the device refused.
#[derive(Debug, Clone)]
pub struct ReadFault {
    pub path: PathBuf,
    /// The first 4 KiB block that could not be read.
    pub pos: u64,
    pub error: String,
}

impl std::fmt::Display for ReadFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "read error in {} at byte {} (4 KiB block {}): {}",
            self.path.display(),
            self.pos,
            self.pos / BLOCK,
            self.error
        )
    }
}

pub struct SegReader {
    path: PathBuf,
    file: std::fs::File,
    len: u64,
    start: u64,
    buf: Vec<u8>,
}

impl SegReader {
    pub fn open(path: &Path) -> Result<SegReader, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
        let len = file.metadata().map_err(|e| format!("stat {}: {e}", path.display()))?.len();
        Ok(SegReader { path: path.to_path_buf(), file, len, start: 0, buf: Vec::new() })
    }

    /// The file's length in bytes.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// Up to `want` bytes from `pos`: fewer only where the file ends (none past it).
    /// `want` must not exceed [`WINDOW`].
    pub fn get(&mut self, pos: u64, want: usize) -> Result<&[u8], ReadFault> {
        assert!(want <= WINDOW, "a read of {want} bytes is larger than the window");
        if pos >= self.len {
            return Ok(&[]);
        }
        let end = (pos + want as u64).min(self.len);
        if pos < self.start || end > self.start + self.buf.len() as u64 {
            let start = pos / BLOCK * BLOCK;
            // `pos` may sit up to a block past `start`: a window and a block cover `end`.
            let n = (WINDOW as u64 + BLOCK).min(self.len - start) as usize;
            self.buf.resize(n, 0);
            if let Err((at, k, e)) = self.fill(start) {
                self.buf.clear();
                return Err(self.locate(at, k, e));
            }
            self.start = start;
        }
        Ok(&self.buf[(pos - self.start) as usize..(end - self.start) as usize])
    }

    /// Fills the window (`buf`, already sized) from `start`: the file's data ranges are
    /// read, its holes and never-written extents zeroed without a read. Reading them would
    /// put their zero pages in the page cache, after which the file system reports them as
    /// data, and a check of a segment's unwritten tail would read all of it. Errors: where
    /// the failed read began, its length, the error.
    fn fill(&mut self, start: u64) -> Result<(), (u64, u64, std::io::Error)> {
        let end = start + self.buf.len() as u64;
        let mut p = start;
        while p < end {
            let hole = self.seek(p, libc::SEEK_HOLE).unwrap_or(end).clamp(p, end);
            let (a, b) = ((p - start) as usize, (hole - start) as usize);
            if let Err(e) = self.file.read_exact_at(&mut self.buf[a..b], p) {
                return Err((p, hole - p, e));
            }
            if hole == end {
                break;
            }
            // A hole the file system cannot place the end of, or one that does not move
            // on: the rest is read.
            let data = match self.seek(hole, libc::SEEK_DATA) {
                Some(d) if d > hole => d.min(end),
                _ => {
                    let e = self.buf.len();
                    return self.file.read_exact_at(&mut self.buf[b..e], hole).map_err(|e| (hole, end - hole, e));
                }
            };
            self.buf[b..(data - start) as usize].fill(0);
            p = data;
        }
        Ok(())
    }

    /// `lseek(fd, pos, whence)`: None where the file system cannot say (then the caller
    /// reads the bytes) or, for `SEEK_DATA`, no data follows (`ENXIO`: the rest is zero).
    fn seek(&self, pos: u64, whence: libc::c_int) -> Option<u64> {
        use std::os::fd::AsRawFd;
        // SAFETY: lseek on a descriptor we own; reads are positioned, the file offset
        // does not matter.
        let at = unsafe { libc::lseek(self.file.as_raw_fd(), pos as libc::off_t, whence) };
        if at >= 0 {
            return Some(at as u64);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENXIO) if whence == libc::SEEK_DATA => Some(self.len),
            _ => None,
        }
    }

    /// Exactly `out.len()` bytes at `pos`, one read and no read-ahead: a start checks a
    /// sealed segment's last batch header (32 bytes) and must not pull the window after
    /// it — up to a batch of a MiB per segment — from the disk.
    pub fn read_at(&self, pos: u64, out: &mut [u8]) -> Result<(), ReadFault> {
        no_readahead(&self.file);
        self.file.read_exact_at(out, pos).map_err(|e| ReadFault { path: self.path.clone(), pos, error: e.to_string() })
    }

    /// True when every byte from `pos` to the end of the file is zero. Ranges the file
    /// system reports as holes (`next_data`: a preallocated segment's unwritten tail) are
    /// zero without being read.
    pub fn zero_from(&mut self, pos: u64) -> Result<bool, ReadFault> {
        let mut p = self.next_data(pos);
        while p < self.len {
            let chunk = self.get(p, WINDOW)?;
            if chunk.iter().any(|b| *b != 0) {
                return Ok(false);
            }
            let n = chunk.len() as u64;
            p = self.next_data(p + n);
        }
        Ok(true)
    }

    /// The first position at or after `pos` that may hold data: `lseek(SEEK_DATA)`. A hole, or an extent allocated but never
    /// written (what `fallocate` leaves and the writer has not reached), reads as zeros;
    /// a file system that cannot tell answers `pos` itself, and the bytes are read.
    pub fn next_data(&self, pos: u64) -> u64 {
        if pos >= self.len {
            return self.len;
        }
        self.seek(pos, libc::SEEK_DATA).map_or(pos, |at| at.max(pos).min(self.len))
    }

    /// Finds the first unreadable block of a failed read, for the error message.
    fn locate(&self, start: u64, n: u64, first: std::io::Error) -> ReadFault {
        let mut block = vec![0u8; BLOCK as usize];
        let mut p = start;
        while p < start + n {
            let k = BLOCK.min(start + n - p) as usize;
            if let Err(e) = self.file.read_exact_at(&mut block[..k], p) {
                return ReadFault { path: self.path.clone(), pos: p, error: e.to_string() };
            }
            p += BLOCK;
        }
        ReadFault { path: self.path.clone(), pos: start, error: first.to_string() }
    }
}

/// Tells the kernel that `file` is read at random: a small read reads its pages only
/// (a buffered read otherwise starts a read-ahead of 128 KiB or more).
pub fn no_readahead(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: fadvise on a descriptor the caller owns; only a hint, its result is irrelevant.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
}

impl Drop for SegReader {
    /// The scan reads every segment once: leave nothing of it in the page cache (the
    /// node reads with Direct I/O afterwards, and a large log would crowd out the rest).
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: fadvise on a descriptor we own; only a hint, its result is irrelevant.
        unsafe { libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_every_position_and_stop_at_the_end() {
        let dir = std::env::temp_dir().join(format!("corelog-segread-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.log");
        let data: Vec<u8> = (0..(WINDOW + 3 * BLOCK as usize + 100)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let mut r = SegReader::open(&path).unwrap();
        for pos in [0u64, 5, 4096, WINDOW as u64 - 10, WINDOW as u64 + 1, data.len() as u64 - 3] {
            let got = r.get(pos, 64).unwrap().to_vec();
            let end = (pos as usize + 64).min(data.len());
            assert_eq!(got, data[pos as usize..end], "at {pos}");
        }
        assert!(r.get(data.len() as u64, 10).unwrap().is_empty());
        assert!(!r.zero_from(0).unwrap());
        std::fs::write(&path, vec![0u8; 3 * WINDOW]).unwrap();
        assert!(SegReader::open(&path).unwrap().zero_from(7).unwrap());
        // A preallocated file: data only where written; the rest is skipped, not read.
        let f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&path).unwrap();
        // SAFETY: fallocate on a descriptor we own.
        assert_eq!(unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, 64 << 20) }, 0);
        f.write_all_at(&[7u8; 4096], 8192).unwrap();
        f.sync_all().unwrap();
        let mut r = SegReader::open(&path).unwrap();
        assert!(r.next_data(12288) >= 12288);
        assert!(r.zero_from(12288).unwrap());
        assert!(!r.zero_from(0).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
