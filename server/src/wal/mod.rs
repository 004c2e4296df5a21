//! The write-ahead log of one shard: segment files of batches of records.
//!
//! - [`batch`]: the on-disk batch frame (one group-commit write).
//! - [`recovery`]: the boot-time / offline scan and torn-tail repair (std I/O).
//! - [`log`]: the live log on glommio Direct I/O: append, read, truncate, roll-over.
//! - [`probe`]: refuse data dirs that do not honour O_DIRECT.

pub mod batch;
pub mod log;
pub mod probe;
pub mod recovery;

pub use log::Log;
