//! rustls driven by hand over glommio sockets: one TLS record and one socket write per
//! batch of responses (futures-rustls would write a record per poll_write).
//!
//! A connection is split into a `Reader` and a `Writer` sharing one socket and the
//! rustls state through `Rc<RefCell>`s borrowed only inside a `poll` (never across an
//! await). glommio keeps separate read and write sources per stream, so a read and a
//! write may be pending at once; one fd per connection (the open-file limit is 20,000
//! per process here). `tls: None` is plaintext (`--insecure`).
//!
//! Kernel TLS: where the kernel has the `tls` ULP (see `ktls`), a finished TLS 1.3
//! session is handed to the kernel in `establish` and the `Reader`/`Writer` then do
//! plain socket reads and writes (`kernel: true`, `tls: None`). Before the hand-off
//! rustls is fed exactly up to a TLS record boundary — the rest of a record it already
//! holds part of is read from the socket byte-exactly — and its plaintext is drained into
//! the `Reader`, so nothing read before the hand-off is lost and the kernel's first
//! record is the next one on the socket. Elsewhere (our hosts) nothing changes.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;

use super::ktls;

pub type Sock = Rc<RefCell<TcpStream>>;

async fn sock_read(s: &Sock, buf: &mut [u8]) -> io::Result<usize> {
    std::future::poll_fn(|cx| Pin::new(&mut *s.borrow_mut()).poll_read(cx, buf)).await
}

thread_local! {
    /// The socket-read buffer of every userspace-TLS and plaintext connection of this
    /// executor. glommio reads on readiness (nothing is lent to the kernel while a read
    /// waits), and the bytes are handed to rustls inside the same poll, so one buffer
    /// per thread serves every connection: 16.5 KiB per connection less (36,000
    /// connections × 16.5 KiB was 594 MiB).
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0u8; READ_CHUNK]);
}

/// Reads once into the shared buffer and gives the bytes to `f` before the buffer can
/// be used again. `Ok(None)`: end of stream.
async fn sock_read_with<R>(s: &Sock, mut f: impl FnMut(&[u8]) -> R) -> io::Result<Option<R>> {
    std::future::poll_fn(|cx| {
        SCRATCH.with(|b| {
            let mut b = b.borrow_mut();
            let read = Pin::new(&mut *s.borrow_mut()).poll_read(cx, &mut b);
            read.map_ok(|n| (n > 0).then(|| f(&b[..n])))
        })
    })
    .await
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

/// Kernel TLS write: plain socket writes, counting records per key (see `ktls`).
async fn kernel_write_all(s: &Sock, mut buf: &[u8], sent: &mut u64) -> io::Result<()> {
    while !buf.is_empty() {
        if *sent >= ktls::TX_RECORD_LIMIT {
            return Err(io::Error::other(
                "kernel TLS: record limit for this key reached (no rekey under kTLS); closing so the link reconnects",
            ));
        }
        let n = std::future::poll_fn(|cx| Pin::new(&mut *s.borrow_mut()).poll_write(cx, buf)).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "socket closed"));
        }
        *sent += ktls::records_for(n);
        buf = &buf[n..];
    }
    Ok(())
}

/// Bytes read from the socket per call: one TLS record (16 KiB plaintext + overhead).
const READ_CHUNK: usize = 16 * 1024 + 512;
/// A connection's plaintext buffer is freed when empty and larger than this.
const SHRINK_ABOVE: usize = 64 * 1024;

pub type Tls = Rc<RefCell<rustls::Connection>>;

pub struct Reader {
    sock: Sock,
    tls: Option<Tls>,
    /// Kernel TLS: the socket yields plaintext; control records come with `EIO`.
    kernel: bool,
    /// Kernel TLS only (a record is read with its type here); empty otherwise: other
    /// connections read into the executor's shared `SCRATCH`.
    raw: Vec<u8>,
    /// Decrypted bytes not yet consumed: `plain[start..]`.
    pub plain: Vec<u8>,
    pub start: usize,
}

