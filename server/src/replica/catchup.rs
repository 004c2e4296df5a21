//! A follower caught up from the leader's segments: one that was away longer than the
//! recent batches in memory cover, or one that starts with an empty data directory (a
//! node rebuilt from its peer). The leader paces it to `--catch-up-mb-per-s` (its reads
//! and sends compete with the appends for the shard's executor and the disk) and reports
//! it: a log line every `REPORT_EVERY` (where it is, rate, time left), metrics
//! (`corelog_rebuild_bytes_total`, `corelog_rebuild_remaining_bytes`) and `/health`
//! (`rebuilding`) while it lasts.

use std::time::{Duration, Instant};

use crate::shard::Shard;

const REPORT_EVERY: Duration = Duration::from_secs(2);

/// What a catch-up has moved so far, and the figures its reports print.
struct Tally {
    started: Instant,
    from: u64,
    /// Record bytes and records so far.
    bytes: u64,
    records: u64,
    /// At the last report: when, and `bytes`, `records` then.
    last: (Instant, u64, u64),
}

impl Tally {
    fn new(from: u64) -> Tally {
        let now = Instant::now();
        Tally { started: now, from, bytes: 0, records: 0, last: (now, 0, 0) }
    }

    fn add(&mut self, count: u32, bytes: usize) {
        self.bytes += bytes as u64;
        self.records += count as u64;
    }

    /// Bytes left for `behind` records, from the mean record size so far.
    fn left(&self, behind: u64) -> u64 {
        (behind as f64 * self.bytes as f64 / self.records.max(1) as f64) as u64
    }

    /// When a report is due: "X MB/s, Y records/s; about T s left" since the last one.
    fn report(&mut self, behind: u64) -> Option<String> {
        let now = Instant::now();
        let secs = now.duration_since(self.last.0).as_secs_f64();
        if secs < REPORT_EVERY.as_secs_f64() {
            return None;
        }
        assert!(self.bytes >= self.last.1 && self.records >= self.last.2, "catch-up tally went backwards");
        let (mb_s, rec_s) =
            ((self.bytes - self.last.1) as f64 / secs / 1e6, (self.records - self.last.2) as f64 / secs);
        let eta = if rec_s > 0.0 { format!("about {:.0} s left", behind as f64 / rec_s) } else { "no progress".into() };
        self.last = (now, self.bytes, self.records);
        Some(format!("{mb_s:.1} MB/s, {rec_s:.0} records/s; {eta}"))
    }

    /// "offsets F..E, X MB in T s (R MB/s)".
    fn summary(&self, end: u64) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let mb = self.bytes as f64 / 1e6;
        format!("offsets {}..{end}, {mb:.1} MB in {secs:.1} s ({:.1} MB/s)", self.from, mb / secs.max(1e-9))
    }
}

pub struct CatchUp {
    shard: u16,
    tally: Tally,
    /// Bytes per second (0: as fast as the link takes them).
    rate: f64,
    /// `corelog_rebuild_remaining_bytes`, 0 again when the catch-up ends either way.
    remaining: metrics::Gauge,
}

impl CatchUp {
    pub fn start(shard: &Shard, cursor: u64) -> CatchUp {
        let end = shard.log().next_offset();
        assert!(cursor < end, "shard {}: a catch-up from {cursor}, at or past the log's end {end}", shard.id());
        log::info!(
            "shard {}: catching the follower up from the segments at offset {cursor} (not in the {} bytes of recent batches kept in memory): {} records behind{}",
            shard.id(),
            shard.cfg().recent_bytes,
            end - cursor,
            match shard.cfg().catch_up_rate {
                r if r > 0.0 => format!(", at most {:.1} MB/s", r / 1e6),
                _ => String::new(),
            }
        );
        crate::metrics::rebuilding(true);
        CatchUp {
            shard: shard.id(),
            tally: Tally::new(cursor),
            rate: shard.cfg().catch_up_rate,
            remaining: shard.metrics().rebuild_remaining.clone(),
        }
    }

