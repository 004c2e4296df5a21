//! The socket options that hand a session to the kernel: the `tls` ULP, then one
//! `tls12_crypto_info_*` struct per direction built from rustls' secrets.
//!
//! The structs are the kernel's uapi layout (TLS 1.3 uses the TLS 1.2 structs with
//! version 0x0304); the kernel reads exactly `size_of` bytes of them, so their sizes and
//! the key and IV lengths copied in are asserted here rather than trusted. The key is
//! wiped when the struct is dropped.

use std::io;
use std::mem;
use std::os::fd::RawFd;

use rustls::ConnectionTrafficSecrets;

use super::cipher::{Cipher, IV_LEN};

/// Bytes of each uapi struct: the 4-byte `tls_crypto_info` header, iv, key, salt, and the
/// 8-byte record sequence number. A libc whose layout differs fails the build here.
const AES128_LEN: usize = 4 + 8 + 16 + 4 + 8;
const AES256_LEN: usize = 4 + 8 + 32 + 4 + 8;
const CHACHA_LEN: usize = 4 + 12 + 32 + 8;
const _: () = assert!(mem::size_of::<libc::tls12_crypto_info_aes_gcm_128>() == AES128_LEN);
const _: () = assert!(mem::size_of::<libc::tls12_crypto_info_aes_gcm_256>() == AES256_LEN);
const _: () = assert!(mem::size_of::<libc::tls12_crypto_info_chacha20_poly1305>() == CHACHA_LEN);
/// AES-GCM takes rustls' IV as a 4-byte salt and an 8-byte explicit IV.
const _: () = assert!(libc::TLS_CIPHER_AES_GCM_128_SALT_SIZE + libc::TLS_CIPHER_AES_GCM_128_IV_SIZE == IV_LEN);
const _: () = assert!(libc::TLS_CIPHER_AES_GCM_256_SALT_SIZE + libc::TLS_CIPHER_AES_GCM_256_IV_SIZE == IV_LEN);
const _: () = assert!(libc::TLS_CIPHER_CHACHA20_POLY1305_IV_SIZE == IV_LEN);

/// Sets the `tls` upper-layer protocol on a TCP socket: the step before `TLS_TX`/`TLS_RX`.
pub(super) fn set_ulp(fd: RawFd) -> io::Result<()> {
    let name = b"tls";
    // SAFETY: `name` is a live 3-byte buffer for the duration of the call and the length
    // passed is its length; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(fd, libc::SOL_TCP, libc::TCP_ULP, name.as_ptr().cast(), name.len() as libc::socklen_t)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(super) enum CryptoInfo {
    Aes128(libc::tls12_crypto_info_aes_gcm_128),
    Aes256(libc::tls12_crypto_info_aes_gcm_256),
    Chacha(libc::tls12_crypto_info_chacha20_poly1305),
}

/// `src` as an array; the caller has checked its length (asserted again here, naming both).
fn copy<const N: usize>(src: &[u8]) -> [u8; N] {
    assert_eq!(src.len(), N, "kTLS crypto info: {} bytes for a {N}-byte field", src.len());
    let mut a = [0u8; N];
    a.copy_from_slice(src);
    a
}

/// The uapi header of a TLS 1.3 crypto info struct for `cipher_type`.
fn tls13(cipher_type: u16) -> libc::tls_crypto_info {
    libc::tls_crypto_info { version: libc::TLS_1_3_VERSION, cipher_type }
}

/// An AES-GCM crypto info (`$variant` holding the uapi struct `$ty`): the two sizes share
/// a layout but for the key, and split rustls' IV into a 4-byte salt and an 8-byte iv.
macro_rules! aes_gcm {
    ($variant:ident, $ty:ident, $cipher_type:expr, $key:expr, $iv:expr, $rec_seq:expr) => {
        CryptoInfo::$variant(libc::$ty {
            info: tls13($cipher_type),
            iv: copy(&$iv[4..]),
            key: copy($key),
            salt: copy(&$iv[..4]),
            rec_seq: $rec_seq,
        })
    };
}

impl CryptoInfo {
    /// `iv` is rustls' 12-byte TLS 1.3 IV. AES-GCM splits it into the 4-byte salt and
    /// the 8-byte iv; ChaCha20-Poly1305 takes all 12 as iv with no salt. `seq` is the
    /// number of the next record under this key.
    pub(super) fn build(c: Cipher, key: &[u8], iv: &[u8; IV_LEN], seq: u64) -> CryptoInfo {
        assert_eq!(key.len(), c.key_len(), "kTLS {c:?}: key of {} bytes, the cipher takes {}", key.len(), c.key_len());
        let rec_seq = seq.to_be_bytes();
        match c {
            Cipher::Aes128Gcm => {
                aes_gcm!(Aes128, tls12_crypto_info_aes_gcm_128, libc::TLS_CIPHER_AES_GCM_128, key, iv, rec_seq)
            }
            Cipher::Aes256Gcm => {
                aes_gcm!(Aes256, tls12_crypto_info_aes_gcm_256, libc::TLS_CIPHER_AES_GCM_256, key, iv, rec_seq)
            }
            Cipher::Chacha20 => CryptoInfo::Chacha(libc::tls12_crypto_info_chacha20_poly1305 {
                info: tls13(libc::TLS_CIPHER_CHACHA20_POLY1305),
                iv: copy(iv),
                key: copy(key),
                salt: [0u8; 0],
                rec_seq,
            }),
        }
    }

