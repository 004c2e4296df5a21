//! The cluster's term in etcd and the pure decisions taken on it (unit-tested here;
//! `coord::Coordinator` only performs them).
//!
//! Keys, under `/corelog/<cluster>/`:
//! - `term`: `epoch=E leader=ID isr=ID[,ID]`, changed only by transactions that compare
//!   its `mod_revision` (compare-and-swap): the epoch is the fencing token every batch
//!   carries; the in-sync set (ISR) names the nodes holding every acknowledged record.
//! - `leader`: `ID`, attached to the leader's etcd lease: it vanishes when the leader
//!   stops renewing (etcd leases are whole seconds, expired on a 500 ms sweep: 1–1.5 s).
//! - `alive`: `epoch=E leader=ID`, the leader's heartbeat, written every quarter of the
//!   lease by a transaction that holds only while the term is still the one the leader
//!   read: each beat extends the leader's lease to its send time + lease − margin, and a
//!   follower that has watched the key unchanged for a whole lease (see [`Watch`]) may
//!   take over with a transaction that holds only while the key is still unchanged. So
//!   a beat either lands before the take-over (and the follower's transaction fails) or
//!   not at all; the old leader's last beat was sent before the follower first saw it,
//!   so its lease ends before the follower's watch does. This is the sub-second lease
//!   etcd's own leases cannot give.
//!
//! Rules: only an ISR member may lead; every leader start takes a new, higher epoch; a
//! new leader taking over from another starts with the ISR = itself (the old leader
//! rejoins once it has caught up).

use std::time::{Duration, Instant};

use super::etcd::Kv;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub epoch: u32,
    pub leader: String,
    pub isr: Vec<String>,
}

impl Term {
    pub fn encode(&self) -> String {
        format!("epoch={} leader={} isr={}", self.epoch, self.leader, self.isr.join(","))
    }

    pub fn decode(s: &str) -> Result<Term, String> {
        let (mut epoch, mut leader, mut isr) = (None, None, None);
        for part in s.split_whitespace() {
            match part.split_once('=') {
                Some(("epoch", v)) => epoch = v.parse::<u32>().ok(),
                Some(("leader", v)) if !v.is_empty() => leader = Some(v.to_string()),
                Some(("isr", v)) => isr = Some(v.split(',').filter(|x| !x.is_empty()).map(String::from).collect()),
                _ => return Err(format!("bad term {s:?}")),
            }
        }
        match (epoch, leader, isr) {
            (Some(epoch), Some(leader), Some(isr)) => Ok(Term { epoch, leader, isr }),
            _ => Err(format!("incomplete term {s:?}")),
        }
    }

    pub fn in_sync(&self, id: &str) -> bool {
        self.isr.iter().any(|m| m == id)
    }
}

/// The leader's heartbeat (key `alive`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alive {
    pub epoch: u32,
    pub leader: String,
}

impl Alive {
    pub fn encode(&self) -> String {
        format!("epoch={} leader={}", self.epoch, self.leader)
    }

    pub fn decode(s: &str) -> Result<Alive, String> {
        let (mut epoch, mut leader) = (None, None);
        for part in s.split_whitespace() {
            match part.split_once('=') {
                Some(("epoch", v)) => epoch = v.parse::<u32>().ok(),
                Some(("leader", v)) if !v.is_empty() => leader = Some(v.to_string()),
                _ => return Err(format!("bad heartbeat {s:?}")),
            }
        }
        match (epoch, leader) {
            (Some(epoch), Some(leader)) => Ok(Alive { epoch, leader }),
            _ => Err(format!("incomplete heartbeat {s:?}")),
        }
    }
}

/// What etcd said, read in one range request.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// The term and its mod_revision.
    pub term: Option<(Term, i64)>,
    /// The leader key's holder and its mod_revision.
    pub leader: Option<(String, i64)>,
    /// The leader's heartbeat and its mod_revision.
    pub alive: Option<(Alive, i64)>,
}

impl View {
    pub fn from_kvs(prefix: &str, kvs: &[Kv]) -> Result<View, String> {
        let mut v = View::default();
        for kv in kvs {
            match kv.key.strip_prefix(prefix) {
                Some("term") => v.term = Some((Term::decode(&kv.value)?, kv.mod_revision)),
                Some("leader") => v.leader = Some((kv.value.clone(), kv.mod_revision)),
                Some("alive") => v.alive = Some((Alive::decode(&kv.value)?, kv.mod_revision)),
                _ => {}
            }
        }
        Ok(v)
    }

    /// The heartbeat's revision if it is the term leader's, in the term's epoch (a beat
    /// of an earlier term, or none yet, says nothing about the current leader).
    pub fn beat(&self) -> Option<i64> {
        let (t, _) = self.term.as_ref()?;
        let (a, rev) = self.alive.as_ref()?;
        (a.epoch == t.epoch && a.leader == t.leader).then_some(*rev)
    }
}

