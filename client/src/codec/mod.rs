//! The wire protocol, sans-IO: bytes in → frames out, frames in → bytes out.
//!
//! Shared by the server, the client library, the load generator and the fuzz target.
//! Nothing here touches a socket, a runtime or a clock. The byte layout is specified in
//! `docs/protocol.md`; keep the two in step.
//!
//! Frame: `len: u32 LE` (bytes after this field) · `op: u8` · `req_id: u64 LE` · body.
//!
//! This file holds the versions, the bounds, the flag bits and the opcodes; the frames
//! themselves, read from the bottom up:
//! - `errors`: the stable error codes and why bytes could not be decoded;
//! - `frame`: cutting frames from bytes, the body cursor, the `Error` frame both ports share;
//! - `request`: client → server requests, and what a stream append expects;
//! - `response`: server → client answers, with the leadership views of version 3;
//! - `repl`: the replication port's frames (both directions).
//!
//! Every item is re-exported here: `codec::Request`, `codec::decode_frame`, … are the paths.

/// A fieldless enum as it stands on the wire: its variants with their numbers, and
/// `$from`, which maps a number back to its variant (`None` for any other). One list
/// serves both directions, so a variant cannot be added to one and missed in the other.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $repr:ident, from $from:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $n:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr($repr)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $n, )+
        }

        impl $name {
            pub fn $from(v: $repr) -> Option<$name> {
                match v {
                    $( $n => Some($name::$variant), )+
                    _ => None,
                }
            }
        }
    };
}

mod errors;
mod frame;
mod group;
mod repl;
mod request;
mod response;

pub use crate::record::{ProducerSeq, MAX_PAYLOAD, MAX_STREAM_NAME};
pub use errors::{CodecError, ErrorCode};
pub use frame::{decode_frame, decode_frame_max, encode_error, Frame};
pub use group::{GroupReq, GroupResp, MAX_GROUP_K, MAX_GROUP_NAME, MAX_GROUP_PREFIX, MAX_MEMBER_ID, NO_COMMIT};
pub use repl::Repl;
pub use request::{encode_append, encode_append2, stream_shard, Expect, Request, StreamReq};
pub use response::{
    carries_hint, encode_appended, encode_appended2, encode_out_of_range, encode_refusal, encode_wrong_version, Hint,
    LeaderState, Leadership, Response, Role,
};

