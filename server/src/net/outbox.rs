//! The outgoing side of one client connection: answers encoded in request order, and
//! the task that writes them to the socket.
//!
//! Two kinds of writer fill it: the shard, through `shard::Answer`, with the outcome of
//! each append (in acknowledgement order), and the connection's own request handlers
//! (reads, refusals, pushes). Order between them holds because a handler that answers
//! anything but an append first waits until no append of the connection is unanswered
//! (`answered`).

use std::cell::{Cell, RefCell};

use corelog_client::codec::{self, ErrorCode};

use crate::shard::{AckForm, Answer, Outcome};
use corelog_runtime::sync::{take, Event};
use corelog_runtime::tls_io::Writer;

/// Encoded responses buffered for one connection before producers wait (tails, reads).
pub const MAX_OUT_BYTES: usize = 2 * 1024 * 1024;

#[derive(Default)]
pub struct Outbox {
    buf: RefCell<Vec<u8>>,
    /// Something was added or the connection is closing: wakes the writer.
    wake: Event,
    /// The writer took what was buffered (or an append was answered).
    drained: Event,
    /// Appends of this connection taken by the shard and not yet answered.
    inflight: Cell<u32>,
    /// The socket is gone or the connection is ending: nothing more is written.
    closed: Cell<bool>,
}

impl Answer for Outbox {
    fn taken(&self) {
        self.inflight.set(self.inflight.get().checked_add(1).expect("inflight appends fit a u32"));
    }

    fn answer(&self, req_id: u64, shard: u16, outcome: Outcome<'_>) {
        take(&self.inflight, 1, "inflight");
        let buf = &mut self.buf.borrow_mut();
        match outcome {
            Outcome::Appended { offset, form: AckForm::V1 } => codec::encode_appended(req_id, shard, offset, buf),
            Outcome::Appended { offset, form: AckForm::V2 { duplicate, version } } => {
                codec::encode_appended2(req_id, shard, offset, duplicate, version, buf)
            }
            Outcome::Failed { code, msg } => codec::encode_error(req_id, code as u16, msg, buf),
        }
        self.wake.notify();
        // A handler waiting for the connection's appends to be answered looks again.
        self.drained.notify();
    }
}

impl Outbox {
    /// Appends of this connection not yet answered.
    pub fn inflight(&self) -> u32 {
        self.inflight.get()
    }

    pub fn closed(&self) -> bool {
        self.closed.get()
    }

    /// Encodes one response with `f` and wakes the writer.
    pub fn push(&self, f: impl FnOnce(&mut Vec<u8>)) {
        f(&mut self.buf.borrow_mut());
        self.wake.notify();
    }

    /// An `Error` answer to a request that is not an append in flight.
    pub fn push_error(&self, req_id: u64, code: ErrorCode, msg: &str) {
        self.push(|b| codec::encode_error(req_id, code as u16, msg, b));
    }

    /// Waits until at most `max_inflight` appends are unanswered and fewer than
    /// `MAX_OUT_BYTES` (when `bounded`) are buffered, or the connection closed.
    pub async fn wait(&self, max_inflight: u32, bounded: bool) {
        while !self.closed.get() && (self.inflight.get() > max_inflight || (bounded && self.full())) {
            self.drained.wait().await;
        }
    }

    /// Waits until every append of the connection is answered (a barrier: what is
    /// answered next cannot overtake them).
    pub async fn answered(&self) {
        self.wait(0, false).await
    }

    /// Waits until every append is answered and the buffer has room.
    pub async fn answered_with_room(&self) {
        self.wait(0, true).await
    }

    /// Waits until the buffer has room.
    pub async fn room(&self) {
        self.wait(u32::MAX, true).await
    }

    /// Waits for the writer to take something (or an append to be answered).
    pub async fn drained(&self) {
        self.drained.wait().await
    }

    pub fn full(&self) -> bool {
        self.buf.borrow().len() >= MAX_OUT_BYTES
    }

    /// Ends the connection's output: the writer sends what is buffered and stops.
    pub fn close(&self) {
        self.closed.set(true);
        self.wake.notify();
    }

    /// Wakes whoever waits on the outbox (a push stream being stopped).
    pub fn nudge(&self) {
        self.drained.notify();
    }

    /// Sends whatever responses accumulated, one write per wake-up, until closed.
    pub async fn write_loop(&self, mut wr: Writer) {
        let mut pending = Vec::new(); // grows to what the connection needs
        loop {
            std::mem::swap(&mut pending, &mut *self.buf.borrow_mut());
            if pending.is_empty() {
                if self.closed.get() {
                    break;
                }
                self.drained.notify();
                self.wake.wait().await;
                continue;
            }
            if wr.write(&pending).await.is_err() {
                self.closed.set(true);
                self.drained.notify();
                break;
            }
            pending.clear();
            self.drained.notify();
        }
        wr.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_encoded_in_order_and_counted() {
        let o = Outbox::default();
        o.taken();
        o.taken();
        o.answer(7, 1, Outcome::Appended { offset: 42, form: AckForm::V1 });
        assert_eq!(o.inflight(), 1);
        o.answer(8, 1, Outcome::Failed { code: ErrorCode::Unavailable, msg: "no" });
        assert_eq!(o.inflight(), 0);
        let buf = o.buf.borrow();
        let (f1, used) = codec::decode_frame(&buf).unwrap().unwrap();
        assert_eq!(f1.req_id, 7);
        let (f2, _) = codec::decode_frame(&buf[used..]).unwrap().unwrap();
        assert_eq!(f2.req_id, 8);
    }

    #[test]
    #[should_panic(expected = "counter inflight would go below zero")]
    fn an_answer_nobody_waits_for_stops() {
        Outbox::default().answer(1, 0, Outcome::Appended { offset: 0, form: AckForm::V1 });
    }
}
