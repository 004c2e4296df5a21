//! One connection's appends through warm-up and window: open loop waits for each send
//! time, closed loop sends at once; each answer is counted (latency inside the window),
//! and in failover mode a refusal or a lost connection moves the connection on.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelog_client::codec::{self, ErrorCode, Hint, Role};
use corelog_client::leadership::{Seen, Target};
use corelog_runtime::watchdog::Watchdog;
use hdrhistogram::Histogram;

use super::answer::{answer, Answer, NoAnswer};
use super::link::{reconnect, Link, BACKOFF_START};
use super::{new_hist, RunConfig, HIST_MAX_US};

/// What one executor's connections count into and share (one thread: cells suffice).
pub(super) struct Local {
    pub(super) hist: RefCell<Histogram<u64>>,
    pub(super) acked: Cell<u64>,
    pub(super) acked_total: Cell<u64>,
    pub(super) errors: RefCell<Vec<(u16, u64)>>,
    pub(super) timeouts: Cell<u64>,
    pub(super) unknown: Cell<u64>,
    pub(super) reconnects: Cell<u64>,
    /// Stream names per (shard, shard count), made on first use.
    names: RefCell<StreamNames>,
    /// Failover: what answers showed about leadership, shared by this executor's
    /// connections.
    pub(super) seen: RefCell<Seen>,
}

/// Stream names by (shard, shard count).
type StreamNames = std::collections::HashMap<(u16, u16), Rc<Vec<String>>>;

impl Local {
    pub(super) fn new() -> Local {
        Local {
            hist: RefCell::new(new_hist()),
            acked: Cell::new(0),
            acked_total: Cell::new(0),
            errors: Default::default(),
            timeouts: Cell::new(0),
            unknown: Cell::new(0),
            reconnects: Cell::new(0),
            names: Default::default(),
            seen: Default::default(),
        }
    }

    /// The names among `s0..s{n-1}` that live on `home.0` of `home.1` shards.
    fn names(&self, n: u32, home: (u16, u16)) -> Rc<Vec<String>> {
        let mut m = self.names.borrow_mut();
        m.entry(home)
            .or_insert_with(|| {
                let all = (0..n).map(|k| format!("s{k}"));
                Rc::new(all.filter(|s| codec::stream_shard(s.as_bytes(), home.1.max(1)) == home.0).collect())
            })
            .clone()
    }

