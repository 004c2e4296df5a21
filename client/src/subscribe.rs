//! Subscriptions: the events of one stream, or of every stream whose name starts with a
//! prefix, read from disk first and then pushed live as they are committed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), corelog_client::Error> {
//! use corelog_client::{ClientConfig, Subscription};
//! let cfg = ClientConfig::mtls("certs/ca.pem", "certs/client.pem", "certs/client.key", "localhost")?;
//! let mut sub = Subscription::prefix("127.0.0.1:9400", &cfg, "order-", &Default::default()).await?;
//! while let Some(e) = sub.next().await? {
//!     let s = e.record.stream.as_ref().unwrap();
//!     println!("{} v{}: {:?}", s.name, s.version, e.record.payload);
//! }
//! # Ok(()) }
//! ```
//!
//! The server filters (protocol `Subscribe`, docs/protocol.md §5 rule 5a). A stream
//! lives on one shard, so a stream subscription is one connection to that shard's direct
//! port; a prefix subscription is one connection per shard, merged here. Within a stream
//! events arrive in version order; across streams (and shards) there is no order.
//! To resume after the connection ended (a restart, a failover), start a new
//! subscription from where this one stopped: [`Subscription::next_version`] for a stream,
//! [`Subscription::positions`] (the next offset per shard) for a prefix. Events are
//! delivered at least once across such a resume and exactly once within one subscription.

use std::collections::HashMap;

use tokio::sync::mpsc;

use crate::client::{greet, shard_addr, split_addrs, to_records, Client, ClientConfig, Error, Record};
use crate::codec::{self, Request, Response, Role};

/// Events buffered between the connections' readers and `next`.
const QUEUE: usize = 4096;

/// One event of a subscription, with the shard it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub shard: u16,
    /// Carries its stream name and version (`record.stream`).
    pub record: Record,
}

pub struct Subscription {
    rx: mpsc::Receiver<Result<Event, Error>>,
    positions: HashMap<u16, u64>,
    next_version: u64,
    /// The stream of a stream subscription (its versions must follow each other).
    stream: Option<String>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Subscription {
    /// The events of `stream` from version `from_version` on, live.
    pub async fn stream(
        addr: &str,
        cfg: &ClientConfig,
        stream: &str,
        from_version: u64,
    ) -> Result<Subscription, Error> {
        crate::record::check_stream_name(stream.as_bytes()).map_err(Error::Protocol)?;
        let count = Client::connect(addr, cfg).await?.info().await.shard_count.max(1);
        let shard = codec::stream_shard(stream.as_bytes(), count);
        let req = Request::Subscribe { stream: true, name: stream.as_bytes(), from: from_version };
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = feed(addr, cfg, shard, req, tx).await?;
        let (stream, next_version) = (Some(stream.to_string()), from_version);
        Ok(Subscription { rx, positions: HashMap::new(), next_version, stream, tasks: vec![task] })
    }

    /// The events of every stream whose name starts with `prefix` (all streams: `""`), on
    /// every shard, from `from` (the next offset per shard; a shard not in it: from its
    /// first record), live.
    pub async fn prefix(
        addr: &str,
        cfg: &ClientConfig,
        prefix: &str,
        from: &HashMap<u16, u64>,
    ) -> Result<Subscription, Error> {
        let count = Client::connect(addr, cfg).await?.info().await.shard_count.max(1);
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut sub = Subscription { rx, positions: from.clone(), next_version: 0, stream: None, tasks: Vec::new() };
        for shard in 0..count {
            let at = from.get(&shard).copied().unwrap_or(0);
            let req = Request::Subscribe { stream: false, name: prefix.as_bytes(), from: at };
            // On an error `sub` is dropped, which stops the feeds already started.
            sub.tasks.push(feed(addr, cfg, shard, req, tx.clone()).await?);
        }
        Ok(sub)
    }

    /// The next event. A server never ends a subscription by itself, so a closed or lost
    /// connection is an error (`Error::Closed`, `Error::Io`, …): resume from the
    /// positions with a new subscription.
    pub async fn next(&mut self) -> Result<Option<Event>, Error> {
        match self.rx.recv().await {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok(e)) => {
                if let (Some(name), Some(s)) = (&self.stream, &e.record.stream) {
                    if s.name != *name || s.version != self.next_version {
                        let got = format!("{:?} version {}", s.name, s.version);
                        let want = format!("{name:?} version {}", self.next_version);
                        return Err(Error::Protocol(format!("subscription got {got} where {want} was due")));
                    }
                }
                self.positions.insert(e.shard, e.record.offset + 1);
                if let Some(s) = &e.record.stream {
                    self.next_version = s.version + 1;
                }
                Ok(Some(e))
            }
        }
    }

    /// Per shard, the offset after the last event `next` returned (or the start given).
    pub fn positions(&self) -> &HashMap<u16, u64> {
        &self.positions
    }

    /// Stream subscriptions: the version after the last event `next` returned.
    pub fn next_version(&self) -> u64 {
        self.next_version
    }
}

/// Opens `shard`'s direct port on the first node of `addr` that answers as leader (only
/// a leader serves subscriptions), sends `req`, and starts a task that forwards the
/// pushed events to `tx`.
async fn feed(
    addr: &str,
    cfg: &ClientConfig,
    shard: u16,
    req: Request<'_>,
    tx: mpsc::Sender<Result<Event, Error>>,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    let mut errs = Vec::new();
    for a in split_addrs(addr) {
        let direct = shard_addr(&a, shard)?;
        let g = match tokio::time::timeout(cfg.connect_timeout, greet(&direct, cfg, Some(&req))).await {
            Ok(Ok(g)) => g,
            Ok(Err(e @ (Error::Server { .. } | Error::Codec(_) | Error::Protocol(_)))) => return Err(e),
            Ok(Err(e)) => {
                errs.push(format!("{direct}: {e}"));
                continue;
            }
            Err(_) => {
                errs.push(format!("{direct}: no answer in {:?}", cfg.connect_timeout));
                continue;
            }
        };
        if g.info.role != Role::Leader {
            errs.push(format!("{direct}: {} (subscriptions are served by the leader)", g.info.role.name()));
            continue;
        }
        let (mut reader, w) = (g.reader, g.writer);
        return Ok(tokio::spawn(async move {
            let _writer = w; // closing it would end the subscription
            loop {
                let got = match reader.next().await {
                    Ok(Some(reply)) => match reply.response() {
                        Ok(Response::Records { records, .. }) => to_records(records),
                        Ok(_) => Err(Error::Protocol("expected Records".into())),
                        Err(e) => Err(e),
                    },
                    Ok(None) => Err(Error::Closed),
                    Err(e) => Err(e),
                };
                match got {
                    Ok(records) => {
                        for record in records {
                            if tx.send(Ok(Event { shard, record })).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        }));
    }
    Err(Error::Unreachable(if errs.is_empty() { format!("no address in {addr:?}") } else { errs.join("; ") }))
}
