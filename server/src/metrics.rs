//! Prometheus metrics: handles created once per shard (a `shard` label), so the hot path
//! only touches uncontended atomics; `/metrics` and `/health` served by small threads.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::coord::cell::ControlCell;
use crate::hist::{self, Hist};
use std::path::{Path, PathBuf};

use metrics::{counter, gauge, Counter, Gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

#[derive(Clone)]
pub struct ShardMetrics {
    pub appends: Counter,
    pub bytes: Counter,
    pub batches: Counter,
    pub errors: Counter,
    pub batch_records: Arc<Hist>,
    pub batch_bytes: Arc<Hist>,
    pub fsync_seconds: Arc<Hist>,
    /// Leader: an append's receipt to its acknowledgement.
    pub append_seconds: Arc<Hist>,
    /// Leader: a batch shipped to the follower's confirmation of it.
    pub repl_rtt_seconds: Arc<Hist>,
    /// Bytes of segment files.
    pub log_bytes: Gauge,
    pub connections: Gauge,
    pub durable_offset: Gauge,
    pub log_end: Gauge,
    pub replication_lag: Gauge,
    pub ktls_active: Gauge,
    pub tls_failures: Counter,
    pub appends_held: Gauge,
    pub handshake_timeouts: Counter,
    pub connections_refused: Counter,
    pub diverged: Counter,
    pub producers: Gauge,
    pub producer_bytes: Gauge,
    pub duplicates: Counter,
    pub streams: Gauge,
    pub stream_bytes: Gauge,
    pub streams_decoded: Gauge,
    pub wrong_versions: Counter,
    pub first_offset: Gauge,
    pub trimmed_segments: Counter,
    pub checkpoints: Counter,
    pub checkpoint_errors: Counter,
    /// Scrubbing (`scrub/`): bytes of sealed segments re-read, rounds over all of them,
    /// damaged spots found (each once), and 1 while damage is known.
    pub scrub_bytes: Counter,
    pub scrub_passes: Counter,
    pub scrub_damage: Counter,
    pub scrub_damaged: Gauge,
    /// Leader: record bytes sent to a follower from the segments (`replica::catchup`),
    /// and an estimate of what is left while that lasts.
    pub rebuild_bytes: Counter,
    pub rebuild_remaining: Gauge,
    /// Consumer groups (`grouplog`, `net::conn::group`): commits made durable, generations
    /// announced to members, records pushed to members.
    pub group_commits: Counter,
    pub group_rebalances: Counter,
    pub group_delivered: Counter,
}

impl ShardMetrics {
    pub fn new(shard: u16) -> ShardMetrics {
        let s = shard.to_string();
        ShardMetrics {
            appends: counter!("corelog_appends_total", "shard" => s.clone()),
            bytes: counter!("corelog_append_bytes_total", "shard" => s.clone()),
            batches: counter!("corelog_batches_total", "shard" => s.clone()),
            errors: counter!("corelog_append_errors_total", "shard" => s.clone()),
            batch_records: Hist::register("corelog_batch_records", format!("shard=\"{s}\""), hist::RECORDS),
            batch_bytes: Hist::register("corelog_batch_bytes", format!("shard=\"{s}\""), hist::BYTES),
            fsync_seconds: Hist::register("corelog_fsync_seconds", format!("shard=\"{s}\""), hist::SECONDS),
            append_seconds: Hist::register("corelog_append_latency_seconds", format!("shard=\"{s}\""), hist::SECONDS),
            repl_rtt_seconds: Hist::register(
                "corelog_replication_rtt_seconds",
                format!("shard=\"{s}\""),
                hist::SECONDS,
            ),
            log_bytes: gauge!("corelog_log_bytes", "shard" => s.clone()),
            connections: gauge!("corelog_connections", "shard" => s.clone()),
            durable_offset: gauge!("corelog_committed_offset", "shard" => s.clone()),
            log_end: gauge!("corelog_log_end_offset", "shard" => s.clone()),
            replication_lag: gauge!("corelog_replication_lag_records", "shard" => s.clone()),
            ktls_active: gauge!("corelog_ktls_active", "shard" => s.clone()),
            tls_failures: counter!("corelog_tls_handshake_failures_total", "shard" => s.clone()),
            appends_held: gauge!("corelog_appends_held", "shard" => s.clone()),
            handshake_timeouts: counter!("corelog_handshake_timeouts_total", "shard" => s.clone()),
            connections_refused: counter!("corelog_connections_refused_total", "shard" => s.clone()),
            diverged: counter!("corelog_replication_diverged_total", "shard" => s.clone()),
            producers: gauge!("corelog_producers", "shard" => s.clone()),
            producer_bytes: gauge!("corelog_producer_state_bytes", "shard" => s.clone()),
            duplicates: counter!("corelog_append_duplicates_total", "shard" => s.clone()),
            streams: gauge!("corelog_streams", "shard" => s.clone()),
            stream_bytes: gauge!("corelog_stream_index_bytes", "shard" => s.clone()),
            streams_decoded: gauge!("corelog_streams_decoded", "shard" => s.clone()),
            wrong_versions: counter!("corelog_append_wrong_version_total", "shard" => s.clone()),
            first_offset: gauge!("corelog_first_offset", "shard" => s.clone()),
            trimmed_segments: counter!("corelog_trimmed_segments_total", "shard" => s.clone()),
            checkpoints: counter!("corelog_checkpoints_total", "shard" => s.clone()),
            checkpoint_errors: counter!("corelog_checkpoint_errors_total", "shard" => s.clone()),
            scrub_bytes: counter!("corelog_scrub_bytes_total", "shard" => s.clone()),
            rebuild_bytes: counter!("corelog_rebuild_bytes_total", "shard" => s.clone()),
            rebuild_remaining: gauge!("corelog_rebuild_remaining_bytes", "shard" => s.clone()),
            scrub_passes: counter!("corelog_scrub_passes_total", "shard" => s.clone()),
            scrub_damage: counter!("corelog_scrub_damage_total", "shard" => s.clone()),
            group_commits: counter!("corelog_group_commits_total", "shard" => s.clone()),
            group_rebalances: counter!("corelog_group_assignments_total", "shard" => s.clone()),
            group_delivered: counter!("corelog_group_delivered_total", "shard" => s.clone()),
            scrub_damaged: gauge!("corelog_scrub_damaged", "shard" => s),
        }
    }
}

/// One consumer group's lag on one shard: records between its lowest committed position
/// and the committed end, and its live members. Labels are bounded by
/// `group::table::MAX_GROUPS` per shard.
pub fn group_lag(group: &str, shard: u16, lag: u64, members: usize) {
    let (g, s) = (group.to_string(), shard.to_string());
    gauge!("corelog_group_lag_records", "group" => g.clone(), "shard" => s.clone()).set(lag as f64);
    gauge!("corelog_group_members", "group" => g, "shard" => s).set(members as f64);
}

/// Installs the recorder. Call once, before any executor starts.
pub fn install() -> PrometheusHandle {
    // Histograms are `hist::Hist` (fixed buckets, nothing kept between scrapes), not the
    // recorder's.
    PrometheusBuilder::new().install_recorder().expect("metrics recorder installed once")
}

/// The recorder's metrics, the histograms, and the data dir's filesystem space.
fn render(handle: &PrometheusHandle, data_dir: &Path) -> String {
    let mut out = handle.render();
    hist::render_all(&mut out);
    if let Some((free, total)) = disk_space(data_dir) {
        let _ = std::fmt::Write::write_fmt(
            &mut out,
            format_args!(
                "# TYPE corelog_disk_free_bytes gauge\ncorelog_disk_free_bytes {free}\n# TYPE corelog_disk_total_bytes gauge\ncorelog_disk_total_bytes {total}\n"
            ),
        );
    }
    out
}

/// (bytes available to this process, total bytes) of the filesystem holding `dir`.
fn disk_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs struct we own.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let f = st.f_frsize as u64;
    Some((st.f_bavail as u64 * f, st.f_blocks as u64 * f))
}

