//! Whether this kernel takes TLS sessions at all: probed once per process on throwaway
//! loopback connections, one per cipher, and cached.
//!
//! Where the probe fails (no `tls` module) every connection stays in userspace rustls,
//! unchanged; `CORELOG_KTLS=off` forces that. The answer also feeds the start-up log line
//! and `corelog_ktls_active`.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;

use super::cipher::{Cipher, CIPHERS, IV_LEN};
use super::crypto::{set_ulp, CryptoInfo};

/// What the probe found: the ciphers the kernel accepted.
#[derive(Clone, Copy, Debug)]
pub struct Support {
    pub(super) ciphers: u8,
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
    let all = CIPHERS.iter().fold(0, |a, (c, _)| a | c.bit());
    assert_eq!(ciphers & !all, 0, "kTLS probe: cipher bits {ciphers:#b} outside the known set {all:#b}");
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
    let info = CryptoInfo::build(c, &vec![0u8; c.key_len()], &[0u8; IV_LEN], 0);
    info.set(fd, libc::TLS_TX).map_err(|e| other("TLS_TX", e))?;
    info.set(fd, libc::TLS_RX).map_err(|e| other("TLS_RX", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
