//! A history-recording closed-loop workload and its checker, for failover tests, the
//! failover bench and `quickstart --failover`.
//!
//! Each connection (its own `Client` over the cluster's addresses, following leadership)
//! keeps one append in flight; payloads are unique (`tag-conn-seq`, padded). Every
//! operation is recorded: invoke and completion time (µs since the start, monotonic) and
//! its outcome — ok at (shard, offset), failed (nothing written), or unknown. After an
//! error the connection goes on with the next payload: nothing is ever re-sent.
//!
//! The checker reads the surviving node's log and verifies: every ok is there at its
//! position with its exact payload; no two oks share a position; no payload of the run is
//! stored twice; no failed one is stored; unknown ones may or may not be.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelog_client::{Client, ClientConfig, Outcome, Position};

#[derive(Clone)]
pub struct Config {
    /// The cluster's client addresses, comma-separated.
    pub addrs: String,
    pub client: ClientConfig,
    pub connections: usize,
    /// Upper bound of the run; `stop` ends it earlier.
    pub duration: Duration,
    pub payload_bytes: usize,
    /// Prefix of every payload (tells runs apart in one log).
    pub tag: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    Ok(Position),
    /// Not written (refused before it was taken).
    Failed(String),
    /// May or may not be in the log.
    Unknown(String),
}

#[derive(Clone, Debug)]
pub struct Op {
    pub conn: u32,
    pub seq: u64,
    pub payload: Vec<u8>,
    pub invoke_us: u64,
    pub done_us: u64,
    pub result: OpResult,
}

#[derive(Default, Debug)]
pub struct History {
    pub ops: Vec<Op>,
}

/// What the checker found (on success).
#[derive(Debug)]
pub struct Report {
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
    /// Unknown ones found in the log.
    pub unknown_present: usize,
}

fn payload(tag: &str, conn: u32, seq: u64, size: usize) -> Vec<u8> {
    let mut p = format!("{tag}-{conn}-{seq}-").into_bytes();
    while p.len() < size {
        p.push(b'.');
    }
    p
}

