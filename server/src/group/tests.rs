use std::collections::BTreeMap;

use super::assign::assign;
use super::*;

fn cfg() -> Config {
    Config { shard: 1, shard_count: 2, k: 4, session_ms: 1_000, settle_ms: 100 }
}

/// A group and every event it returned, in order (its stream).
struct Logged {
    g: Group,
    log: Vec<Event>,
}

impl Logged {
    fn new() -> Logged {
        Logged { g: Group::new(cfg()), log: Vec::new() }
    }
    fn tick(&mut self, now: u64) -> Option<u64> {
        let e = self.g.tick(now)?;
        self.log.push(e);
        Some(self.g.gen())
    }
    fn commit(&mut self, m: &str, gen: u64, next: u64, now: u64) -> Result<(), Refusal> {
        let e = self.g.commit(m, gen, next, now)?;
        self.log.push(e);
        Ok(())
    }
    /// Where `member`'s delivery of `bucket` starts (None: from the log's start).
    fn from(&self, member: &str, bucket: Bucket) -> Option<u64> {
        let mine = self.g.assigned(member);
        mine.iter().find(|(b, _)| *b == bucket).expect("the member owns the bucket").1
    }
    /// The stream folded into a fresh group (what a node taking over sees), through the
    /// bytes, from the start and from the last `State`: the state must be the same.
    fn refold(&self) -> Group {
        let last = self.log.iter().rposition(|e| matches!(e, Event::State { .. })).unwrap_or(0);
        let mut tail = Group::new(cfg());
        for e in &self.log[last..] {
            tail.apply(&Event::decode(&e.encode()).unwrap()).unwrap();
        }
        let mut fresh = Group::new(cfg());
        for e in &self.log {
            fresh.apply(&Event::decode(&e.encode()).unwrap()).unwrap();
        }
        assert_eq!((tail.gen, &tail.owners, &tail.next), (fresh.gen, &fresh.owners, &fresh.next));
        assert_eq!(fresh.gen, self.g.gen);
        assert_eq!(fresh.owners, self.g.owners);
        assert_eq!(fresh.next, self.g.next);
        fresh
    }
}

#[test]
fn buckets_live_on_the_shard_of_their_streams() {
    for i in 0..2_000u32 {
        let name = format!("orders-{i}");
        for (n, k) in [(1, 1), (2, 4), (3, 7), (8, 64)] {
            let b = bucket_of(name.as_bytes(), n, k);
            assert!(b < n * k);
            assert_eq!(b % n, corelog_client::codec::stream_shard(name.as_bytes(), n), "{name} n={n} k={k}");
        }
    }
    assert_eq!(Group::new(cfg()).buckets(), &[1, 3, 5, 7]);
}

