//! Consumer groups through the Rust consumer (`corelog_client::group::Consumer`) and
//! `corelog tail --group` against a real pair: members share a prefix's events, commit,
//! and whoever takes over a bucket starts at its committed position.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use corelog_client::group::{CommitOutcome, Consumer, ConsumerOptions, Delivery};
use corelog_client::{Client, ClientConfig, Expect};

const WITHIN: Duration = Duration::from_secs(30);

/// Appends events `from..to`: event k to stream `acct-<k % 12>` (the group's prefix),
/// and every fifth instead to `other-<k % 3>` (not the group's). Returns the payloads of
/// the group's.
async fn append(c: &Client, from: u64, to: u64) -> BTreeSet<String> {
    let mut ours = BTreeSet::new();
    for k in from..to {
        let payload = format!("k{k}");
        let name = if k % 5 == 0 { format!("other-{}", k % 3) } else { format!("acct-{}", k % 12) };
        c.append_to(&name, Expect::Any, payload.as_bytes()).await.unwrap();
        if name.starts_with("acct-") {
            ours.insert(payload);
        }
    }
    ours
}

/// What a member got: the payloads, and per stream the versions in delivery order.
#[derive(Default)]
struct Got {
    payloads: Vec<String>,
    versions: BTreeMap<String, Vec<u64>>,
}

impl Got {
    fn distinct(&self) -> BTreeSet<String> {
        self.payloads.iter().cloned().collect()
    }
}

/// Takes the next event of `c` into `got` (bounded wait).
async fn take(c: &mut Consumer, got: &mut Got) {
    let e = tokio::time::timeout(WITHIN, c.next()).await.expect("an event in time").unwrap().expect("open");
    let s = e.record.stream.expect("group events carry their stream");
    assert!(s.name.starts_with("acct-"), "{} is not under the group's prefix", s.name);
    got.versions.entry(s.name).or_default().push(s.version);
    got.payloads.push(String::from_utf8(e.record.payload).unwrap());
}

/// Takes events from `a` and `b` until together they hold every payload of `want`.
async fn until_both_hold(a: &mut Consumer, ga: &mut Got, b: &mut Consumer, gb: &mut Got, want: &BTreeSet<String>) {
    while !want.is_subset(&ga.distinct().union(&gb.distinct()).cloned().collect()) {
        tokio::select! {
            _ = take(a, ga) => {}
            _ = take(b, gb) => {}
        }
    }
}

/// Commits and asserts every shard's commit was made durable.
async fn commit_all(c: &mut Consumer) {
    for done in c.commit().await.unwrap() {
        assert!(matches!(done.outcome, CommitOutcome::Committed { .. }), "{done:?}");
    }
}

/// Each shard's generation as `c` has yielded it.
fn gens(c: &Consumer) -> BTreeMap<u16, u64> {
    c.assignment().iter().map(|(&shard, a)| (shard, a.gen)).collect()
}

/// Takes deliveries until every shard has assigned `c` a generation above the one in
/// `before` (any, for a shard not in it); no event is due meanwhile.
async fn until_assigned(c: &mut Consumer, shards: u16, before: &BTreeMap<u16, u64>) {
    let mut newer = BTreeSet::new();
    while newer.len() < shards as usize {
        let d = tokio::time::timeout(WITHIN, c.next_delivery()).await.expect("in time").unwrap().expect("open");
        match d {
            Delivery::Assigned { shard, assignment } if before.get(&shard).is_none_or(|&g| assignment.gen > g) => {
                newer.insert(shard);
            }
            Delivery::Event(e) => panic!("no event was due: {e:?}"),
            _ => {}
        }
    }
}

