//! A static leader + follower pair: start, catch-up wait, log comparison.

use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

pub struct Pair {
    pub leader: Node,
    pub follower: Node,
}

pub fn pair(dir: &TempDir, certs: Option<&Path>, extra: &[&str]) -> Pair {
    let (lp, fp) = (ports(), ports());
    let ldata = dir.path().join("leader");
    let fdata = dir.path().join("follower");
    let largs = Node::args(Mode::Leader { follower_repl: fp.repl }, &ldata, lp, certs, "server", extra);
    let fargs = Node::args(Mode::Follower { leader_client: lp.client }, &fdata, fp, certs, "follower", extra);
    Pair { leader: Node::new("leader", ldata, lp, largs), follower: Node::new("follower", fdata, fp, fargs) }
}

/// Waits (bounded) until the follower's committed offsets match the leader's.
pub fn wait_caught_up(p: &Pair, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let l = p.leader.metric_sum("corelog_log_end_offset");
        let lc = p.leader.metric_sum("corelog_committed_offset");
        let f = p.follower.metric_sum("corelog_log_end_offset");
        if l == f && l == lc && l > 0.0 {
            return;
        }
        assert!(Instant::now() < deadline, "follower not caught up: leader {l}, follower {f}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn assert_same_logs(a: &Path, b: &Path) -> Vec<(u64, String)> {
    let (ca, oa) = inspect(a);
    let (cb, ob) = inspect(b);
    assert_eq!((ca, cb), (0, 0), "inspect:\n{oa}\n{ob}");
    let (sa, sb) = (inspect_summary(&oa), inspect_summary(&ob));
    assert_eq!(sa, sb, "logs differ:\n{oa}\n{ob}");
    sa
}

pub fn wait_log(n: &Node, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !n.log_text().contains(needle) {
        assert!(Instant::now() < deadline, "{} never logged {needle:?}:\n{}", n.name, n.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The roles swapped on the data dirs of a stopped pair: `admin promote` of the follower's
/// data dir, which then leads on the follower's ports; the old leader's data dir follows
/// it on the old leader's ports. Neither is started.
pub fn promoted(p: &Pair, extra: &[&str]) -> Pair {
    let (old, new) = (p.leader.ports, p.follower.ports);
    promote(&p.follower.data, None);
    let largs = Node::args(Mode::Leader { follower_repl: old.repl }, &p.follower.data, new, None, "", extra);
    let fargs = Node::args(Mode::Follower { leader_client: new.client }, &p.leader.data, old, None, "", extra);
    Pair {
        leader: Node::new("promoted-leader", p.follower.data.clone(), new, largs),
        follower: Node::new("old-leader-as-follower", p.leader.data.clone(), old, fargs),
    }
}
