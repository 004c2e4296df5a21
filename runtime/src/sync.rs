//! Single-threaded wake-up primitives for one executor (no atomics, no locks).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Runs `f` until it completes (`Some`) or `at` passes (`None`; `f` is dropped).
///
/// A plain future holding `f` once beside the timer: an `async fn` would keep its
/// argument and the awaited copy both (a 4 KB handshake took 12 KB under it).
pub fn deadline<F: Future>(at: Instant, f: F) -> Deadline<F> {
    let timer = glommio::timer::Timer::new(at.saturating_duration_since(Instant::now()));
    Deadline { f, timer }
}

/// See [`deadline`].
pub struct Deadline<F> {
    f: F,
    timer: glommio::timer::Timer,
}

impl<F: Future> Future for Deadline<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `f` is pinned structurally: it is never moved out of `self`, and
        // `Deadline` implements neither `Drop` nor `Unpin` by hand. `timer` is `Unpin`.
        let this = unsafe { self.get_unchecked_mut() };
        let f = unsafe { Pin::new_unchecked(&mut this.f) };
        if let Poll::Ready(v) = f.poll(cx) {
            return Poll::Ready(Some(v));
        }
        Pin::new(&mut this.timer).poll(cx).map(|_| None)
    }
}

/// A broadcast event: `wait()` completes after the next `notify()`.
///
/// Bounded: a waiting `EventWait` holds one slot however often it is polled (a wait
/// raced against something that wakes often — `or(read, closing)` on a busy connection
/// — is re-polled on every wake-up), and a dropped one gives its slot back (a wait
/// abandoned at a timeout, again and again, while nothing notifies). Both used to push
/// a waker clone each time until the next notify: memory without bound, and glommio's
/// per-task reference count overflowed after 32,767 clones — a panic that stopped the
/// node (one connection after 32,767 appends).
#[derive(Default)]
pub struct Event {
    generation: Cell<u64>,
    waiters: RefCell<Vec<Option<Waker>>>,
    /// Slots of `waiters` whose wait was dropped, reused by the next waits.
    free: RefCell<Vec<usize>>,
}

impl Event {
    pub fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        self.free.borrow_mut().clear();
        let mut waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters.drain(..).flatten() {
            w.wake();
        }
        // Keep the allocation for the next waits (a connection's event is waited on and
        // notified once per append: taking the vector freed it and the next wait
        // allocated it again — 1.6 % of the leader's CPU at 9,000 connections). A wait
        // registered while waking (none in glommio, whose wake only schedules) keeps its
        // own vector and slot.
        let mut slot = self.waiters.borrow_mut();
        if slot.is_empty() {
            *slot = waiters;
        }
    }

    /// Resolves once `notify` has been called after this call.
    pub fn wait(&self) -> EventWait<'_> {
        EventWait { ev: self, seen: self.generation.get(), slot: None }
    }

    /// Slots held (for tests): waits registered since the last notify, less dropped ones
    /// whose slot was not reused yet.
    pub fn slots(&self) -> usize {
        self.waiters.borrow().len()
    }
}

pub struct EventWait<'a> {
    ev: &'a Event,
    seen: u64,
    /// Our slot in `ev.waiters` (valid while the generation is `seen`).
    slot: Option<usize>,
}

impl Future for EventWait<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.ev.generation.get() != self.seen {
            return Poll::Ready(());
        }
        let mut waiters = self.ev.waiters.borrow_mut();
        match self.slot {
            Some(i) => {
                let w = &mut waiters[i];
                if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *w = Some(cx.waker().clone());
                }
            }
            None => {
                let i = match self.ev.free.borrow_mut().pop() {
                    Some(i) => {
                        waiters[i] = Some(cx.waker().clone());
                        i
                    }
                    None => {
                        waiters.push(Some(cx.waker().clone()));
                        waiters.len() - 1
                    }
                };
                drop(waiters);
                self.slot = Some(i);
            }
        }
        Poll::Pending
    }
}

impl Drop for EventWait<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            if self.ev.generation.get() == self.seen {
                self.ev.waiters.borrow_mut()[i] = None;
                self.ev.free.borrow_mut().push(i);
            }
        }
    }
}