/// A follower's watch of the leader's heartbeat: the leader is silent once the beat's
/// revision has been seen unchanged for a whole lease of continuous watching. Reads
/// further apart than `gap` (etcd unreachable, this process stalled) restart the watch:
/// only time spent watching counts, so a follower that was itself cut off or frozen
/// never judges a leader on what it missed.
#[derive(Clone, Copy, Debug)]
pub struct Watch {
    lease: Duration,
    gap: Duration,
    /// The beat's revision and when this watch first saw it (or resumed watching).
    seen: Option<(i64, Instant)>,
    last_read: Option<Instant>,
}

impl Watch {
    pub fn new(lease: Duration, gap: Duration) -> Watch {
        Watch { lease, gap, seen: None, last_read: None }
    }

    /// Notes a successful read at `now` showing beat revision `beat`; whether the leader
    /// is silent (and the revision it has been silent at, for the take-over's guard).
    pub fn observe(&mut self, beat: Option<i64>, now: Instant) -> Option<i64> {
        let watching = self.last_read.is_some_and(|t| now.saturating_duration_since(t) <= self.gap);
        self.last_read = Some(now);
        let Some(rev) = beat else {
            self.seen = None;
            return None;
        };
        match self.seen {
            Some((r, _)) if r == rev && watching => {}
            _ => self.seen = Some((rev, now)),
        }
        let (r, since) = self.seen.expect("set above");
        (now.saturating_duration_since(since) >= self.lease).then_some(r)
    }

    /// How long the current beat has been watched unchanged (zero when none).
    pub fn unchanged_for(&self, now: Instant) -> Duration {
        self.seen.map_or(Duration::ZERO, |(_, since)| now.saturating_duration_since(since))
    }
}

/// What a starting node does.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    /// Write `term` (and the leader key) if the term is as observed, then lead.
    Lead(Term),
    /// Another node leads: follow it.
    Follow(Term),
    /// Nothing to do yet (said why); look again.
    Wait(String),
}

/// `disk_epoch`: the highest epoch on this node's disk (a new epoch exceeds both).
pub fn on_start(view: &View, me: &str, disk_epoch: u32) -> Start {
    let Some((term, _)) = &view.term else {
        // A new cluster: the first node to write the term leads, alone in the ISR.
        return Start::Lead(Term { epoch: disk_epoch + 1, leader: me.into(), isr: vec![me.into()] });
    };
    let next = term.epoch.max(disk_epoch) + 1;
    if term.leader == me {
        match &view.leader {
            Some((holder, _)) if holder != me => {
                Start::Wait(format!("term names us but {holder} holds the leader key"))
            }
            // Our own restart: a new epoch, the ISR unchanged.
            _ => Start::Lead(Term { epoch: next, leader: me.into(), isr: term.isr.clone() }),
        }
    } else {
        Start::Follow(term.clone())
    }
}

/// A follower's take-over: when the leader key is gone (etcd lease expired), or when the
/// leader is known lost (`leader_lost`: its replication port refuses connections after
/// the link broke, or its heartbeat has been silent for a whole lease, see [`Watch`]).
/// Only an ISR member may take over. Safe without waiting for the old lease: an old
/// leader acknowledges only with our fsync or after removing us from the ISR by a
/// transaction on the term this one replaces.
pub fn take_over(view: &View, me: &str, disk_epoch: u32, leader_lost: bool) -> Result<Term, String> {
    let Some((term, _)) = &view.term else { return Err("no term".into()) };
    if term.leader == me {
        return Err("the term already names us".into());
    }
    if view.leader.is_some() && !leader_lost {
        return Err(format!("leader {} still holds its lease", term.leader));
    }
    if !term.in_sync(me) {
        return Err(format!(
            "this node is not in the in-sync set {:?} of epoch {}: it may lack acknowledged writes, so it does not take over (last resort: docs/operations.md, unclean promotion)",
            term.isr, term.epoch
        ));
    }
    Ok(Term { epoch: term.epoch.max(disk_epoch) + 1, leader: me.into(), isr: vec![me.into()] })
}

