//! The checker: the history against the log read back, and the history's file form.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use corelog_client::Position;

use crate::readback::Logs;
use crate::run::{History, Op, OpResult};

/// A stretch without acknowledgements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub from_us: u64,
    pub to_us: u64,
}

impl Gap {
    pub fn len(&self) -> Duration {
        Duration::from_micros(self.to_us - self.from_us)
    }
    pub fn is_empty(&self) -> bool {
        self.to_us == self.from_us
    }
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ms (from {:.3} s to {:.3} s after the start)",
            self.len().as_millis(),
            self.from_us as f64 / 1e6,
            self.to_us as f64 / 1e6
        )
    }
}

impl History {
    fn ok_done(&self) -> Vec<u64> {
        let mut d: Vec<u64> =
            self.ops.iter().filter(|o| matches!(o.result, OpResult::Ok(_))).map(|o| o.done_us).collect();
        d.sort_unstable();
        d
    }

    /// The write-unavailability window: the largest gap between consecutive ok
    /// completions (over all connections); None with fewer than two oks.
    pub fn unavailability(&self) -> Option<Gap> {
        self.ok_done().windows(2).map(|w| Gap { from_us: w[0], to_us: w[1] }).max_by_key(|g| (g.len(), g.from_us))
    }

    /// From the last ok completed at or before `at_us` to the first completed after it.
    pub fn gap_around(&self, at_us: u64) -> Option<Gap> {
        let d = self.ok_done();
        let i = d.partition_point(|&t| t <= at_us);
        (i > 0 && i < d.len()).then(|| Gap { from_us: d[i - 1], to_us: d[i] })
    }

    /// A change of leader at `at_us`, measured by epochs: from the last acknowledgement
    /// in the epoch that acknowledged last before `at_us` to the first acknowledgement in
    /// a newer epoch (epochs from the read-back `logs`, which must hold every ok). Unlike
    /// [`History::gap_around`], answers the old leader sent before it died but the
    /// client read only after `at_us` do not count as writes resumed. None: no ok before
    /// `at_us` or none in a newer epoch.
    pub fn takeover(&self, logs: &Logs, at_us: u64) -> Option<Gap> {
        let oks: Vec<(u64, u32)> = self
            .ops
            .iter()
            .filter_map(|o| match o.result {
                OpResult::Ok(p) => Some((o.done_us, logs.get(&p.shard)?.get(p.offset as usize)?.epoch)),
                _ => None,
            })
            .collect();
        let old = oks.iter().filter(|(t, _)| *t <= at_us).max_by_key(|(t, _)| *t)?.1;
        let from_us = oks.iter().filter(|(_, e)| *e <= old).map(|(t, _)| *t).max()?;
        let to_us = oks.iter().filter(|(_, e)| *e > old).map(|(t, _)| *t).min()?;
        Some(Gap { from_us, to_us: to_us.max(from_us) })
    }

    /// Oks invoked after `at_us`.
    pub fn oks_after(&self, at_us: u64) -> usize {
        self.ops.iter().filter(|o| matches!(o.result, OpResult::Ok(_)) && o.invoke_us > at_us).count()
    }

    /// The operations around `at_us` (± `n` by invocation time), one line each.
    pub fn around(&self, at_us: u64, n: usize) -> String {
        let i = self.ops.partition_point(|o| o.invoke_us < at_us);
        let (lo, hi) = (i.saturating_sub(n), (i + n).min(self.ops.len()));
        self.ops[lo..hi].iter().map(|o| format!("    {}\n", op_line(o))).collect()
    }

    /// Writes the history (see the module docs); with `logs` (the read-back), the
    /// `shard`, `found` and `foreign` lines too.
    pub fn write(&self, path: &Path, logs: Option<&Logs>) -> std::io::Result<()> {
        let mut s = String::from(
            "# corelog workload history v1: op CONN SEQ INVOKE_US DONE_US PAYLOAD (ok SHARD OFFSET | failed REASON | unknown REASON)\n",
        );
        let _ = writeln!(s, "tag {}", self.tag);
        for o in &self.ops {
            let _ = writeln!(s, "{}", op_line(o));
        }
        if let Some(logs) = logs {
            let prefix = format!("{}-", self.tag);
            let mut stored = HashMap::new();
            for (&shard, recs) in logs {
                let start = recs.iter().position(|r| r.payload.starts_with(prefix.as_bytes())).unwrap_or(recs.len());
                let _ = writeln!(s, "shard {shard} start {start} len {}", recs.len());
                for r in &recs[start..] {
                    if r.payload.starts_with(prefix.as_bytes()) {
                        stored.insert(r.payload.as_slice(), (shard, r.offset));
                    } else {
                        let _ = writeln!(s, "foreign {shard} {}", r.offset);
                    }
                }
            }
            for o in self.ops.iter().filter(|o| matches!(o.result, OpResult::Unknown(_))) {
                if let Some((shard, offset)) = stored.get(o.payload.as_slice()) {
                    let _ = writeln!(s, "found {} {} {shard} {offset}", o.conn, o.seq);
                }
            }
        }
        std::fs::write(path, s)
    }
}

