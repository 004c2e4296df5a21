//! Taking an append: the bounds it waits under, the producer and stream checks, the
//! offset it gets, and the open batch it is encoded into; the retried duplicates of
//! idempotent producers.

use std::rc::Rc;
use std::time::Instant;

use corelog_client::codec::{ErrorCode, Expect};
use corelog_client::record::{self, Ext, ProducerSeq, StreamPos};

use super::{publish_index, Shard, MAX_STAGED_BYTES, MAX_UNACKED};
use crate::index::LogIndex;
use crate::producers::{refusal, Verdict};
use crate::wal::batch::{MAX_BATCH_BYTES, MAX_BATCH_RECORDS};

/// Where an append's outcome goes: the connection that sent it (`net::outbox` turns
/// outcomes into frames; the shard knows nothing of the wire). For each append the
/// shard accepts it calls `taken` once, then `answer` exactly once.
pub trait Answer {
    /// An append (or a retried one, `answer_duplicate`) is now this shard's to answer.
    fn taken(&self);
    /// The outcome of an append `taken` before, in the shard's acknowledgement order.
    fn answer(&self, req_id: u64, shard: u16, outcome: Outcome<'_>);
}

/// How one append ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Durable on every replica the shard waits for, at `offset`.
    Appended { offset: u64, form: AckForm },
    /// Not acknowledged: `code` says whether anything may have been written.
    Failed { code: ErrorCode, msg: &'a str },
}

/// How an append is answered: the request's protocol version decides the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckForm {
    /// `Appended` (an `Append`).
    V1,
    /// `Appended2` (an `Append2`); `duplicate`: a duplicate's original position;
    /// `version`: the event's stream version.
    V2 { duplicate: bool, version: Option<u64> },
}

/// What one append asks for besides its payload.
#[derive(Debug, Clone, Copy, Default)]
pub struct AppendReq<'a> {
    pub producer: Option<ProducerSeq>,
    pub stream: Option<(&'a str, Expect)>,
}

/// Why an append was not taken (nothing written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Error(ErrorCode, String),
    /// The stream is not at the expected version; `current`: its last event's version.
    WrongVersion {
        current: Option<u64>,
        msg: String,
    },
    /// What was asked for was deleted by retention; `first` is the first still held.
    OutOfRange {
        first: u64,
        what: String,
    },
}

impl From<(ErrorCode, String)> for Refused {
    fn from((code, msg): (ErrorCode, String)) -> Refused {
        Refused::Error(code, msg)
    }
}

pub(super) struct Waiter {
    pub(super) conn: Rc<dyn Answer>,
    pub(super) req_id: u64,
    pub(super) form: AckForm,
    /// When the append was taken (for `corelog_append_latency_seconds`).
    pub(super) at: Instant,
}

/// A retried idempotent append whose original is not committed yet: answered with the
/// original's position when it is, or with the original's failure.
pub(super) struct DupWaiter {
    pub(super) offset: u64,
    pub(super) version: Option<u64>,
    pub(super) conn: Rc<dyn Answer>,
    pub(super) req_id: u64,
    pub(super) since: Instant,
}

/// What `Shard::append` did with an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Given an offset; answered when durable on every replica.
    Staged,
    /// An idempotent append already in the log (or on its way): the caller answers it
    /// with `answer_duplicate` once the connection's earlier answers have left.
    Duplicate,
}

/// A batch being filled or waiting for the disk.
pub(super) struct Staged {
    pub(super) first_offset: u64,
    pub(super) count: u32,
    pub(super) records: Vec<u8>,
    pub(super) waiters: Vec<Waiter>,
    pub(super) since: Instant,
}

