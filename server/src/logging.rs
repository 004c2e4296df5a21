//! Server log lines on stderr, through the `log` crate's macros: one line per event,
//! `2026-11-23T17:40:01.123456Z INFO  message` (UTC, microseconds), or with
//! `--log-format json` one JSON object per line: `{"ts":"…","level":"INFO","msg":"…"}`.
//! The messages operators grep for are listed in docs/operations.md §5.1.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

struct Logger {
    json: AtomicBool,
}

static LOGGER: Logger = Logger { json: AtomicBool::new(false) };

impl Log for Logger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= Level::Info
    }
    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let msg = r.args().to_string();
        if r.target().starts_with("glommio") && msg.contains("probing iopoll support") {
            return; // made to fail on purpose: wal::probe::disable_poll_ring
        }
        let fmt = if self.json.load(Ordering::Relaxed) { Format::Json } else { Format::Text };
        let line = line(SystemTime::now(), r.level(), &msg, fmt);
        // One write per line: lines of different threads do not interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Installs the logger (once per process; later calls only change the format).
pub fn init(format: Format) {
    LOGGER.json.store(format == Format::Json, Ordering::Relaxed);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(LevelFilter::Info);
    }
}

/// One formatted line, newline included.
pub fn line(at: SystemTime, level: Level, msg: &str, format: Format) -> String {
    let ts = rfc3339(at);
    match format {
        Format::Text => format!("{ts} {level:<5} {msg}\n"),
        Format::Json => {
            let o = serde_json::json!({ "ts": ts, "level": level.as_str(), "msg": msg });
            format!("{o}\n")
        }
    }
}

/// `YYYY-MM-DDThh:mm:ss.uuuuuuZ` (UTC).
pub fn rfc3339(at: SystemTime) -> String {
    let d = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z", rem / 3600, rem % 3600 / 60, rem % 60, d.subsec_micros())
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_utc_rfc3339() {
        let t = |s: u64, us: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(s) + Duration::from_micros(us));
        assert_eq!(t(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(t(951_782_400, 5), "2000-02-29T00:00:00.000005Z"); // leap day
        assert_eq!(t(1_795_453_201, 123_456), "2026-11-23T17:00:01.123456Z");
        assert_eq!(t(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
    }

    #[test]
    fn text_and_json_lines() {
        let at = UNIX_EPOCH + Duration::from_secs(1_795_453_201);
        assert_eq!(
            line(at, Level::Warn, "shard 0: FENCED", Format::Text),
            "2026-11-23T17:00:01.000000Z WARN  shard 0: FENCED\n"
        );
        let j = line(at, Level::Info, "a \"quoted\"\nline", Format::Json);
        assert!(j.ends_with('\n') && j.matches('\n').count() == 1, "{j}");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["ts"], "2026-11-23T17:00:01.000000Z");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["msg"], "a \"quoted\"\nline");
    }
}