    /// One direction's secrets from rustls (`seq`: its next record's number); `Err` where
    /// the kernel cannot take them.
    pub(super) fn from_secrets(seq: u64, s: &ConnectionTrafficSecrets) -> Result<CryptoInfo, String> {
        let (c, key, iv) = match s {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Cipher::Aes128Gcm, key.as_ref(), iv.as_ref()),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::Aes256Gcm, key.as_ref(), iv.as_ref()),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (Cipher::Chacha20, key.as_ref(), iv.as_ref()),
            _ => return Err("cipher not supported by kernel TLS".into()),
        };
        if key.len() != c.key_len() || iv.len() != IV_LEN {
            return Err(format!("unexpected key/iv sizes {}/{}", key.len(), iv.len()));
        }
        Ok(CryptoInfo::build(c, key, &copy(iv), seq))
    }

    /// The struct's address and size, as `setsockopt` takes them.
    pub(super) fn bytes(&self) -> (*const libc::c_void, usize) {
        let (p, n, want): (*const libc::c_void, usize, usize) = match self {
            CryptoInfo::Aes128(i) => {
                ((i as *const libc::tls12_crypto_info_aes_gcm_128).cast(), mem::size_of_val(i), AES128_LEN)
            }
            CryptoInfo::Aes256(i) => {
                ((i as *const libc::tls12_crypto_info_aes_gcm_256).cast(), mem::size_of_val(i), AES256_LEN)
            }
            CryptoInfo::Chacha(i) => {
                ((i as *const libc::tls12_crypto_info_chacha20_poly1305).cast(), mem::size_of_val(i), CHACHA_LEN)
            }
        };
        assert_eq!(n, want, "kTLS crypto info: {n} bytes where the uapi struct has {want}");
        (p, n)
    }

    /// Installs this direction's keys (`dir`: `TLS_TX` or `TLS_RX`) on a socket whose ULP
    /// is `tls`.
    pub(super) fn set(&self, fd: RawFd, dir: libc::c_int) -> io::Result<()> {
        assert!(dir == libc::TLS_TX || dir == libc::TLS_RX, "kTLS: setsockopt direction {dir} is neither TX nor RX");
        let (p, n) = self.bytes();
        let len = libc::socklen_t::try_from(n).expect("a crypto info struct fits socklen_t");
        // SAFETY: `p` points to `n` bytes of a live #[repr(C)] uapi struct owned by `self`
        // (its size asserted by `bytes`), which outlives the call; the kernel only reads it.
        let r = unsafe { libc::setsockopt(fd, libc::SOL_TLS, dir, p, len) };
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
            // SAFETY: `b` is a valid, aligned &mut u8; volatile so the wipe is not
            // optimised away as a dead store before the free.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
        debug_assert!(key.iter().all(|b| *b == 0), "kTLS crypto info: a key left unwiped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crypto_info_layout() {
        let key: Vec<u8> = (0..16).collect();
        let iv: [u8; 12] = std::array::from_fn(|i| 100 + i as u8);
        let i = CryptoInfo::build(Cipher::Aes128Gcm, &key, &iv, 7);
        let (p, n) = i.bytes();
        assert_eq!(n, 4 + 8 + 16 + 4 + 8);
        // SAFETY: `p` points to `n` bytes of the struct, alive while `i` is.
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
        // SAFETY: as above, while `c` is alive.
        let b = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
        assert_eq!(&b[4..16], &iv[..]);
        assert_eq!(&b[16..48], &key32[..]);
        assert_eq!(&b[48..56], &1u64.to_be_bytes());
        let a = CryptoInfo::build(Cipher::Aes256Gcm, &key32, &iv, 0);
        assert_eq!(a.bytes().1, 4 + 8 + 32 + 4 + 8);
    }

    #[test]
    #[should_panic(expected = "key of 16 bytes, the cipher takes 32")]
    fn a_key_of_the_wrong_length_is_refused() {
        let iv = [0u8; IV_LEN];
        CryptoInfo::build(Cipher::Aes256Gcm, &[0u8; 16], &iv, 0);
    }
}