/// Takes `n` from a counter. One that would go below zero is a bug in its bookkeeping
/// (in release it would wrap silently and lift every bound that reads it): stop there.
pub fn take<T>(c: &Cell<T>, n: T, what: &str)
where
    T: Copy + PartialOrd + std::ops::Sub<Output = T> + std::fmt::Display,
{
    let v = c.get();
    assert!(v >= n, "counter {what} would go below zero: {v} - {n}");
    c.set(v - n);
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_counter_takes_what_it_holds() {
        let c = Cell::new(3usize);
        take(&c, 2, "c");
        take(&c, 1, "c");
        assert_eq!(c.get(), 0);
    }

    #[test]
    #[should_panic(expected = "counter inflight would go below zero: 0 - 1")]
    fn a_counter_below_zero_stops_with_its_name() {
        take(&Cell::new(0u32), 1, "inflight");
    }

    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Count(AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A wait on `ev`, polled once: it must be pending (and so hold a slot).
    fn pending<'a>(ev: &'a Event, cx: &mut Context<'_>) -> Pin<Box<EventWait<'a>>> {
        let mut w = Box::pin(ev.wait());
        assert!(w.as_mut().poll(cx).is_pending());
        w
    }

    /// Runs `test` with a fresh event, one `pending` wait on it, the context that wait was
    /// polled in, and how often that context's waker has been woken.
    fn with_a_wait(test: impl for<'e> FnOnce(&'e Event, Pin<Box<EventWait<'e>>>, &mut Context<'_>, &AtomicUsize)) {
        let ev = Event::default();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let w = pending(&ev, &mut cx);
        test(&ev, w, &mut cx, &count.0);
    }

    #[test]
    fn a_wait_holds_one_slot_however_often_polled_or_dropped() {
        with_a_wait(|ev, mut w, cx, wakes| {
            for _ in 0..100_000 {
                assert!(w.as_mut().poll(cx).is_pending());
            }
            assert_eq!(ev.slots(), 1);
            for _ in 0..100_000 {
                drop(pending(ev, cx));
            }
            assert_eq!(ev.slots(), 2, "dropped waits reuse one slot");
            ev.notify();
            assert_eq!(wakes.load(Ordering::SeqCst), 1, "only the live wait is woken");
            assert!(w.as_mut().poll(cx).is_ready());
            assert_eq!(ev.slots(), 0);
        });
    }

    /// A notify keeps the waiters' allocation: the next wait reuses it.
    #[test]
    fn notify_keeps_the_allocation_for_the_next_wait() {
        with_a_wait(|ev, mut w, cx, wakes| {
            let cap = ev.waiters.borrow().capacity();
            for round in 1..=1000 {
                ev.notify();
                assert_eq!(wakes.load(Ordering::SeqCst), round, "the wait of round {round} was woken");
                assert!(w.as_mut().poll(cx).is_ready());
                assert_eq!(ev.slots(), 0);
                // Held across the notify (a freed vector has capacity 0; malloc may well hand
                // the same address back, so the address proves nothing).
                assert_eq!(ev.waiters.borrow().capacity(), cap, "round {round}: the allocation was dropped");
                w = pending(ev, cx);
                assert_eq!(ev.waiters.borrow().capacity(), cap, "round {round}: the vector grew");
            }
        });
    }

    /// The crash itself: a glommio task re-polling one wait 40,000 times (each clone
    /// of its waker raised its reference count, which overflows at 32,767).
    #[test]
    fn a_glommio_task_survives_40k_polls_of_one_wait() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let ev = Event::default();
                let mut w = Box::pin(ev.wait());
                std::future::poll_fn(|cx| {
                    for _ in 0..40_000 {
                        assert!(w.as_mut().poll(cx).is_pending());
                    }
                    Poll::Ready(())
                })
                .await;
                ev.notify();
                w.await;
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// `deadline` holds its future once: a large future costs its own size plus the
    /// timer, not twice its size (the async fn it replaced held 3× a handshake).
    #[test]
    fn deadline_holds_its_future_once() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let big = async {
                    let buf = [7u8; 4096];
                    glommio::yield_if_needed().await;
                    buf[4095]
                };
                let inner = std::mem::size_of_val(&big);
                let d = deadline(Instant::now() + std::time::Duration::from_secs(5), big);
                let outer = std::mem::size_of_val(&d);
                assert!(outer <= inner + 64, "deadline of a {inner} B future is {outer} B");
                assert_eq!(d.await, Some(7));
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// A future that never completes gives `None` once the instant passes (and is
    /// dropped then); one that completes first gives its value.
    #[test]
    fn deadline_times_out_and_drops_the_future() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                struct Guard(std::rc::Rc<Cell<bool>>);
                impl Drop for Guard {
                    fn drop(&mut self) {
                        self.0.set(true);
                    }
                }
                let ev = Event::default();
                let dropped = std::rc::Rc::new(Cell::new(false));
                let g = Guard(dropped.clone());
                let at = Instant::now() + std::time::Duration::from_millis(30);
                let never = async move {
                    let _g = g;
                    ev.wait().await
                };
                assert!(deadline(at, never).await.is_none());
                assert!(Instant::now() >= at, "returned before the deadline");
                assert!(dropped.get(), "the timed-out future was dropped");
                let past = Instant::now() - std::time::Duration::from_millis(1);
                assert_eq!(deadline(past, async { 3 }).await, Some(3), "a ready future wins a passed deadline");
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
