//! Boot-time check that the data directory honours O_DIRECT. tmpfs refuses O_DIRECT;
//! overlayfs may silently route it through the page cache. Both are refused.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

const TMPFS_MAGIC: i64 = 0x0102_1994;
const OVERLAYFS_MAGIC: i64 = 0x794c_7630;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

pub fn check_direct_io(dir: &Path) -> Result<(), String> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!("statfs {}: {}", dir.display(), std::io::Error::last_os_error()));
    }
    let kind = match st.f_type as i64 {
        TMPFS_MAGIC => Some("tmpfs"),
        OVERLAYFS_MAGIC => Some("overlayfs"),
        RAMFS_MAGIC => Some("ramfs"),
        _ => None,
    };
    if let Some(kind) = kind {
        return Err(format!(
            "data dir {} is on {kind}, which does not honour O_DIRECT: corelog needs a real block-device filesystem (ext4, xfs)",
            dir.display()
        ));
    }
    let probe = dir.join(".odirect-probe");
    let res = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)?;
        let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
        // SAFETY: layout is non-zero sized; freed below.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let buf = unsafe { std::slice::from_raw_parts(ptr, 4096) };
        let r = f.write_all(buf);
        unsafe { std::alloc::dealloc(ptr, layout) };
        r?;
        f.sync_data()
    })();
    let _ = std::fs::remove_file(&probe);
    res.map_err(|e| probe_error(dir, &e))
}

/// Only EINVAL means the filesystem refuses O_DIRECT; anything else is about the disk.
fn probe_error(dir: &Path, e: &std::io::Error) -> String {
    let d = dir.display();
    match e.raw_os_error() {
        Some(libc::EINVAL) => {
            format!("data dir {d} does not honour O_DIRECT ({e}): corelog needs a real block-device filesystem")
        }
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => format!(
            "data dir {d} is full: writing a 4 KiB probe block failed ({e}); free space on its filesystem (nothing was changed)"
        ),
        Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => {
            format!("data dir {d} is not writable: writing a 4 KiB probe block failed ({e})")
        }
        _ => format!(
            "data dir {d}: writing and syncing a 4 KiB probe block with O_DIRECT failed ({e}): the device or filesystem reports an error"
        ),
    }
}

/// glommio sends a Direct I/O file's reads and writes to its IOPOLL ring when a probe —
/// a read at the first open of a file on the device, once per executor thread —
/// succeeds. Where it succeeds on a device that completes by interrupt (the probe of an
/// empty file; device-mapper volumes under Debian's kernel, as the VM storage test saw;
/// kernels that drop the poll flag instead of refusing it), an executor with I/O on that
/// ring cannot sleep: it spins reaping it for as long as the write takes. Measured with a
/// glommio loop of 4 KiB O_DSYNC writes on the 2-vCPU dev machine: 206 µs of CPU per
/// 155 µs write; on the vCPU that takes the disk's interrupts 4 ms per write (the O_DSYNC
/// completion worker waits for the spinning thread's next tick); with the ring off 56–63
/// µs of CPU per write at the same latency. So every shard opens a write-only file first:
/// the probe's read fails (EBADF) and glommio marks the device non-pollable for this
/// thread. (On that machine's virtio disk the probe of a real block is refused anyway,
/// EOPNOTSUPP, so there it changes nothing.) glommio logs the failed probe as an error;
/// `logging` drops that one line.
pub async fn disable_poll_ring(dir: &Path) -> Result<(), String> {
    let p = dir.join(".iopoll-probe");
    let f = glommio::io::OpenOptions::new()
        .write(true)
        .create(true)
        .dma_open(&p)
        .await
        .map_err(|e| format!("open {}: {e}", p.display()))?;
    let _ = f.close().await;
    std::fs::remove_file(&p).map_err(|e| format!("remove {}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn probe_errors_name_the_real_cause() {
        let d = std::path::Path::new("/data");
        let msg = |code| super::probe_error(d, &std::io::Error::from_raw_os_error(code));
        assert!(msg(libc::EINVAL).contains("does not honour O_DIRECT"));
        assert!(msg(libc::ENOSPC).contains("is full") && !msg(libc::ENOSPC).contains("O_DIRECT ("));
        assert!(msg(libc::EIO).contains("device or filesystem reports an error"));
        assert!(msg(libc::EROFS).contains("not writable"));
    }
}