pub struct Writer {
    sock: Sock,
    tls: Option<Tls>,
    /// Kernel TLS: records sent under the current key (an upper bound, see
    /// `ktls::records_for`); the connection fails at `ktls::TX_RECORD_LIMIT`.
    kernel: Option<u64>,
    out: Vec<u8>,
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Completes the TLS handshake (if any), hands the session to kernel TLS where that is
/// available, and splits the stream.
pub async fn establish(sock: TcpStream, tls: Option<rustls::Connection>) -> io::Result<(Reader, Writer)> {
    establish_as(sock, tls, "other").await
}

/// `establish`, naming the kind of connection (`client`, `replication`) for the
/// `corelog_ktls_connections_total` counter and the kernel-TLS log lines.
pub async fn establish_as(
    sock: TcpStream,
    tls: Option<rustls::Connection>,
    kind: &'static str,
) -> io::Result<(Reader, Writer)> {
    establish_seen(sock, tls, kind, |_| ()).await
}

/// `establish_as`, handing the peer's end-entity certificate (DER) to `seen` once the
/// handshake has verified it.
pub async fn establish_seen(
    sock: TcpStream,
    tls: Option<rustls::Connection>,
    kind: &'static str,
    seen: impl FnOnce(&[u8]),
) -> io::Result<(Reader, Writer)> {
    let sock: Sock = Rc::new(RefCell::new(sock));
    if let Some(mut c) = tls {
        let mut out = Vec::new();
        // Record boundaries of what rustls was given, and what the handshake's last
        // read brought beyond the handshake (fed after it, draining plaintext as we go).
        let mut frames = ktls::Frames::default();
        let mut rest: Vec<u8> = Vec::new();
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
                // Read into the executor's shared buffer: a handshake in flight holds no
                // 16.5 KiB read buffer of its own (thousands are in flight while 36,000
                // clients connect at once).
                let fed = sock_read_with(&sock, |input| handshake_feed(&mut c, input, &mut frames, &mut rest)).await?;
                match fed {
                    None => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed during TLS handshake")),
                    Some(Ok(Ok(()))) => {}
                    Some(Ok(Err(e))) => {
                        // Send the alert so the peer learns why.
                        let _ = c.write_tls(&mut out);
                        let _ = sock_write_all(&sock, &out).await;
                        return Err(other(e));
                    }
                    Some(Err(e)) => return Err(e),
                }
            }
        }
        if let Some(cert) = c.peer_certificates().and_then(|certs| certs.first()) {
            seen(cert.as_ref());
        }
        while c.wants_write() {
            c.write_tls(&mut out)?;
        }
        if !out.is_empty() {
            sock_write_all(&sock, &out).await?;
        }
        let mut plain = Vec::new();
        let closed = feed(&mut c, &rest, &mut frames, &mut plain)?;
        match ktls::wanted(&c) {
            Ok(()) if !closed => {
                // Complete the record rustls holds part of, reading no further.
                let mut raw = vec![0u8; READ_CHUNK];
                let mut closed = false;
                while frames.missing() > 0 && !closed {
                    let need = frames.missing().min(raw.len());
                    let n = sock_read(&sock, &mut raw[..need]).await?;
                    if n == 0 {
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed inside a TLS record"));
                    }
                    closed = feed(&mut c, &raw[..n], &mut frames, &mut plain)?;
                }
                if !closed {
                    let fd = sock.borrow().as_raw_fd();
                    match ktls::offload(fd, c) {
                        Ok(o) => {
                            ktls::report(kind, true, None);
                            return Ok((
                                Reader { sock: sock.clone(), tls: None, kernel: true, raw, plain, start: 0 },
                                Writer { sock, tls: None, kernel: Some(o.tx_seq), out: Vec::new() },
                            ));
                        }
                        Err(ktls::Refused::Userspace(back, why)) => {
                            ktls::report(kind, false, Some(&why));
                            c = *back;
                        }
                        Err(ktls::Refused::Fatal(why)) => {
                            ktls::report(kind, false, Some(&why));
                            return Err(io::Error::other(format!("kernel TLS hand-off: {why}")));
                        }
                    }
                } else {
                    ktls::report(kind, false, Some("peer closed right after the handshake"));
                }
            }
            Ok(()) => ktls::report(kind, false, Some("peer closed right after the handshake")),
            Err(why) => ktls::report(kind, false, why.as_deref()),
        }
        let tls = Some(Rc::new(RefCell::new(c)));
        let (mut r, w) = split(sock, tls)?;
        r.plain = plain;
        return Ok((r, w));
    }
    split(sock, None)
}

/// Gives one handshake read to rustls: the records it takes are noted in `frames`, and
/// what follows the handshake's last message is kept in `rest` (fed once the handshake
/// is done). `Ok(Err)`: the peer's handshake is refused (an alert is then due).
fn handshake_feed(
    c: &mut rustls::Connection,
    mut input: &[u8],
    frames: &mut ktls::Frames,
    rest: &mut Vec<u8>,
) -> io::Result<Result<(), rustls::Error>> {
    while !input.is_empty() {
        let before = input;
        c.read_tls(&mut input)?;
        frames.feed(&before[..before.len() - input.len()]);
        if let Err(e) = c.process_new_packets() {
            return Ok(Err(e));
        }
        if !c.is_handshaking() {
            rest.extend_from_slice(input);
            break;
        }
    }
    Ok(Ok(()))
}

