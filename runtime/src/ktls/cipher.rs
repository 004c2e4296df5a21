//! The TLS 1.3 ciphers the kernel can take over, and the key and IV sizes each needs.
//!
//! One place names them so that the probe, the crypto-info builder and the hand-off agree
//! on which rustls suite maps to which kernel cipher and on how long its secrets are.

use rustls::CipherSuite;

/// rustls' TLS 1.3 IV: 12 bytes for every cipher here (RFC 8446 §5.3).
pub(super) const IV_LEN: usize = 12;

/// Every cipher with its name, in the order the probe tries them.
pub(super) const CIPHERS: [(Cipher, &str); 3] =
    [(Cipher::Aes128Gcm, "AES-128-GCM"), (Cipher::Aes256Gcm, "AES-256-GCM"), (Cipher::Chacha20, "ChaCha20-Poly1305")];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20,
}

impl Cipher {
    /// The kernel cipher for a negotiated TLS 1.3 suite (None: not offloadable).
    pub(super) fn of(suite: CipherSuite) -> Option<Cipher> {
        match suite {
            CipherSuite::TLS13_AES_128_GCM_SHA256 => Some(Cipher::Aes128Gcm),
            CipherSuite::TLS13_AES_256_GCM_SHA384 => Some(Cipher::Aes256Gcm),
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => Some(Cipher::Chacha20),
            _ => None,
        }
    }

    /// This cipher's bit in `Support`'s set of accepted ciphers.
    pub(super) fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Bytes of key the kernel's crypto-info struct holds for this cipher.
    pub(super) fn key_len(self) -> usize {
        match self {
            Cipher::Aes128Gcm => 16,
            Cipher::Aes256Gcm | Cipher::Chacha20 => 32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cipher_has_its_own_bit_and_the_kernels_key_size() {
        let bits: u8 = CIPHERS.iter().map(|(c, _)| c.bit()).fold(0, |a, b| {
            assert_eq!(a & b, 0, "two ciphers share a bit");
            a | b
        });
        assert_eq!(bits, 0b111);
        assert_eq!(Cipher::Aes128Gcm.key_len(), libc::TLS_CIPHER_AES_GCM_128_KEY_SIZE);
        assert_eq!(Cipher::Aes256Gcm.key_len(), libc::TLS_CIPHER_AES_GCM_256_KEY_SIZE);
        assert_eq!(Cipher::Chacha20.key_len(), libc::TLS_CIPHER_CHACHA20_POLY1305_KEY_SIZE);
    }
}
