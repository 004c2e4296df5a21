//! Network partitions in coordinator mode: etcd and the two nodes each in its own network
//! namespace (`common::netns`), the test process in the root namespace as the client
//! host, a veth link between every two hosts. A cut sets one end of a link down for 5 s
//! (many leases) under a closed-loop load of 100 connections, then heals it:
//!
//! - (a) the leader cut from everything: the follower takes over, writes resume on it
//!   while the old leader is still cut off, and the old leader rejoins as follower;
//! - (b) leader and follower cut from each other: the leader drops the follower from the
//!   in-sync set and acknowledges alone; the follower (still seeing the leader's lease)
//!   stays follower, so exactly one side acknowledges;
//! - (c) the follower cut from etcd: nothing changes, the leader keeps acknowledging on
//!   both copies;
//! - (d) etcd cut from both nodes: no acknowledgement after the leader's lease can have
//!   ended; writes resume after healing.
//!
//! After healing, the pair must again be one leader with both in sync, the other node's
//! log must equal the leader's, and the recorded history must pass the checks of
//! `common::coord::verify` (read-back, epoch order, Porcupine). Timings are printed.
//! Needs root (`ip netns`) and etcd; skipped otherwise (fails under CORELOG_NO_SKIP=1).

mod common;

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::coord::{epoch, health, netns_cluster, run_for, Cluster, HOSTS};
use common::coord_run::assert_no_ack_past_the_lease;
use corelog_history::{Background, History, Logs, OpResult, Report};

/// How long each cut lasts: many leases (the default is 400 ms), and more than the
/// leader key's etcd lease (1 s).
const CUT: Duration = Duration::from_secs(5);

/// One partition test at a time: each runs three servers and 100 connections.
static SERIAL: Mutex<()> = Mutex::new(());

/// Links between hosts, by name (`HOSTS`, `e`, `c`).
type Links = Vec<(&'static str, &'static str)>;

/// A cut in place: made on a cluster with both nodes in sync under a load acknowledged
/// for a while. Holds the serial lock.
struct Cut {
    _serial: MutexGuard<'static, ()>,
    c: Cluster,
    leader: usize,
    /// The leader's epoch before the cut.
    old: u32,
    load: Background,
    links: Links,
    /// When the cut began, and the load's clock once it was in place.
    t0: Instant,
    cut_us: u64,
}

/// Cuts the links `links(leader)` names; `None` where the test cannot run.
fn begin(test: &str, tag: &str, links: impl Fn(usize) -> Links) -> Option<Cut> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = netns_cluster(test, None)?;
    let (leader, load) = c.paired_under_load(tag, 200, "before the cut");
    let old = epoch(&health(&c.nodes[leader]));
    let links = links(leader);
    let t0 = Instant::now();
    let net = c.net.as_ref().expect("netns");
    for (a, b) in &links {
        net.cut(a, b);
    }
    let cut_us = load.now_us();
    Some(Cut { _serial, c, leader, old, load, links, t0, cut_us })
}

/// Heals each of `links`; returns the load's clock just before.
fn heal(c: &Cluster, load: &Background, links: &[(&str, &str)]) -> u64 {
    let healed_us = load.now_us();
    let net = c.net.as_ref().expect("netns");
    for (a, b) in links {
        net.heal(a, b);
    }
    healed_us
}

/// The checked history's window and counts, as the tests print them.
fn window(r: &Report) -> String {
    format!("window {} ms, {} ok, {} unknown", r.window.map_or(0, |w| w.len().as_millis()), r.ok, r.unknown)
}

/// The fault's duration: until `CUT` after `t0`, sampling both nodes' health every
/// 100 ms for `check` (a cut-off node's line is "").
fn hold(c: &Cluster, t0: Instant, check: impl Fn(&[String; 2])) {
    while t0.elapsed() < CUT {
        check(&[health(&c.nodes[0]), health(&c.nodes[1])]);
        std::thread::sleep(Duration::from_millis(100).min(CUT.saturating_sub(t0.elapsed())));
    }
}

/// After healing: one leader with both in sync again, in an epoch for which `epoch_ok`
/// holds (its index, and how long that took), more load, the history checked against
/// its log, the other node's log equal to it. Returns the history, the report and the
/// leader's log.
fn finish(c: &Cluster, load: Background, epoch_ok: impl Fn(u32) -> bool) -> (usize, Duration, History, Report, Logs) {
    let t = Instant::now();
    let leader = c.wait_pair_in(Duration::from_secs(60), epoch_ok);
    let paired = t.elapsed();
    run_for(&load, Duration::from_secs(1), 200, "after healing");
    let h = load.finish();
    let r = c.verify(leader, &h);
    c.wait_same_log(1 - leader, leader, Duration::from_secs(60));
    (leader, paired, h, r, c.read(leader))
}

