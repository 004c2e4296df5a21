//! rustls driven by hand over glommio sockets: one TLS record and one socket write per
//! batch of responses (futures-rustls would write a record per poll_write).
//!
//! A connection is split into a `Reader` and a `Writer` sharing one socket and the
//! rustls state through `Rc<RefCell>`s borrowed only inside a `poll` (never across an
//! await). glommio keeps separate read and write sources per stream, so a read and a
//! write may be pending at once; one fd per connection (the open-file limit is 20,000
//! per process here). `tls: None` is plaintext (`--insecure`).

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;

pub type Sock = Rc<RefCell<TcpStream>>;

async fn sock_read(s: &Sock, buf: &mut [u8]) -> io::Result<usize> {
    std::future::poll_fn(|cx| Pin::new(&mut *s.borrow_mut()).poll_read(cx, buf)).await
}

async fn sock_write_all(s: &Sock, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = std::future::poll_fn(|cx| Pin::new(&mut *s.borrow_mut()).poll_write(cx, buf)).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "socket closed"));
        }
        buf = &buf[n..];
    }
    Ok(())
}

/// Bytes read from the socket per call.
const READ_CHUNK: usize = 64 * 1024;

pub type Tls = Rc<RefCell<rustls::Connection>>;

pub struct Reader {
    sock: Sock,
    tls: Option<Tls>,
    raw: Vec<u8>,
    /// Decrypted bytes not yet consumed: `plain[start..]`.
    pub plain: Vec<u8>,
    pub start: usize,
}

pub struct Writer {
    sock: Sock,
    tls: Option<Tls>,
    out: Vec<u8>,
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Completes the TLS handshake (if any) and splits the stream.
pub async fn establish(sock: TcpStream, tls: Option<rustls::Connection>) -> io::Result<(Reader, Writer)> {
    let sock: Sock = Rc::new(RefCell::new(sock));
    let mut raw = vec![0u8; READ_CHUNK];
    if let Some(mut c) = tls {
        let mut out = Vec::new();
        while c.is_handshaking() {
            while c.wants_write() {
                c.write_tls(&mut out)?;
            }
            if !out.is_empty() {
                sock_write_all(&sock, &out).await?;
                out.clear();
            }
            if !c.is_handshaking() {
                break;
            }
            if c.wants_read() {
                let n = sock_read(&sock, &mut raw).await?;
                if n == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed during TLS handshake"));
                }
                let mut input = &raw[..n];
                while !input.is_empty() {
                    c.read_tls(&mut input)?;
                    if let Err(e) = c.process_new_packets() {
                        // Send the alert so the peer learns why.
                        let _ = c.write_tls(&mut out);
                        let _ = sock_write_all(&sock, &out).await;
                        return Err(other(e));
                    }
                }
            }
        }
        while c.wants_write() {
            c.write_tls(&mut out)?;
        }
        if !out.is_empty() {
            sock_write_all(&sock, &out).await?;
        }
        let tls = Some(Rc::new(RefCell::new(c)));
        return split(sock, tls, raw);
    }
    split(sock, None, raw)
}

fn split(sock: Sock, tls: Option<Tls>, raw: Vec<u8>) -> io::Result<(Reader, Writer)> {
    Ok((
        Reader { sock: sock.clone(), tls: tls.clone(), raw, plain: Vec::new(), start: 0 },
        Writer { sock, tls, out: Vec::new() },
    ))
}

impl Reader {
    /// Unconsumed plaintext.
    pub fn data(&self) -> &[u8] {
        &self.plain[self.start..]
    }

    pub fn consume(&mut self, n: usize) {
        self.start += n;
        debug_assert!(self.start <= self.plain.len());
    }

    /// Moves plaintext rustls already decrypted into `plain`. Returns (got any, peer closed).
    fn drain_tls(&mut self) -> io::Result<(bool, bool)> {
        let Some(tls) = &self.tls else { return Ok((false, false)) };
        let mut c = tls.borrow_mut();
        let st = c.process_new_packets().map_err(other)?;
        let avail = st.plaintext_bytes_to_read();
        if avail > 0 {
            let at = self.plain.len();
            self.plain.resize(at + avail, 0);
            c.reader().read_exact(&mut self.plain[at..])?;
        }
        Ok((avail > 0, st.peer_has_closed()))
    }

    /// Reads more plaintext. Returns false on a clean end of stream.
    pub async fn fill(&mut self) -> io::Result<bool> {
        if self.start > 0 {
            self.plain.drain(..self.start);
            self.start = 0;
        }
        loop {
            // Plaintext may already wait inside rustls (e.g. sent with the handshake).
            let (got, closed) = self.drain_tls()?;
            if got {
                return Ok(true);
            }
            if closed {
                return Ok(false);
            }
            let n = sock_read(&self.sock, &mut self.raw).await?;
            if n == 0 {
                return Ok(false);
            }
            match self.tls.clone() {
                None => {
                    self.plain.extend_from_slice(&self.raw[..n]);
                    return Ok(true);
                }
                Some(tls) => {
                    let raw = std::mem::take(&mut self.raw);
                    let mut input = &raw[..n];
                    while !input.is_empty() {
                        if let Err(e) = tls.borrow_mut().read_tls(&mut input) {
                            self.raw = raw;
                            return Err(e);
                        }
                        // Decrypt as we go so rustls' buffer never fills up.
                        if let Err(e) = self.drain_tls() {
                            self.raw = raw;
                            return Err(e);
                        }
                    }
                    self.raw = raw;
                    if !self.data().is_empty() {
                        return Ok(true);
                    }
                }
            }
        }
    }
}

impl Writer {
    /// Encrypts `data` (one TLS record per 16 KiB) and writes it with one socket write.
    pub async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match &self.tls {
            None => sock_write_all(&self.sock, data).await,
            Some(tls) => {
                {
                    // rustls accepts a bounded amount per call (its buffer limit):
                    // encrypt in pieces, draining records as we go.
                    let mut c = tls.borrow_mut();
                    self.out.clear();
                    let mut rest = data;
                    loop {
                        let n = c.writer().write(rest)?;
                        rest = &rest[n..];
                        while c.wants_write() {
                            c.write_tls(&mut self.out)?;
                        }
                        if rest.is_empty() {
                            break;
                        }
                        if n == 0 {
                            return Err(io::Error::new(io::ErrorKind::WriteZero, "TLS connection refuses more data"));
                        }
                    }
                }
                sock_write_all(&self.sock, &self.out).await
            }
        }
    }

    pub async fn close(&mut self) {
        if let Some(tls) = &self.tls {
            tls.borrow_mut().send_close_notify();
            let _ = self.write(&[]).await;
        }
        let s = self.sock.borrow().as_raw_fd();
        // SAFETY: shutdown on the fd owned by our stream (no await while borrowed).
        unsafe { libc::shutdown(s, libc::SHUT_WR) };
    }
}
