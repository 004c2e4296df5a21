//! Holding the scrubber's reads to a rate.

use std::time::{Duration, Instant};

/// Paces reads to a rate: a read may start once the previous ones' bytes have had their
/// time at the rate. Time spent idle (or reading slowly) earns no credit, so the
/// scrubber never bursts above the rate to catch up.
#[derive(Debug)]
pub struct Pacer {
    bytes_per_s: u64,
    next: Option<Instant>,
}

impl Pacer {
    pub fn new(bytes_per_s: u64) -> Pacer {
        assert!(bytes_per_s > 0, "scrub pacer: a rate of 0 bytes per second never lets a read start");
        Pacer { bytes_per_s, next: None }
    }

    /// How long to wait, from `now`, before a read of `bytes`.
    pub fn take(&mut self, bytes: u64, now: Instant) -> Duration {
        let start = self.next.map_or(now, |n| n.max(now));
        let cost_ns = (bytes as u128 * 1_000_000_000 / self.bytes_per_s as u128).min(u64::MAX as u128) as u64;
        self.next = Some(start + Duration::from_nanos(cost_ns));
        assert!(start >= now, "scrub pacer: a read would start before it is asked for");
        start - now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pacer_spaces_reads_at_the_rate_and_keeps_no_credit_from_idle_time() {
        let mib = 1u64 << 20;
        let mut p = Pacer::new(2 * mib); // 2 MiB/s: a MiB every 500 ms
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(p.take(mib, t0), Duration::ZERO, "the first read at once");
        assert_eq!(p.take(mib, t0), ms(500));
        assert_eq!(p.take(mib, t0 + ms(200)), ms(800), "the third after 1 s");
        // A read that comes late (slow device, idle) earns nothing: the next one still
        // waits a whole MiB's time after it.
        assert_eq!(p.take(mib, t0 + ms(5000)), Duration::ZERO);
        assert_eq!(p.take(mib, t0 + ms(5000)), ms(500));
        assert_eq!(p.take(mib / 2, t0 + ms(6000)), ms(0));
        assert_eq!(p.take(mib, t0 + ms(6000)), ms(250), "half a MiB takes 250 ms");
    }
}
