//! The open-file limit: raised to its hard limit at start, and how many descriptors the
//! process keeps for itself before the rest go to client connections.
//!
//! A stock Linux login shell or systemd service starts with a soft limit of 1,024 and a
//! much higher hard limit; a server that keeps the soft one serves a few hundred
//! connections at most. Raising the soft limit to the hard one needs no privilege.

/// Descriptors of the process outside its shards: stdio, the metrics listener and its
/// `MAX_HTTP_CONCURRENT` requests, the coordinator's etcd connections, the certificate
/// watcher, the log and control files opened briefly, and room for the runtime's own.
pub const PROCESS_FDS: usize = 64;

/// Descriptors of one executor: glommio's three io_uring rings and their eventfds.
pub const EXECUTOR_FDS: usize = 16;

/// Descriptors of one shard besides its segment files: the client listener, the
/// direct-port listener, the replication listener, the replication link (two while one
/// reconnects), the shard lock, the catch-up reader, the zero-ahead file and the
/// epoch/control files it rewrites, the checkpoint files a roll reads (two across a
/// rebase) and the scrubber's file; a burst past this comes out of `SEGMENT_GROWTH`.
pub const SHARD_FDS: usize = 16;

/// Segment files a shard may add after start before its reserve is used up: each
/// segment is one open file for as long as it is kept (256 MiB segments: 16 GiB of new
/// log per shard between two starts).
pub const SEGMENT_GROWTH: usize = 64;

/// Below this many client connections the start-up line is a WARN that says how to
/// raise the limit.
pub const FEW_CONNECTIONS: usize = 1_000;

/// The soft and hard RLIMIT_NOFILE after [`raise`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The soft limit the process was started with.
    pub was: u64,
    /// The soft limit now.
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft RLIMIT_NOFILE to the hard one (or to the kernel's `fs.nr_open` when
/// the hard one is unlimited). A failure leaves the limit as it was.
pub fn raise() -> Limit {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Limit { was: 1024, soft: 1024, hard: 1024 };
    }
    let was = r.rlim_cur;
    let target = if r.rlim_max == libc::RLIM_INFINITY { nr_open().unwrap_or(was) } else { r.rlim_max };
    if target > was {
        let want = libc::rlimit { rlim_cur: target, rlim_max: r.rlim_max };
        // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the
        // hard one is allowed to any process.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return Limit { was, soft: target, hard: r.rlim_max };
        }
    }
    Limit { was, soft: was, hard: r.rlim_max }
}

fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open").ok()?.trim().parse().ok()
}

/// Descriptors kept for the process itself: `executors` executors running `shards`
/// shards that hold `segments` segment files between them now.
pub fn reserve(executors: usize, shards: usize, segments: usize) -> usize {
    debug_assert!(executors <= shards.max(1), "{executors} executors for {shards} shards");
    PROCESS_FDS + executors * EXECUTOR_FDS + shards * (SHARD_FDS + SEGMENT_GROWTH) + segments
}

/// The default `--max-connections`: what the soft limit leaves after the reserve, at
/// least 1.
pub fn default_max_connections(limit: Limit, reserve: usize) -> usize {
    (limit.soft as usize).saturating_sub(reserve).max(1)
}

/// The start-up line about the connection cap `max` (`room` is what the limit leaves),
/// and whether it is a warning: a default cap under [`FEW_CONNECTIONS`], or an explicit
/// one above the room (connections past the room then fail at accept with EMFILE).
pub fn cap_line(max: usize, room: usize, limit: Limit, reserve: usize, explicit: bool) -> (String, bool) {
    let raised = if limit.soft > limit.was { format!(", raised from {}", limit.was) } else { String::new() };
    let base = format!(
        "at most {max} client connections in this process (--max-connections{}); open-file limit {} (hard {}{raised}), {reserve} kept for shards, segments and the process",
        if explicit { "" } else { ", default" },
        limit.soft,
        limit.hard,
    );
    let how = "raise the hard limit of open files (`ulimit -n 65536` in the shell that starts corelog, `LimitNOFILE=65536` in its systemd unit, or `nofile` in /etc/security/limits.conf)";
    if explicit && max > room {
        return (format!("{base}. The limit leaves room for {room}: accepts beyond that fail; {how}"), true);
    }
    if !explicit && max < FEW_CONNECTIONS {
        return (format!("{base}. That is few: {how}"), true);
    }
    (base, false)
}

/// Segment files (`*.log`) under the given shard directories now.
pub fn count_segments<'a>(dirs: impl IntoIterator<Item = &'a std::path::Path>) -> usize {
    dirs.into_iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|rd| rd.flatten())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stock_soft_limit_leaves_hundreds_of_connections_for_two_shards() {
        let l = Limit { was: 1024, soft: 1024, hard: 1024 };
        let r = reserve(2, 2, 4);
        let max = default_max_connections(l, r);
        assert!(max >= 500, "{max} connections under a 1,024 limit with 2 shards (reserve {r})");
        let (line, warn) = cap_line(max, max, l, r, false);
        assert!(warn && line.contains("LimitNOFILE"), "{line}");
    }

    #[test]
    fn a_large_default_or_an_explicit_cap_within_the_room_is_not_a_warning() {
        let l = Limit { was: 1024, soft: 20_000, hard: 20_000 };
        let room = default_max_connections(l, reserve(8, 8, 100));
        let (line, warn) = cap_line(room, room, l, reserve(8, 8, 100), false);
        assert!(!warn && line.contains("raised from 1024"), "{line}");
        assert!(!cap_line(10, room, l, 100, true).1);
        let (line, warn) = cap_line(room + 1, room, l, 100, true);
        assert!(warn && line.contains("fail"), "{line}");
    }

    #[test]
    fn shards_that_share_an_executor_share_its_rings() {
        // One executor per shard keeps what a shard always kept (rings with it).
        assert_eq!(reserve(8, 8, 0) - reserve(1, 1, 0), 7 * (EXECUTOR_FDS + SHARD_FDS + SEGMENT_GROWTH));
        assert_eq!(reserve(2, 16, 0), PROCESS_FDS + 2 * EXECUTOR_FDS + 16 * (SHARD_FDS + SEGMENT_GROWTH));
        assert!(reserve(2, 16, 0) < reserve(16, 16, 0));
    }

    #[test]
    fn the_cap_is_at_least_one() {
        let l = Limit { was: 64, soft: 64, hard: 64 };
        assert_eq!(default_max_connections(l, reserve(4, 4, 10)), 1);
    }
}
