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

pub struct CatchUp {
    shard: u16,
    started: Instant,
    from: u64,
    /// Record bytes and records sent from the segments so far.
    bytes: u64,
    records: u64,
    /// At the last report: when, and `bytes`, `records` then.
    last: (Instant, u64, u64),
    /// Bytes per second (0: as fast as the link takes them).
    rate: f64,
    /// `corelog_rebuild_remaining_bytes`, 0 again when the catch-up ends either way.
    remaining: metrics::Gauge,
}

impl CatchUp {
    pub fn start(shard: &Shard, cursor: u64) -> CatchUp {
        let end = shard.log.next_offset();
        log::info!(
            "shard {}: catching the follower up from the segments at offset {cursor} (not in the {} bytes of recent batches kept in memory): {} records behind{}",
            shard.id(),
            shard.cfg.recent_bytes,
            end - cursor,
            match shard.cfg.catch_up_rate {
                r if r > 0.0 => format!(", at most {:.1} MB/s", r / 1e6),
                _ => String::new(),
            }
        );
        crate::metrics::rebuilding(true);
        let now = Instant::now();
        CatchUp {
            shard: shard.id(),
            started: now,
            from: cursor,
            bytes: 0,
            records: 0,
            last: (now, 0, 0),
            rate: shard.cfg.catch_up_rate,
            remaining: shard.metrics.rebuild_remaining.clone(),
        }
    }

    /// Waits until the next read keeps the catch-up within its rate.
    pub async fn pace(&self) {
        if self.rate > 0.0 {
            let due = self.started + Duration::from_secs_f64(self.bytes as f64 / self.rate);
            let now = Instant::now();
            if due > now {
                glommio::timer::sleep(due - now).await;
            }
        }
    }

    /// `count` records of `bytes` sent; the follower's next offset is now `cursor`.
    pub fn sent(&mut self, shard: &Shard, count: u32, bytes: usize, cursor: u64) {
        self.bytes += bytes as u64;
        self.records += count as u64;
        shard.metrics.rebuild_bytes.increment(bytes as u64);
        let behind = shard.log.next_offset().saturating_sub(cursor);
        // Bytes left, from the mean record size sent so far.
        let left = (behind as f64 * self.bytes as f64 / self.records.max(1) as f64) as u64;
        self.remaining.set(left as f64);
        let now = Instant::now();
        let secs = now.duration_since(self.last.0).as_secs_f64();
        if secs < REPORT_EVERY.as_secs_f64() {
            return;
        }
        let (mb_s, rec_s) =
            ((self.bytes - self.last.1) as f64 / secs / 1e6, (self.records - self.last.2) as f64 / secs);
        let eta = if rec_s > 0.0 { format!("about {:.0} s left", behind as f64 / rec_s) } else { "no progress".into() };
        log::info!(
            "shard {}: catching the follower up: at offset {cursor} of {}, {behind} records (≈ {:.1} MB) behind; {:.1} MB/s, {rec_s:.0} records/s; {eta}",
            self.shard,
            shard.log.next_offset(),
            left as f64 / 1e6,
            mb_s
        );
        self.last = (now, self.bytes, self.records);
    }

    /// The follower reached the recent batches in memory (or the link ended).
    pub fn done(self, cursor: u64) {
        let secs = self.started.elapsed().as_secs_f64();
        log::info!(
            "shard {}: follower caught up from the segments: offsets {}..{cursor}, {:.1} MB in {secs:.1} s ({:.1} MB/s)",
            self.shard,
            self.from,
            self.bytes as f64 / 1e6,
            self.bytes as f64 / 1e6 / secs.max(1e-9)
        );
    }
}

impl Drop for CatchUp {
    fn drop(&mut self) {
        self.remaining.set(0.0);
        crate::metrics::rebuilding(false);
    }
}