    /// Waits until the next read keeps the catch-up within its rate.
    pub async fn pace(&self) {
        if self.rate > 0.0 {
            let due = self.tally.started + Duration::from_secs_f64(self.tally.bytes as f64 / self.rate);
            let now = Instant::now();
            if due > now {
                glommio::timer::sleep(due - now).await;
            }
        }
    }

    /// `count` records of `bytes` sent; the follower's next offset is now `cursor`.
    pub fn sent(&mut self, shard: &Shard, count: u32, bytes: usize, cursor: u64) {
        self.tally.add(count, bytes);
        // Catch-up batches follow one another gap-free from where it started.
        assert_eq!(
            cursor,
            self.tally.from + self.tally.records,
            "shard {}: catch-up cursor off its batches",
            self.shard
        );
        shard.metrics().rebuild_bytes.increment(bytes as u64);
        let behind = shard.log().next_offset().saturating_sub(cursor);
        let left = self.tally.left(behind);
        self.remaining.set(left as f64);
        if let Some(r) = self.tally.report(behind) {
            log::info!(
                "shard {}: catching the follower up: at offset {cursor} of {}, {behind} records (≈ {:.1} MB) behind; {r}",
                self.shard,
                shard.log().next_offset(),
                left as f64 / 1e6
            );
        }
    }

    /// The follower reached the recent batches in memory (or the link ended).
    pub fn done(self, cursor: u64) {
        log::info!("shard {}: follower caught up from the segments: {}", self.shard, self.tally.summary(cursor));
    }
}

impl Drop for CatchUp {
    fn drop(&mut self) {
        self.remaining.set(0.0);
        crate::metrics::rebuilding(false);
    }
}

/// The follower's side of a catch-up: from its end to the leader's end when the link was
/// made (`target`). Once it has taken `REPORT_EVERY` and is still short, it reports as the
/// leader does (a log line every `REPORT_EVERY`, `corelog_rebuild_bytes_total`,
/// `corelog_rebuild_remaining_bytes`, `rebuilding` on `/health`), and once at the end; a
/// follower that was behind only briefly says nothing.
pub struct Behind {
    shard: u16,
    target: u64,
    tally: Tally,
    reporting: bool,
    remaining: metrics::Gauge,
}

impl Behind {
    /// None when the follower's log already reaches `target`.
    pub fn new(shard: &Shard, from: u64, target: u64) -> Option<Behind> {
        (from < target).then(|| Behind {
            shard: shard.id(),
            target,
            tally: Tally::new(from),
            reporting: false,
            remaining: shard.metrics().rebuild_remaining.clone(),
        })
    }

    /// `count` records of `bytes` staged; the log continues at `next`. False once it
    /// reached the target (drop it then).
    pub fn staged(&mut self, shard: &Shard, count: u32, bytes: usize, next: u64) -> bool {
        self.tally.add(count, bytes);
        debug_assert_eq!(next, self.tally.from + self.tally.records, "shard {}: batches staged with a gap", self.shard);
        let behind = self.target.saturating_sub(next);
        if behind == 0 {
            if self.reporting {
                log::info!(
                    "shard {}: caught up with the leader's end when the link was made: {}",
                    self.shard,
                    self.tally.summary(next)
                );
            }
            return false;
        }
        if self.reporting {
            shard.metrics().rebuild_bytes.increment(bytes as u64);
        }
        let Some(r) = self.tally.report(behind) else { return true };
        if !self.reporting {
            self.reporting = true;
            crate::metrics::rebuilding(true);
        }
        let left = self.tally.left(behind);
        self.remaining.set(left as f64);
        log::info!(
            "shard {}: catching up from the leader: at offset {next} of {}, {behind} records (≈ {:.1} MB) to go; {r}",
            self.shard,
            self.target,
            left as f64 / 1e6
        );
        true
    }
}

impl Drop for Behind {
    fn drop(&mut self) {
        if self.reporting {
            self.remaining.set(0.0);
            crate::metrics::rebuilding(false);
        }
    }
}
