//! Kernel TLS (kTLS): after rustls finishes a TLS 1.3 handshake, the session keys move
//! into the kernel (`setsockopt(TCP_ULP, "tls")`, then `SOL_TLS` `TLS_TX` / `TLS_RX`
//! with `tls12_crypto_info_*`; TLS 1.3 uses the same structs with version 0x0304), so
//! application data is encrypted and decrypted by the kernel and a connection's reads
//! and writes are plain socket syscalls.
//!
//! One concern per file:
//! * `probe`: whether the kernel takes sessions at all, once per process ([`probe`]);
//!   where it does not (no `tls` module, as on our development hosts) every connection
//!   stays in userspace rustls, unchanged. `CORELOG_KTLS=off` forces userspace.
//! * `cipher`, `crypto`: the offloadable ciphers, their key sizes, and the socket options
//!   that install a direction's keys.
//! * `frames`: record boundaries in the bytes fed to rustls before the hand-off
//!   ([`Frames`]); `offload`: the hand-off itself ([`offload`], from `tls_io::establish`).
//! * `cmsg`, `control`: records that are not application data after the hand-off
//!   ([`recv_record`], [`control`], [`send_alert`]); KeyUpdate closes the connection
//!   (this kernel cannot rekey).
//! * `report`: which path each connection took ([`report`]).
//!
//! **Record limit**: nothing in the kernel counts records per key. The writer counts
//! what it sends ([`records_for`], an upper bound) and fails the connection before
//! [`TX_RECORD_LIMIT`] records (below 2^24, RFC 8446 §5.5 allows ≈2^24.5 for AES-GCM);
//! long-lived replication links then re-dial and handshake fresh keys. The receive
//! direction is bounded by the peer's sender-side count (our own writer or rustls).

mod cipher;
mod cmsg;
mod control;
mod crypto;
mod frames;
mod offload;
mod probe;
mod report;

pub use self::cmsg::{recv_record, send_alert};
pub use self::control::{control, Control};
pub use self::frames::Frames;
pub use self::offload::{offload, wanted, Offloaded, Refused};
pub use self::probe::{available, probe, status_line, Support};
pub use self::report::report;

/// TLS record content types.
pub const CT_ALERT: u8 = 21;
pub const CT_HANDSHAKE: u8 = 22;
pub const CT_APPLICATION_DATA: u8 = 23;

/// Largest plaintext per TLS record.
pub const MAX_RECORD_PAYLOAD: usize = 16 * 1024;

/// Records a kernel-TLS writer sends under one key before it fails the connection
/// (the peer or our dialler reconnects with fresh keys): 2^24 - 2^16, so even a
/// single 1 GiB write after the last check stays below 2^24.
pub const TX_RECORD_LIMIT: u64 = (1 << 24) - (1 << 16);
const _: () = assert!(TX_RECORD_LIMIT < 1 << 24, "the kTLS record limit must stay below 2^24");
// The writer checks before each send (`sent < TX_RECORD_LIMIT`), then adds `records_for`
// of what the send took: even 1 GiB then numbers its last record below 2^24.
const _: () = assert!(
    TX_RECORD_LIMIT - 1 + records_for(1 << 30) <= 1 << 24,
    "a 1 GiB write after the last check must number its records below 2^24"
);

/// Upper bound on the records the kernel makes of one `send` that accepted `n` bytes:
/// it cuts at 16 KiB and ends a record at the end of every send (no MSG_MORE); one
/// more for a record a previous send may have left open.
pub const fn records_for(n: usize) -> u64 {
    (n / MAX_RECORD_PAYLOAD) as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_bound() {
        assert_eq!(records_for(1), 1);
        assert_eq!(records_for(16 * 1024), 2);
        assert_eq!(records_for(100_000), 7);
        const { assert!(TX_RECORD_LIMIT < 1 << 24) };
    }
}
