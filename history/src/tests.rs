//! The checker and the history file against hand-made histories.

use std::time::Duration;

use corelog_client::{ClientConfig, Position, Record};

use crate::run::payload;
use crate::*;

fn op(conn: u32, seq: u64, t: u64, r: OpResult) -> Op {
    Op { conn, seq, payload: payload("t", conn, seq, 12), invoke_us: t, done_us: t + 10, result: r }
}
fn ok(shard: u16, offset: u64) -> OpResult {
    OpResult::Ok(Position { shard, offset })
}
fn failed() -> OpResult {
    OpResult::Failed("server error 5 NotLeader".into())
}
fn unknown() -> OpResult {
    OpResult::Unknown("connection closed before the answer".into())
}
fn hist(ops: &[&Op]) -> History {
    let mut ops: Vec<Op> = ops.iter().map(|o| (*o).clone()).collect();
    ops.sort_by_key(|o| o.invoke_us);
    History { tag: "t".into(), ops }
}
/// Logs holding these payloads, in this order, per shard.
fn logs(shards: &[&[&[u8]]]) -> Logs {
    let mut l = Logs::new();
    for (s, recs) in shards.iter().enumerate() {
        let v = recs.iter().enumerate().map(|(i, p)| Record {
            offset: i as u64,
            epoch: 1,
            producer: None,
            stream: None,
            payload: p.to_vec(),
        });
        l.insert(s as u16, v.collect());
    }
    l
}

#[test]
fn payloads_are_unique_padded_and_validated() {
    assert_eq!(payload("t", 3, 17, 12), b"t-3-17-.....".to_vec());
    assert_eq!(payload("tag", 3, 17, 0), b"tag-3-17-".to_vec());
    let cfg = |tag: &str, size| Config {
        addrs: vec!["127.0.0.1:1".into()],
        client: ClientConfig::insecure(),
        connections: 100,
        duration: Duration::from_secs(1),
        payload_bytes: size,
        tag: tag.into(),
    };
    assert!(cfg("run_1", 64).validate().is_ok());
    assert!(cfg("a-b", 64).validate().is_err(), "'-' would make one tag a prefix of another");
    assert!(cfg("t", 8).validate().is_err(), "too small for the sequence number");
    assert!(cfg("t", 1 << 20).validate().is_err());
}

#[test]
fn a_consistent_history_passes_and_counts() {
    let a = op(0, 0, 0, ok(0, 1));
    let b = op(1, 0, 5, unknown()); // stored
    let c = op(0, 1, 20, failed());
    let d = op(1, 1, 30, ok(1, 0));
    let e = op(2, 0, 31, unknown()); // not stored
    let h = hist(&[&a, &b, &c, &d, &e]);
    let r = check(&h, &logs(&[&[b"other", &a.payload, &b.payload, b"other2"], &[&d.payload]])).unwrap();
    assert_eq!((r.ops, r.ok, r.failed, r.unknown, r.unknown_present, r.foreign), (5, 2, 1, 2, 1, 1));
    assert_eq!(r.window, Some(Gap { from_us: 10, to_us: 40 }));
    assert!(r.to_string().starts_with("cross-check OK"), "{r}");
}

#[test]
fn a_lost_or_misplaced_ack_fails_with_its_context() {
    let a = op(0, 0, 0, ok(0, 0));
    let b = op(1, 0, 5, ok(0, 1));
    let h = hist(&[&a, &b]);
    let e = check(&h, &logs(&[&[&a.payload]])).unwrap_err();
    assert!(e.starts_with("LOST") && e.contains("not in the log") && e.contains("op 1 0 5 15 t-1-0-"), "{e}");
    let e = check(&h, &logs(&[&[&b.payload, &a.payload]])).unwrap_err();
    assert!(e.starts_with("LOST") && e.contains("history around it") && e.contains("op 0 0 0 10"), "{e}");
    let e = check(&h, &logs(&[&[&a.payload, b"t-1-0-......x"]])).unwrap_err();
    assert!(e.starts_with("PHANTOM"), "different bytes under the run's tag: {e}");
}

#[test]
fn duplicates_written_failures_double_acks_and_gaps_fail() {
    let a = op(0, 0, 0, ok(0, 0));
    let f = op(1, 0, 5, failed());
    let u = op(2, 0, 6, unknown());
    let h = hist(&[&a, &f, &u]);
    assert!(check(&h, &logs(&[&[&a.payload]])).is_ok());
    let e = check(&h, &logs(&[&[&a.payload, &a.payload]])).unwrap_err();
    assert!(e.starts_with("DUPLICATE"), "{e}");
    let e = check(&h, &logs(&[&[&a.payload, &u.payload], &[&u.payload]])).unwrap_err();
    assert!(e.starts_with("DUPLICATE"), "an unknown one may be stored once, not twice: {e}");
    let e = check(&h, &logs(&[&[&a.payload], &[&f.payload]])).unwrap_err();
    assert!(e.starts_with("FAILED BUT WRITTEN"), "{e}");
    let twice = hist(&[&a, &op(3, 0, 9, ok(0, 0))]);
    assert!(check(&twice, &logs(&[&[&a.payload]])).unwrap_err().starts_with("TWO ACKS"));
    let mut gap = logs(&[&[&a.payload]]);
    gap.get_mut(&0).unwrap()[0].offset = 1;
    assert!(check(&h, &gap).unwrap_err().contains("where 0 was due"));
}