/// Client protocol version carried in `Hello`: the newest this build speaks. Version 2
/// adds `Append2` (idempotent appends: producer id + sequence; streams with an expected
/// version), `Appended2`, `ReadStream` and `StreamRecords`; a
/// server speaks every version from `MIN_PROTOCOL_VERSION` up and answers `HelloOk` with
/// the version the client asked for. Version 3 adds what a client needs to follow
/// leadership (docs/protocol.md §6): `HelloOk` carries the node's [`Leadership`] view
/// (its lease, the newest epoch it knows, whether a leader holds a live lease), and the
/// refusals that send a client elsewhere (`NotLeader`, `Unavailable`, `Fenced`,
/// `ShuttingDown`) carry a [`Hint`].
/// Version 4 adds consumer groups (`GroupJoin`, `GroupCommit`, `GroupHeartbeat` and
/// their pushes; docs/protocol.md §11). A client that needs no group greets with
/// [`CLIENT_VERSION`], so that it keeps leadership hints against a version-3 server.
pub const PROTOCOL_VERSION: u16 = 4;
/// The version a client greets with when it uses no consumer group: the newest a
/// version-3 server (the release before groups) also speaks.
pub const CLIENT_VERSION: u16 = 3;
/// First protocol version with consumer groups.
pub const GROUPS_VERSION: u16 = 4;
/// First protocol version whose `HelloOk` and refusals carry leadership (see above).
pub const LEADERSHIP_VERSION: u16 = 3;
/// The version a client opens with when a server refuses [`CLIENT_VERSION`] with
/// `BadVersion` (a server older than the client, as during a rolling upgrade): the oldest
/// with every request the client sends. Without version 3 a connection learns nothing of
/// leases and its refusals carry no hint (docs/operations.md §15).
pub const FALLBACK_VERSION: u16 = 2;
/// Oldest client protocol version a server still speaks.
pub const MIN_PROTOCOL_VERSION: u16 = 1;
/// Replication protocol version carried in `Repl::Hello`. 2: the follower answers
/// `Welcome` with `Joined` (its last record's epoch and CRC) instead of `Ack`, and a
/// leader writes nothing before a follower has accepted its epoch. Both nodes of a pair
/// must speak the same version; a different one is refused with `BadVersion`.
pub const REPL_PROTOCOL_VERSION: u16 = 2;
/// Magic in `Hello` / `ReplHello` bodies: lets a server reject a stray plaintext speaker.
pub const HELLO_MAGIC: [u8; 4] = *b"CLOG";
/// `len` field + op + req_id.
pub const FRAME_HEADER_LEN: usize = 4 + 1 + 8;
/// Largest `max_bytes` a `Read` may ask for; a `Records` frame stays below `MAX_FRAME`.
pub const MAX_READ_BYTES: u32 = 1024 * 1024;
/// Largest replication batch body (records bytes).
pub const MAX_REPL_BATCH_BYTES: usize = 2 * 1024 * 1024;
/// Largest whole frame, header included. Anything announcing more is refused unread.
pub const MAX_FRAME: usize = MAX_REPL_BATCH_BYTES + 64;
/// Largest frame a client may send: an `Append` of `MAX_PAYLOAD` bytes (the largest
/// request, with the largest `Append2` header). The client port refuses anything
/// announcing more, unread.
pub const MAX_REQUEST_FRAME: usize = FRAME_HEADER_LEN + APPEND2_MAX_HEADER + MAX_PAYLOAD;
/// `Append2` body before the payload: flags, producer id and sequence, stream name
/// length, the longest valid name, expected-version kind and value.
pub const APPEND2_MAX_HEADER: usize = 1 + 16 + 2 + MAX_STREAM_NAME + 9;
/// `Append2` flag bit: producer id and sequence follow.
pub const APPEND_FLAG_PRODUCER: u8 = 0x01;
/// `Append2` flag bit: a stream name and an expected version follow (after the producer).
pub const APPEND_FLAG_STREAM: u8 = 0x02;
/// `Appended2` flag bit: the sequence was written before; this is its original position.
pub const APPENDED_FLAG_DUPLICATE: u8 = 0x01;
/// `Appended2` flag bit: the event's stream version follows.
pub const APPENDED_FLAG_VERSION: u8 = 0x02;
/// `Subscribe` flag bit: `name` is one stream's name and `from` a version (else `name`
/// is a prefix and `from` an offset of the connection's shard).
pub const SUBSCRIBE_FLAG_STREAM: u8 = 0x01;
/// Most events one `ReadStream` may ask for.
pub const MAX_READ_COUNT: u32 = 10_000;
/// Expected-version kinds in `Append2` (docs/protocol.md §4).
pub const EXPECT_ANY: u8 = 0;
pub const EXPECT_NO_STREAM: u8 = 1;
pub const EXPECT_EXACT: u8 = 2;
/// `current` in a `WrongExpectedVersion` error when the stream has no event.
pub const NO_STREAM_VERSION: u64 = u64::MAX;
const _: () = assert!(MAX_REQUEST_FRAME <= MAX_FRAME);