/// Coordinator mode: `role=… epoch=… insync=… degraded=…`, appended to `/health`.
static HEALTH: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

pub fn set_health(line: &str) {
    *HEALTH.lock().unwrap_or_else(|e| e.into_inner()) = line.to_string();
}

/// Coordinator-mode leader: 1 lease held, 2 lapsed (acknowledgements held until it is
/// renewed); 0 otherwise. Shown on `/health` as `lease=ok|lapsed`.
static LEASE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

pub fn set_lease_lapsed(lapsed: bool) {
    LEASE.store(if lapsed { 2 } else { 1 }, Ordering::Relaxed);
    gauge!("corelog_lease_lapsed").set(if lapsed { 1.0 } else { 0.0 });
}

/// Shards of this process whose scrubber knows of damage (`scrub/`). Shown on `/health`
/// as `scrub=damaged` while any does: the node still serves (200), an operator must act.
static SCRUB_DAMAGED: AtomicUsize = AtomicUsize::new(0);

/// A shard's scrubber found damage (`true`) or knows of none any more (`false`): call
/// on each change only.
pub fn scrub_damage_known(known: bool) {
    count_shards(&SCRUB_DAMAGED, known, "scrub damage cleared more often than found");
}

/// One shard more (`up`) or fewer in `shards`; `never` if that would go below zero.
fn count_shards(shards: &AtomicUsize, up: bool, never: &str) {
    if up {
        shards.fetch_add(1, Ordering::Relaxed);
    } else {
        let was = shards.fetch_sub(1, Ordering::Relaxed);
        assert!(was > 0, "{never}");
    }
}

/// Shards of this process catching a follower up from their segments
/// (`replica::catchup`). Shown on `/health` as `rebuilding` while any does.
static REBUILDING: AtomicUsize = AtomicUsize::new(0);

/// A shard started (`true`) or ended (`false`) catching its follower up from the segments.
pub fn rebuilding(now: bool) {
    count_shards(&REBUILDING, now, "a catch-up ended more often than it started");
}

