//! One append's attempts: what to do after a failure ([`Step`]), the failover budget,
//! the back-off, and the outcome over all attempts ([`Attempts`]).

use std::time::{Duration, Instant};

use super::config::ClientConfig;
use super::conn::Conn;
use super::error::{Error, Outcome};
use crate::codec::{ErrorCode, Role};

/// Back-off between attempts: from 20 ms, doubling, at most 100 ms.
const BACKOFF_START: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(100);

/// What an append does after an attempt failed (docs/protocol.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing was written there: try again, on another node (or the leader named).
    Move,
    /// The attempt may have landed: an idempotent append is sent again, a plain one not.
    Lost,
    /// An idempotent append waits for an earlier sequence of its producer.
    Wait,
    /// A definite answer no retry changes.
    Stop,
}

pub(crate) fn step(e: &Error) -> Step {
    use ErrorCode::*;
    match e {
        Error::Unreachable(_) | Error::NotSent | Error::Tls(_) => Step::Move,
        Error::Io(_) | Error::Closed | Error::Timeout(_) | Error::Abandoned(_) => Step::Lost,
        Error::Server { .. } => match e.code() {
            Some(NotLeader | Unavailable | Fenced | ShuttingDown | Overloaded) => Step::Move,
            Some(OutcomeUnknown | ReplicationTimeout) => Step::Lost,
            Some(SequenceGap | UnknownProducer) => Step::Wait,
            _ => Step::Stop,
        },
        _ => Step::Stop,
    }
}

/// One append's attempts, the one retry path of plain appends, stream appends and
/// producers: the failover budget, the back-off (20 ms doubling to 100 ms, or a refusal's
/// retry hint), and whether an attempt may have landed (then the call can no longer say
/// `NotWritten`).
pub(crate) struct Attempts {
    budget: Duration,
    pub(crate) deadline: Option<Instant>,
    backoff: Duration,
    /// The last retry hint a refusal gave (a take-over under way): later pauses of this
    /// append use it too (the node is restarting: refused connections are cheap to retry).
    hint: Option<Duration>,
    pub(crate) sent: u32,
    pub(crate) in_doubt: bool,
}

impl Attempts {
    /// The budget starts now (`start`), or at the first failure (a producer's).
    pub(crate) fn new(cfg: &ClientConfig, start: bool) -> Attempts {
        let deadline = start.then(|| Instant::now() + cfg.failover_timeout);
        Attempts {
            budget: cfg.failover_timeout,
            deadline,
            backoff: BACKOFF_START,
            hint: None,
            sent: 0,
            in_doubt: false,
        }
    }

    pub(crate) fn start(&mut self) -> Instant {
        *self.deadline.get_or_insert_with(|| Instant::now() + self.budget)
    }

    /// Notes an attempt's failure; its step.
    pub(crate) fn failed(&mut self, e: &Error) -> Step {
        let s = step(e);
        if s == Step::Lost {
            self.in_doubt = true;
        }
        s
    }

    /// [`Attempts::failed`] for an attempt on `conn`. A connection to a follower never
    /// writes an append (a node that takes over closes the connections greeted as a
    /// follower's first; other role changes restart its process): an attempt lost there
    /// was not written, and is answered as such.
    pub(crate) fn failed_on(&mut self, conn: &Conn, e: Error) -> (Step, Error) {
        if conn.info.role == Role::Follower && step(&e) == Step::Lost && !matches!(e, Error::Server { .. }) {
            let why = format!(
                "{}: a follower's connection ended before its answer ({e}); a follower writes nothing",
                conn.addr
            );
            return (Step::Move, Error::Unreachable(why));
        }
        (self.failed(&e), e)
    }

    /// `e` as the call's error, with the outcome over all attempts.
    pub(crate) fn fail(&self, e: Error) -> Error {
        if self.in_doubt && e.outcome() == Outcome::NotWritten {
            Error::InDoubt { attempts: self.sent, last: Box::new(e) }
        } else {
            e
        }
    }

    /// Sleeps the back-off, or the retry hint `e` carries (a take-over under way: ask
    /// again soon, without growing the back-off); `Err` (the call's error) when the
    /// budget would end first.
    pub(crate) async fn pause(&mut self, e: Error) -> Result<(), Error> {
        let end = self.start();
        let hinted = match &e {
            Error::Server { hint: Some(h), .. } if h.retry_ms > 0 => Some(Duration::from_millis(h.retry_ms as u64)),
            _ => None,
        };
        let hinted = hinted.or(self.hint);
        self.hint = hinted;
        let wait = hinted.unwrap_or(self.backoff);
        if Instant::now() + wait >= end {
            return Err(self.fail(e));
        }
        tokio::time::sleep(wait).await;
        if hinted.is_none() {
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        }
        Ok(())
    }
}
