//! The shard's logic without a socket: a real log in a temporary directory, a real
//! executor, and connections that record the outcomes the shard hands them.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelog_client::codec::{ErrorCode, Role};
use corelog_client::record;

use super::*;
use crate::coord::cell::ControlCell;
use crate::index::LogIndex;
use crate::metrics::ShardMetrics;
use crate::wal::batch::MAX_BATCH_RECORDS;
use crate::wal::recovery;

const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection that keeps every outcome it is handed, in order.
#[derive(Default)]
struct Recorder {
    taken: Cell<u32>,
    got: RefCell<Vec<(u64, Result<u64, ErrorCode>)>>,
}

impl Answer for Recorder {
    fn taken(&self) {
        self.taken.set(self.taken.get() + 1);
    }
    fn answer(&self, req_id: u64, shard: u16, outcome: Outcome<'_>) {
        assert_eq!(shard, 0);
        let r = match outcome {
            Outcome::Appended { offset, .. } => Ok(offset),
            Outcome::Failed { code, .. } => Err(code),
        };
        self.got.borrow_mut().push((req_id, r));
    }
}

impl Recorder {
    fn answers(&self) -> Vec<(u64, Result<u64, ErrorCode>)> {
        self.got.borrow().clone()
    }
}

/// Runs `test` on a fresh executor with a shard over an empty log; `standalone`: no
/// follower (acknowledged on local durability).
fn with_shard<F, Fut>(standalone: bool, test: F)
where
    F: FnOnce(Rc<Shard>) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let dir = crate::wal::disk_tempdir();
    let d = dir.path().to_path_buf();
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            let log = Log::open(&d, &recovery::scan(0, &d).unwrap(), 64 * 1024 * 1024).await.unwrap();
            let cfg = ShardConfig {
                id: 0,
                shard_count: 1,
                standalone,
                ack_timeout: ACK_TIMEOUT,
                groups: Default::default(),
                recent_bytes: MAX_RECENT_BYTES,
                catch_up_rate: 0.0,
                handshake_timeout: Duration::from_secs(5),
                repl_timeout: Duration::from_secs(5),
                leader_addr: None,
                ctl: Arc::new(ControlCell::unbounded(1)),
                slot: 0,
                retain: Default::default(),
                authz: None,
            };
            let shard = Shard::new(cfg, Rc::new(log), Role::Leader, 1, 0, LogIndex::new(1024), ShardMetrics::new(0));
            glommio::spawn_local(shard.clone().commit_loop()).detach();
            test(shard).await;
        })
        .unwrap()
        .join()
        .unwrap();
}

/// Takes one append of `payload` for `conn` as request `req_id`.
async fn append(shard: &Shard, conn: &Rc<dyn Answer>, req_id: u64, payload: &[u8]) -> Result<Taken, Refused> {
    shard.append(AppendReq::default(), AckForm::V1, payload, conn, req_id).await
}

/// Waits until `n` records are on the log's disk.
async fn written(shard: &Shard, n: u64) {
    while shard.log.next_offset() < n {
        shard.changed().await;
    }
}

fn recorder() -> (Rc<Recorder>, Rc<dyn Answer>) {
    let r = Rc::new(Recorder::default());
    let a: Rc<dyn Answer> = r.clone();
    (r, a)
}

/// Appends that arrive while a write is in flight form the next batch, one write for
/// all of them; each is answered with its own offset, in order, once durable.
#[test]
fn appends_during_a_write_form_the_next_batch() {
    with_shard(true, |shard| async move {
        let (rec, conn) = recorder();
        assert_eq!(append(&shard, &conn, 0, b"first").await, Ok(Taken::Staged));
        // The commit loop takes the lone append and starts writing it.
        while !shard.staged.borrow().is_empty() {
            glommio::yield_if_needed().await;
            glommio::executor().yield_task_queue_now().await;
        }
        assert!(rec.answers().is_empty(), "answered before it was durable");
        for i in 1..=100u64 {
            assert_eq!(append(&shard, &conn, i, format!("event {i}").as_bytes()).await, Ok(Taken::Staged));
        }
        {
            let staged = shard.staged.borrow();
            assert_eq!(staged.len(), 1, "the appends wait in one batch");
            assert_eq!(staged[0].count, 100);
            assert_eq!(staged[0].first_offset, 1);
        }
        written(&shard, 101).await;
        let mut batches = Vec::new();
        recovery::scan_with(0, shard.log.dir(), &mut |recs| batches.push(record::Records::new(recs).count())).unwrap();
        assert_eq!(batches, vec![1, 100], "one write for the lone append, one for the rest");
        let want: Vec<_> = (0..=100).map(|i| (i, Ok(i))).collect();
        assert_eq!(rec.answers(), want);
        assert_eq!(rec.taken.get(), 101);
        assert_eq!(shard.unacked_count.get(), 0);
        assert_eq!(shard.staged_bytes.get(), 0);
        let (recs, n) = shard.log.read(0, 101, 1 << 20).await.unwrap();
        assert_eq!(n, 101);
        let payloads: Vec<_> = record::Records::new(&recs).map(|r| r.unwrap().payload.to_vec()).collect();
        assert_eq!(payloads[0], b"first");
        assert_eq!(payloads[100], b"event 100");
    });
}

/// A batch holds at most `MAX_BATCH_RECORDS`: the appends beyond it open the next one.
#[test]
fn a_full_batch_opens_the_next() {
    with_shard(false, |shard| async move {
        let (_rec, conn) = recorder();
        // Not accepted by a follower yet: nothing is written, everything stays staged.
        let n = MAX_BATCH_RECORDS as u64 + 10;
        for i in 0..n {
            append(&shard, &conn, i, b"x").await.unwrap();
        }
        let staged = shard.staged.borrow();
        assert_eq!(staged.len(), 2);
        assert_eq!(staged[0].count, MAX_BATCH_RECORDS);
        assert_eq!(staged[1].count, 10);
        assert_eq!(staged[1].first_offset, MAX_BATCH_RECORDS as u64);
    });
}