#[test]
fn the_unavailability_window_is_the_largest_gap_between_oks() {
    // Two connections; oks complete at 10, 20, 35 | 400, 410 (failures in between).
    let ops = [
        op(0, 0, 0, ok(0, 0)),
        op(1, 0, 10, ok(0, 1)),
        op(0, 1, 25, ok(0, 2)),
        op(1, 1, 30, failed()),
        op(0, 2, 40, unknown()),
        op(1, 2, 390, ok(0, 3)),
        op(0, 3, 400, ok(0, 4)),
    ];
    let h = hist(&ops.iter().collect::<Vec<_>>());
    assert_eq!(h.unavailability(), Some(Gap { from_us: 35, to_us: 400 }));
    assert_eq!(h.gap_around(100), Some(Gap { from_us: 35, to_us: 400 }));
    assert_eq!(h.gap_around(5), None);
    assert_eq!(h.oks_after(35), 2);
    // Epochs: 1 for the first three records, 2 after. "Killed" at 30: the ok read at
    // 35 is still epoch 1; writes resumed at 400 (epoch 2's first).
    let mut l = logs(&[&[b"a", b"b", b"c", b"d", b"e"]]);
    l.get_mut(&0).unwrap().iter_mut().skip(3).for_each(|r| r.epoch = 2);
    assert_eq!(h.takeover(&l, 30), Some(Gap { from_us: 35, to_us: 400 }));
    assert_eq!(h.takeover(&l, 5), None, "nothing acknowledged before");
    assert_eq!(h.takeover(&logs(&[&[b"a", b"b", b"c", b"d", b"e"]]), 30), None, "no newer epoch");
    assert_eq!(hist(&[&ops[0]]).unavailability(), None);
}

fn written(h: &History, l: Option<&Logs>) -> (tempdir::Dir, String) {
    let d = tempdir::Dir::new();
    let p = d.0.join("h.txt");
    h.write(&p, l).unwrap();
    let s = std::fs::read_to_string(&p).unwrap();
    (d, s)
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            let p = std::env::temp_dir().join(format!("workload-{}-{}", std::process::id(), rand_suffix()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }
}

#[test]
fn the_history_file_has_one_line_per_op_and_the_read_back() {
    let a = op(0, 0, 0, ok(0, 1));
    let u = op(1, 0, 5, unknown());
    let v = op(2, 0, 6, OpResult::Unknown("no answer\nwithin 1s".into()));
    let mut odd = op(3, 0, 7, failed());
    odd.payload = b"t-3-0 x".to_vec();
    let h = hist(&[&a, &u, &v, &odd]);
    let (_d, s) = written(&h, Some(&logs(&[&[b"old", &a.payload, &u.payload, b"foreign"], &[]])));
    let lines: Vec<&str> = s.lines().collect();
    assert!(lines[0].starts_with('#'));
    assert_eq!(lines[1], "tag t");
    assert_eq!(lines[2], "op 0 0 0 10 t-0-0-...... ok 0 1");
    assert_eq!(lines[3], "op 1 0 5 15 t-1-0-...... unknown connection closed before the answer");
    assert_eq!(lines[4], "op 2 0 6 16 t-2-0-...... unknown no answer within 1s");
    assert_eq!(lines[5], "op 3 0 7 17 hex:742d332d302078 failed server error 5 NotLeader");
    assert_eq!(&lines[6..], ["shard 0 start 1 len 4", "foreign 0 3", "shard 1 start 0 len 0", "found 1 0 0 2"]);
    let (_d, s) = written(&h, None);
    assert_eq!(s.lines().count(), 6);
}

/// Runs tools/porcupine on `h` (+ `l`); None where go is missing (a failure under
/// CORELOG_NO_SKIP=1).
fn porcupine_on(h: &History, l: &Logs) -> Option<Linearizability> {
    if !go_available() {
        assert!(std::env::var("CORELOG_NO_SKIP").as_deref() != Ok("1"), "go not on PATH and CORELOG_NO_SKIP=1");
        eprintln!("SKIP porcupine: go not on PATH");
        return None;
    }
    let (d, _) = written(h, Some(l));
    Some(porcupine(&porcupine_dir(), &d.0.join("h.txt")).unwrap())
}

#[test]
fn porcupine_accepts_a_linearizable_history_and_rejects_a_real_time_inversion() {
    let a = op(0, 0, 0, ok(0, 0));
    let b = op(1, 0, 5, ok(0, 1)); // concurrent with a
    let u = op(2, 0, 6, unknown());
    let c = op(0, 1, 20, ok(0, 3));
    let l = logs(&[&[&a.payload, &b.payload, &u.payload, &c.payload]]);
    let h = hist(&[&a, &b, &u, &c]);
    assert!(check(&h, &l).is_ok());
    let Some(v) = porcupine_on(&h, &l) else { return };
    assert!(matches!(&v, Linearizability::Linearizable(s) if s.contains("linearizable")), "{v:?}");
    // c (offset 0) invoked after a (offset 3) completed: the log order contradicts
    // real time, though every ack reads back where it said.
    let (a, c) = (op(0, 0, 0, ok(0, 3)), op(0, 1, 20, ok(0, 0)));
    let l = logs(&[&[&c.payload, &b.payload, &u.payload, &a.payload]]);
    let h = hist(&[&a, &b, &u, &c]);
    assert!(check(&h, &l).is_ok(), "the read-back check cannot see this");
    let v = porcupine_on(&h, &l).unwrap();
    assert!(
        matches!(&v, Linearizability::NotLinearizable(s) if s.contains("before append conn 0 seq 1 (relative offset 0) was invoked at 20")),
        "{v:?}"
    );
}