#[test]
fn two_members_share_a_prefix_and_the_survivor_resumes_from_the_commits() {
    let (_dir, _pair) = started_pair_in("group_client", &["--shard-count", "2"]);
    let addr = _pair.leader.addr();
    let cfg = ClientConfig::insecure();
    runtime().block_on(async {
        let client = Client::connect(&addr, &cfg).await.unwrap();
        let first = append(&client, 0, 150).await;
        let opts = ConsumerOptions { k: 4, ..Default::default() };
        // Alone, `a` gets every bucket: the whole prefix, from the log's start.
        let mut a = Consumer::join(&addr, &cfg, "billing", "a", "acct-", &opts).await.unwrap();
        let mut ga = Got::default();
        while ga.distinct().len() < first.len() {
            take(&mut a, &mut ga).await;
        }
        assert_eq!(ga.distinct(), first);
        assert_eq!(ga.payloads.len(), first.len(), "nothing twice within one generation");
        for (name, v) in &ga.versions {
            assert!(v.windows(2).all(|w| w[0] < w[1]), "{name} out of order: {v:?}");
        }
        commit_all(&mut a).await;
        // `b` joins: the buckets are split, each starting at its committed position, so
        // neither member gets any of the events `a` committed.
        let before = gens(&a);
        assert_eq!(before.len(), 2, "both shards delivered: both assigned");
        let mut b = Consumer::join(&addr, &cfg, "billing", "b", "acct-", &opts).await.unwrap();
        until_assigned(&mut b, 2, &BTreeMap::new()).await;
        until_assigned(&mut a, 2, &before).await;
        let second = append(&client, 150, 300).await;
        let (mut ga, mut gb) = (Got::default(), Got::default());
        until_both_hold(&mut a, &mut ga, &mut b, &mut gb, &second).await;
        let got: BTreeSet<String> = ga.distinct().union(&gb.distinct()).cloned().collect();
        assert_eq!(got, second, "only the events after the commit");
        assert!(ga.distinct().is_disjoint(&gb.distinct()), "a bucket belongs to one member");
        assert!(!ga.payloads.is_empty() && !gb.payloads.is_empty(), "both members got events");
        commit_all(&mut a).await;
        commit_all(&mut b).await;
        // `a` leaves: `b` takes over its buckets from where `a` committed.
        let before = gens(&b);
        drop(a);
        until_assigned(&mut b, 2, &before).await;
        assert_eq!(b.assignment().values().map(|a| a.buckets.len()).sum::<usize>(), 8, "all 2 × 4 buckets");
        let third = append(&client, 300, 400).await;
        let mut gb = Got::default();
        while gb.payloads.len() < third.len() {
            take(&mut b, &mut gb).await;
        }
        assert_eq!(gb.distinct(), third, "exactly the events after the commits, once each");
        commit_all(&mut b).await;
        let s = b.stats();
        assert!(s.committed >= 2 && s.skipped == 0 && s.rejoins == 0, "{s:?}");
    });
}

