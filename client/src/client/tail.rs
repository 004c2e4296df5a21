//! A live tail ([`Tail`]): one shard's records pushed by a node as they become durable,
//! on a connection of its own.

use std::collections::VecDeque;

use super::addrs::{shard_addr, split_addrs};
use super::config::ClientConfig;
use super::error::Error;
use super::frames::FrameReader;
use super::greet::{greet, Stream};
use super::values::{to_records, Record};
use crate::codec::{Request, Response};

/// A live tail: records pushed by the server as they become durable, in offset order.
/// It holds a connection of its own.
pub struct Tail {
    reader: FrameReader<tokio::io::ReadHalf<Box<dyn Stream>>>,
    _writer: tokio::io::WriteHalf<Box<dyn Stream>>,
    pending: VecDeque<Record>,
    /// The offset the next record received must have.
    fetched: u64,
    /// The offset after the last record handed out.
    next_offset: u64,
}

impl Tail {
    /// Tails `shard` of the node whose client address is `addr` (connects to the shard's
    /// direct port); with several addresses (`"A,B"`), of the first that answers.
    pub async fn start(addr: &str, cfg: &ClientConfig, shard: u16, from: u64) -> Result<Tail, Error> {
        let mut errs = Vec::new();
        for a in split_addrs(addr) {
            let direct = shard_addr(&a, shard)?;
            match tokio::time::timeout(cfg.connect_timeout, Tail::start_at(&direct, cfg, shard, from)).await {
                Ok(Ok(t)) => return Ok(t),
                Ok(Err(e)) => errs.push(format!("{direct}: {e}")),
                Err(_) => errs.push(format!("{direct}: no answer in {:?}", cfg.connect_timeout)),
            }
        }
        Err(Error::Unreachable(if errs.is_empty() { format!("no address in {addr:?}") } else { errs.join("; ") }))
    }

    async fn start_at(direct: &str, cfg: &ClientConfig, shard: u16, from: u64) -> Result<Tail, Error> {
        let g = greet(direct, cfg, Some(&Request::Tail { shard, from })).await?;
        Ok(Tail { reader: g.reader, _writer: g.writer, pending: VecDeque::new(), fetched: from, next_offset: from })
    }

    /// The offset after the last record [`Tail::next`] handed out (`from` before the
    /// first): where a new tail resumes without skipping or repeating a record.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// The next record; `Ok(None)` when the server closed the tail.
    pub async fn next(&mut self) -> Result<Option<Record>, Error> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                self.next_offset = r.offset + 1;
                return Ok(Some(r));
            }
            let Some(reply) = self.reader.next().await? else {
                return Ok(None);
            };
            match reply.response()? {
                Response::Records { records, .. } => {
                    for r in to_records(records)? {
                        if r.offset != self.fetched {
                            return Err(Error::Protocol(format!(
                                "tail gap: expected {}, got {}",
                                self.fetched, r.offset
                            )));
                        }
                        self.fetched += 1;
                        self.pending.push_back(r);
                    }
                }
                _ => return Err(Error::Protocol("expected Records".into())),
            }
        }
    }
}