fn health_body() -> String {
    let h = HEALTH.lock().unwrap_or_else(|e| e.into_inner());
    let mut line = health_line(&h, LEASE.load(Ordering::Relaxed), SCRUB_DAMAGED.load(Ordering::Relaxed) > 0);
    if REBUILDING.load(Ordering::Relaxed) > 0 {
        line.insert_str(line.len() - 1, " rebuilding");
    }
    line
}

/// `/health`'s body from the coordinator's fields (`h`, "" without a coordinator), the
/// lease state and whether scrubbing knows of damage.
fn health_line(h: &str, lease: u8, scrub_damaged: bool) -> String {
    let lease = match lease {
        1 => " lease=ok",
        2 => " lease=lapsed",
        _ => "",
    };
    // Last, after the coordinator's fields, which readers take word by word.
    let scrub = if scrub_damaged { " scrub=damaged" } else { "" };
    if h.is_empty() {
        format!("ok{scrub}\n")
    } else {
        format!("ok {h}{lease}{scrub}\n")
    }
}

/// Requests served at once; more connections are closed at accept (and counted).
pub const MAX_HTTP_CONCURRENT: usize = 16;
/// Time a client has to send its request line and headers, and, separately, to take
/// the answer: a stuck scraper holds one slot for at most twice this.
pub const HTTP_IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request line or header line read.
const MAX_HTTP_LINE: u64 = 8 * 1024;

/// Serves `GET /metrics` and `GET /health` (200 once every shard has started, 503 before),
/// one thread per request, at most `MAX_HTTP_CONCURRENT` at once, each bounded by
/// `HTTP_IO_TIMEOUT` for reading and for writing: a scraper that stops reading cannot
/// keep `/health` from answering.
/// `/metrics` and `/health` on `addr`: plain HTTP, or HTTPS with a client certificate
/// required when `tls` is given (`--metrics-tls`: the client port's configuration, so
/// the same CA and the same certificate rotation).
pub fn serve(
    addr: SocketAddr,
    handle: PrometheusHandle,
    ctl: Arc<ControlCell>,
    data_dir: PathBuf,
    tls: Option<crate::net::tls::Live<rustls::ServerConfig>>,
) -> std::io::Result<SocketAddr> {
    let data_dir = Arc::new(data_dir);
    let l = TcpListener::bind(addr)?;
    let local = l.local_addr()?;
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("metrics-http".into()).spawn(move || {
        for s in l.incoming().flatten() {
            if busy.fetch_add(1, Ordering::AcqRel) >= MAX_HTTP_CONCURRENT {
                busy.fetch_sub(1, Ordering::AcqRel);
                counter!("corelog_http_refused_total").increment(1);
                continue; // dropped: closed at once
            }
            let (handle, ctl, slot, dir) = (handle.clone(), ctl.clone(), busy.clone(), data_dir.clone());
            let tls = tls.clone();
            let spawned = std::thread::Builder::new().name("metrics-req".into()).spawn(move || {
                let _ = s.set_read_timeout(Some(HTTP_IO_TIMEOUT));
                let _ = s.set_write_timeout(Some(HTTP_IO_TIMEOUT));
                match tls.map(|t| rustls::ServerConnection::new(t.current())) {
                    None => answer(&mut &s, &handle, &ctl, &dir),
                    Some(Ok(c)) => {
                        let mut stream = rustls::StreamOwned::new(c, s);
                        answer(&mut stream, &handle, &ctl, &dir);
                        stream.conn.send_close_notify();
                        let _ = stream.flush();
                    }
                    Some(Err(e)) => log::warn!("metrics: TLS session: {e}"),
                }
                slot.fetch_sub(1, Ordering::AcqRel);
            });
            if spawned.is_err() {
                // No thread to be had: the connection (moved into the closure) is closed.
                busy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    })?;
    Ok(local)
}

fn answer(s: &mut (impl Read + Write), handle: &PrometheusHandle, ctl: &ControlCell, data_dir: &Path) {
    let mut r = BufReader::new(Read::by_ref(s).take(MAX_HTTP_LINE * 101));
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    // Drain headers (bounded).
    for _ in 0..100 {
        let mut h = String::new();
        if r.read_line(&mut h).map(|n| n <= 2).unwrap_or(true) {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = match path {
        "/metrics" => ("200 OK", render(handle, data_dir)),
        "/health" if ctl.started() => ("200 OK", health_body()),
        "/health" => ("503 Service Unavailable", "starting\n".to_string()),
        _ => ("404 Not Found", "not found\n".to_string()),
    };
    drop(r);
    let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_adds_scrub_damage_after_the_coordinators_fields() {
        assert_eq!(health_line("", 0, false), "ok\n");
        assert_eq!(health_line("", 0, true), "ok scrub=damaged\n");
        let h = "role=leader epoch=3 insync=2 degraded=0";
        assert_eq!(health_line(h, 1, false), format!("ok {h} lease=ok\n"));
        assert_eq!(health_line(h, 2, true), format!("ok {h} lease=lapsed scrub=damaged\n"));
        assert_eq!(
            health_line("role=follower epoch=3 insync=2 degraded=0", 0, true).split_whitespace().nth(2),
            Some("epoch=3")
        );
    }
}
