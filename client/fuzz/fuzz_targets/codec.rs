//! Fuzz target `codec`: arbitrary bytes through the sans-IO wire codec and the record
//! decoder. Run from `client/fuzz`:
//!
//! ```text
//! cargo +nightly fuzz run codec -- -max_total_time=600 -max_len=4096
//! ```
//!
//! What it checks, besides "never panics":
//! - `decode_frame` cuts frames that lie inside the input and whose length matches;
//!   the input is consumed frame after frame, like a connection's read buffer.
//! - every frame goes through `Request::parse`, `Response::parse` and `Repl::parse`;
//!   whatever parses is re-encoded, and `parse(decode_frame(encode(x))) == x`. The
//!   encodings are canonical, so the re-encoded bytes must equal the input frame
//!   (`Repl` frames always carry `req_id` 0; `Error` messages over 1 KiB are cut).
//! - `record::decode`, `record::Records` and `record::verify_run` on the whole input and
//!   on every `Records` / `Repl::Batch` body; decoded records (versions 1 and 2) re-encode
//!   to the same bytes and `record::peek` agrees with `record::decode`.
//! - protocol version 2: `Append2` (with and without a producer and a stream),
//!   `Appended2` (with and without a version), `ReadStream`, `StreamRecords` and the
//!   `WrongExpectedVersion` error, `Trim` / `Trimmed` and the `OutOfRange` error with its
//!   first offset (retention) go through the same parse / re-encode checks as every
//!   other frame; records with producer and stream extensions likewise.

#![no_main]

use corelog_client::codec::{decode_frame, CodecError, Frame, Repl, Request, Response, FRAME_HEADER_LEN, MAX_FRAME};
use corelog_client::record::{self, RecordRef, Records, RECORD_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

/// Longest `Error` message the encoder keeps (it cuts on a char boundary).
const MAX_ERROR_MESSAGE: usize = 1024;

/// What parsed, or `None` once the error's code and text have been produced (neither
/// may panic).
fn parsed<T>(r: Result<T, CodecError>) -> Option<T> {
    r.map_err(|e| {
        let _ = (e.code(), e.to_string());
    })
    .ok()
}

/// The one frame `out` holds, which must be the whole of it, with `req_id`.
fn reencoded<'a>(out: &'a [u8], req_id: u64, what: &str) -> Frame<'a> {
    let (f, used) = decode_frame(out)
        .unwrap_or_else(|e| panic!("re-encoded {what} does not decode: {e}"))
        .unwrap_or_else(|| panic!("re-encoded {what}: not a whole frame"));
    assert_eq!(used, out.len(), "re-encoded {what}: frame length");
    assert_eq!(f.req_id, req_id, "re-encoded {what}: req_id");
    f
}

fn check_request(f: &Frame<'_>, wire: &[u8]) {
    let Some(req) = parsed(Request::parse(f)) else { return };
    let mut out = Vec::new();
    req.encode(f.req_id, &mut out);
    let f2 = reencoded(&out, f.req_id, "request");
    check_same(&Request::parse(&f2).expect("re-encoded request parses"), &req, out == wire, "request");
}

/// What a re-encoded frame parses to (`again`) is what was encoded, and the encoding is
/// `canonical` (the input's bytes).
fn check_same<T: PartialEq + std::fmt::Debug>(again: &T, original: &T, canonical: bool, what: &str) {
    assert_eq!(again, original, "{what}: decode(encode(x)) != x");
    assert!(canonical, "{what} encoding is not canonical");
}

/// A re-encoded error frame keeps its message, or the prefix the encoder cuts it to;
/// `canonical` (its bytes equal the input's) must hold unless the message was cut.
fn check_error_message(original: &str, reencoded: &str, canonical: bool, what: &str) {
    if original.len() <= MAX_ERROR_MESSAGE {
        assert_eq!(original, reencoded, "error message changed");
        assert!(canonical, "{what} encoding is not canonical");
    } else {
        assert!(reencoded.len() <= MAX_ERROR_MESSAGE && reencoded.len() + 4 > MAX_ERROR_MESSAGE);
        assert!(original.starts_with(reencoded), "error message not cut to a prefix");
    }
}

fn check_records_body(records: &[u8], first: u64, count: u32) {
    walk_records(records);
    let _ = record::verify_run(records, first, count);
}

