//! One executor of a `run`: opens its share of the connections in waves, waits for the
//! process's start, drives every connection through warm-up and window, and keeps them
//! open a little past the window before it hands its counts back.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelog_client::codec::LEADERSHIP_VERSION;
use hdrhistogram::Histogram;

use super::drive::{drive, Local};
use super::link::{connect, Link};
use super::{Global, RunConfig};

/// Connections one executor opens concurrently (the server's accept backlog is 4096).
const CONNECT_CONCURRENCY: usize = 256;

pub(super) struct ExecResult {
    pub(super) hist: Histogram<u64>,
    pub(super) acked: u64,
    pub(super) acked_total: u64,
    pub(super) errors: Vec<(u16, u64)>,
    pub(super) timeouts: u64,
    pub(super) unknown: u64,
    pub(super) reconnects: u64,
}

pub(super) async fn executor(cfg: RunConfig, g: Arc<Global>, first: usize, share: usize) -> ExecResult {
    let local = Rc::new(Local::new());
    let conns = connect_all(&cfg, &g, &local, first, share).await;
    g.finished_connecting.fetch_add(1, Ordering::AcqRel);
    while !g.go.load(Ordering::Acquire) {
        glommio::timer::sleep(Duration::from_millis(2)).await;
    }
    let start = g.start.lock().unwrap().expect("set before go");
    drive_all(&cfg, &local, conns, start).await;
    let errors = local.errors.borrow().clone();
    let hist = local.hist.borrow().clone();
    ExecResult {
        hist,
        acked: local.acked.get(),
        acked_total: local.acked_total.get(),
        errors,
        timeouts: local.timeouts.get(),
        unknown: local.unknown.get(),
        reconnects: local.reconnects.get(),
    }
}

/// Opens connections `first..first + share`, CONNECT_CONCURRENCY at a time, counting
/// them (and the failures) in `g`; returns those that opened.
async fn connect_all(cfg: &RunConfig, g: &Arc<Global>, local: &Rc<Local>, first: usize, share: usize) -> Vec<Link> {
    let conns: Rc<RefCell<Vec<Link>>> = Rc::default();
    let connect_until = Instant::now() + cfg.connect_deadline;
    let mut idx = first;
    while idx < first + share {
        let wave: Vec<_> = (idx..(idx + CONNECT_CONCURRENCY).min(first + share))
            .map(|i| {
                let (cfg, g, conns, local) = (cfg.clone(), g.clone(), conns.clone(), local.clone());
                glommio::spawn_local(async move {
                    if Instant::now() > connect_until {
                        g.connect_failures.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    match connect(&cfg, i, 0, &local.seen).await {
                        Ok((r, w, alt, hello)) => {
                            g.connected.fetch_add(1, Ordering::Relaxed);
                            let (home, role, epoch) = (hello.home, hello.role, hello.epoch);
                            let leases = hello.version >= LEADERSHIP_VERSION;
                            conns.borrow_mut().push(Link { r, w, i, alt, home, role, epoch, leases });
                        }
                        Err(e) => {
                            if g.connect_failures.fetch_add(1, Ordering::Relaxed) < 3 {
                                crate::log!("connection {i}: {e}");
                            }
                        }
                    }
                })
            })
            .collect();
        idx += wave.len();
        for t in wave {
            t.await;
        }
    }
    conns.take()
}

/// Drives every connection from `start` through warm-up and window, then lingers.
async fn drive_all(cfg: &RunConfig, local: &Rc<Local>, conns: Vec<Link>, start: Instant) {
    let measure_from = start + cfg.warmup;
    let measure_to = measure_from + cfg.duration;
    let n_total = cfg.connections.max(1);
    let share = conns.len();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|conn| {
            let (cfg, local, i) = (cfg.clone(), local.clone(), conn.i);
            // Open loop: connection i sends every n_total/rate seconds, phase-shifted.
            let schedule = cfg.rate.map(|rate| {
                let interval = Duration::from_secs_f64(n_total as f64 / rate);
                (interval, start + interval.mul_f64(i as f64 / n_total as f64))
            });
            glommio::spawn_local(drive(conn, cfg, local, schedule, measure_from, measure_to))
        })
        .collect();
    // A connection whose window is over stays open until this executor's last answer is
    // in, and until twice the slowest answer has passed since the window's end (at most
    // LINGER_MAX): closing thousands of connections costs the server CPU, and the appends
    // of other connections (and of other load-generator processes, whose windows end at
    // the same time) still in flight would pay for it — a tail of the benchmark's own
    // making.
    let mut open = Vec::with_capacity(share);
    for t in tasks {
        open.extend(t.await);
    }
    let slowest = Duration::from_micros(local.hist.borrow().max());
    let linger_to = measure_to + (slowest * 2).min(cfg.timeout).min(LINGER_MAX);
    if let Some(left) = linger_to.checked_duration_since(Instant::now()) {
        glommio::timer::sleep(left).await;
    }
    drop(open);
}

/// The longest a process keeps its connections open after its window (a failover run's
/// slowest answer can take seconds).
const LINGER_MAX: Duration = Duration::from_secs(5);
