//! Replication, shard i ↔ shard i over one long-lived mTLS connection per pair.
//!
//! The leader dials `follower repl base port + i`; both sides send `Repl::Hello`
//! (epoch, shard, shard count, log end, last record epoch). A lower epoch is refused
//! with `Fenced`; a node that learns of a higher epoch while leading is fenced.
//! The leader answers `Welcome{epoch, truncate_to}`, the follower cuts its log there
//! (records the leader's history lacks were never acknowledged), persists the epoch,
//! and `Ack`s its end; the leader then streams batches from that point, from its
//! in-memory recent batches or, when the follower is further behind, from its segments.

pub mod catchup;
pub mod follower;
pub mod handshake;
pub mod leader;
#[cfg(test)]
mod model;
pub mod recent;
pub mod seed;

use corelog_client::codec::{decode_frame, CodecError, Frame, Repl};

use corelog_runtime::tls_io::Reader;

/// Reads the next replication frame; `Ok(None)` at a clean end of stream.
pub async fn next_frame<'a>(rd: &'a mut Reader, consumed: &mut usize) -> Result<Option<Frame<'a>>, String> {
    rd.consume(std::mem::take(consumed));
    loop {
        // Re-borrow after each fill: decode only once a whole frame is present.
        match decode_frame(rd.data()) {
            Ok(Some((_, used))) => {
                *consumed = used;
                let (f, _) = decode_frame(rd.data()).expect("decoded above").expect("whole frame");
                return Ok(Some(f));
            }
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        match rd.fill().await {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        }
    }
}

pub fn parse<'a>(f: &Frame<'a>) -> Result<Repl<'a>, String> {
    Repl::parse(f).map_err(|e: CodecError| e.to_string())
}
