//! What a record that is not application data means after the hand-off.
//!
//! close_notify is the end of the stream; other alerts are errors; NewSessionTicket is
//! ignored; **KeyUpdate is an error that closes the connection**: Linux 6.1 cannot
//! install new TLS 1.3 receive keys on a socket (rekey arrived in 6.13/6.14), so the peer
//! reconnects. rustls peers send KeyUpdate only near their AEAD record limit (about 2^24
//! records). Sans I/O: the records are read by `cmsg::recv_record`.

use std::io;

use super::{CT_ALERT, CT_HANDSHAKE, MAX_RECORD_PAYLOAD};

/// Handshake message types seen after the handshake.
const HS_NEW_SESSION_TICKET: u8 = 4;
const HS_KEY_UPDATE: u8 = 24;
/// Bytes of a handshake message header: type, 24-bit length.
const HS_HEADER_LEN: usize = 4;

/// What a record that is not application data means for the reader.
#[derive(Debug, PartialEq, Eq)]
pub enum Control {
    /// Skip it (NewSessionTicket, user_canceled warning).
    Ignore,
    /// close_notify: the peer's end of stream.
    Eof,
}

/// Interprets a control record's payload (one record's plaintext, as the kernel
/// decrypted it: never more than a record holds).
pub fn control(ct: u8, payload: &[u8]) -> io::Result<Control> {
    debug_assert!(
        payload.len() <= MAX_RECORD_PAYLOAD,
        "kTLS control record of {} bytes, above the TLS maximum {MAX_RECORD_PAYLOAD}",
        payload.len()
    );
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
                let fragmented = || bad("fragmented post-handshake message (not supported under kernel TLS)".into());
                if p.len() < HS_HEADER_LEN {
                    return Err(fragmented());
                }
                let len = u32::from_be_bytes([0, p[1], p[2], p[3]]) as usize;
                if p.len() < HS_HEADER_LEN + len {
                    return Err(fragmented());
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
                p = &p[HS_HEADER_LEN + len..];
            }
            Ok(Control::Ignore)
        }
        t => Err(bad(format!("unexpected TLS record type {t} under kernel TLS"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
