//! Streams: appends guarded by an expected version, and reads of one stream.
//!
//! ```no_run
//! # async fn demo() -> Result<(), corelog_client::Error> {
//! use corelog_client::{Client, ClientConfig, Expect};
//! let cfg = ClientConfig::mtls("certs/ca.pem", "certs/client.pem", "certs/client.key", "localhost")?;
//! let client = Client::connect("127.0.0.1:9400", &cfg).await?;
//! let a = client.append_to("order-42", Expect::NoStream, b"created").await?;
//! client.append_to("order-42", Expect::Exact(a.version), b"paid").await?;
//! let read = client.read_stream("order-42", 0, 100).await?;
//! assert_eq!(read.events.len(), 2);
//! # Ok(()) }
//! ```
//!
//! A stream lives on one shard (`codec::stream_shard`: FNV-1a of the name modulo the
//! shard count); these calls reach it on its direct port on each node, with a client per
//! shard made on first use. A stream append is a plain append as far as failures go
//! (see the `client` module docs), and follows leadership the same way — finding the
//! stream's shard included, within the same failover budget: for appends that are never
//! stored twice, use a [`crate::Producer`] of the stream's shard and
//! [`crate::Producer::append_to`].

use std::sync::atomic::Ordering;

use crate::client::{shard_addr, split_addrs, to_records, Attempts, Client, Error, Position, Record};
use crate::codec::{self, Expect, Request, Response, StreamReq};
use crate::record;

/// A stream append that was written (or, from a producer, found written before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAppended {
    pub position: Position,
    /// The event's version in its stream (0 for the stream's first event).
    pub version: u64,
}

/// Events read from one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRead {
    /// In version order, each with its stream name and version.
    pub events: Vec<Record>,
    /// The version to read from next.
    pub next_version: u64,
    /// Committed events in the stream when this was read: read on while `next_version`
    /// is below it.
    pub end_version: u64,
}

impl Client {
    /// The cluster's shard count (from the first `HelloOk`; it never changes).
    pub async fn shard_count(&self) -> Result<u16, Error> {
        match self.shard_count.load(Ordering::Relaxed) {
            0 => Ok(self.connection().await?.info.shard_count.max(1)),
            n => Ok(n),
        }
    }

    /// The client of the shard that holds `stream` (this one if it is that shard's).
    pub async fn for_stream(&self, stream: &str) -> Result<Client, Error> {
        record::check_stream_name(stream.as_bytes()).map_err(Error::Invalid)?;
        let count = self.shard_count().await?;
        self.for_shard(codec::stream_shard(stream.as_bytes(), count)).await
    }

    /// A client of `shard`'s direct ports on the same nodes (made once, then shared),
    /// connected.
    pub async fn for_shard(&self, shard: u16) -> Result<Client, Error> {
        let c = self.shard_client(shard)?;
        c.connection().await?;
        Ok(c)
    }

    /// [`Client::for_shard`] without connecting (it connects on first use).
    fn shard_client(&self, shard: u16) -> Result<Client, Error> {
        if self.shard == Some(shard) {
            return Ok(self.clone());
        }
        if let Some(c) = self.by_shard.lock().unwrap().get(&shard) {
            return Ok(c.clone());
        }
        let direct = split_addrs(&self.given).iter().map(|a| shard_addr(a, shard)).collect::<Result<Vec<_>, _>>()?;
        let c = Client::lazy(&self.given, direct, &self.cfg, Some(shard), self.shard_count.clone(), self.seen.clone())?;
        Ok(self.by_shard.lock().unwrap().entry(shard).or_insert(c).clone())
    }

    /// Appends `payload` to `stream` if the stream's version meets `expect`; returns the
    /// event's position and version once durable on every replica. A mismatch is
    /// [`Error::WrongExpectedVersion`] with the stream's current version (nothing written).
    pub async fn append_to(&self, stream: &str, expect: Expect, payload: &[u8]) -> Result<StreamAppended, Error> {
        if payload.len() > codec::MAX_PAYLOAD {
            return Err(Error::Codec(codec::CodecError::PayloadTooLarge(payload.len())));
        }
        record::check_stream_name(stream.as_bytes()).map_err(Error::Invalid)?;
        let mut attempts = Attempts::new(&self.cfg, true);
        let count = loop {
            let end = attempts.start();
            let err = match tokio::time::timeout_at(end.into(), self.shard_count()).await {
                Ok(Ok(n)) => break n,
                Ok(Err(e @ Error::Invalid(_))) => return Err(e),
                Ok(Err(e)) => e,
                Err(_) => Error::Unreachable("failover budget spent connecting".into()),
            };
            attempts.pause(err).await?;
        };
        let c = self.shard_client(codec::stream_shard(stream.as_bytes(), count))?;
        let mut frame = Vec::with_capacity(payload.len() + codec::FRAME_HEADER_LEN + codec::APPEND2_MAX_HEADER);
        codec::encode_append2(0, None, Some(StreamReq::new(stream, expect)), payload, &mut frame);
        let reply = c.submit_with(frame, &mut attempts).await?;
        match reply.response()? {
            Response::Appended2 { shard, offset, version: Some(version), .. } => {
                Ok(StreamAppended { position: Position { shard, offset }, version })
            }
            _ => Err(Error::Protocol("expected Appended2 with a stream version".into())),
        }
    }

    /// Reads committed events of `stream` from `from_version`, at most `max_count`
    /// (≤ `codec::MAX_READ_COUNT`) and about 1 MiB.
    pub async fn read_stream(&self, stream: &str, from_version: u64, max_count: u32) -> Result<StreamRead, Error> {
        let c = self.for_stream(stream).await?;
        c.read_stream_here(stream, from_version, max_count).await
    }

    /// [`Client::read_stream`] on `shard`, whatever the name's hash says: the server keeps
    /// a consumer group's state on each shard in a stream `$g/<group>/<shard>` of that
    /// shard (read-only for clients).
    pub async fn read_stream_on(
        &self,
        shard: u16,
        stream: &str,
        from_version: u64,
        max_count: u32,
    ) -> Result<StreamRead, Error> {
        self.for_shard(shard).await?.read_stream_here(stream, from_version, max_count).await
    }

    async fn read_stream_here(&self, stream: &str, from_version: u64, max_count: u32) -> Result<StreamRead, Error> {
        let reply = self
            .request(&Request::ReadStream {
                name: stream.as_bytes(),
                from_version,
                max_count: max_count.min(codec::MAX_READ_COUNT),
                max_bytes: codec::MAX_READ_BYTES,
            })
            .await?;
        match reply.response()? {
            Response::StreamRecords { next_version, end_version, records, .. } => {
                Ok(StreamRead { events: to_records(records)?, next_version, end_version })
            }
            _ => Err(Error::Protocol("expected StreamRecords".into())),
        }
    }
}