    /// One more refusal with `code` inside the window.
    fn count_error(&self, code: u16) {
        let mut e = self.errors.borrow_mut();
        match e.iter_mut().find(|(c, _)| *c == code) {
            Some(x) => x.1 += 1,
            None => e.push((code, 1)),
        }
    }
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// A fresh producer for connection `i`: an id from the clock, the process and `i`.
fn new_producer(i: usize) -> codec::ProducerSeq {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(i);
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    codec::ProducerSeq { id: h.finish(), seq: 0 }
}

/// Drives connection `c` until `measure_to`, counting into `local`; `schedule` (open
/// loop) is its send interval and first send time. Returns the connection, still open,
/// or None when its run ended early (a fault outside failover mode, no stream on its
/// shard, or no node to reconnect to before the end).
pub(super) async fn drive(
    mut c: Link,
    cfg: RunConfig,
    local: Rc<Local>,
    schedule: Option<(Duration, Instant)>,
    measure_from: Instant,
    measure_to: Instant,
) -> Option<Link> {
    let mut d = Driver::new(c.i, cfg, local, schedule, (measure_from, measure_to));
    while let Some(t0) = d.send_time().await {
        if !d.encode(&c) {
            return None;
        }
        let after = d.exchange(&mut c, t0).await?;
        if d.producer.is_some() && (after.failed || after.move_to.is_some()) {
            d.producer = Some(new_producer(c.i));
        }
        if let Some(to) = after.move_to {
            if !reconnect(&mut c, to, &d.cfg, &d.local.seen, (after.wait, &mut d.backoff), d.measure_to).await {
                return None;
            }
            bump(&d.local.reconnects);
        }
    }
    Some(c)
}

/// What one connection carries from one append to the next (the connection itself is
/// replaced when it reconnects).
struct Driver {
    cfg: RunConfig,
    local: Rc<Local>,
    payload: Vec<u8>,
    /// The append being sent.
    frame: Vec<u8>,
    req_id: u64,
    producer: Option<codec::ProducerSeq>,
    /// Open loop: the send interval and the next intended send time.
    interval: Option<Duration>,
    intended: Option<Instant>,
    /// Round-robin index or xorshift state.
    pick: u64,
    backoff: Duration,
    watchdog: Watchdog,
    measure_from: Instant,
    measure_to: Instant,
}

/// What an append's outcome asks of its connection.
struct After {
    /// The append was refused: its producer may not go on.
    failed: bool,
    /// Failover: the alternative to reconnect to (None: stay).
    move_to: Option<usize>,
    /// Failover: the pause before reconnecting (a refusal's retry hint; else the back-off).
    wait: Option<Duration>,
}

impl Driver {
    fn new(
        i: usize,
        cfg: RunConfig,
        local: Rc<Local>,
        schedule: Option<(Duration, Instant)>,
        (measure_from, measure_to): (Instant, Instant),
    ) -> Driver {
        let payload = vec![b'x'; cfg.payload_bytes];
        Driver {
            frame: Vec::with_capacity(payload.len() + 16),
            payload,
            req_id: 0,
            producer: cfg.idempotent.then(|| new_producer(i)),
            interval: schedule.map(|s| s.0),
            intended: schedule.map(|s| s.1),
            pick: (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            backoff: BACKOFF_START,
            watchdog: Watchdog::new(),
            cfg,
            local,
            measure_from,
            measure_to,
        }
    }

    /// The time the next append's latency counts from, once it is due: now (closed
    /// loop), or its intended send time, waited for (open loop). None: the window is over.
    async fn send_time(&mut self) -> Option<Instant> {
        let now = Instant::now();
        if now >= self.measure_to {
            return None;
        }
        let t0 = match (self.interval, self.intended) {
            (Some(interval), Some(at)) => {
                if at > now {
                    glommio::timer::sleep(at - now).await;
                }
                self.intended = Some(at + interval);
                at
            }
            _ => now,
        };
        (t0 < self.measure_to).then_some(t0)
    }

    /// Encodes the next append into `frame`: to the next of the streams on `c`'s shard
    /// (when streams are asked for), with its producer's next sequence (when idempotent).
    /// False when none of the streams lives on that shard.
    fn encode(&mut self, c: &Link) -> bool {
        self.frame.clear();
        self.req_id += 1;
        let names = (self.cfg.streams > 0).then(|| self.local.names(self.cfg.streams, c.home));
        let stream = match &names {
            None => None,
            Some(n) if n.is_empty() => {
                crate::log!("connection {}: none of the {} streams lives on shard {}", c.i, self.cfg.streams, c.home.0);
                return false;
            }
            Some(n) => {
                self.pick = if self.cfg.stream_random { xorshift(self.pick) } else { self.pick.wrapping_add(1) };
                Some(codec::StreamReq::new(&n[(self.pick % n.len() as u64) as usize], codec::Expect::Any))
            }
        };
        match (self.producer.as_mut(), stream) {
            (None, None) => codec::encode_append(self.req_id, &self.payload, &mut self.frame),
            (p, stream) => {
                codec::encode_append2(self.req_id, p.as_deref().copied(), stream, &self.payload, &mut self.frame);
                if let Some(p) = p {
                    p.seq += 1;
                }
            }
        }
        true
    }

    /// Sends the encoded append on `c` and counts its outcome (latency from `t0`).
    /// None: the connection's run ends.
    async fn exchange(&mut self, c: &mut Link, t0: Instant) -> Option<After> {
        let mut after = After { failed: false, move_to: None, wait: None };
        if c.w.write(&self.frame).await.is_err() {
            if !self.cfg.failover {
                bump(&self.local.timeouts);
                return None;
            }
            bump(&self.local.unknown); // part of it may have left
            after.move_to = Some(c.alt + 1);
            return Some(after);
        }
        let res = answer(c, &self.cfg, &self.local.seen, &mut self.watchdog).await;
        let done = Instant::now();
        match res {
            Ok(Answer::Appended) => {
                self.backoff = BACKOFF_START;
                bump(&self.local.acked_total);
                if t0 >= self.measure_from {
                    let us = (done - t0).as_micros().clamp(1, HIST_MAX_US as u128) as u64;
                    self.local.hist.borrow_mut().record(us).expect("clamped to bounds");
                    bump(&self.local.acked);
                }
            }
            Ok(Answer::Refused { code, message, hint }) => {
                after.failed = true;
                if t0 >= self.measure_from {
                    self.local.count_error(code);
                }
                if code != ErrorCode::ReplicationTimeout as u16 && code != ErrorCode::Overloaded as u16 {
                    if !self.cfg.failover {
                        return None;
                    }
                    after.wait = hint.filter(|h| h.retry_ms > 0).map(|h| Duration::from_millis(h.retry_ms as u64));
                    match after_refusal(c, &self.cfg, &self.local.seen, (code, &message, hint)) {
                        Some(to) => after.move_to = Some(to),
                        // The same node again, on this connection, after the pause.
                        None => glommio::timer::sleep(after.wait.unwrap_or(self.backoff)).await,
                    }
                }
            }
            Ok(Answer::Probe { .. } | Answer::Other) | Err(NoAnswer::Timeout) => {
                bump(&self.local.timeouts);
                if !self.cfg.failover {
                    return None;
                }
                after.move_to = Some(c.alt + 1);
            }
            Err(NoAnswer::Broken | NoAnswer::Abandoned) => {
                // The connection broke, or was given up, before the answer.
                if !self.cfg.failover {
                    bump(&self.local.timeouts);
                    return None;
                }
                // A follower's connection writes nothing (a node taking over closes it).
                if c.role != Role::Follower {
                    bump(&self.local.unknown);
                }
                after.move_to = Some(c.alt + 1);
            }
        }
        Some(after)
    }
}

/// Failover: the alternative to reconnect to after a refusal (`Seen::after_refusal`):
/// the leader named if it is one of the targets, or the next one; None: the same node,
/// on the same connection.
fn after_refusal(c: &Link, cfg: &RunConfig, seen: &RefCell<Seen>, refusal: (u16, &str, Option<Hint>)) -> Option<usize> {
    let (code, named, hint) = refusal;
    let n = cfg.targets.len();
    let at = cfg.targets[c.alt % n].to_string();
    let code = ErrorCode::from_u16(code);
    let named = if code == Some(ErrorCode::NotLeader) { named } else { "" };
    match seen.borrow_mut().after_refusal(&at, code, named, hint, Instant::now()) {
        Target::Named(a) => {
            let t = a.parse::<SocketAddr>().ok().and_then(|a| cfg.targets.iter().position(|t| *t == a));
            Some(t.unwrap_or(c.alt + 1))
        }
        Target::Stay => None,
        Target::Other => Some(c.alt + 1),
    }
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^ (x << 17)
}
