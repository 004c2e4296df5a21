//! Frames as bytes: cutting one from the front of a buffer, starting and finishing one
//! in an output buffer, the bounds-checked cursor every body is parsed with, and the
//! `Error` frame that both the client and the replication port send.

use super::errors::CodecError;
use super::{op, FRAME_HEADER_LEN, HELLO_MAGIC, MAX_FRAME};

/// A frame as cut from the byte stream; the body still borrows the input buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub op: u8,
    pub req_id: u64,
    pub body: &'a [u8],
}

/// Cuts one frame from the front of `buf`. `Ok(None)`: need more bytes.
/// On success returns the frame and the number of bytes it used.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, CodecError> {
    decode_frame_max(buf, MAX_FRAME)
}

/// `decode_frame` with a smaller bound on the whole frame (`max_frame ≤ MAX_FRAME`), e.g.
/// `MAX_REQUEST_FRAME` on the client port.
pub fn decode_frame_max(buf: &[u8], max_frame: usize) -> Result<Option<(Frame<'_>, usize)>, CodecError> {
    debug_assert!(max_frame <= MAX_FRAME);
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().unwrap());
    if (len as usize) < FRAME_HEADER_LEN - 4 {
        return Err(CodecError::FrameTooShort(len));
    }
    if len as usize > max_frame - 4 {
        return Err(CodecError::FrameTooLarge(len, max_frame));
    }
    let total = 4 + len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let op = buf[4];
    let req_id = u64::from_le_bytes(buf[5..13].try_into().unwrap());
    Ok(Some((Frame { op, req_id, body: &buf[13..total] }, total)))
}

/// Starts a frame in `out`; returns the position of its length field for `finish_frame`.
pub(super) fn begin_frame(out: &mut Vec<u8>, op: u8, req_id: u64) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.push(op);
    out.extend_from_slice(&req_id.to_le_bytes());
    at
}

pub(super) fn finish_frame(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 4) as u32;
    debug_assert!(len as usize <= MAX_FRAME - 4, "encoder built an oversized frame");
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// A whole frame whose body is `parts` one after the other: most bodies are fixed-width
/// little-endian fields (`x.to_le_bytes()`), with at most a length-prefixed name or a
/// trailing byte run among them, so one list of parts says the whole layout.
pub(super) fn encode_parts(out: &mut Vec<u8>, op: u8, req_id: u64, parts: &[&[u8]]) {
    let at = begin_frame(out, op, req_id);
    for p in parts {
        out.extend_from_slice(p);
    }
    finish_frame(out, at);
}

/// Little-endian cursor over a body; every read is bounds-checked.
pub(super) struct Body<'a> {
    pub(super) op: u8,
    pub(super) rest: &'a [u8],
}

impl<'a> Body<'a> {
    pub(super) fn new(f: &Frame<'a>) -> Self {
        Body { op: f.op, rest: f.body }
    }
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.rest.len() < n {
            return Err(CodecError::BadBody { op: self.op, reason: "body truncated" });
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }
    pub(super) fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    pub(super) fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub(super) fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub(super) fn end(self) -> Result<(), CodecError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(CodecError::BadBody { op: self.op, reason: "trailing bytes" })
        }
    }
    /// The rest of the body (a trailing byte run): nothing is left for `end` to refuse.
    pub(super) fn take_rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }
    pub(super) fn magic(&mut self) -> Result<(), CodecError> {
        if self.take(4)? != HELLO_MAGIC {
            return Err(CodecError::BadBody { op: self.op, reason: "bad magic" });
        }
        Ok(())
    }
}

/// Parses `f`'s body with `fields`, then refuses any bytes they left over.
pub(super) fn parse_body<'a, T>(
    f: &Frame<'a>,
    fields: impl FnOnce(&mut Body<'a>) -> Result<T, CodecError>,
) -> Result<T, CodecError> {
    let mut b = Body::new(f);
    let parsed = fields(&mut b)?;
    b.end()?;
    Ok(parsed)
}

/// Error frame; the message is cut to 1 KiB on a char boundary.
pub fn encode_error(req_id: u64, code: u16, message: &str, out: &mut Vec<u8>) {
    let at = begin_error(req_id, code, message, out);
    finish_frame(out, at);
}

/// Starts an `Error` frame: code, then the message cut to 1 KiB on a char boundary;
/// what an error carries after the message follows, then `finish_frame`.
pub(super) fn begin_error(req_id: u64, code: u16, message: &str, out: &mut Vec<u8>) -> usize {
    let mut end = message.len().min(1024);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let msg = &message.as_bytes()[..end];
    let at = begin_frame(out, op::ERROR, req_id);
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_le_bytes());
    out.extend_from_slice(msg);
    at
}

/// Reads an `Error` frame's code and message, as the port's frame type `T`; what the
/// error carries after the message is left in `b`.
pub(super) fn parse_error<'a, T>(b: &mut Body<'a>) -> Result<T, CodecError>
where
    T: From<(u16, &'a str)>,
{
    let code = b.u16()?;
    let n = b.u16()? as usize;
    let msg = std::str::from_utf8(b.take(n)?)
        .map_err(|_| CodecError::BadBody { op: op::ERROR, reason: "message not UTF-8" })?;
    Ok(T::from((code, msg)))
}
