//! A timeout for a loop of waits (a connection's answers, a link's frames) that costs
//! no timer registration per wait.
//!
//! Used by the load generator (one per connection: the answer to each append) and by the
//! replication link (one per loop: the follower's next ack, the leader's next batch, the
//! idle ship loop's next shipment). `glommio::timer::timeout` around every append creates
//! a timer, inserts it into the executor's timer map (a hash map and a B-tree of every
//! pending timer: 9,000 of them at 9,000 connections per process) and removes it when the
//! answer comes: at 9,000 connections per load generator that was ≈ 5 % of its CPU (perf,
//! benches/profile.sh: `drop_in_place<Timeout>` 4.4 % inclusive, the hash map's
//! `remove_entry` 1.9 % self).
//!
//! A [`Watchdog`] holds one timer per connection. It is armed for an append's deadline
//! only when no armed timer is due at or before it (in a steady run: once per `limit`),
//! and every poll checks the clock against the append's own deadline; when the timer
//! armed for an earlier append fires first, the task is woken, sees its own deadline not
//! yet passed, and re-arms. An append therefore times out at `sent + limit` (within the
//! executor's timer resolution), never earlier.
//!
//! The timer is registered with the waker of the task that polls [`Watchdog::within`];
//! a watchdog belongs to one task (one connection's driver), which is how it is used.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use glommio::timer::Timer;

pub struct Watchdog {
    timer: Timer,
    /// When the timer fires (it is registered with the reactor until then, or until
    /// it has fired and been polled).
    armed_until: Option<Instant>,
}

impl Default for Watchdog {
    fn default() -> Self {
        Self::new()
    }
}

impl Watchdog {
    /// A watchdog with nothing armed (must be created on a glommio executor).
    pub fn new() -> Watchdog {
        Watchdog { timer: Timer::new(Duration::ZERO), armed_until: None }
    }

    /// `fut`'s output, or `None` once `sent + limit` has passed without it.
    pub async fn within<F: Future>(&mut self, sent: Instant, limit: Duration, fut: F) -> Option<F::Output> {
        let due = sent + limit;
        let mut fut = pin!(fut);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            let now = Instant::now();
            if now >= due {
                return Poll::Ready(None);
            }
            // Armed for a moment that has passed (it fired, or is about to): re-arm for
            // this append's deadline. Armed for a later moment than `due` (an earlier
            // call had a longer limit): re-arm earlier. Otherwise it will wake us in time.
            let rearm = match self.armed_until {
                None => true,
                Some(at) => at <= now || at > due,
            };
            if rearm {
                self.timer.reset(due - now);
                self.armed_until = Some(due);
                // Registers the timer with this task's waker (Pending: `due` is ahead).
                if std::pin::Pin::new(&mut self.timer).poll(cx).is_ready() {
                    // Due already (the clock moved on since `now`): poll again at once.
                    self.armed_until = None;
                    cx.waker().wake_by_ref();
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glommio::LocalExecutorBuilder;

    #[test]
    fn an_answer_in_time_is_returned() {
        let got = LocalExecutorBuilder::default()
            .spawn(|| async {
                let mut w = Watchdog::new();
                let mut got = Vec::new();
                for i in 0..100u32 {
                    got.push(w.within(Instant::now(), Duration::from_secs(5), async move { i }).await);
                }
                got
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(got, (0..100).map(Some).collect::<Vec<_>>());
    }

    #[test]
    fn a_missing_answer_times_out_at_its_own_deadline_not_an_earlier_ones() {
        let (first, second) = LocalExecutorBuilder::default()
            .spawn(|| async {
                let mut w = Watchdog::new();
                let limit = Duration::from_millis(200);
                // Not answered on the first poll: arms the timer for t0 + 200 ms;
                // answered after 10 ms.
                let t0 = Instant::now();
                let answer = async {
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                    1
                };
                assert_eq!(w.within(t0, limit, answer).await, Some(1));
                assert_eq!(w.armed_until, Some(t0 + limit));
                glommio::timer::sleep(Duration::from_millis(100)).await;
                // Sent at t0 + 100 ms and never answered: the timer armed for the first
                // append fires at t0 + 200 ms; this one must last until t1 + 200 ms.
                let t1 = Instant::now();
                let r = w.within(t1, limit, std::future::pending::<u32>()).await;
                let second = t1.elapsed();
                // A timed-out wait leaves the watchdog usable.
                let t2 = Instant::now();
                let again = w.within(t2, limit, std::future::pending::<u32>()).await;
                assert_eq!((r, again), (None, None));
                (t2.elapsed(), second)
            })
            .unwrap()
            .join()
            .unwrap();
        for d in [first, second] {
            assert!(d >= Duration::from_millis(200), "timed out after {d:?}, before its 200 ms");
            // Generous upper bound: the timer must wake the task at all (a shared machine
            // may be slow, but not seconds slow).
            assert!(d < Duration::from_secs(5), "timed out only after {d:?}");
        }
    }

    #[test]
    fn a_shorter_limit_after_a_longer_one_is_kept() {
        let took = LocalExecutorBuilder::default()
            .spawn(|| async {
                let mut w = Watchdog::new();
                assert_eq!(w.within(Instant::now(), Duration::from_secs(60), async { 7 }).await, Some(7));
                let t = Instant::now();
                assert_eq!(w.within(t, Duration::from_millis(50), std::future::pending::<()>()).await, None);
                t.elapsed()
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(took >= Duration::from_millis(50) && took < Duration::from_secs(5), "took {took:?}");
    }
}
