//! Kernel TLS (kTLS): after rustls finishes a TLS 1.3 handshake, the session keys move
//! into the kernel (`setsockopt(TCP_ULP, "tls")`, then `SOL_TLS` `TLS_TX` / `TLS_RX`
//! with `tls12_crypto_info_*`; TLS 1.3 uses the same structs with version 0x0304), so
//! application data is encrypted and decrypted by the kernel and a connection's reads
//! and writes are plain socket syscalls.
//!
//! * **Probe once** ([`probe`]): on a throwaway loopback TCP pair per cipher (AES-128-GCM,
//!   AES-256-GCM, ChaCha20-Poly1305) set the ULP and both directions with dummy keys.
//!   Where it fails (no `tls` module, as on our development hosts) every connection
//!   stays in userspace rustls, unchanged. `CORELOG_KTLS=off` forces userspace.
//! * **Hand-off** (`tls_io::establish`): see [`offload`]. The caller first feeds rustls
//!   up to a TLS record boundary (see [`Frames`]) and drains its plaintext, so nothing
//!   rustls read from the socket is lost and the kernel starts at the next record.
//! * **Control records** after the hand-off: a plain `read` fails with `EIO` when the
//!   next record is not application data; [`recv_record`] reads it with `recvmsg` and the
//!   `TLS_GET_RECORD_TYPE` cmsg. close_notify is the end of the stream; other alerts are
//!   errors; NewSessionTicket is ignored; **KeyUpdate is an error that closes the
//!   connection**: Linux 6.1 cannot install new TLS 1.3 receive keys on a socket (rekey
//!   arrived in 6.13/6.14), so the peer reconnects. rustls peers send KeyUpdate only near
//!   their AEAD record limit (about 2^24 records).
//! * **Record limit**: nothing in the kernel counts records per key. The writer counts
//!   what it sends ([`records_for`], an upper bound) and fails the connection before
//!   [`TX_RECORD_LIMIT`] records (below 2^24, RFC 8446 §5.5 allows ≈2^24.5 for AES-GCM);
//!   long-lived replication links then re-dial and handshake fresh keys. The receive
//!   direction is bounded by the peer's sender-side count (our own writer or rustls).

use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::OnceLock;

use rustls::{CipherSuite, ConnectionTrafficSecrets, ProtocolVersion};

/// TLS record content types.
pub const CT_ALERT: u8 = 21;
pub const CT_HANDSHAKE: u8 = 22;
pub const CT_APPLICATION_DATA: u8 = 23;

/// Handshake message types seen after the handshake.
const HS_NEW_SESSION_TICKET: u8 = 4;
const HS_KEY_UPDATE: u8 = 24;

/// Largest plaintext per TLS record.
pub const MAX_RECORD_PAYLOAD: usize = 16 * 1024;

/// Records a kernel-TLS writer sends under one key before it fails the connection
/// (the peer or our dialler reconnects with fresh keys): 2^24 - 2^16, so even a
/// single 1 GiB write after the last check stays below 2^24.
pub const TX_RECORD_LIMIT: u64 = (1 << 24) - (1 << 16);

/// Upper bound on the records the kernel makes of one `send` that accepted `n` bytes:
/// it cuts at 16 KiB and ends a record at the end of every send (no MSG_MORE); one
/// more for a record a previous send may have left open.
pub fn records_for(n: usize) -> u64 {
    (n / MAX_RECORD_PAYLOAD) as u64 + 1
}

// ---------------------------------------------------------------- probe

const CIPHERS: [(Cipher, &str); 3] =
    [(Cipher::Aes128Gcm, "AES-128-GCM"), (Cipher::Aes256Gcm, "AES-256-GCM"), (Cipher::Chacha20, "ChaCha20-Poly1305")];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20,
}

