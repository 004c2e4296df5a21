//! corelog-server: the server, a node of the replicated log, as a library. The `corelog`
//! binary (src/bin/corelog: the command line, the client subcommands, `inspect`,
//! `quickstart`, `workload`) is built on it, as are the integration tests and the
//! benchmarks.
//!
//! Data plane: [`shard`] (admission, group commit, acks), [`wal`] (segments, batches,
//! recovery), [`net`] (listeners, connections, TLS), [`replica`] (leader link, follower
//! apply). Control plane: [`control`] (epochs, locks, promotion), [`node`] (start-up),
//! [`coord`] (etcd: leases, terms, in-sync set; coordinator mode),
//! plus [`certs`], [`backup`], [`metrics`] (and [`probe`], the HTTP GET that reads its
//! endpoints), [`cpus`] (executor placement); [`sync`] and [`watchdog`] are the
//! executor-local wake-up and timeout primitives both planes (and the load generator) use.

pub mod access;
pub mod authz;
pub mod backup;
pub mod boot;
pub mod certs;
pub mod checkpoint;
pub mod config;
pub mod control;
pub mod coord;
pub mod group;
pub mod grouplog;
pub mod hist;
pub mod index;
pub mod le;
pub mod logging;
pub mod metrics;
pub mod net;
pub mod node;
pub mod principal;
pub mod probe;
pub mod producers;
pub mod reexec;
pub mod replica;
pub mod scrub;
pub mod shard;
pub mod shutdown;
pub mod snapshot;
pub mod streamread;
pub mod streams;
pub mod wal;

// The runtime pieces (TLS I/O, kTLS, wake-ups, the watchdog, CPUs, open files) are
// their own crate, shared with the load generator; re-exported under their old paths.
pub use corelog_runtime::{cpus, sync, watchdog};

/// Stops the process on an unrecoverable error (fsync/write failure, corruption found
/// while running): one clear line, non-zero exit, nothing acknowledged after it.
pub fn fatal(msg: &str) -> ! {
    if log::log_enabled!(log::Level::Error) {
        log::error!("FATAL: {msg}");
    } else {
        eprintln!("corelog: FATAL: {msg}"); // not serving: no logger installed
    }
    std::process::exit(70)
}
