//! The write-ahead log of one shard: segment files of batches of records.
//!
//! - [`batch`]: the on-disk batch frame (one group-commit write).
//! - [`recovery`]: the boot-time / offline scan and torn-tail repair (std I/O).
//! - [`segread`]: positioned reads of a segment for the scan (errors, never SIGBUS).
//! - [`damage`]: a torn write or damage to a possibly acknowledged batch?
//! - [`log`]: the live log on glommio Direct I/O: append, read, truncate, roll-over.
//! - [`batchindex`]: where each batch of a live segment lies (8 bytes per batch).
//! - [`segidx`]: the index file of a sealed segment, which a start trusts instead of a scan.
//! - [`prezero`]: keeps the blocks in front of the writer written with zeros.
//! - [`history`]: the epochs of a log and where each began.
//! - [`digest`]: the digest of record bytes that scans, index files and `inspect` compare.
//! - [`probe`]: refuse data dirs that do not honour O_DIRECT.

pub mod batch;
pub mod batchindex;
pub mod damage;
pub mod digest;
pub mod history;
pub mod log;
pub mod prezero;
pub mod probe;
pub mod recovery;
pub mod segidx;
pub mod segread;

pub use log::Log;

/// A fresh directory for a unit test of Direct I/O, removed when dropped. Under target/,
/// on the disk filesystem the build uses: /tmp may be a tmpfs, which refuses O_DIRECT
/// and has no extents for FIEMAP to report.
#[cfg(test)]
pub(crate) fn disk_tempdir() -> tempfile::TempDir {
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/tmp");
    std::fs::create_dir_all(base).unwrap();
    tempfile::tempdir_in(base).unwrap()
}