/// A replicated leader writes nothing before a follower accepted its epoch, then
/// acknowledges exactly what both copies hold: the committed end is the lower of its own
/// durable end and the follower's.
#[test]
fn an_append_is_answered_once_both_copies_hold_it() {
    with_shard(false, |shard| async move {
        let (rec, conn) = recorder();
        for i in 0..3 {
            append(&shard, &conn, i, b"e").await.unwrap();
        }
        glommio::executor().yield_task_queue_now().await;
        assert_eq!(shard.log.next_offset(), 0, "written before a follower accepted the epoch");
        shard.follower_joined(0);
        written(&shard, 3).await;
        assert_eq!(shard.committed(), 0);
        assert!(rec.answers().is_empty(), "answered on one copy");
        shard.follower_acked(2);
        assert_eq!(shard.committed(), 2);
        assert_eq!(rec.answers(), vec![(0, Ok(0)), (1, Ok(1))]);
        shard.follower_acked(1); // an older confirmation changes nothing
        assert_eq!(shard.committed(), 2);
        shard.follower_acked(3);
        assert_eq!(rec.answers(), vec![(0, Ok(0)), (1, Ok(1)), (2, Ok(2))]);
        assert_eq!(shard.unacked_count.get(), 0);
    });
}

/// A confirmation of offsets never assigned is a bug on one side: the node stops there
/// rather than acknowledge what no replica holds.
#[test]
fn a_follower_confirming_what_was_never_assigned_stops() {
    with_shard(false, |shard| async move {
        let (rec, conn) = recorder();
        append(&shard, &conn, 0, b"e").await.unwrap();
        shard.follower_joined(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shard.follower_acked(2)));
        let msg = r.expect_err("accepted a confirmation beyond the assigned offsets");
        let msg = msg.downcast_ref::<String>().expect("a formatted assertion");
        assert!(msg.contains("beyond the 1 offsets assigned"), "{msg}");
        assert!(rec.answers().is_empty());
    });
}

/// `MAX_UNACKED` appends waiting: the next one waits for room. When no follower
/// accepted the epoch within the ack timeout, every staged append is answered
/// `Unavailable` (nothing written), its offset is handed out again, and the waiting
/// append goes in.
#[test]
fn appends_beyond_the_bound_wait_and_unaccepted_ones_fail_unwritten() {
    with_shard(false, |shard| async move {
        let (rec, conn) = recorder();
        for i in 0..MAX_UNACKED as u64 {
            append(&shard, &conn, i, b"e").await.unwrap();
        }
        assert_eq!(shard.unacked_count.get(), MAX_UNACKED);
        let mut next = Box::pin(append(&shard, &conn, u64::MAX, b"late"));
        assert!(futures_lite::future::poll_once(&mut next).await.is_none(), "taken beyond MAX_UNACKED");
        shard.expire(Instant::now() + ACK_TIMEOUT);
        assert_eq!(shard.assigned(), 0, "the offsets are handed out again");
        assert_eq!(shard.log.next_offset(), 0);
        let answers = rec.answers();
        assert_eq!(answers.len(), MAX_UNACKED);
        assert!(answers.iter().all(|(_, r)| *r == Err(ErrorCode::Unavailable)));
        assert_eq!(next.await, Ok(Taken::Staged));
        assert_eq!(shard.assigned(), 1);
        assert_eq!(shard.unacked_count.get(), 1);
    });
}

/// Staged bytes are bounded too: an append that would pass `MAX_STAGED_BYTES` waits.
#[test]
fn staged_bytes_are_bounded() {
    with_shard(false, |shard| async move {
        let (_rec, conn) = recorder();
        let big = vec![7u8; 60 * 1024]; // under the protocol's MAX_PAYLOAD
        let mut taken = 0;
        while shard.staged_bytes.get() + big.len() + 64 <= MAX_STAGED_BYTES {
            append(&shard, &conn, taken, &big).await.unwrap();
            taken += 1;
        }
        assert!(taken >= 250, "{taken} appends of 60 KiB before the bound");
        let mut next = Box::pin(append(&shard, &conn, taken, &big));
        assert!(futures_lite::future::poll_once(&mut next).await.is_none(), "staged past MAX_STAGED_BYTES");
        assert!(shard.staged_bytes.get() <= MAX_STAGED_BYTES);
    });
}

/// Written on the leader, not confirmed by the follower in time: `ReplicationTimeout`
/// (it may still appear); a leader that is fenced answers what waits `OutcomeUnknown`
/// and refuses new appends.
#[test]
fn unconfirmed_appends_time_out_and_a_fenced_leader_refuses() {
    with_shard(false, |shard| async move {
        let (rec, conn) = recorder();
        shard.follower_joined(0);
        append(&shard, &conn, 0, b"a").await.unwrap();
        written(&shard, 1).await;
        shard.expire(Instant::now() + ACK_TIMEOUT);
        assert_eq!(rec.answers(), vec![(0, Err(ErrorCode::ReplicationTimeout))]);
        append(&shard, &conn, 1, b"b").await.unwrap();
        written(&shard, 2).await;
        shard.fence("a test");
        assert_eq!(rec.answers()[1], (1, Err(ErrorCode::OutcomeUnknown)));
        let refused = append(&shard, &conn, 2, b"c").await;
        assert!(matches!(refused, Err(Refused::Error(ErrorCode::Fenced, _))), "{refused:?}");
        assert_eq!(shard.unacked_count.get(), 0);
    });
}