fn check_response(f: &Frame<'_>, wire: &[u8]) {
    let Some(resp) = parsed(Response::parse(f)) else { return };
    if let Response::Records { next_offset, count, records, .. } = &resp {
        check_records_body(records, next_offset.wrapping_sub(*count as u64), *count);
    }
    if let Response::StreamRecords { records, .. } = &resp {
        walk_records(records);
    }
    let mut out = Vec::new();
    resp.encode(f.req_id, &mut out);
    let f2 = reencoded(&out, f.req_id, "response");
    let again = Response::parse(&f2).expect("re-encoded response parses");
    let canonical = out == wire;
    match (&resp, &again) {
        (Response::Error { code: c1, message: m1 }, Response::Error { code: c2, message: m2 }) => {
            assert_eq!(c1, c2);
            check_error_message(m1, m2, canonical, "error response");
        }
        (Response::OutOfRange { first: a, message: m1 }, Response::OutOfRange { first: b, message: m2 }) => {
            assert_eq!(a, b);
            check_error_message(m1, m2, canonical, "OutOfRange");
        }
        (Response::WrongVersion { current: v1, message: m1 }, Response::WrongVersion { current: v2, message: m2 }) => {
            assert_eq!(v1, v2);
            check_error_message(m1, m2, canonical, "WrongExpectedVersion");
        }
        _ => check_same(&again, &resp, canonical, "response"),
    }
}

fn check_repl(f: &Frame<'_>, wire: &[u8]) {
    let Some(repl) = parsed(Repl::parse(f)) else { return };
    if let Repl::Batch { first_offset, count, records, .. } = &repl {
        // Exactly what a follower runs on a received batch.
        check_records_body(records, *first_offset, *count);
    }
    let mut out = Vec::new();
    repl.encode(&mut out);
    // Replication frames carry req_id 0.
    let f2 = reencoded(&out, 0, "repl frame");
    let again = Repl::parse(&f2).expect("re-encoded repl frame parses");
    let same_bytes_but_req_id = out[..5] == wire[..5] && out[13..] == wire[13..];
    match (&repl, &again) {
        (Repl::Error { code: c1, message: m1 }, Repl::Error { code: c2, message: m2 }) => {
            assert_eq!(c1, c2);
            check_error_message(m1, m2, same_bytes_but_req_id, "repl error");
        }
        _ => check_same(&again, &repl, same_bytes_but_req_id, "repl"),
    }
}

/// A decoded record (version 1, or version 2 with producer and/or stream extensions) must re-encode
/// to the bytes it came from: the decoder checks version and flags, so the encoding is
/// canonical.
fn check_record(r: &RecordRef<'_>, bytes: &[u8]) {
    assert_eq!(bytes.len(), r.encoded_len());
    let mut out = Vec::new();
    record::encode_ex(r.offset, r.epoch, r.ext(), r.payload, &mut out);
    let (r2, n) = record::decode(&out).expect("re-encoded record decodes");
    assert_eq!(n, out.len());
    assert_eq!(&r2, r, "record decode(encode(x)) != x");
    assert_eq!(out, bytes, "record encoding is not canonical");
    let (offset, ext, len) = record::peek(bytes).expect("a decoded record peeks");
    assert_eq!((offset, ext, len), (r.offset, r.ext(), n), "peek disagrees with decode");
}

fn walk_records(buf: &[u8]) {
    if let Ok((r, n)) = record::decode(buf) {
        assert!(n >= RECORD_HEADER_LEN && n <= buf.len());
        check_record(&r, &buf[..n]);
    }
    let mut at = 0usize;
    let mut it = Records::new(buf);
    while let Some(item) = it.next() {
        match item {
            Ok(r) => {
                let n = r.encoded_len();
                assert!(at + n <= buf.len());
                check_record(&r, &buf[at..at + n]);
                at += n;
            }
            Err(e) => {
                let _ = e.to_string();
                assert!(it.next().is_none(), "Records must stop after an error");
                break;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // Consume frames from the front, as a connection's read loop does.
    let mut rest = data;
    loop {
        match decode_frame(rest) {
            Ok(Some((f, used))) => {
                assert!(used >= FRAME_HEADER_LEN && used <= rest.len() && used <= MAX_FRAME);
                assert_eq!(used, FRAME_HEADER_LEN + f.body.len());
                assert_eq!(f.op, rest[4]);
                let wire = &rest[..used];
                check_request(&f, wire);
                check_response(&f, wire);
                check_repl(&f, wire);
                rest = &rest[used..];
            }
            Ok(None) => {
                // Only an incomplete frame may ask for more bytes.
                if rest.len() >= 4 {
                    let len = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
                    assert!(4 + len > rest.len());
                }
                break;
            }
            Err(e) => {
                let _ = (e.code(), e.to_string());
                break;
            }
        }
    }
    walk_records(data);
    let _ = record::verify_run(data, 0, u32::MAX);
});