/// Runs `corelog tail` with `args` until it exits; its stdout lines.
fn tail_group(addr: &str, args: &[&str]) -> Vec<String> {
    let child = Command::new(BIN)
        .args(["tail", "--insecure", "--addr", addr])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // It exits by itself after --count events; one still running after WITHIN is
    // killed, and fails the test.
    let (exited, waited) = std::sync::mpsc::channel::<()>();
    let pid = child.id().to_string();
    let watchdog = std::thread::spawn(move || {
        if waited.recv_timeout(WITHIN).is_err() {
            let _ = Command::new("kill").args(["-9", &pid]).status();
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = exited.send(());
    watchdog.join().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "tail --group failed, or ran past {WITHIN:?}: {text}");
    text.lines().map(String::from).collect()
}

#[test]
fn tail_group_traces_assignments_events_and_commits_and_a_second_run_resumes() {
    let (_dir, _pair) = started_pair_in("group_cli", &["--shard-count", "2"]);
    let addr = _pair.leader.addr();
    let cfg = ClientConfig::insecure();
    let rt = runtime();
    let client = rt.block_on(Client::connect(&addr, &cfg)).unwrap();
    let first = rt.block_on(append(&client, 0, 40));
    let n = first.len().to_string();
    let lines = tail_group(
        &addr,
        &["--trace", "--group", "cli", "--member", "m1", "--prefix", "acct-", "--k", "2", "--count", &n],
    );
    let fields = |kind: &str| -> Vec<Vec<String>> {
        let of_kind = lines.iter().filter(|l| l.split(' ').next() == Some(kind));
        of_kind.map(|l| l.split(' ').skip(1).map(String::from).collect()).collect()
    };
    let assigned = fields("A");
    assert!(assigned.iter().any(|a| a[0] == "0") && assigned.iter().any(|a| a[0] == "1"), "{lines:?}");
    assert!(assigned.iter().all(|a| a[2].split(',').count() == 2), "one member holds each shard's 2: {lines:?}");
    let delivered = fields("D");
    let payloads: BTreeSet<String> = delivered.iter().map(|d| String::from_utf8(hex(&d[5])).unwrap()).collect();
    assert_eq!(payloads, first, "{lines:?}");
    // Per shard, the last commit names the offset after the last event delivered there.
    let committed = fields("C");
    for shard in ["0", "1"] {
        let last = delivered.iter().filter(|d| d[0] == shard).map(|d| d[2].parse::<u64>().unwrap()).max();
        let next = committed.iter().filter(|c| c[0] == shard).map(|c| c[2].parse::<u64>().unwrap()).max();
        assert_eq!(next, last.map(|o| o + 1), "shard {shard}: {lines:?}");
    }
    // `group describe` folds the group's streams: each bucket of a shard is committed
    // where that shard's last commit said.
    let out = Command::new(BIN).args(["group", "describe", "--insecure", "--addr", &addr, "cli"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let mut shard = String::new();
    let mut buckets = 0;
    for l in text.lines() {
        let w: Vec<&str> = l.split(' ').collect();
        match w[0] {
            "shard" => shard = w[1].to_string(),
            "bucket" => {
                let next = committed.iter().filter(|c| c[0] == shard).map(|c| c[2].as_str()).next_back();
                assert_eq!(Some(w[5]), next, "shard {shard}: {text}");
                buckets += 1;
            }
            _ => panic!("{text}"),
        }
    }
    assert_eq!(buckets, 4, "2 shards × k 2: {text}");
    // A later member of the same group starts at the commits: only what came since.
    let second = rt.block_on(append(&client, 40, 50));
    let n = second.len().to_string();
    let lines = tail_group(&addr, &["--trace", "--group", "cli", "--prefix", "acct-", "--count", &n]);
    let payloads: BTreeSet<String> = lines
        .iter()
        .filter(|l| l.starts_with("D "))
        .map(|l| String::from_utf8(hex(l.rsplit(' ').next().unwrap())).unwrap())
        .collect();
    assert_eq!(payloads, second, "{lines:?}");
    // Without --trace, events print as `tail --prefix` prints them.
    let lines = tail_group(&addr, &["--group", "plain", "--prefix", "acct-1", "--count", "2"]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        let f: Vec<&str> = l.split('\t').collect();
        assert!(f.len() == 5 && f[2].starts_with("acct-1") && f[4].starts_with('k'), "{l}");
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn a_member_joins_again_after_its_leader_restarts_and_resumes_from_its_commits() {
    let (_dir, mut pair) = started_pair_in("group_restart", &["--shard-count", "2"]);
    let addr = pair.leader.addr();
    let cfg = ClientConfig::insecure().with_failover_timeout(Duration::from_secs(20));
    let rt = runtime();
    let client = rt.block_on(Client::connect(&addr, &cfg)).unwrap();
    let first = rt.block_on(append(&client, 0, 60));
    let opts = ConsumerOptions::default();
    let mut c = rt.block_on(Consumer::join(&addr, &cfg, "restart", "m", "acct-", &opts)).unwrap();
    rt.block_on(async {
        let mut got = Got::default();
        while got.distinct().len() < first.len() {
            take(&mut c, &mut got).await;
        }
        commit_all(&mut c).await;
    });
    pair.leader.kill9();
    pair.leader.start();
    let second = rt.block_on(append(&client, 60, 120));
    let got = rt.block_on(async {
        let mut got = Got::default();
        while !second.is_subset(&got.distinct()) {
            take(&mut c, &mut got).await;
        }
        got
    });
    assert!(got.distinct().is_disjoint(&first), "committed events are not delivered again");
    assert!(c.stats().rejoins >= 2, "each shard's connection joined again: {:?}", c.stats());
}
