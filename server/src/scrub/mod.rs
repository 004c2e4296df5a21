//! Scrubbing: re-reading a shard's sealed segments at a bounded rate to find bit rot.
//!
//! A start trusts a sealed segment's index file after checking only its checksum, the
//! segment's name, the next segment's name and its last batch (`boot.rs`): every other
//! byte of a sealed segment is read by nothing but client reads. So that damage there is
//! still found while it can be repaired from the peer, each shard re-reads its sealed
//! segments (every one but the one being written), oldest first, round and round, with
//! Direct I/O reads of at most [`CHUNK`] bytes (the device's bytes, not a cached copy),
//! paced to `--scrub-mib-per-s` shared by the node's shards. Each segment is checked
//! as the boot scan checks it — every batch frame and CRC, every record's CRC and offset,
//! batches back to back from byte 0 up to the next segment's first offset, zeros after
//! the last one — and against its index file: the batch positions, `next_offset`,
//! `end_pos`, the last batch and the digest of the record bytes ([`SegCheck`], sans I/O).
//!
//! Damage is logged (ERROR, naming shard, segment, byte and offsets), counted once
//! (`corelog_scrub_damage_total`), shown while known (`corelog_scrub_damaged`, `/health`
//! says `scrub=damaged`) and never served: a read of a damaged batch fails, since every
//! record's CRC is checked as it is decoded (`Log::read`, `Log::read_offsets`) and a
//! batch header that is not the one the log's index expects is refused (`Log::fetch`).
//! Damage is not repaired here: the operator rebuilds the shard from the peer
//! (docs/operations.md §7.3).
//!
//! A segment that retention deletes, or that a follower's cut changes, while it is being
//! read is skipped, never reported: it is reported only when, after its last read, the
//! log still holds it as a sealed segment and its file is the one that was read
//! (same inode, same modification and change times).
//!
//! Files: `segcheck.rs` checks one segment's bytes (sans I/O), `verdict.rs` judges the
//! bytes at one batch position, `pacer.rs` holds reads to the rate, `task.rs` is the
//! per-shard loop that reads the segments, `read.rs` one Direct I/O read, `report.rs`
//! what is found and what becomes of it (log, metrics, `/health`).

use std::rc::Rc;
use std::time::Duration;

use crate::shard::Shard;

mod pacer;
mod read;
mod report;
mod segcheck;
mod task;
mod verdict;

#[cfg(test)]
mod testdata;

pub use self::pacer::Pacer;
pub use self::report::Damage;
pub use self::segcheck::SegCheck;
pub use self::task::run;

/// `--scrub-mib-per-s` by default, for the whole node: 12 MiB/s re-reads 1 TB in a day
/// (12 × 2^20 B × 86,400 s ≈ 1.09 × 10^12 B), a small share of an NVMe device's reads.
pub const DEFAULT_MIB_PER_S: f64 = 12.0;
/// Bytes one read takes at most (one batch is at most 1 MiB + a block: two reads).
pub const CHUNK: usize = 1024 * 1024;
/// How long after the node is ready the first read comes: the start's own reads and the
/// first clients go first.
pub const START_AFTER: Duration = Duration::from_secs(1);

/// Bytes per second one shard reads, from the node's rate and shard count; None: off.
pub fn shard_bytes_per_s(node_mib_per_s: f64, shard_count: u16) -> Option<u64> {
    if node_mib_per_s.is_nan() || node_mib_per_s <= 0.0 || shard_count == 0 {
        return None;
    }
    let b = node_mib_per_s * (1u64 << 20) as f64 / shard_count as f64;
    assert!(b > 0.0, "scrub: {node_mib_per_s} MiB/s over {shard_count} shards gives no rate");
    Some((b as u64).max(1))
}

/// Spawns the shard's scrubber unless the rate is 0.
pub fn spawn(shard: &Rc<Shard>, node_mib_per_s: f64, shard_count: u16) {
    if let Some(rate) = shard_bytes_per_s(node_mib_per_s, shard_count) {
        glommio::spawn_local(run(shard.clone(), rate)).detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_rate_covers_a_terabyte_a_day_shared_by_the_shards() {
        let node = shard_bytes_per_s(DEFAULT_MIB_PER_S, 1).unwrap();
        assert!(node as u128 * 86_400 >= 1_000_000_000_000, "{node} B/s");
        assert_eq!(shard_bytes_per_s(12.0, 4), Some(3 << 20));
        assert_eq!(shard_bytes_per_s(0.0, 4), None, "0 turns it off");
        assert_eq!(shard_bytes_per_s(f64::NAN, 4), None);
        assert_eq!(shard_bytes_per_s(1e-9, 4), Some(1), "never a rate of 0");
    }
}
