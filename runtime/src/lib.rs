//! The runtime under corelog's server and load generator: what a thread-per-core
//! program on glommio needs besides its own logic, and nothing of the log.
//!
//! - [`tls_io`]: rustls driven by hand over a glommio socket, handed to kernel TLS after
//!   the handshake where the kernel has the `tls` ULP ([`ktls`]).
//! - [`sync`]: single-threaded wake-up primitives (events, deadlines, checked counters).
//! - [`watchdog`]: one re-armed timer for a loop instead of one per wait.
//! - [`cpus`]: the CPUs this process may run on, and which one an executor takes.
//! - [`fds`]: the open-file limit raised and accounted for.

pub mod cpus;
pub mod fds;
pub mod ktls;
pub mod sync;
pub mod tls_io;
pub mod watchdog;
