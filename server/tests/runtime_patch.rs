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
//! The patch's sleep path (an executor with nothing to run submits the SQEs its tasks
//! queued in the same `io_uring_enter` that sleeps, and orders its "I sleep" against
//! wakers with a fence, not `membarrier`) is held to the three ways a sleeping executor
//! is woken: its own I/O (a socket's readiness poll and a DMA write, each submitted with
//! the sleep that waits for it), a result from the blocking-thread pool, and a message
//! from another executor. Checked by mutation: with the queued SQEs left unsubmitted by
//! the sleep (`wait_linked` waiting without submitting) the socket test hangs and fails.
//! A missing fence is a race that x86 shows rarely; these tests only show that the wake
//! paths still wake.
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

/// `finishes`, for a scenario that is one future on a fresh executor.
fn on_executor<T, Fut>(what: &str, make: impl FnOnce() -> Fut + Send + 'static) -> (T, Duration)
where
    T: Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    finishes(what, || LocalExecutorBuilder::default().spawn(make).unwrap().join().unwrap())
}

#[test]
fn short_timers_due_before_the_executor_sleeps_still_wake_it() {
    const SLEEPS: u32 = 20_000;
    let (slept, took) = on_executor("20,000 sleeps of 0-49 µs", || async {
        let mut n = 0u32;
        for i in 0..SLEEPS {
            // 0 µs: due before the turn that arms it ends; up to 49 µs: due around the
            // moment the executor decides whether to sleep.
            glommio::timer::sleep(Duration::from_micros((i % 50) as u64)).await;
            n += 1;
        }
        n
    });
    assert_eq!(slept, SLEEPS);
    eprintln!("{SLEEPS} short sleeps in {took:?}");
}

/// Round trips with a client thread over loopback, and a DMA write per round trip: each
/// read of the executor's side finds nothing, queues a readiness poll and sleeps with it;
/// each write is awaited the same way.
#[test]
fn io_queued_by_tasks_is_submitted_by_the_sleep_that_waits_for_it() {
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    use std::io::{Read, Write};
    const TRIPS: u32 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dma");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 4];
        for i in 0..TRIPS {
            s.write_all(&i.to_le_bytes()).unwrap();
            s.read_exact(&mut b).unwrap();
            assert_eq!(u32::from_le_bytes(b), i + 1, "trip {i}: wrong answer");
        }
    });
    let (served, took) = on_executor("5,000 socket round trips and DMA writes", move || async move {
        let std_sock = listener.accept().unwrap().0;
        std_sock.set_nonblocking(true).unwrap();
        let mut s = unsafe {
            use std::os::fd::{FromRawFd, IntoRawFd};
            glommio::net::TcpStream::from_raw_fd(std_sock.into_raw_fd())
        };
        let f = glommio::io::DmaFile::create(&path).await.unwrap();
        let mut b = [0u8; 4];
        let mut n = 0u32;
        for i in 0..TRIPS {
            s.read_exact(&mut b).await.unwrap();
            let got = u32::from_le_bytes(b);
            assert_eq!(got, i, "trip {i}: wrong request");
            let mut page = f.alloc_dma_buffer(4096);
            page.as_bytes_mut().fill(b[0]);
            assert_eq!(f.write_at(page, u64::from(i % 16) * 4096).await.unwrap(), 4096);
            s.write_all(&(got + 1).to_le_bytes()).await.unwrap();
            n += 1;
        }
        f.close().await.unwrap();
        n
    });
    client.join().unwrap();
    assert_eq!(served, TRIPS);
    eprintln!("{TRIPS} round trips with a DMA write each in {took:?}");
}

/// Work handed to the blocking-thread pool: the executor sleeps while the thread works,
/// and the result's arrival must wake it.
#[test]
fn blocking_pool_results_wake_a_sleeping_executor() {
    const JOBS: u64 = 3_000;
    let (sum, took) = on_executor("3,000 blocking jobs", || async {
        let mut sum = 0u64;
        for i in 0..JOBS {
            sum += glommio::executor()
                .spawn_blocking(move || {
                    // Long enough for the executor to be asleep when it ends.
                    std::thread::sleep(Duration::from_micros(50));
                    i
                })
                .await;
        }
        sum
    });
    assert_eq!(sum, JOBS * (JOBS - 1) / 2);
    eprintln!("{JOBS} blocking jobs in {took:?}");
}

/// Two executors on their own threads play ping-pong over glommio's shared channels
/// (capacity 1): each waits asleep for the other's message.
#[test]
fn another_executors_message_wakes_a_sleeping_executor() {
    use glommio::channels::shared_channel;
    const ROUNDS: u64 = 20_000;
    let (to_b, from_a) = shared_channel::new_bounded::<u64>(1);
    let (to_a, from_b) = shared_channel::new_bounded::<u64>(1);
    let (last, took) = finishes("20,000 ping-pongs between two executors", move || {
        let b = LocalExecutorBuilder::default()
            .spawn(move || async move {
                let (rx, tx) = (from_a.connect().await, to_a.connect().await);
                while let Some(v) = rx.recv().await {
                    tx.send(v + 1).await.unwrap();
                }
            })
            .unwrap();
        let a = LocalExecutorBuilder::default()
            .spawn(move || async move {
                let (tx, rx) = (to_b.connect().await, from_b.connect().await);
                let mut v = 0u64;
                for i in 0..ROUNDS {
                    tx.send(v).await.unwrap();
                    v = rx.recv().await.unwrap();
                    assert_eq!(v, 2 * i + 1, "round {i}");
                    v += 1;
                }
                drop(tx);
                v
            })
            .unwrap();
        let v = a.join().unwrap();
        b.join().unwrap();
        v
    });
    assert_eq!(last, 2 * ROUNDS);
    eprintln!("{ROUNDS} ping-pongs in {took:?}");
}