fn payload_text(p: &[u8]) -> String {
    if !p.is_empty() && p.iter().all(|b| b.is_ascii_graphic()) {
        String::from_utf8_lossy(p).into_owned()
    } else {
        p.iter().fold(String::from("hex:"), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

fn op_line(o: &Op) -> String {
    let r = match &o.result {
        OpResult::Ok(p) => format!("ok {} {}", p.shard, p.offset),
        OpResult::Failed(e) => format!("failed {}", e.replace('\n', " ")),
        OpResult::Unknown(e) => format!("unknown {}", e.replace('\n', " ")),
    };
    format!("op {} {} {} {} {} {r}", o.conn, o.seq, o.invoke_us, o.done_us, payload_text(&o.payload))
}

/// What the checker found, when the history and the log agree.
#[derive(Debug, Clone)]
pub struct Report {
    pub ops: usize,
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
    /// Unknown ones found in the log.
    pub unknown_present: usize,
    /// Records of other writers after the run's first record (not checked).
    pub foreign: usize,
    /// The largest gap between consecutive ok completions.
    pub window: Option<Gap>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cross-check OK: {} operations: {} acknowledged, all read back at their positions; {} failed, none in the log; {} unknown, {} of them in the log; no payload stored twice",
            self.ops, self.ok, self.failed, self.unknown, self.unknown_present
        )?;
        if self.foreign > 0 {
            write!(f, "; {} records of other writers", self.foreign)?;
        }
        Ok(())
    }
}

/// Checks `h` against the logs read back from the surviving node (see the module docs).
/// Payloads starting with `TAG-` belong to the run. On a violation, the error names it,
/// the operation(s) involved and the history around them (± 5 operations by time).
pub fn check(h: &History, logs: &Logs) -> Result<Report, String> {
    let prefix = format!("{}-", h.tag);
    let by_payload: HashMap<&[u8], &Op> = h.ops.iter().map(|o| (o.payload.as_slice(), o)).collect();
    let context = |o: &Op| format!("    {}\n  history around it:\n{}", op_line(o), h.around(o.invoke_us, 5));
    let mut stored: HashMap<&[u8], Position> = HashMap::new();
    let mut foreign = 0;
    for (&shard, recs) in logs {
        let mut ours = false;
        for (i, r) in recs.iter().enumerate() {
            if r.offset != i as u64 {
                return Err(format!("the log of shard {shard} has offset {} where {i} was due", r.offset));
            }
            let pos = Position { shard, offset: r.offset };
            if !r.payload.starts_with(prefix.as_bytes()) {
                foreign += usize::from(ours);
                continue;
            }
            ours = true;
            let Some(o) = by_payload.get(r.payload.as_slice()) else {
                return Err(format!(
                    "PHANTOM: {pos:?} holds {:?}, a payload of this run that no operation sent",
                    payload_text(&r.payload)
                ));
            };
            if let Some(first) = stored.insert(&r.payload, pos) {
                return Err(format!("DUPLICATE: stored twice, at {first:?} and at {pos:?}:\n{}", context(o)));
            }
        }
    }
    let at = |pos: &Position| logs.get(&pos.shard).and_then(|r| r.get(pos.offset as usize)).map(|r| &r.payload);
    let mut r = Report { ops: h.ops.len(), ok: 0, failed: 0, unknown: 0, unknown_present: 0, foreign, window: None };
    let mut positions: HashMap<Position, &Op> = HashMap::new();
    for o in &h.ops {
        match &o.result {
            OpResult::Ok(pos) => {
                r.ok += 1;
                if let Some(other) = positions.insert(*pos, o) {
                    return Err(format!(
                        "TWO ACKS at {pos:?}:\n    {}\n{}",
                        op_line(other),
                        context(o).trim_start_matches('\n')
                    ));
                }
                match at(pos) {
                    Some(p) if *p == o.payload => {}
                    Some(p) => {
                        return Err(format!(
                            "LOST: acknowledged at {pos:?}, which holds {:?}:\n{}",
                            payload_text(p),
                            context(o)
                        ))
                    }
                    None => {
                        return Err(format!("LOST: acknowledged at {pos:?}, which is not in the log:\n{}", context(o)))
                    }
                }
            }
            OpResult::Failed(_) => {
                r.failed += 1;
                if let Some(pos) = stored.get(o.payload.as_slice()) {
                    return Err(format!("FAILED BUT WRITTEN: refused, yet stored at {pos:?}:\n{}", context(o)));
                }
            }
            OpResult::Unknown(_) => {
                r.unknown += 1;
                r.unknown_present += usize::from(stored.contains_key(o.payload.as_slice()));
            }
        }
    }
    r.window = h.unavailability();
    Ok(r)
}