impl Cipher {
    fn of(suite: CipherSuite) -> Option<Cipher> {
        match suite {
            CipherSuite::TLS13_AES_128_GCM_SHA256 => Some(Cipher::Aes128Gcm),
            CipherSuite::TLS13_AES_256_GCM_SHA384 => Some(Cipher::Aes256Gcm),
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => Some(Cipher::Chacha20),
            _ => None,
        }
    }
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// What the probe found: the ciphers the kernel accepted.
#[derive(Clone, Copy, Debug)]
pub struct Support {
    ciphers: u8,
}

impl Support {
    pub fn cipher_names(&self) -> String {
        CIPHERS.iter().filter(|(c, _)| self.ciphers & c.bit() != 0).map(|(_, n)| *n).collect::<Vec<_>>().join(", ")
    }
}

static PROBE: OnceLock<Result<Support, String>> = OnceLock::new();

/// Probes kernel TLS once per process (the first call does the work, later calls read
/// the cached answer). `Err` carries why it is not available.
pub fn probe() -> &'static Result<Support, String> {
    PROBE.get_or_init(probe_now)
}

/// True when connections are handed to the kernel after the handshake.
pub fn available() -> bool {
    probe().is_ok()
}

/// One log line saying which TLS data path is active.
pub fn status_line() -> String {
    match probe() {
        Ok(s) => format!(
            "kernel TLS active (tls ULP; TLS 1.3 {}): data path in the kernel after the rustls handshake",
            s.cipher_names()
        ),
        Err(why) => format!("kernel TLS not available: {why}; userspace rustls"),
    }
}

fn probe_now() -> Result<Support, String> {
    if let Ok(v) = std::env::var("CORELOG_KTLS") {
        if matches!(v.to_ascii_lowercase().as_str(), "0" | "off" | "no" | "false") {
            return Err(format!("disabled by CORELOG_KTLS={v}"));
        }
    }
    let ulps = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap_or_default();
    let mut ciphers = 0u8;
    let mut errs = Vec::new();
    for (c, name) in CIPHERS {
        match probe_cipher(c) {
            Ok(()) => ciphers |= c.bit(),
            Err(ProbeErr::Ulp(e)) => {
                let listed = ulps.split_whitespace().collect::<Vec<_>>().join(" ");
                return Err(format!(
                    "setsockopt(TCP_ULP, \"tls\") failed: {e} (tcp_available_ulp: {})",
                    if listed.is_empty() { "none" } else { &listed }
                ));
            }
            Err(ProbeErr::Other(e)) => errs.push(format!("{name}: {e}")),
        }
    }
    if ciphers == 0 {
        return Err(format!("the tls ULP loads but refuses every cipher ({})", errs.join("; ")));
    }
    Ok(Support { ciphers })
}

enum ProbeErr {
    Ulp(io::Error),
    Other(String),
}

/// Sets the ULP and both directions with a dummy key on a fresh loopback connection.
fn probe_cipher(c: Cipher) -> Result<(), ProbeErr> {
    let other = |what: &str, e: io::Error| ProbeErr::Other(format!("{what}: {e}"));
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(|e| other("loopback listen", e))?;
    let a = l.local_addr().map_err(|e| other("loopback address", e))?;
    let s = std::net::TcpStream::connect(a).map_err(|e| other("loopback connect", e))?;
    let _peer = l.accept().map_err(|e| other("loopback accept", e))?;
    let fd = s.as_raw_fd();
    set_ulp(fd).map_err(ProbeErr::Ulp)?;
    let (key, iv) = match c {
        Cipher::Aes128Gcm => (vec![0u8; 16], [0u8; 12]),
        Cipher::Aes256Gcm | Cipher::Chacha20 => (vec![0u8; 32], [0u8; 12]),
    };
    let info = CryptoInfo::build(c, &key, &iv, 0);
    info.set(fd, libc::TLS_TX).map_err(|e| other("TLS_TX", e))?;
    info.set(fd, libc::TLS_RX).map_err(|e| other("TLS_RX", e))?;
    Ok(())
}

