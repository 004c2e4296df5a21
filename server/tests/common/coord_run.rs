//! How the coordinator-mode tests begin (a pair in sync under load) and a check they
//! share on the history: no acknowledgement while the leader cannot hold a lease.

use std::time::Duration;

use super::coord::{cluster, run_for, Cluster};
use corelog_history::{Background, History, OpResult};

impl Cluster {
    /// Waits for a pair in sync, starts the load tagged `tag` and returns (the leader's
    /// index, the load) once `acks` appends are acknowledged (`what` names the phase).
    pub fn paired_under_load(&self, tag: &str, acks: u64, what: &str) -> (usize, Background) {
        let leader = self.wait_pair(Duration::from_secs(60));
        let load = self.load(tag);
        run_for(&load, Duration::from_secs(1), acks, what);
        (leader, load)
    }

    /// Restarts node `follower` and waits (bounded) until it is back in the in-sync set
    /// of `leader`, which is no longer degraded and still leads.
    pub fn rejoin(&mut self, leader: usize, follower: usize) {
        self.nodes[follower].spawn();
        self.wait_metric(leader, "corelog_insync_replicas", Duration::from_secs(60), |v| v == 2.0);
        self.wait_metric(leader, "corelog_degraded", Duration::from_secs(5), |v| v == 0.0);
        assert_eq!(self.wait_pair(Duration::from_secs(10)), leader, "the leader changed");
    }
}

/// `cluster(test)` (None where it cannot run), paired and under load
/// (`paired_under_load`), with its leader's and its follower's index and the load.
pub fn cluster_under_load(test: &str, tag: &str, acks: u64, what: &str) -> Option<(Cluster, usize, usize, Background)> {
    let c = cluster(test)?;
    let (leader, load) = c.paired_under_load(tag, acks, what);
    Some((c, leader, 1 - leader, load))
}

/// Asserts that no append invoked more than a lease (1 s) after `fault_us` completed
/// before `end_us`: the leader acknowledges only until its last renewal plus the TTL.
/// `fault` names the fault in the message.
pub fn assert_no_ack_past_the_lease(h: &History, fault_us: u64, end_us: u64, fault: &str) {
    let late: Vec<_> = h
        .ops
        .iter()
        .filter(|o| matches!(o.result, OpResult::Ok(_)) && o.invoke_us > fault_us + 1_000_000 && o.done_us < end_us)
        .collect();
    assert!(
        late.is_empty(),
        "{} acks past the lease with etcd {fault}, e.g.:\n{}",
        late.len(),
        h.around(late[0].invoke_us, 5)
    );
}
