//! corelog-client: the corelog wire protocol and an async client library.
//!
//! - [`codec`]: the sans-IO frame codec shared by server, client, load generator and fuzzer.
//! - [`record`]: the record encoding (same bytes on disk, on the replication link and in reads).
//! - [`tls`]: PEM loading and rustls configs.
//! - [`Client`] / [`Tail`]: the tokio client an application uses.
//! - [`Producer`]: idempotent appends (never stored twice; unknown outcomes sent again).
//! - [`Client::append_to`] / [`Client::read_stream`]: streams with expected versions.
//! - [`Subscription`]: a stream's or a prefix's events, catch-up then live.
//! - [`group`]: consumer groups ([`group::Consumer`]): a group's members share a prefix's
//!   events and commit how far they got.
//! - [`leadership`]: the rules for following leadership (docs/protocol.md §6.3), shared
//!   by the client and the load generator.

mod client;
pub mod codec;
pub mod group;
pub mod leadership;
pub mod producer;
pub mod record;
mod streams;
pub mod subscribe;
pub mod tls;

pub use client::{shard_addr, Client, ClientConfig, Error, Outcome, Position, Record, ServerInfo, StreamVersion, Tail};
pub use codec::{ErrorCode, Expect, ProducerSeq, Role};
pub use group::{Consumer, ConsumerOptions, GroupEvent};
pub use producer::{Appended, Producer};
pub use streams::{StreamAppended, StreamRead};
pub use subscribe::{Event, Subscription};