/// Runs the workload until `duration` passed or `stop` is set. `t0` is the instant the
/// history's times count from.
pub fn run(cfg: &Config, stop: Arc<AtomicBool>, t0: Instant) -> History {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    let ops = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + cfg.duration;
    rt.block_on(async {
        let mut tasks = Vec::new();
        for conn in 0..cfg.connections as u32 {
            let (cfg, stop, ops) = (cfg.clone(), stop.clone(), ops.clone());
            tasks.push(tokio::spawn(async move {
                let us = |at: Instant| at.saturating_duration_since(t0).as_micros() as u64;
                let live = || Instant::now() < end && !stop.load(Ordering::Acquire);
                let mut client = None;
                let mut seq = 0u64;
                let mut mine = Vec::new();
                while live() {
                    let c = match &client {
                        Some(c) => c,
                        None => match Client::connect(&cfg.addrs, &cfg.client).await {
                            Ok(c) => client.insert(c),
                            Err(_) => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                continue;
                            }
                        },
                    };
                    let p = payload(&cfg.tag, conn, seq, cfg.payload_bytes);
                    let invoke = Instant::now();
                    let r = c.append(&p).await;
                    let done = Instant::now();
                    let result = match r {
                        Ok(pos) => OpResult::Ok(pos),
                        Err(e) if e.outcome() == Outcome::NotWritten => OpResult::Failed(e.to_string()),
                        Err(e) => OpResult::Unknown(e.to_string()),
                    };
                    let bad = !matches!(result, OpResult::Ok(_));
                    mine.push(Op { conn, seq, payload: p, invoke_us: us(invoke), done_us: us(done), result });
                    seq += 1;
                    if bad {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                ops.lock().unwrap().extend(mine);
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let mut ops = std::mem::take(&mut *ops.lock().unwrap());
    ops.sort_by_key(|o| (o.invoke_us, o.conn));
    History { ops }
}

/// Every record of every shard of the node at `addr`: shard → (offset, epoch, payload).
pub type Logs = BTreeMap<u16, Vec<(u64, u32, Vec<u8>)>>;

pub async fn read_all(addr: &str, cfg: &ClientConfig) -> Result<Logs, String> {
    let c = Client::connect(addr, cfg).await.map_err(|e| format!("connect {addr}: {e}"))?;
    let shards = c.info().await.shard_count;
    let mut logs = Logs::new();
    for shard in 0..shards {
        let c = Client::connect_shard(addr, shard, cfg).await.map_err(|e| format!("shard {shard}: {e}"))?;
        let mut v = Vec::new();
        loop {
            let from = v.last().map_or(0, |(o, _, _): &(u64, u32, Vec<u8>)| o + 1);
            let recs = c.read(shard, from, 1 << 20).await.map_err(|e| format!("read shard {shard} at {from}: {e}"))?;
            if recs.is_empty() {
                break;
            }
            v.extend(recs.into_iter().map(|r| (r.offset, r.epoch, r.payload)));
        }
        logs.insert(shard, v);
    }
    Ok(logs)
}

impl History {
    /// The history around `at_us` (± `n` operations by invoke time), one line each.
    pub fn around(&self, at_us: u64, n: usize) -> String {
        let i = self.ops.partition_point(|o| o.invoke_us < at_us);
        let lo = i.saturating_sub(n);
        let hi = (i + n).min(self.ops.len());
        self.ops[lo..hi].iter().map(|o| format!("  {}\n", line(o))).collect()
    }

    /// Write-unavailability around `at_us`: from the last ok completed before it to the
    /// first ok completed after it (None if no ok on one side).
    pub fn window_around(&self, at_us: u64) -> Option<Duration> {
        let oks = self.ops.iter().filter(|o| matches!(o.result, OpResult::Ok(_)));
        let before = oks.clone().map(|o| o.done_us).filter(|&t| t <= at_us).max()?;
        let after = oks.map(|o| o.done_us).filter(|&t| t > at_us).min()?;
        Some(Duration::from_micros(after - before))
    }

    pub fn oks_after(&self, at_us: u64) -> usize {
        self.ops.iter().filter(|o| matches!(o.result, OpResult::Ok(_)) && o.invoke_us > at_us).count()
    }

    /// One line per operation (for post-mortems).
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let text: String = self.ops.iter().map(|o| line(o) + "\n").collect();
        std::fs::write(path, text)
    }
}

fn line(o: &Op) -> String {
    let r = match &o.result {
        OpResult::Ok(p) => format!("ok {}:{}", p.shard, p.offset),
        OpResult::Failed(e) => format!("failed ({e})"),
        OpResult::Unknown(e) => format!("unknown ({e})"),
    };
    format!(
        "conn {} seq {} invoke {} µs done {} µs {r} {:?}",
        o.conn,
        o.seq,
        o.invoke_us,
        o.done_us,
        String::from_utf8_lossy(&o.payload)
    )
}

/// Checks `h` against the log read back from the surviving node (see the module docs).
/// Only payloads starting with `tag-` belong to the run.
pub fn check(h: &History, logs: &Logs, tag: &str) -> Result<Report, String> {
    let prefix = format!("{tag}-");
    let mut stored: HashMap<&[u8], Position> = HashMap::new();
    for (&shard, recs) in logs {
        for (offset, _, p) in recs {
            if p.starts_with(prefix.as_bytes()) {
                if let Some(first) = stored.insert(p, Position { shard, offset: *offset }) {
                    return Err(format!(
                        "payload {:?} stored twice: at {first:?} and at {shard}:{offset}",
                        String::from_utf8_lossy(p)
                    ));
                }
            }
        }
    }
    let at = |pos: &Position| -> Option<&[u8]> {
        let recs = logs.get(&pos.shard)?;
        let i = recs.binary_search_by_key(&pos.offset, |r| r.0).ok()?;
        Some(&recs[i].2)
    };
    let fail = |o: &Op, why: String| {
        Err(format!("{why}\n  operation: {}\n  history around it:\n{}", line(o), h.around(o.invoke_us, 5)))
    };
    let (mut ok, mut failed, mut unknown, mut unknown_present) = (0, 0, 0, 0);
    let mut positions: HashMap<Position, &Op> = HashMap::new();
    for o in &h.ops {
        match &o.result {
            OpResult::Ok(pos) => {
                ok += 1;
                if let Some(other) = positions.insert(*pos, o) {
                    return fail(o, format!("two acknowledged appends at {pos:?} (the other: {})", line(other)));
                }
                match at(pos) {
                    Some(p) if p == o.payload.as_slice() => {}
                    Some(p) => {
                        return fail(
                            o,
                            format!(
                                "LOST: acknowledged at {pos:?}, but the log holds {:?} there",
                                String::from_utf8_lossy(p)
                            ),
                        )
                    }
                    None => return fail(o, format!("LOST: acknowledged at {pos:?}, which is not in the log")),
                }
            }
            OpResult::Failed(_) => {
                failed += 1;
                if let Some(pos) = stored.get(o.payload.as_slice()) {
                    return fail(o, format!("a failed (not written) append is in the log at {pos:?}"));
                }
            }
            OpResult::Unknown(_) => {
                unknown += 1;
                unknown_present += usize::from(stored.contains_key(o.payload.as_slice()));
            }
        }
    }
    Ok(Report { ok, failed, unknown, unknown_present })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(conn: u32, seq: u64, t: u64, r: OpResult) -> Op {
        Op { conn, seq, payload: payload("t", conn, seq, 8), invoke_us: t, done_us: t + 10, result: r }
    }
    fn ok(shard: u16, offset: u64) -> OpResult {
        OpResult::Ok(Position { shard, offset })
    }
    fn log(recs: &[(u16, u64, &Op)]) -> Logs {
        let mut l = Logs::new();
        for (s, o, op) in recs {
            l.entry(*s).or_default().push((*o, 1, op.payload.clone()));
        }
        l
    }

    #[test]
    fn a_consistent_history_passes() {
        let a = op(0, 0, 0, ok(0, 0));
        let b = op(1, 0, 5, OpResult::Unknown("closed".into()));
        let c = op(0, 1, 20, OpResult::Failed("NotLeader".into()));
        let d = op(1, 1, 30, ok(0, 2));
        let h = History { ops: vec![a.clone(), b.clone(), c, d.clone()] };
        let r = check(&h, &log(&[(0, 0, &a), (0, 1, &b), (0, 2, &d)]), "t").unwrap();
        assert_eq!((r.ok, r.failed, r.unknown, r.unknown_present), (2, 1, 1, 1));
        assert_eq!(h.window_around(15), Some(Duration::from_micros(30)));
    }

    #[test]
    fn a_lost_or_swapped_ack_fails() {
        let a = op(0, 0, 0, ok(0, 0));
        let b = op(1, 0, 5, ok(0, 1));
        let h = History { ops: vec![a.clone(), b.clone()] };
        assert!(check(&h, &log(&[(0, 0, &a)]), "t").unwrap_err().contains("LOST"));
        let e = check(&h, &log(&[(0, 0, &b), (0, 1, &a)]), "t").unwrap_err();
        assert!(e.contains("LOST") && e.contains("history around it"), "{e}");
    }

    #[test]
    fn duplicates_and_written_failures_fail() {
        let a = op(0, 0, 0, ok(0, 0));
        let f = op(1, 0, 5, OpResult::Failed("Unavailable".into()));
        let h = History { ops: vec![a.clone(), f.clone()] };
        assert!(check(&h, &log(&[(0, 0, &a), (0, 1, &a)]), "t").unwrap_err().contains("twice"));
        assert!(check(&h, &log(&[(0, 0, &a), (1, 0, &f)]), "t").unwrap_err().contains("failed (not written)"));
        let twice = History { ops: vec![a.clone(), op(2, 0, 9, ok(0, 0))] };
        assert!(check(&twice, &log(&[(0, 0, &a)]), "t").is_err());
    }
}