/// Acknowledged appends invoked after `from_us` and completed before `to_us`, by epoch.
fn acks_by_epoch(h: &History, logs: &Logs, from_us: u64, to_us: u64) -> BTreeMap<u32, usize> {
    let mut n = BTreeMap::new();
    for o in h.ops.iter().filter(|o| o.invoke_us > from_us && o.done_us < to_us) {
        if let OpResult::Ok(p) = o.result {
            *n.entry(logs[&p.shard][p.offset as usize].epoch).or_insert(0) += 1;
        }
    }
    n
}

fn ms(us: u64) -> u64 {
    us / 1000
}

#[test]
fn a_leader_cut_from_everything_is_replaced_and_rejoins_as_follower() {
    let isolated = |l: usize| vec![(HOSTS[l], HOSTS[1 - l]), (HOSTS[l], "e"), (HOSTS[l], "c")];
    let Some(Cut { _serial, c, leader, old, load, links, t0, cut_us }) =
        begin("partition_leader_isolated", "a", isolated)
    else {
        return;
    };
    c.wait_health(Duration::from_secs(30), "the follower leading", |h| h[1 - leader].contains("role=leader"));
    let took_over = t0.elapsed();
    run_for(&load, Duration::ZERO, 200, "on the new leader while the old one is cut off");
    hold(&c, t0, |h| assert!(h[leader].is_empty(), "the cut-off leader answered the client: {h:?}"));
    let healed_us = heal(&c, &load, &links);
    let (now, paired, h, r, logs) = finish(&c, load, |e| e > old);
    assert_eq!(now, 1 - leader, "the old leader took the lead back");
    let during = acks_by_epoch(&h, &logs, cut_us, healed_us);
    assert!(during.keys().all(|&e| e > old), "acks in epoch {old} during the cut: {during:?}");
    let on_new: usize = during.values().sum();
    assert!(on_new > 0, "nothing acknowledged while the old leader was cut off");
    let text = c.nodes[leader].log_text();
    assert!(text.contains("re-executing") && text.contains("following"), "old leader:\n{}", c.logs());
    let first = h.ops.iter().filter(|o| o.invoke_us > cut_us && matches!(o.result, OpResult::Ok(_))).map(|o| o.done_us);
    eprintln!(
        "leader isolated: the follower led {} ms after the cut, first ack {} ms after it; {on_new} acks during the cut (epochs {during:?}); pair again {} ms after healing; {}",
        took_over.as_millis(),
        first.min().map_or(0, |t| ms(t - cut_us)),
        paired.as_millis(),
        window(&r)
    );
}

#[test]
fn b_leader_and_follower_cut_apart_only_the_leader_acknowledges_alone() {
    let split = |l: usize| vec![(HOSTS[l], HOSTS[1 - l])];
    let Some(Cut { _serial, c, leader, old, load, links, t0, cut_us }) = begin("partition_pair_split", "b", split)
    else {
        return;
    };
    let follower = 1 - leader;
    c.wait_metric(leader, "corelog_degraded", Duration::from_secs(15), |v| v == 1.0);
    c.wait_metric(leader, "corelog_insync_replicas", Duration::from_secs(1), |v| v == 1.0);
    let (degraded, degraded_us) = (t0.elapsed(), load.now_us());
    run_for(&load, Duration::ZERO, 200, "acknowledged by the leader alone");
    hold(&c, t0, |h| {
        assert!(h[follower].contains("role=follower"), "the cut-off follower changed role: {h:?}");
        assert!(h[leader].contains("role=leader") && epoch(&h[leader]) == old, "the leader changed: {h:?}");
    });
    let cut_log = c.nodes[leader].log_text();
    let healed_us = heal(&c, &load, &links);
    let (now, paired, h, r, logs) = finish(&c, load, |e| e == old);
    assert_eq!(now, leader, "the leader changed");
    let during = acks_by_epoch(&h, &logs, cut_us, healed_us);
    assert_eq!(during.keys().copied().collect::<Vec<_>>(), vec![old], "acks by epoch during the cut: {during:?}");
    let alone = acks_by_epoch(&h, &logs, degraded_us, healed_us)[&old];
    assert!(cut_log.contains("DEGRADED: follower"), "no DEGRADED line:\n{}", c.logs());
    // While cut off, a follower that confirms nothing is not tried back (each try holds
    // every ack for --isr-timeout-ms), however long its dead link takes to time out.
    assert!(
        !cut_log.contains("did not confirm every acknowledged record"),
        "tried to take the cut-off follower back:\n{}",
        c.logs()
    );
    assert!(!c.nodes[follower].log_text().contains("took over"), "the follower took over:\n{}", c.logs());
    eprintln!(
        "pair split: degraded {} ms after the cut; {alone} acks by the leader alone; back in sync {} ms after healing; {}",
        degraded.as_millis(),
        paired.as_millis(),
        window(&r)
    );
}