fn set_ulp(fd: RawFd) -> io::Result<()> {
    let name = b"tls";
    // SAFETY: setsockopt with a pointer/length pair into a live buffer.
    let r = unsafe {
        libc::setsockopt(fd, libc::SOL_TCP, libc::TCP_ULP, name.as_ptr().cast(), name.len() as libc::socklen_t)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ---------------------------------------------------------------- crypto info

enum CryptoInfo {
    Aes128(libc::tls12_crypto_info_aes_gcm_128),
    Aes256(libc::tls12_crypto_info_aes_gcm_256),
    Chacha(libc::tls12_crypto_info_chacha20_poly1305),
}

fn copy<const N: usize>(src: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(src);
    a
}

impl CryptoInfo {
    /// `iv` is rustls' 12-byte TLS 1.3 IV. AES-GCM splits it into the 4-byte salt and
    /// the 8-byte iv; ChaCha20-Poly1305 takes all 12 as iv with no salt.
    fn build(c: Cipher, key: &[u8], iv: &[u8; 12], seq: u64) -> CryptoInfo {
        let rec_seq = seq.to_be_bytes();
        match c {
            Cipher::Aes128Gcm => CryptoInfo::Aes128(libc::tls12_crypto_info_aes_gcm_128 {
                info: libc::tls_crypto_info {
                    version: libc::TLS_1_3_VERSION,
                    cipher_type: libc::TLS_CIPHER_AES_GCM_128,
                },
                iv: copy(&iv[4..]),
                key: copy(key),
                salt: copy(&iv[..4]),
                rec_seq,
            }),
            Cipher::Aes256Gcm => CryptoInfo::Aes256(libc::tls12_crypto_info_aes_gcm_256 {
                info: libc::tls_crypto_info {
                    version: libc::TLS_1_3_VERSION,
                    cipher_type: libc::TLS_CIPHER_AES_GCM_256,
                },
                iv: copy(&iv[4..]),
                key: copy(key),
                salt: copy(&iv[..4]),
                rec_seq,
            }),
            Cipher::Chacha20 => CryptoInfo::Chacha(libc::tls12_crypto_info_chacha20_poly1305 {
                info: libc::tls_crypto_info {
                    version: libc::TLS_1_3_VERSION,
                    cipher_type: libc::TLS_CIPHER_CHACHA20_POLY1305,
                },
                iv: copy(iv),
                key: copy(key),
                salt: [0u8; 0],
                rec_seq,
            }),
        }
    }

    fn from_secrets(seq: u64, s: &ConnectionTrafficSecrets) -> Result<CryptoInfo, String> {
        let (c, key, iv) = match s {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Cipher::Aes128Gcm, key.as_ref(), iv.as_ref()),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::Aes256Gcm, key.as_ref(), iv.as_ref()),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (Cipher::Chacha20, key.as_ref(), iv.as_ref()),
            _ => return Err("cipher not supported by kernel TLS".into()),
        };
        let want_key = if c == Cipher::Aes128Gcm { 16 } else { 32 };
        if key.len() != want_key || iv.len() != 12 {
            return Err(format!("unexpected key/iv sizes {}/{}", key.len(), iv.len()));
        }
        Ok(CryptoInfo::build(c, key, &copy(iv), seq))
    }

    fn bytes(&self) -> (*const libc::c_void, usize) {
        match self {
            CryptoInfo::Aes128(i) => ((i as *const libc::tls12_crypto_info_aes_gcm_128).cast(), mem::size_of_val(i)),
            CryptoInfo::Aes256(i) => ((i as *const libc::tls12_crypto_info_aes_gcm_256).cast(), mem::size_of_val(i)),
            CryptoInfo::Chacha(i) => {
                ((i as *const libc::tls12_crypto_info_chacha20_poly1305).cast(), mem::size_of_val(i))
            }
        }
    }

    fn set(&self, fd: RawFd, dir: libc::c_int) -> io::Result<()> {
        let (p, n) = self.bytes();
        // SAFETY: `p` points to `n` bytes of a live #[repr(C)] uapi struct.
        let r = unsafe { libc::setsockopt(fd, libc::SOL_TLS, dir, p, n as libc::socklen_t) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for CryptoInfo {
    fn drop(&mut self) {
        let key: &mut [u8] = match self {
            CryptoInfo::Aes128(i) => &mut i.key,
            CryptoInfo::Aes256(i) => &mut i.key,
            CryptoInfo::Chacha(i) => &mut i.key,
        };
        for b in key.iter_mut() {
            // SAFETY: a valid &mut u8; volatile so the wipe is not optimised away.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

// ---------------------------------------------------------------- hand-off

/// Where TLS records start and end in the bytes fed to rustls: rustls keeps a partial
/// record it cannot decrypt yet in its own buffer, and those bytes are gone from the
/// socket. Knowing how many bytes the record still misses, the caller reads exactly
/// those (never past the record) before handing the socket to the kernel.
#[derive(Default, Debug)]
pub struct Frames {
    hdr: [u8; 5],
    hdr_len: usize,
    body_left: usize,
}

impl Frames {
    pub fn feed(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.body_left > 0 {
                let k = self.body_left.min(b.len());
                self.body_left -= k;
                b = &b[k..];
            } else {
                let k = (5 - self.hdr_len).min(b.len());
                self.hdr[self.hdr_len..self.hdr_len + k].copy_from_slice(&b[..k]);
                self.hdr_len += k;
                b = &b[k..];
                if self.hdr_len == 5 {
                    self.hdr_len = 0;
                    self.body_left = u16::from_be_bytes([self.hdr[3], self.hdr[4]]) as usize;
                }
            }
        }
    }

    /// Bytes still missing from the current record (0 at a record boundary).
    pub fn missing(&self) -> usize {
        if self.body_left > 0 {
            self.body_left
        } else if self.hdr_len > 0 {
            5 - self.hdr_len
        } else {
            0
        }
    }
}

/// Whether this connection should be handed to the kernel: kTLS probed fine, TLS 1.3,
/// and a cipher the kernel accepted. `Err` says why not (`None`: kTLS is off entirely).
pub fn wanted(c: &rustls::Connection) -> Result<(), Option<String>> {
    let Ok(s) = probe() else { return Err(None) };
    if c.protocol_version() != Some(ProtocolVersion::TLSv1_3) {
        return Err(Some(format!("protocol {:?} (only TLS 1.3 is offloaded)", c.protocol_version())));
    }
    let suite = c.negotiated_cipher_suite().map(|s| s.suite());
    match suite.and_then(Cipher::of) {
        Some(cipher) if s.ciphers & cipher.bit() != 0 => Ok(()),
        _ => Err(Some(format!("cipher suite {suite:?} not accepted by the kernel"))),
    }
}

/// The result of a successful hand-off.
#[derive(Debug, Clone, Copy)]
pub struct Offloaded {
    /// Records already sent under the current write key (rustls' sequence number).
    pub tx_seq: u64,
    pub rx_seq: u64,
}

pub enum Refused {
    /// Nothing was changed: go on with rustls in userspace.
    Userspace(Box<rustls::Connection>, String),
    /// The secrets left rustls but the kernel refused them: the connection is lost.
    Fatal(String),
}

/// Moves a finished TLS 1.3 session into the kernel. The caller guarantees that rustls
/// holds no unsent records (`!wants_write()`), no unread plaintext and no received
/// bytes short of a record boundary (see [`Frames`]); `wanted()` said yes.
pub fn offload(fd: RawFd, c: rustls::Connection) -> Result<Offloaded, Refused> {
    if c.wants_write() {
        return Err(Refused::Userspace(Box::new(c), "rustls still has records to send".into()));
    }
    if let Err(e) = set_ulp(fd) {
        return Err(Refused::Userspace(Box::new(c), format!("setsockopt(TCP_ULP, \"tls\"): {e}")));
    }
    // Only the ULP is set so far: until TLS_TX/TLS_RX the socket still passes bytes
    // through unchanged, but there is no way back to rustls after the extraction.
    let secrets = c.dangerous_extract_secrets().map_err(|e| Refused::Fatal(format!("extract secrets: {e}")))?;
    let (tx_seq, tx) = &secrets.tx;
    let (rx_seq, rx) = &secrets.rx;
    let txi = CryptoInfo::from_secrets(*tx_seq, tx).map_err(Refused::Fatal)?;
    let rxi = CryptoInfo::from_secrets(*rx_seq, rx).map_err(Refused::Fatal)?;
    txi.set(fd, libc::TLS_TX).map_err(|e| Refused::Fatal(format!("setsockopt(TLS_TX): {e}")))?;
    rxi.set(fd, libc::TLS_RX).map_err(|e| Refused::Fatal(format!("setsockopt(TLS_RX): {e}")))?;
    Ok(Offloaded { tx_seq: *tx_seq, rx_seq: *rx_seq })
}

// ---------------------------------------------------------------- control records

/// What a record that is not application data means for the reader.
#[derive(Debug, PartialEq, Eq)]
pub enum Control {
    /// Skip it (NewSessionTicket, user_canceled warning).
    Ignore,
    /// close_notify: the peer's end of stream.
    Eof,
}

/// Interprets a control record's payload.
pub fn control(ct: u8, payload: &[u8]) -> io::Result<Control> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    match ct {
        CT_ALERT => match payload {
            [_, 0] => Ok(Control::Eof),
            [1, 90] => Ok(Control::Ignore), // user_canceled (warning); close_notify follows
            [level, desc] => Err(bad(format!("peer sent TLS alert {desc} (level {level})"))),
            _ => Err(bad(format!("malformed TLS alert record ({} bytes)", payload.len()))),
        },
        CT_HANDSHAKE => {
            let mut p = payload;
            while !p.is_empty() {
                if p.len() < 4 {
                    return Err(bad("fragmented post-handshake message (not supported under kernel TLS)".into()));
                }
                let len = u32::from_be_bytes([0, p[1], p[2], p[3]]) as usize;
                if p.len() < 4 + len {
                    return Err(bad("fragmented post-handshake message (not supported under kernel TLS)".into()));
                }
                match p[0] {
                    HS_NEW_SESSION_TICKET => {}
                    HS_KEY_UPDATE => {
                        return Err(bad(
                            "peer sent TLS 1.3 KeyUpdate: kernel TLS on this kernel cannot rekey; closing (reconnect)"
                                .into(),
                        ))
                    }
                    t => return Err(bad(format!("unexpected post-handshake message type {t}"))),
                }
                p = &p[4 + len..];
            }
            Ok(Control::Ignore)
        }
        t => Err(bad(format!("unexpected TLS record type {t} under kernel TLS"))),
    }
}

#[repr(C)]
union CmsgBuf {
    hdr: libc::cmsghdr,
    buf: [u8; 64],
}

/// `recvmsg` with a control buffer: reads the next record (or application data) and its
/// type. `Ok(None)`: nothing ready (EAGAIN). Never blocks.
pub fn recv_record(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<(u8, usize)>> {
    // SAFETY: zeroed msghdr/cmsg buffer are valid; every pointer refers to live buffers
    // for the duration of the call, and CMSG_* walk only what the kernel filled in.
    unsafe {
        let mut cbuf: CmsgBuf = mem::zeroed();
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut msg: libc::msghdr = mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = (&mut cbuf as *mut CmsgBuf).cast();
        msg.msg_controllen = mem::size_of::<CmsgBuf>() as _;
        let n = libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(e);
        }
        let mut ct = CT_APPLICATION_DATA;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_TLS && (*c).cmsg_type == libc::TLS_GET_RECORD_TYPE {
                ct = *libc::CMSG_DATA(c);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "TLS record type truncated"));
        }
        Ok(Some((ct, n as usize)))
    }
}

/// Sends a TLS alert record through the kernel (`TLS_SET_RECORD_TYPE` cmsg). Never blocks.
pub fn send_alert(fd: RawFd, level: u8, desc: u8) -> io::Result<()> {
    let mut payload = [level, desc];
    // SAFETY: as in `recv_record`; the cmsg header and its one data byte lie inside `cbuf`.
    unsafe {
        let mut cbuf: CmsgBuf = mem::zeroed();
        let mut iov = libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() };
        let mut msg: libc::msghdr = mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = (&mut cbuf as *mut CmsgBuf).cast();
        msg.msg_controllen = libc::CMSG_SPACE(1) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_TLS;
        (*c).cmsg_type = libc::TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(c) = CT_ALERT;
        if libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- reporting

thread_local! {
    static SAID: RefCell<HashSet<(&'static str, bool)>> = RefCell::new(HashSet::new());
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("main").to_string()
}

/// Counts a TLS connection's data path (`corelog_ktls_connections_total{conn,path}`) and
/// logs the first of each kind per thread, with the reason when it stayed in userspace
/// although kernel TLS is available.
pub fn report(conn: &'static str, kernel: bool, why: Option<&str>) {
    metrics::counter!("corelog_ktls_connections_total", "conn" => conn, "path" => if kernel { "kernel" } else { "userspace" })
        .increment(1);
    if !kernel && why.is_none() {
        return; // kTLS unavailable: said once at start-up
    }
    let first = SAID.with(|s| s.borrow_mut().insert((conn, kernel)));
    if first {
        match why {
            None => log::info!("{}: kernel TLS active on {conn} connections", thread_name()),
            Some(w) => {
                log::info!("{}: kernel TLS not used on a {conn} connection: {w}; userspace rustls", thread_name())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_track_record_boundaries() {
        let mut f = Frames::default();
        assert_eq!(f.missing(), 0);
        // A whole record: header (type 23, 0x0303, length 3) + 3 bytes.
        f.feed(&[23, 3, 3, 0, 3, 1, 2, 3]);
        assert_eq!(f.missing(), 0);
        // Header split in two pieces.
        f.feed(&[23, 3]);
        assert_eq!(f.missing(), 3);
        f.feed(&[3, 0x01]);
        assert_eq!(f.missing(), 1);
        f.feed(&[0x00]); // length 256
        assert_eq!(f.missing(), 256);
        f.feed(&[0; 200]);
        assert_eq!(f.missing(), 56);
        // The rest of this record and the start of the next one in one piece.
        let mut b = vec![0u8; 56];
        b.extend_from_slice(&[21, 3, 3, 0, 2, 1]);
        f.feed(&b);
        assert_eq!(f.missing(), 1);
        f.feed(&[0]);
        assert_eq!(f.missing(), 0);
        // Zero-length record.
        f.feed(&[23, 3, 3, 0, 0]);
        assert_eq!(f.missing(), 0);
    }

    #[test]
    fn crypto_info_layout() {
        let key: Vec<u8> = (0..16).collect();
        let iv: [u8; 12] = std::array::from_fn(|i| 100 + i as u8);
        let i = CryptoInfo::build(Cipher::Aes128Gcm, &key, &iv, 7);
        let (p, n) = i.bytes();
        assert_eq!(n, 4 + 8 + 16 + 4 + 8);
        // SAFETY: `p` points to `n` bytes of the struct.
        let b = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
        assert_eq!(&b[0..2], &0x0304u16.to_ne_bytes());
        assert_eq!(&b[2..4], &51u16.to_ne_bytes());
        assert_eq!(&b[4..12], &iv[4..]);
        assert_eq!(&b[12..28], &key[..]);
        assert_eq!(&b[28..32], &iv[..4]);
        assert_eq!(&b[32..40], &7u64.to_be_bytes());
        let key32: Vec<u8> = (0..32).collect();
        let c = CryptoInfo::build(Cipher::Chacha20, &key32, &iv, 1);
        let (p, n) = c.bytes();
        assert_eq!(n, 4 + 12 + 32 + 8);
        // SAFETY: as above.
        let b = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
        assert_eq!(&b[4..16], &iv[..]);
        assert_eq!(&b[16..48], &key32[..]);
        assert_eq!(&b[48..56], &1u64.to_be_bytes());
        let a = CryptoInfo::build(Cipher::Aes256Gcm, &key32, &iv, 0);
        assert_eq!(a.bytes().1, 4 + 8 + 32 + 4 + 8);
    }

    #[test]
    fn control_records() {
        assert_eq!(control(CT_ALERT, &[1, 0]).unwrap(), Control::Eof);
        assert_eq!(control(CT_ALERT, &[1, 90]).unwrap(), Control::Ignore);
        assert!(control(CT_ALERT, &[2, 40]).is_err());
        // NewSessionTicket (two of them in one record) is skipped.
        let mut nst = vec![4, 0, 0, 2, 9, 9];
        nst.extend_from_slice(&[4, 0, 0, 0]);
        assert_eq!(control(CT_HANDSHAKE, &nst).unwrap(), Control::Ignore);
        let e = control(CT_HANDSHAKE, &[24, 0, 0, 1, 0]).unwrap_err();
        assert!(e.to_string().contains("KeyUpdate"), "{e}");
        assert!(control(CT_HANDSHAKE, &[4, 0, 0, 9, 1]).is_err());
        assert!(control(20, &[1]).is_err());
    }

    #[test]
    fn record_bound() {
        assert_eq!(records_for(1), 1);
        assert_eq!(records_for(16 * 1024), 2);
        assert_eq!(records_for(100_000), 7);
        const { assert!(TX_RECORD_LIMIT < 1 << 24) };
    }

    #[test]
    fn probe_answers() {
        // Either way it must give a reason or a cipher list, and be cached.
        match probe() {
            Ok(s) => assert!(!s.cipher_names().is_empty()),
            Err(why) => assert!(!why.is_empty()),
        }
        assert!(std::ptr::eq(probe(), probe()));
        assert!(status_line().contains("kernel TLS"));
    }
}