/// The leader checks the term is still its own.
pub fn still_leading(view: &View, me: &str, epoch: u32) -> Result<(), String> {
    match &view.term {
        Some((t, _)) if t.leader == me && t.epoch == epoch => Ok(()),
        Some((t, _)) => Err(format!("the term is now epoch {} led by {}", t.epoch, t.leader)),
        None => Err("the term vanished from etcd".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(epoch: u32, leader: &str, isr: &[&str]) -> Term {
        Term { epoch, leader: leader.into(), isr: isr.iter().map(|s| s.to_string()).collect() }
    }

    fn view(term: Option<Term>, leader: Option<&str>) -> View {
        View { term: term.map(|t| (t, 7)), leader: leader.map(|l| (l.to_string(), 8)), alive: None }
    }

    #[test]
    fn heartbeat_round_trips_and_counts_only_in_the_term_of_its_leader() {
        let a = Alive { epoch: 5, leader: "a".into() };
        assert_eq!(Alive::decode(&a.encode()).unwrap(), a);
        assert!(Alive::decode("epoch=5").is_err() && Alive::decode("x=1").is_err());
        let mut v = view(Some(t(5, "a", &["a", "b"])), Some("a"));
        assert_eq!(v.beat(), None, "no heartbeat yet");
        v.alive = Some((a, 11));
        assert_eq!(v.beat(), Some(11));
        v.alive = Some((Alive { epoch: 4, leader: "a".into() }, 12));
        assert_eq!(v.beat(), None, "a beat of an older term");
        v.alive = Some((Alive { epoch: 5, leader: "b".into() }, 13));
        assert_eq!(v.beat(), None, "another node's beat");
    }

    #[test]
    fn a_leader_is_silent_after_a_whole_lease_of_continuous_watching() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut w = Watch::new(ms(400), ms(150));
        let at = |w: &mut Watch, t: u64, rev: Option<i64>| w.observe(rev, t0 + ms(t));
        assert_eq!(at(&mut w, 0, Some(7)), None);
        assert_eq!(at(&mut w, 100, Some(7)), None);
        assert_eq!(at(&mut w, 200, Some(8)), None, "a new beat restarts the count");
        assert_eq!(at(&mut w, 300, Some(8)), None);
        assert_eq!(at(&mut w, 450, Some(8)), None);
        assert_eq!(at(&mut w, 550, Some(8)), None, "399 ms");
        assert_eq!(at(&mut w, 600, Some(8)), Some(8), "400 ms unchanged");
        // A gap in watching (reads failed, or this process stalled) restarts the count.
        let mut w = Watch::new(ms(400), ms(150));
        assert_eq!(at(&mut w, 0, Some(7)), None);
        assert_eq!(at(&mut w, 500, Some(7)), None, "not watched in between");
        assert_eq!(at(&mut w, 650, Some(7)), None);
        assert_eq!(at(&mut w, 800, Some(7)), None);
        assert_eq!(at(&mut w, 900, Some(7)), Some(7));
        assert_eq!(w.unchanged_for(t0 + ms(900)), ms(400));
        // No beat of the current term: nothing to judge.
        assert_eq!(at(&mut w, 950, None), None);
        assert_eq!(w.unchanged_for(t0 + ms(950)), Duration::ZERO);
    }

    #[test]
    fn term_round_trips_and_rejects_garbage() {
        let x = t(5, "a", &["a", "b"]);
        assert_eq!(Term::decode(&x.encode()).unwrap(), x);
        assert_eq!(Term::decode("epoch=2 leader=a isr=").unwrap().isr, Vec::<String>::new());
        assert!(Term::decode("epoch=2 leader=a").is_err());
        assert!(Term::decode("epoch=x leader=a isr=a").is_err());
        assert!(Term::decode("hello").is_err());
    }

    #[test]
    fn first_node_bootstraps_alone_above_its_disk() {
        assert_eq!(on_start(&View::default(), "a", 4), Start::Lead(t(5, "a", &["a"])));
    }

    #[test]
    fn a_restarting_leader_takes_a_new_epoch_and_keeps_the_isr() {
        let v = view(Some(t(5, "a", &["a", "b"])), Some("a"));
        assert_eq!(on_start(&v, "a", 3), Start::Lead(t(6, "a", &["a", "b"])));
        assert_eq!(on_start(&v, "a", 9), Start::Lead(t(10, "a", &["a", "b"])));
        assert_eq!(on_start(&v, "b", 5), Start::Follow(t(5, "a", &["a", "b"])));
    }

    #[test]
    fn only_an_in_sync_follower_takes_over_and_only_when_the_leader_is_gone() {
        let live = view(Some(t(5, "a", &["a", "b"])), Some("a"));
        assert!(take_over(&live, "b", 5, false).is_err(), "lease still held");
        assert_eq!(take_over(&live, "b", 5, true).unwrap(), t(6, "b", &["b"]));
        let gone = view(Some(t(5, "a", &["a", "b"])), None);
        assert_eq!(take_over(&gone, "b", 5, false).unwrap(), t(6, "b", &["b"]));
        let degraded = view(Some(t(5, "a", &["a"])), None);
        assert!(take_over(&degraded, "b", 5, true).unwrap_err().contains("not in the in-sync set"));
        assert!(take_over(&gone, "a", 5, true).is_err(), "the term names us already");
    }

    #[test]
    fn a_leader_notices_a_new_term() {
        let v = view(Some(t(6, "b", &["b"])), Some("b"));
        assert!(still_leading(&v, "a", 5).is_err());
        assert!(still_leading(&view(Some(t(5, "a", &["a"])), Some("a")), "a", 5).is_ok());
        assert!(still_leading(&View::default(), "a", 5).is_err());
    }
}