impl Shard {
    /// Accepts one append for `conn`: encodes it into the open batch. The answer is
    /// pushed to `conn` once the record is durable on every replica (or fails). An
    /// idempotent append (`producer`) is checked against the producer's state first:
    /// a duplicate is not written (`Taken::Duplicate`), an out-of-line sequence is refused.
    /// A stream append then gets the stream's next version if `expect` holds.
    pub async fn append(
        &self,
        req: AppendReq<'_>,
        form: AckForm,
        payload: &[u8],
        conn: &Rc<dyn Answer>,
        req_id: u64,
    ) -> Result<Taken, Refused> {
        // The version is not known yet; its width is.
        let sized = Ext { producer: req.producer, stream: req.stream.map(|(name, _)| StreamPos { name, version: 0 }) };
        let len = record::RECORD_HEADER_LEN + sized.len() + payload.len();
        self.wait_room(len).await?;
        // From here to the offset's assignment nothing awaits: the verdicts still hold.
        let index = self.index.borrow();
        if let Some(p) = req.producer {
            match index.producers.check(p) {
                Verdict::Fresh => {}
                Verdict::Duplicate(_) => return Ok(Taken::Duplicate),
                v => return Err(refusal(p, v).into()),
            }
        }
        let stream = match req.stream {
            None => None,
            Some((name, expect)) => match index.streams.check(name, expect) {
                Ok(version) => Some(StreamPos { name, version }),
                Err(current) => {
                    self.metrics.wrong_versions.increment(1);
                    let at = current.map_or("has no event".to_string(), |v| format!("is at version {v}"));
                    let msg = format!("stream {name:?} {at}, not {expect} as expected; nothing written");
                    return Err(Refused::WrongVersion { current, msg });
                }
            },
        };
        drop(index);
        let ext = Ext { producer: req.producer, stream };
        let form = match form {
            AckForm::V2 { duplicate, .. } => AckForm::V2 { duplicate, version: stream.map(|s| s.version) },
            f => f,
        };
        let mut staged = self.staged.borrow_mut();
        let need_new = match staged.back() {
            None => true,
            Some(b) => b.records.len() + len > MAX_BATCH_BYTES || b.count >= MAX_BATCH_RECORDS,
        };
        if need_new {
            let cap = if staged.is_empty() { 4096 } else { MAX_BATCH_BYTES };
            staged.push_back(Staged {
                first_offset: self.next_assign.get(),
                count: 0,
                records: Vec::with_capacity(cap),
                waiters: Vec::new(),
                since: Instant::now(),
            });
        }
        let b = staged.back_mut().expect("pushed above");
        let offset = self.next_assign.get();
        record::encode_ex(offset, self.epoch.get(), ext, payload, &mut b.records);
        b.count += 1;
        b.waiters.push(Waiter { conn: conn.clone(), req_id, form, at: Instant::now() });
        conn.taken();
        self.next_assign.set(offset + 1);
        self.staged_bytes.set(self.staged_bytes.get() + len);
        self.unacked_count.set(self.unacked_count.get() + 1);
        drop(staged);
        if !ext.is_empty() {
            self.update_index(|t| t.note(offset, ext).expect("the version was taken from this index"));
        }
        if !self.accepted.get() {
            self.metrics.appends_held.set(self.unacked_count.get() as f64);
        }
        self.staged_ev.notify();
        Ok(Taken::Staged)
    }

    /// Changes the producers' table or the stream index and publishes their sizes.
    pub(crate) fn update_index<R>(&self, f: impl FnOnce(&mut LogIndex) -> R) -> R {
        let mut t = self.index.borrow_mut();
        let r = f(&mut t);
        publish_index(&self.metrics, &t);
        r
    }

    /// Reads the index (e.g. a stream's offsets for a read).
    pub fn with_index<R>(&self, f: impl FnOnce(&LogIndex) -> R) -> R {
        f(&self.index.borrow())
    }

    /// Answers a retried idempotent append (after `append` said `Taken::Duplicate` and
    /// every earlier answer of `conn` has left) with its original's position: now if that
    /// is committed, else when it is. `false`: the producer's state changed meanwhile
    /// (the original's offset was handed out again): call `append` once more.
    /// A retry naming a stream is answered with the original's version there (none if
    /// the original was not an event of that stream).
    pub async fn answer_duplicate(
        &self,
        p: ProducerSeq,
        stream: Option<&str>,
        conn: &Rc<dyn Answer>,
        req_id: u64,
    ) -> bool {
        let Verdict::Duplicate(offset) = self.index.borrow().producers.check(p) else {
            return false;
        };
        let version = match stream {
            Some(name) => self.version_at(name, offset).await,
            None => None,
        };
        self.metrics.duplicates.increment(1);
        conn.taken();
        if offset < self.committed() {
            let form = AckForm::V2 { duplicate: true, version };
            conn.answer(req_id, self.id(), Outcome::Appended { offset, form });
        } else {
            let d = DupWaiter { offset, version, conn: conn.clone(), req_id, since: Instant::now() };
            self.dups.borrow_mut().push(d);
        }
        true
    }

    /// The version of `name`'s event at `offset`: from memory in the last segment, else
    /// from the record itself (its stream extension). None: no such event there.
    async fn version_at(&self, name: &str, offset: u64) -> Option<u64> {
        if offset >= self.log.last_segment_first() {
            let l = self.with_index(|t| t.streams.locate(name))?;
            return l.active.binary_search(&offset).ok().map(|i| l.active_from() + i as u64);
        }
        let (recs, n) = self.log.read(offset, offset + 1, 1).await.ok()?;
        let (at, ext, _) = record::peek(&recs).ok().filter(|_| n == 1)?;
        ext.stream.filter(|s| at == offset && s.name == name).map(|s| s.version)
    }

    /// Waits until an append of `len` encoded bytes fits under the bounds. Errors when
    /// this node takes no appends.
    async fn wait_room(&self, len: usize) -> Result<(), (ErrorCode, String)> {
        loop {
            if let Some(e) = self.refuse() {
                return Err(e);
            }
            if self.staged_bytes.get() + len <= MAX_STAGED_BYTES && self.unacked_count.get() < MAX_UNACKED {
                return Ok(());
            }
            self.space_ev.wait().await;
        }
    }
}
