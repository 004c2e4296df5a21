//! The handshake's decisions, pure (no I/O, no clock): shared by the leader
//! (`leader.rs`), the follower (`follower.rs`), the log's epoch index (`wal/log/`) and
//! the exhaustive model in `model.rs`, so the model checks the code that runs.
//! docs/protocol.md §8 steps 5, 6 and 8.

pub use crate::wal::history::History;

/// Step 5, on the leader: `(common_epoch, truncate_to)` for a follower whose log ends at
/// `follower_next` with its last record in `follower_last_epoch` (Kafka's leader-epoch
/// rule: the follower keeps nothing past the end of the last epoch both have seen).
pub fn welcome(leader: &History, follower_next: u64, follower_last_epoch: u32) -> (u32, u64) {
    let common_epoch = leader.epoch_at_or_below(follower_last_epoch);
    let truncate_to = follower_next.min(leader.end_of_epoch(common_epoch));
    debug_assert!(truncate_to <= leader.end && truncate_to <= follower_next);
    (common_epoch, truncate_to)
}

/// Step 6, on the follower: the offset its log is cut to (its end when nothing is cut).
pub fn follower_cut(follower: &History, truncate_to: u64, common_epoch: u32) -> u64 {
    truncate_to.min(follower.end_of_epoch(common_epoch)).min(follower.end)
}

/// Step 8, on the leader: the follower's last record must be ours. `ours` is the
/// (epoch, CRC) of the leader's record at `follower_next - 1` (None when the leader holds
/// none there). A follower that holds no record reports (0, 0) — every real record has an
/// epoch of 1 or more: an empty log, or one that starts at `follower_next` (seeded there,
/// or trimmed to an empty segment); nothing of it can differ from ours.
pub fn same_last_record(follower_next: u64, follower_last: (u32, u32), ours: Option<(u32, u32)>) -> Result<(), String> {
    match (follower_next, ours) {
        (_, _) if follower_last == (0, 0) => Ok(()),
        (0, _) => Err("an empty follower log reports a last record".into()),
        (_, Some(o)) if o == follower_last => Ok(()),
        (n, Some(o)) => Err(format!(
            "record {} differs: follower epoch {} crc {:08x}, leader epoch {} crc {:08x}",
            n - 1,
            follower_last.0,
            follower_last.1,
            o.0,
            o.1
        )),
        (n, None) => Err(format!("record {} is not in the leader's log", n - 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welcome_cuts_a_follower_suffix_of_an_epoch_the_leader_left() {
        // Leader: epoch 1 at 0..100, epoch 2 from 100..120. Follower: epoch 1 at 0..105.
        let l = History { epochs: &[(1, 0), (2, 100)], end: 120 };
        let f = History { epochs: &[(1, 0)], end: 105 };
        let (common, to) = welcome(&l, f.end, f.last_epoch());
        assert_eq!((common, to), (1, 100));
        assert_eq!(follower_cut(&f, to, common), 100);
        // A follower that is simply behind keeps everything.
        let f = History { epochs: &[(1, 0), (2, 100)], end: 110 };
        let (common, to) = welcome(&l, f.end, f.last_epoch());
        assert_eq!((common, to, follower_cut(&f, to, common)), (2, 110, 110));
        // A follower with an epoch the leader never saw (3) is cut to the end of epoch 2
        // in its own log.
        let l = History { epochs: &[(1, 0), (4, 50)], end: 60 };
        let f = History { epochs: &[(1, 0), (3, 40)], end: 45 };
        let (common, to) = welcome(&l, f.end, f.last_epoch());
        assert_eq!((common, to), (1, 45));
        assert_eq!(follower_cut(&f, to, common), 40);
    }

    #[test]
    fn last_record_check() {
        assert!(same_last_record(0, (0, 0), None).is_ok());
        assert!(same_last_record(9, (0, 0), None).is_ok(), "a follower seeded at 9 holds no record");
        assert!(same_last_record(9, (0, 0), Some((1, 2))).is_ok(), "a follower trimmed to 9 holds none");
        assert!(same_last_record(0, (1, 2), None).is_err());
        assert!(same_last_record(5, (1, 2), Some((1, 2))).is_ok());
        assert!(same_last_record(5, (1, 2), Some((1, 3))).unwrap_err().contains("record 4 differs"));
        assert!(same_last_record(5, (1, 2), None).is_err());
    }
}
