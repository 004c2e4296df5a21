//! Graceful shutdown on SIGTERM or SIGINT (control plane: one thread, atomics only).
//!
//! 1. The first signal drains: every shard refuses new appends (`ShuttingDown`, nothing
//!    written) and closes new client connections at accept; what was taken is still
//!    written, replicated and answered (or fails as it would, e.g. `ReplicationTimeout`).
//! 2. Once a shard has answered everything it took, its client connections send what
//!    they hold and close their TLS sessions; the shard reports itself drained.
//! 3. When every shard is drained the commit loops stop before their next write and the
//!    write in flight (if any) finishes its fdatasync.
//! 4. Each shard seals its last segment (its index file, a checkpoint at the next offset:
//!    `Shard::seal_at_stop`), and the process exits 0: the next start finds no torn tail
//!    and reads no tail at all, whatever the log's length.
//!
//! A second signal, or `--shutdown-timeout-ms` passing first, exits at once with status
//! 1 — as safe as kill -9 (nothing acknowledged is lost), only less tidy.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coord::cell::ControlCell;

/// How long the last write may take to finish once the commit loops stop.
const LAST_WRITE: Duration = Duration::from_secs(5);
/// How long sealing the last segments may take after that (an index file and a
/// checkpoint per shard: tens of MB with a million streams).
const SEAL: Duration = Duration::from_secs(10);

fn set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise the set we own.
    unsafe {
        let mut s: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut s);
        libc::sigaddset(&mut s, libc::SIGTERM);
        libc::sigaddset(&mut s, libc::SIGINT);
        s
    }
}

/// Blocks SIGTERM and SIGINT in the calling thread and every thread it spawns after:
/// only the shutdown thread takes them (with `sigtimedwait`). Call before any thread
/// is spawned.
pub fn block_signals() {
    let s = set();
    // SAFETY: a valid set; changes this thread's mask only.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &s, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "pthread_sigmask");
}

/// The next SIGTERM/SIGINT within `wait` (None: none came).
fn next_signal(wait: Duration) -> Option<i32> {
    let s = set();
    let ts = libc::timespec { tv_sec: wait.as_secs() as libc::time_t, tv_nsec: wait.subsec_nanos() as libc::c_long };
    // SAFETY: valid set and timespec; no siginfo wanted.
    let sig = unsafe { libc::sigtimedwait(&s, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

fn name(sig: i32) -> &'static str {
    if sig == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}

/// Starts the thread that waits for the signals.
pub fn spawn(ctl: Arc<ControlCell>, deadline: Duration) -> Result<(), String> {
    std::thread::Builder::new()
        .name("shutdown".into())
        .spawn(move || {
            let sig = loop {
                if let Some(s) = next_signal(Duration::from_secs(3600)) {
                    break s;
                }
            };
            run(&ctl, sig, deadline)
        })
        .map(|_| ())
        .map_err(|e| format!("start the shutdown thread: {e}"))
}

fn run(ctl: &ControlCell, sig: i32, deadline: Duration) -> ! {
    log::info!(
        "received {}: shutting down: no new connections or appends, answering what was taken (within {deadline:?}; a second signal exits at once)",
        name(sig)
    );
    ctl.drain();
    let until = Instant::now() + deadline;
    while !ctl.slots.iter().all(|s| s.drained.load(Ordering::SeqCst)) {
        if Instant::now() >= until {
            log::warn!("shutdown: not drained within {deadline:?}; exiting now (as after kill -9: nothing acknowledged is lost)");
            std::process::exit(1);
        }
        if let Some(s) = next_signal(Duration::from_millis(10)) {
            log::warn!("shutdown: second signal ({}); exiting now", name(s));
            std::process::exit(1);
        }
    }
    ctl.stop(); // commit loops write nothing more
    let last = Instant::now() + LAST_WRITE;
    while ctl.slots.iter().any(|s| s.writing.load(Ordering::SeqCst)) {
        if Instant::now() >= last {
            log::warn!("shutdown: a write did not finish within {LAST_WRITE:?}; exiting now");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Each shard now seals its last segment (`Shard::seal_at_stop`): an index file and a
    // checkpoint, so that the next start reads no tail.
    let sealed = Instant::now() + SEAL;
    while !ctl.slots.iter().all(|s| s.sealed_at_stop.load(Ordering::SeqCst)) {
        if Instant::now() >= sealed {
            log::warn!(
                "shutdown: the last segments not sealed within {SEAL:?}; exiting now (the next start scans them)"
            );
            std::process::exit(1);
        }
        if let Some(s) = next_signal(Duration::from_millis(1)) {
            log::warn!("shutdown: second signal ({}); exiting now (the next start scans the last segments)", name(s));
            std::process::exit(1);
        }
    }
    log::info!("shut down cleanly: every append taken was answered, no write in flight, the last segments sealed");
    std::process::exit(0)
}