#[test]
fn events_round_trip_and_damage_is_an_error() {
    let events = [
        Event::State {
            gen: 7,
            k: 4,
            prefix: "order-".into(),
            owners: vec![("a".into(), vec![1, 5]), ("b".into(), vec![3])],
            next: vec![(5, 9)],
        },
        Event::State { gen: 8, k: 64, prefix: String::new(), owners: vec![], next: vec![] },
        Event::Commit { gen: 8, member: "ü-member".into(), next: u64::MAX },
    ];
    for e in &events {
        let bytes = e.encode();
        assert_eq!(&Event::decode(&bytes).unwrap(), e);
        for cut in 0..bytes.len() {
            assert!(Event::decode(&bytes[..cut]).is_err(), "{e:?} cut at {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(Event::decode(&long).unwrap_err().contains("after a group event"));
    }
    assert!(Event::decode(&[9]).unwrap_err().contains("unknown"));
    // A member id of length 0, and one that is not UTF-8.
    assert!(Event::decode(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap_err().contains("member id"));
    let mut bad = Event::Commit { gen: 1, member: "ab".into(), next: 0 }.encode();
    bad[10] = 0xff;
    assert!(Event::decode(&bad).unwrap_err().contains("UTF-8"));
}

#[test]
fn assignment_is_balanced_and_sticky() {
    let buckets: Vec<Bucket> = (0..8).collect();
    let names = |n: usize| (0..n).map(|i| format!("m{i}")).collect::<Vec<_>>();
    assert!(assign(&buckets, &[], &BTreeMap::new()).is_empty());
    let mut prev = BTreeMap::new();
    for n in 1..=9 {
        let owners = assign(&buckets, &names(n), &prev);
        let now: BTreeMap<Bucket, String> =
            owners.iter().flat_map(|(m, bs)| bs.iter().map(move |b| (*b, m.clone()))).collect();
        if n > 1 {
            // A member joined: only buckets that must go to it (or even out) move.
            let moved = now.iter().filter(|(b, m)| prev.get(b) != Some(*m)).count();
            let fair = buckets.len() / n;
            assert!(moved <= fair.max(1) + 1, "{n} members: {moved} buckets moved");
        }
        prev = now;
    }
    // Members leave: the survivors keep what they had.
    let three = assign(&buckets, &names(3), &BTreeMap::new());
    let prev: BTreeMap<Bucket, String> =
        three.iter().flat_map(|(m, bs)| bs.iter().map(move |b| (*b, m.clone()))).collect();
    let two = assign(&buckets, &names(2), &prev);
    for (m, bs) in &two {
        let had = &three.iter().find(|(x, _)| x == m).unwrap().1;
        assert!(had.iter().all(|b| bs.contains(b)), "{m} lost a bucket: had {had:?}, has {bs:?}");
    }
}

#[test]
fn a_generation_opens_after_the_settle_window_and_fences_the_old_one() {
    let mut l = Logged::new();
    l.g.join("a", 0).unwrap();
    l.g.join("b", 50).unwrap();
    assert_eq!(l.tick(99), None, "inside the settle window");
    assert_eq!(l.tick(100), Some(1), "both joins open one generation");
    let a = l.g.assigned("a");
    let b = l.g.assigned("b");
    assert_eq!((a.len(), b.len()), (2, 2));
    let (ba, bb) = (a[0].0, b[0].0);
    assert_eq!(l.from("a", ba), None, "nothing committed: from the log's start");
    l.commit("a", 1, 500, 120).unwrap();
    assert_eq!(l.from("a", ba), Some(500));
    assert_eq!(l.from("b", bb), None, "a's commit covers a's buckets only");
    l.commit("a", 1, 300, 125).unwrap();
    assert_eq!(l.from("a", ba), Some(500), "a commit never moves a bucket back");
    assert_eq!(l.commit("a", 0, 9, 130), Err(Refusal::Stale { current: 1 }));
    assert_eq!(l.commit("c", 1, 9, 130), Err(Refusal::NotMember));
    // b leaves: a new generation at once; b's old commits are refused.
    l.g.leave("b", 200);
    assert_eq!(l.tick(200), Some(2));
    assert_eq!(l.g.assigned("a").len(), 4);
    assert_eq!(l.commit("b", 1, 9, 210), Err(Refusal::NotMember));
    assert_eq!(l.commit("a", 1, 600, 210), Err(Refusal::Stale { current: 2 }));
    assert_eq!(l.g.heartbeat("a", 1, 210), Err(Refusal::Stale { current: 2 }));
    // The committed position of a bucket survives the move of its owner.
    assert_eq!((l.from("a", ba), l.from("a", bb)), (Some(500), None));
    l.commit("a", 2, 700, 220).unwrap();
    assert_eq!((l.from("a", ba), l.from("a", bb)), (Some(700), Some(700)));
    l.refold();
}

#[test]
fn a_silent_member_times_out_and_a_take_over_forgets_sessions() {
    let mut l = Logged::new();
    l.g.join("a", 0).unwrap();
    l.g.join("b", 0).unwrap();
    l.tick(100).unwrap();
    assert_eq!(l.g.next_deadline(), Some(1_000));
    l.g.heartbeat("a", 1, 900).unwrap();
    assert_eq!(l.tick(999), None);
    assert_eq!(l.tick(1_000), Some(2), "b sent nothing for a session");
    assert_eq!(l.g.members().collect::<Vec<_>>(), ["a"]);
    let b = l.g.assigned("a")[0].0;
    l.commit("a", 2, 77, 1_100).unwrap();
    let mut taken = l.refold();
    taken.resume();
    assert_eq!(taken.commit("a", 2, 78, 1_200), Err(Refusal::NotMember));
    taken.join("a", 1_200).unwrap();
    let e = taken.tick(1_300).expect("a rejoin opens a generation");
    assert!(matches!(e, Event::State { gen: 3, .. }));
    let from = taken.assigned("a").into_iter().find(|(x, _)| *x == b).unwrap().1;
    assert_eq!(from, Some(77), "the commit survived the take-over");
}

#[test]
fn a_fold_refuses_what_no_group_could_have_written() {
    let mut g = Group::new(cfg());
    let state =
        |gen, owners: Vec<(String, Vec<Bucket>)>| Event::State { gen, k: 4, prefix: "p".into(), owners, next: vec![] };
    let wrong_k = Event::State { gen: 1, k: 5, prefix: String::new(), owners: vec![], next: vec![] };
    assert!(g.apply(&wrong_k).unwrap_err().contains("5 buckets"));
    g.apply(&state(2, vec![("a".into(), vec![1])])).unwrap();
    let back = g.apply(&state(1, vec![])).unwrap_err();
    assert!(back.contains("generation 1 after 2"), "{back}");
    let other = g.apply(&state(2, vec![])).unwrap_err();
    assert!(other.contains("other owners"), "{other}");
    g.apply(&state(2, vec![("a".into(), vec![1])])).expect("a snapshot of the same generation");
    let twice = state(3, vec![("a".into(), vec![1]), ("b".into(), vec![1])]);
    assert!(g.apply(&twice).unwrap_err().contains("owned twice"));
    let foreign = state(3, vec![("a".into(), vec![0])]);
    assert!(g.apply(&foreign).unwrap_err().contains("not shard 1's"));
    let not_owner = Event::Commit { gen: 2, member: "b".into(), next: 5 };
    assert!(g.apply(&not_owner).unwrap_err().contains("owning nothing"));
    assert_eq!(g.gen(), 2, "a refused event changes nothing");
}

#[test]
fn full_and_bad_members_are_refused() {
    let mut g = Group::new(cfg());
    for i in 0..MAX_MEMBERS {
        g.join(&format!("m{i}"), 0).unwrap();
    }
    assert_eq!(g.join("one-more", 0), Err(Refusal::Full));
    g.join("m0", 5).expect("a member renews even when full");
    assert!(matches!(g.join("", 0), Err(Refusal::Bad(_))));
    assert!(matches!(g.join(&"x".repeat(MAX_MEMBER_ID + 1), 0), Err(Refusal::Bad(_))));
    let e = g.tick(100).unwrap();
    // More members than buckets: four own one each, the rest wait.
    let Event::State { owners, .. } = &e else { panic!("{e:?}") };
    assert_eq!(owners.iter().filter(|(_, b)| !b.is_empty()).count(), 4);
    assert_eq!(Event::decode(&e.encode()).unwrap(), e);
}

/// Random joins, leaves, silences, heartbeats and commits against one group: after every
/// step no bucket has two owners, every bucket has a live owner once a generation opened
/// with members, only owners' commits are taken, and the stream folds to the same state.
#[test]
fn random_histories_keep_the_invariants() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut taken, mut refused, mut gens) = (0, 0, 0);
    for _ in 0..50 {
        let mut l = Logged::new();
        let mut now = 0;
        for _ in 0..400 {
            now += rnd(300);
            let m = format!("m{}", rnd(6));
            match rnd(6) {
                0 => l.g.join(&m, now).unwrap(),
                1 => l.g.leave(&m, now),
                2 => {
                    let _ = l.g.heartbeat(&m, l.g.gen(), now);
                }
                _ => {
                    let gen = l.g.gen() - rnd(2).min(l.g.gen());
                    let owns = l.g.owners.values().any(|o| *o == m);
                    let live = l.g.members.contains_key(&m);
                    let took = l.commit(&m, gen, now, now).is_ok();
                    assert_eq!(took, live && gen == l.g.gen() && owns);
                    if l.g.commits_since_state() >= SNAPSHOT_EVERY {
                        let snap = l.g.snapshot();
                        assert_eq!(l.g.commits_since_state(), 0, "a snapshot starts the count again");
                        l.log.push(snap);
                    }
                    if took {
                        taken += 1
                    } else {
                        refused += 1
                    }
                }
            }
            if l.tick(now).is_some() && !l.g.members.is_empty() {
                for b in l.g.buckets() {
                    let owner = &l.g.owners[b];
                    assert!(l.g.members.contains_key(owner), "bucket {b} owned by {owner}, not live");
                }
            }
        }
        gens += l.g.gen();
        l.refold();
    }
    assert!(taken > 100 && refused > 100 && gens > 500, "the histories exercised little: {taken} {refused} {gens}");
}