/// Gives `input` to rustls, decrypting as it goes (its plaintext buffer is bounded) and
/// appending plaintext to `plain`. Returns whether the peer sent close_notify.
fn feed(
    c: &mut rustls::Connection,
    mut input: &[u8],
    frames: &mut ktls::Frames,
    plain: &mut Vec<u8>,
) -> io::Result<bool> {
    let mut closed = drain(c, plain)?;
    while !input.is_empty() && !closed {
        let before = input;
        if c.read_tls(&mut input)? == 0 {
            break;
        }
        frames.feed(&before[..before.len() - input.len()]);
        closed = drain(c, plain)?;
    }
    Ok(closed)
}

fn drain(c: &mut rustls::Connection, plain: &mut Vec<u8>) -> io::Result<bool> {
    let st = c.process_new_packets().map_err(other)?;
    let avail = st.plaintext_bytes_to_read();
    if avail > 0 {
        let at = plain.len();
        plain.resize(at + avail, 0);
        c.reader().read_exact(&mut plain[at..])?;
    }
    Ok(st.peer_has_closed())
}

fn split(sock: Sock, tls: Option<Tls>) -> io::Result<(Reader, Writer)> {
    Ok((
        Reader { sock: sock.clone(), tls: tls.clone(), kernel: false, raw: Vec::new(), plain: Vec::new(), start: 0 },
        Writer { sock, tls, kernel: None, out: Vec::new() },
    ))
}

impl Reader {
    /// True when the kernel decrypts this connection (kernel TLS).
    pub fn is_kernel_tls(&self) -> bool {
        self.kernel
    }

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
        if self.plain.is_empty() && self.plain.capacity() > SHRINK_ABOVE {
            self.plain = Vec::new(); // a large request passed: do not keep its buffer
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
            if self.kernel {
                return self.fill_kernel().await;
            }
            let (tls, plain) = (self.tls.clone(), &mut self.plain);
            let got = sock_read_with(&self.sock, |raw| match &tls {
                None => {
                    plain.extend_from_slice(raw);
                    io::Result::Ok(())
                }
                Some(tls) => {
                    let mut c = tls.borrow_mut();
                    let mut input = raw;
                    while !input.is_empty() {
                        c.read_tls(&mut input)?;
                        // Decrypt as we go so rustls' buffer never fills up.
                        drain(&mut c, plain)?;
                    }
                    Ok(())
                }
            })
            .await?;
            match got {
                None => return Ok(false),
                Some(r) => r?,
            }
            if !self.data().is_empty() {
                return Ok(true);
            }
        }
    }
}

impl Reader {
    /// Kernel TLS: application data arrives as plaintext; any other record makes the
    /// read fail with `EIO` and is then read with its type (`ktls::recv_record`).
    async fn fill_kernel(&mut self) -> io::Result<bool> {
        if self.raw.is_empty() {
            self.raw = vec![0u8; READ_CHUNK];
        }
        loop {
            match sock_read(&self.sock, &mut self.raw).await {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.plain.extend_from_slice(&self.raw[..n]);
                    return Ok(true);
                }
                Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                    let fd = self.sock.borrow().as_raw_fd();
                    let Some((ct, n)) = ktls::recv_record(fd, &mut self.raw)? else { continue };
                    if ct == ktls::CT_APPLICATION_DATA {
                        if n == 0 {
                            return Ok(false);
                        }
                        self.plain.extend_from_slice(&self.raw[..n]);
                        return Ok(true);
                    }
                    match ktls::control(ct, &self.raw[..n])? {
                        ktls::Control::Eof => return Ok(false),
                        ktls::Control::Ignore => continue,
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Writer {
    /// True when the kernel encrypts this connection (kernel TLS).
    pub fn is_kernel_tls(&self) -> bool {
        self.kernel.is_some()
    }

    /// Encrypts `data` (one TLS record per 16 KiB) and writes it with one socket write.
    pub async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if let Some(sent) = &mut self.kernel {
            return kernel_write_all(&self.sock, data, sent).await;
        }
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
        if self.kernel.is_some() {
            let fd = self.sock.borrow().as_raw_fd();
            // close_notify as a TLS alert record; best effort (never blocks).
            let _ = ktls::send_alert(fd, 1, 0);
        }
        if let Some(tls) = &self.tls {
            tls.borrow_mut().send_close_notify();
            let _ = self.write(&[]).await;
        }
        let s = self.sock.borrow().as_raw_fd();
        // SAFETY: shutdown on the fd owned by our stream (no await while borrowed).
        unsafe { libc::shutdown(s, libc::SHUT_WR) };
    }
}
