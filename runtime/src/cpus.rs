//! The CPUs this process may run on, and which of them the k-th executor is pinned to.
//!
//! Executors are pinned (glommio `Placement::Fixed`) to the k-th CPU of the process's
//! affinity mask, not to CPU number k. A node started under `taskset -c 4-7`, or in a
//! container limited to a cpuset, pins its shards to CPUs 4–7: pinning to CPU k itself
//! silently escaped a `taskset` mask (so a leader and a follower split over one machine's
//! CPUs landed on the same ones) and, in a cpuset that lacks CPU k, failed to start.

/// The CPUs in the calling thread's affinity mask, ascending (at least one). Call it
/// before pinning the calling thread; a thread inherits its creator's mask.
pub fn allowed() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    let cpus: Vec<usize> = if rc == 0 {
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
    } else {
        Vec::new()
    };
    if cpus.is_empty() {
        // No mask to read (or more CPUs than a cpu_set_t holds): every CPU counts.
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        return (0..n).collect();
    }
    cpus
}

/// The CPU for executor `index`: the (index mod n)-th of `allowed`.
pub fn pick(allowed: &[usize], index: usize) -> usize {
    assert!(!allowed.is_empty(), "no CPU to pin to");
    allowed[index % allowed.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_wraps_over_the_allowed_cpus_in_order() {
        let cpus = [4, 5, 9];
        let picked: Vec<usize> = (0..7).map(|k| pick(&cpus, k)).collect();
        assert_eq!(picked, [4, 5, 9, 4, 5, 9, 4]);
    }

    #[test]
    fn allowed_follows_the_threads_affinity_mask() {
        let all = allowed();
        assert!(!all.is_empty());
        assert!(all.windows(2).all(|w| w[0] < w[1]), "ascending: {all:?}");
        // A thread whose mask is only the last allowed CPU sees just that one, and so
        // does a thread it starts (the mask is inherited).
        let last = *all.last().unwrap();
        let (own, child) = std::thread::spawn(move || {
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            unsafe { libc::CPU_SET(last, &mut set) };
            let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
            assert_eq!(rc, 0, "sched_setaffinity: {}", std::io::Error::last_os_error());
            (allowed(), std::thread::spawn(allowed).join().unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(own, [last]);
        assert_eq!(child, [last]);
    }
}
