//! The hand-off: whether a finished rustls session may move into the kernel, and moving
//! it (`tls_io::establish` calls these once per connection).
//!
//! The caller first feeds rustls up to a TLS record boundary (see [`super::Frames`]) and
//! drains its plaintext, so nothing rustls read from the socket is lost and the kernel
//! starts at the next record.

use std::os::fd::RawFd;

use rustls::ProtocolVersion;

use super::cipher::Cipher;
use super::crypto::{set_ulp, CryptoInfo};
use super::probe::probe;
use super::TX_RECORD_LIMIT;

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
/// bytes short of a record boundary (see [`super::Frames`]); `wanted()` said yes.
pub fn offload(fd: RawFd, c: rustls::Connection) -> Result<Offloaded, Refused> {
    // `wanted()` said yes: the kernel structs built below are TLS 1.3's.
    assert_eq!(c.protocol_version(), Some(ProtocolVersion::TLSv1_3), "kTLS hand-off of a session not TLS 1.3");
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
    // Right after a handshake only a few records (session tickets) went out under the
    // traffic key; the writer's count starts here and fails the connection at the limit.
    assert!(*tx_seq < TX_RECORD_LIMIT, "kTLS hand-off: {tx_seq} records sent under the key already");
    let txi = CryptoInfo::from_secrets(*tx_seq, tx).map_err(Refused::Fatal)?;
    let rxi = CryptoInfo::from_secrets(*rx_seq, rx).map_err(Refused::Fatal)?;
    txi.set(fd, libc::TLS_TX).map_err(|e| Refused::Fatal(format!("setsockopt(TLS_TX): {e}")))?;
    rxi.set(fd, libc::TLS_RX).map_err(|e| Refused::Fatal(format!("setsockopt(TLS_RX): {e}")))?;
    Ok(Offloaded { tx_seq: *tx_seq, rx_seq: *rx_seq })
}
