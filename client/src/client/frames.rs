//! Whole frames off a socket: [`FrameReader`] cuts them from the bytes read, a [`Reply`]
//! owns one and turns it into a response (error frames into [`Error`]s).

use tokio::io::{AsyncRead, AsyncReadExt};

use super::error::Error;
use crate::codec::{self, decode_frame, Response};

/// An owned frame as received.
pub(crate) struct Reply {
    pub(super) op: u8,
    pub(crate) req_id: u64,
    body: Vec<u8>,
}

impl Reply {
    pub(crate) fn response(&self) -> Result<Response<'_>, Error> {
        let f = codec::Frame { op: self.op, req_id: 0, body: &self.body };
        match Response::parse(&f).map_err(Error::Codec)? {
            Response::Error { code, message } => Err(Error::Server { code, message: message.to_string(), hint: None }),
            Response::Refusal { code, message, hint } => {
                Err(Error::Server { code, message: message.to_string(), hint: Some(hint) })
            }
            Response::WrongVersion { current, message } => {
                Err(Error::WrongExpectedVersion { current, message: message.to_string() })
            }
            Response::OutOfRange { first, message } => Err(Error::OutOfRange { first, message: message.to_string() }),
            r => Ok(r),
        }
    }
}

/// Reads whole frames from a stream, keeping leftovers between calls.
pub(crate) struct FrameReader<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub(crate) fn new(r: R) -> Self {
        FrameReader { r, buf: Vec::with_capacity(64 * 1024), start: 0 }
    }
    pub(crate) async fn next(&mut self) -> Result<Option<Reply>, Error> {
        loop {
            if let Some((f, used)) = decode_frame(&self.buf[self.start..]).map_err(Error::Codec)? {
                let reply = Reply { op: f.op, req_id: f.req_id, body: f.body.to_vec() };
                self.start += used;
                return Ok(Some(reply));
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.r.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}
