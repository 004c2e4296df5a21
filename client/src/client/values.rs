//! What client calls return: where an event was stored, records read back (decoded from
//! the record encoding, CRC verified) and what a node said in its `HelloOk`.

use super::error::Error;
use crate::codec::{Leadership, ProducerSeq, Role};
use crate::record::Records;

/// Where an event was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub shard: u16,
    pub offset: u64,
}

/// A record read back, CRC verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: u64,
    pub epoch: u32,
    /// Set on records of idempotent appends.
    pub producer: Option<ProducerSeq>,
    /// Set on events appended to a stream: its name and the event's version there.
    pub stream: Option<StreamVersion>,
    pub payload: Vec<u8>,
}

/// An event's stream and its version in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamVersion {
    pub name: String,
    pub version: u64,
}

/// What the server said in its `HelloOk`.
#[derive(Debug, Clone, Copy)]
pub struct ServerInfo {
    pub shard: u16,
    pub shard_count: u16,
    pub role: Role,
    pub epoch: u32,
    /// The node's view of leadership (protocol version 3; `None` from older servers).
    pub leadership: Option<Leadership>,
}

/// Decodes a run of records in the record encoding (a `Records` or `StreamRecords` body).
pub(crate) fn to_records(buf: &[u8]) -> Result<Vec<Record>, Error> {
    Records::new(buf)
        .map(|r| {
            r.map(|r| Record {
                offset: r.offset,
                epoch: r.epoch,
                producer: r.producer,
                stream: r.stream.map(|s| StreamVersion { name: s.name.to_string(), version: s.version }),
                payload: r.payload.to_vec(),
            })
            .map_err(|e| Error::Protocol(format!("bad record from server: {e}")))
        })
        .collect()
}
