//! Single-threaded wake-up primitives for one executor (no atomics, no locks).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Runs `f` until it completes (`Some`) or `at` passes (`None`; `f` is dropped).
pub async fn deadline<F: Future>(at: Instant, f: F) -> Option<F::Output> {
    let left = at.saturating_duration_since(Instant::now());
    futures_lite::future::or(async { Some(f.await) }, async {
        glommio::timer::sleep(left).await;
        None
    })
    .await
}

/// A broadcast event: `wait()` completes after the next `notify()`.
#[derive(Default)]
pub struct Event {
    generation: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl Event {
    pub fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        for w in self.waiters.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Resolves once `notify` has been called after this call.
    pub fn wait(&self) -> EventWait<'_> {
        EventWait { ev: self, seen: self.generation.get() }
    }
}

pub struct EventWait<'a> {
    ev: &'a Event,
    seen: u64,
}

impl Future for EventWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.ev.generation.get() != self.seen {
            return Poll::Ready(());
        }
        // No de-duplication (O(n) per poll): a spurious re-poll adds a waker that the
        // next notify drains.
        self.ev.waiters.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}