#[test]
fn c_a_follower_cut_from_etcd_changes_nothing() {
    let follower_from_etcd = |l: usize| vec![(HOSTS[1 - l], "e")];
    let Some(Cut { _serial, c, leader, old, load, links, t0, cut_us }) =
        begin("partition_follower_etcd", "c", follower_from_etcd)
    else {
        return;
    };
    let follower = 1 - leader;
    hold(&c, t0, |h| {
        let l = &h[leader];
        let ok = l.contains("role=leader") && l.contains("insync=2") && l.contains("degraded=0") && epoch(l) == old;
        assert!(ok && h[follower].contains("role=follower"), "the pair changed with the follower cut from etcd: {h:?}");
    });
    let healed_us = heal(&c, &load, &links);
    let (now, _, h, r, logs) = finish(&c, load, |e| e == old);
    assert_eq!(now, leader, "the leader changed");
    // Past the follower's own lease (1 s): acks go on, two copies, in the same epoch.
    let during = acks_by_epoch(&h, &logs, cut_us + 1_500_000, healed_us);
    assert_eq!(during.keys().copied().collect::<Vec<_>>(), vec![old], "acks by epoch during the cut: {during:?}");
    assert!(c.nodes[follower].log_text().contains("etcd unreachable"), "{}", c.logs());
    for n in &c.nodes {
        assert!(!n.log_text().contains("re-executing"), "{} changed role:\n{}", n.name, c.logs());
    }
    eprintln!(
        "follower cut from etcd: {} acks (both copies) in epoch {old} from 1.5 s after the cut to healing; {}",
        during[&old],
        window(&r)
    );
}

#[test]
fn d_with_etcd_cut_from_both_nodes_acks_stop_at_the_lease_end_and_resume_after() {
    let etcd_from_both = |_| vec![("e", HOSTS[0]), ("e", HOSTS[1])];
    let Some(Cut { _serial, c, leader, old, load, links, t0, cut_us }) =
        begin("partition_etcd_isolated", "d", etcd_from_both)
    else {
        return;
    };
    // Its /health says when the lease has lapsed (acknowledgements held).
    let lapsed = std::cell::Cell::new(false);
    hold(&c, t0, |h| lapsed.set(lapsed.get() || h[leader].contains("lease=lapsed")));
    assert!(lapsed.get(), "the leader's /health never showed lease=lapsed with etcd cut off");
    let healed_us = heal(&c, &load, &links);
    // Its lease expired: a new term.
    let (now, paired, h, r, logs) = finish(&c, load, |e| e > old);
    // Nothing invoked past the lease (renewed last before the cut) may complete before
    // etcd is back.
    assert_no_ack_past_the_lease(&h, cut_us, healed_us, "cut off");
    assert!(c.nodes[leader].log_text().contains("cannot renew the lease"), "{}", c.logs());
    assert!(h.oks_after(healed_us) > 0, "no append acknowledged after healing");
    let done = |o: &&corelog_history::Op| matches!(o.result, OpResult::Ok(_));
    let last = h.ops.iter().filter(done).map(|o| o.done_us).filter(|&t| t < healed_us).max().unwrap_or(0);
    let first = h.ops.iter().filter(done).map(|o| o.done_us).filter(|&t| t > healed_us).min().unwrap_or(0);
    let after = acks_by_epoch(&h, &logs, healed_us, u64::MAX);
    eprintln!(
        "etcd isolated: last ack {} ms after the cut; first ack {} ms after healing; {} leads (epoch {old} before, acks after by epoch {after:?}), pair again {} ms after healing; {}",
        ms(last.saturating_sub(cut_us)),
        ms(first.saturating_sub(healed_us)),
        c.nodes[now].name,
        paired.as_millis(),
        window(&r)
    );
}
