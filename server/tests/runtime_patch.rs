//! The vendored glommio's reactor patch (third_party/glommio/CORELOG_PATCH.md), held to
//! a behaviour that a benchmark, not a test, first caught going wrong: a user timer
//! armed before the turn's completions are consumed can fire and be consumed before the
//! executor sleeps; the executor must then not sleep (the open-loop load generator slept
//! forever with its pacing timers due). Checked by mutation: with that check removed
//! (`timer_armed = true` in `src/sys/uring.rs`) this test hangs and fails.
//!
//! The patch's other fix (a preemption pending before any task ran must not park the
//! executor with tasks queued) has no test here: a ping-pong of tasks beside short
//! timers did not reproduce the stall with the fix reverted; it showed as 50–150 ms
//! stalls of one-connection benchmark runs.
//!
//! The failure is a hang, so the scenario runs on its own executor thread and the test
//! fails if it has not finished within a limit a hundred times what it needs (the limit
//! detects a hang; it does not time anything).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use glommio::LocalExecutorBuilder;

/// What a scenario may take before it counts as hung.
const HANG: Duration = Duration::from_secs(120);

/// Runs `scenario` on a fresh executor; its output, or a failure naming `what` if it
/// has not finished within `HANG` (the hung executor thread is left behind).
fn finishes<T: Send + 'static>(what: &str, scenario: impl FnOnce() -> T + Send + 'static) -> (T, Duration) {
    let (tx, rx) = mpsc::channel();
    let t = Instant::now();
    std::thread::spawn(move || {
        let out = scenario();
        let _ = tx.send(out);
    });
    match rx.recv_timeout(HANG) {
        Ok(out) => (out, t.elapsed()),
        Err(_) => panic!("{what}: the executor did not finish within {HANG:?}: it went to sleep with work due"),
    }
}

#[test]
fn short_timers_due_before_the_executor_sleeps_still_wake_it() {
    const SLEEPS: u32 = 20_000;
    let (slept, took) = finishes("20,000 sleeps of 0-49 µs", || {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let mut n = 0u32;
                for i in 0..SLEEPS {
                    // 0 µs: due before the turn that arms it ends; up to 49 µs: due
                    // around the moment the executor decides whether to sleep.
                    glommio::timer::sleep(Duration::from_micros((i % 50) as u64)).await;
                    n += 1;
                }
                n
            })
            .unwrap()
            .join()
            .unwrap()
    });
    assert_eq!(slept, SLEEPS);
    eprintln!("{SLEEPS} short sleeps in {took:?}");
}
