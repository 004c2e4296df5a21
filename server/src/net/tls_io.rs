//! rustls driven by hand over glommio sockets: one TLS record and one socket write per
//! batch of responses (futures-rustls would write a record per poll_write).
//!
//! A connection is split into a `Reader` and a `Writer`, each with its own dup of the
//! socket fd (glommio streams cannot be split), sharing the rustls state through an
//! `Rc<RefCell>` that is never held across an await. `tls: None` is plaintext
//! (`--insecure`).

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::rc::Rc;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

/// Bytes read from the socket per call.
const READ_CHUNK: usize = 64 * 1024;

pub type Tls = Rc<RefCell<rustls::Connection>>;

pub struct Reader {
    sock: TcpStream,
    tls: Option<Tls>,
    raw: Vec<u8>,
    /// Decrypted bytes not yet consumed: `plain[start..]`.
    pub plain: Vec<u8>,
    pub start: usize,
}

pub struct Writer {
    sock: TcpStream,
    tls: Option<Tls>,
    out: Vec<u8>,
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Completes the TLS handshake (if any) and splits the stream.
pub async fn establish(
    mut sock: TcpStream,
    tls: Option<rustls::Connection>,
) -> io::Result<(Reader, Writer)> {
    let mut raw = vec![0u8; READ_CHUNK];
    if let Some(mut c) = tls {
        let mut out = Vec::new();
        while c.is_handshaking() {
            while c.wants_write() {
                c.write_tls(&mut out)?;
            }
            if !out.is_empty() {
                sock.write_all(&out).await?;
                out.clear();
            }
            if !c.is_handshaking() {
                break;
            }
            if c.wants_read() {
                let n = sock.read(&mut raw).await?;
                if n == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed during TLS handshake",
                    ));
                }
                c.read_tls(&mut &raw[..n])?;
                if let Err(e) = c.process_new_packets() {
                    // Send the alert so the peer learns why.
                    let _ = c.write_tls(&mut out);
                    let _ = sock.write_all(&out).await;
                    return Err(other(e));
                }
            }
        }
        while c.wants_write() {
            c.write_tls(&mut out)?;
        }
        if !out.is_empty() {
            sock.write_all(&out).await?;
        }
        let tls = Some(Rc::new(RefCell::new(c)));
        return split(sock, tls, raw);
    }
    split(sock, None, raw)
}

fn split(sock: TcpStream, tls: Option<Tls>, raw: Vec<u8>) -> io::Result<(Reader, Writer)> {
    // SAFETY: dup returns a fresh fd that the new TcpStream owns and closes.
    let fd = unsafe { libc::dup(sock.as_raw_fd()) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let wsock = unsafe { TcpStream::from_raw_fd(fd) };
    Ok((
        Reader {
            sock,
            tls: tls.clone(),
            raw,
            plain: Vec::with_capacity(READ_CHUNK),
            start: 0,
        },
        Writer {
            sock: wsock,
            tls,
            out: Vec::with_capacity(READ_CHUNK),
        },
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

    /// Reads more plaintext. Returns false on a clean end of stream.
    pub async fn fill(&mut self) -> io::Result<bool> {
        if self.start > 0 {
            self.plain.drain(..self.start);
            self.start = 0;
        }
        loop {
            let n = self.sock.read(&mut self.raw).await?;
            let Some(tls) = &self.tls else {
                if n == 0 {
                    return Ok(false);
                }
                self.plain.extend_from_slice(&self.raw[..n]);
                return Ok(true);
            };
            let mut c = tls.borrow_mut();
            if n == 0 {
                return Ok(false);
            }
            let mut input = &self.raw[..n];
            while !input.is_empty() {
                c.read_tls(&mut input)?;
                let st = c.process_new_packets().map_err(other)?;
                let avail = st.plaintext_bytes_to_read();
                if avail > 0 {
                    let at = self.plain.len();
                    self.plain.resize(at + avail, 0);
                    c.reader().read_exact(&mut self.plain[at..])?;
                }
                if st.peer_has_closed() && avail == 0 && input.is_empty() {
                    return Ok(!self.data().is_empty());
                }
            }
            if !self.data().is_empty() {
                return Ok(true);
            }
        }
    }
}

impl Writer {
    /// Encrypts `data` (one TLS record per 16 KiB) and writes it with one socket write.
    pub async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match &self.tls {
            None => self.sock.write_all(data).await,
            Some(tls) => {
                {
                    let mut c = tls.borrow_mut();
                    c.writer().write_all(data)?;
                    self.out.clear();
                    while c.wants_write() {
                        c.write_tls(&mut self.out)?;
                    }
                }
                self.sock.write_all(&self.out).await
            }
        }
    }

    pub async fn close(&mut self) {
        if let Some(tls) = &self.tls {
            tls.borrow_mut().send_close_notify();
            let _ = self.write(&[]).await;
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Write).await;
    }
}
