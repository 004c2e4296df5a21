//! A history-recording closed-loop workload and its checker: used by the failover tests,
//! `benches/failover.sh`, `corelog workload` and `corelog quickstart --failover`.
//!
//! Each connection task (its own [`Client`] over all the cluster's addresses, following
//! leadership) keeps one append in flight. Payloads are unique and self-describing:
//! `TAG-CONN-SEQ-` padded with `.` to the payload size. Every operation is recorded with
//! its invocation and completion time (µs since the run's start, monotonic) and its
//! outcome: ok at (shard, offset), failed (refused, nothing written: [`Outcome::NotWritten`])
//! or unknown (may or may not be in the log). After a failed or unknown outcome the task
//! waits a little (10 ms doubling to 200 ms) and goes on with the NEXT payload on the same
//! client (which has left the failed connection and keeps what it learned about
//! leadership): nothing is ever sent twice.
//!
//! [`check`] compares the history with the log read back from the surviving node
//! ([`read_all`]): every ok is stored at its position with identical bytes; no two oks
//! share a position; no payload of the run is stored twice, and none that no operation
//! sent; no failed one is stored; unknown ones may or may not be (counted). It also
//! reports the write-unavailability window: the largest gap between consecutive ok
//! completions, over all connections.
//!
//! [`History::write`] writes a line format (below) that `tools/porcupine` reads to check
//! linearizability per shard ([`porcupine`]):
//!
//! ```text
//! # comment
//! tag TAG
//! op CONN SEQ INVOKE_US DONE_US PAYLOAD ok SHARD OFFSET
//! op CONN SEQ INVOKE_US DONE_US PAYLOAD failed REASON…
//! op CONN SEQ INVOKE_US DONE_US PAYLOAD unknown REASON…
//! shard S start B len L      (read-back: the run's first record in S is at B, of L)
//! found CONN SEQ S OFFSET     (read-back: an unknown op is stored there)
//! foreign S OFFSET            (read-back: another writer's record, at or after B)
//! ```
//!
//! PAYLOAD is the payload itself when it is printable ASCII without spaces (always, for

mod check;
mod porcupine;
mod readback;
mod run;
#[cfg(test)]
mod tests;

pub use check::{check, Gap, Report};
pub use porcupine::{go_available, porcupine, porcupine_dir, Linearizability};
pub use readback::{read_all, read_back, Logs};
pub use run::{run, spawn, Background, Config, History, Live, Op, OpResult};