/// Operation codes. Requests < 0x80 ≤ responses; replication frames 0x10..0x1F / 0x90..0x9F.
pub mod op {
    pub const HELLO: u8 = 0x01;
    pub const APPEND: u8 = 0x02;
    pub const READ: u8 = 0x03;
    pub const TAIL: u8 = 0x04;
    pub const APPEND2: u8 = 0x05;
    pub const READ_STREAM: u8 = 0x06;
    pub const SUBSCRIBE: u8 = 0x07;
    pub const TRIM: u8 = 0x08;
    pub const INDEX_SNAPSHOT: u8 = 0x09;
    pub const GROUP_JOIN: u8 = 0x0A;
    pub const GROUP_COMMIT: u8 = 0x0B;
    pub const GROUP_HEARTBEAT: u8 = 0x0C;
    pub const REPL_HELLO: u8 = 0x10;
    pub const REPL_ACK: u8 = 0x11;
    pub const REPL_JOINED: u8 = 0x12;
    pub const REPL_PING: u8 = 0x13;
    pub const HELLO_OK: u8 = 0x81;
    pub const APPENDED: u8 = 0x82;
    pub const RECORDS: u8 = 0x83;
    pub const APPENDED2: u8 = 0x84;
    pub const STREAM_RECORDS: u8 = 0x85;
    pub const TRIMMED: u8 = 0x86;
    pub const INDEX_SNAPSHOT_PIECE: u8 = 0x87;
    pub const GROUP_ASSIGNED: u8 = 0x88;
    pub const GROUP_RECORDS: u8 = 0x89;
    pub const GROUP_COMMITTED: u8 = 0x8A;
    pub const REPL_WELCOME: u8 = 0x90;
    pub const REPL_BATCH: u8 = 0x91;
    pub const REPL_SEED: u8 = 0x92;
    pub const ERROR: u8 = 0xFF;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Property: every `Append2` / `Appended2` (random flags, ids, sequences, payload
    /// lengths up to the maximum) survives encode → frame → parse unchanged, and every
    /// record of either version survives encode → decode with `peek` agreeing.
    #[test]
    fn version_2_messages_and_records_roundtrip_for_random_values() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..2_000 {
            let n = if rng.gen_bool(0.05) { MAX_PAYLOAD } else { rng.gen_range(0..300) };
            let payload: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            let producer = rng.gen_bool(0.7).then(|| ProducerSeq { id: rng.gen(), seq: rng.gen() });
            let name_len = if rng.gen_bool(0.1) { MAX_STREAM_NAME } else { rng.gen_range(1..40) };
            let name: String = (0..name_len).map(|_| rng.gen_range(b'a'..=b'z') as char).collect();
            let expect = match rng.gen_range(0..3) {
                0 => Expect::Any,
                1 => Expect::NoStream,
                _ => Expect::Exact(rng.gen()),
            };
            let stream = rng.gen_bool(0.5).then(|| StreamReq::new(&name, expect));
            let req_id = rng.gen();
            let mut out = Vec::new();
            Request::Append2 { producer, stream, payload: &payload }.encode(req_id, &mut out);
            let (f, used) = decode_frame_max(&out, MAX_REQUEST_FRAME).unwrap().unwrap();
            assert_eq!((used, f.req_id), (out.len(), req_id));
            let parsed = Request::parse(&f).unwrap();
            assert_eq!(parsed, Request::Append2 { producer, stream, payload: &payload });
            if let Request::Append2 { stream: Some(s), .. } = parsed {
                assert_eq!(s.expect(), Ok(expect));
            }
            let version = rng.gen_bool(0.5).then(|| rng.gen());
            let r = Response::Appended2 { shard: rng.gen(), offset: rng.gen(), duplicate: rng.gen(), version };
            let mut out = Vec::new();
            r.encode(req_id, &mut out);
            let (f, _) = decode_frame(&out).unwrap().unwrap();
            assert_eq!(Response::parse(&f).unwrap(), r);
            let (offset, epoch) = (rng.gen(), rng.gen());
            let ext = crate::record::Ext {
                producer,
                stream: stream.map(|_| crate::record::StreamPos { name: &name, version: rng.gen() }),
            };
            let mut rec = Vec::new();
            crate::record::encode_ex(offset, epoch, ext, &payload, &mut rec);
            let (got, len) = crate::record::decode(&rec).unwrap();
            assert_eq!(
                (got.offset, got.epoch, got.ext(), got.payload, len),
                (offset, epoch, ext, &payload[..], rec.len())
            );
            assert_eq!(crate::record::peek(&rec).unwrap(), (offset, ext, rec.len()));
            // Any single flipped byte is caught (CRC, or a shape check first).
            let at = rng.gen_range(0..rec.len());
            rec[at] ^= 1 << rng.gen_range(0..8);
            assert!(crate::record::decode(&rec).is_err(), "flip at {at} not detected");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        for _ in 0..20_000 {
            let n = rng.gen_range(0..64);
            let mut buf: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            if n >= 4 && rng.gen_bool(0.7) {
                let len = rng.gen_range(0..(n as u32));
                buf[0..4].copy_from_slice(&len.to_le_bytes());
            }
            if let Ok(Some((f, used))) = decode_frame(&buf) {
                assert!(used <= buf.len());
                let _ = Request::parse(&f);
                let _ = Response::parse(&f);
                let _ = Repl::parse(&f);
            }
        }
    }
}
