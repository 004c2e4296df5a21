//! corelog-client: the corelog wire protocol and an async client library.
//!
//! - [`codec`]: the sans-IO frame codec shared by server, client, load generator and fuzzer.
//! - [`record`]: the record encoding (same bytes on disk, on the replication link and in reads).
//! - [`tls`]: PEM loading and rustls configs.
//! - [`Client`] / [`Tail`]: the tokio client an application uses.
//! - [`Producer`]: idempotent appends (never stored twice; unknown outcomes sent again).

mod client;
pub mod codec;
pub mod producer;
pub mod record;
pub mod tls;

pub use client::{shard_addr, Client, ClientConfig, Error, Outcome, Position, Record, ServerInfo, Tail};
pub use codec::{ErrorCode, ProducerSeq, Role};
pub use producer::{Appended, Producer};
