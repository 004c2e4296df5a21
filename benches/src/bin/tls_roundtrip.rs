//! A CPU-speed yardstick for comparing machines (and a machine's CPUs with each other):
//! an in-memory rustls client and server (TLS 1.3, the ring provider, as corelog) exchange
//! a 120-byte request and a 24-byte answer, one record each way, with no sockets or
//! system calls. Prints ns per round trip (two seals, two opens) for three rounds of
//! ROUNDTRIPS (default 200,000); the last round is the figure. `benches/cpu_speed.sh`
//! runs it on one CPU alone and on every CPU at once.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

/// Moves every TLS byte `from` has queued into `to` and processes it; the state after
/// the last record processed (None when nothing was queued).
fn pump(from: &mut rustls::Connection, to: &mut rustls::Connection, buf: &mut Vec<u8>) -> Option<rustls::IoState> {
    buf.clear();
    while from.wants_write() {
        from.write_tls(buf).expect("write_tls to a Vec");
    }
    let mut s = &buf[..];
    let mut state = None;
    while !s.is_empty() {
        to.read_tls(&mut s).expect("read_tls from a slice");
        state = Some(to.process_new_packets().expect("valid records"));
    }
    state
}

/// Sends `msg` from `from` to `to` as one record and reads it back out of `to`.
fn send(from: &mut rustls::Connection, to: &mut rustls::Connection, msg: &[u8], out: &mut Vec<u8>, plain: &mut [u8]) {
    from.writer().write_all(msg).expect("plaintext in");
    let n = pump(from, to, out).expect("a record was sent").plaintext_bytes_to_read();
    assert_eq!(n, msg.len(), "one record carries the whole message");
    to.reader().read_exact(&mut plain[..n]).expect("plaintext out");
}

fn main() {
    let n: u32 = std::env::var("ROUNDTRIPS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("a self-signed certificate");
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let prov = Arc::new(rustls::crypto::ring::default_provider());
    let scfg = rustls::ServerConfig::builder_with_provider(prov.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("server certificate");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("root certificate");
    let ccfg = rustls::ClientConfig::builder_with_provider(prov)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").expect("server name");
    let mut c: rustls::Connection = rustls::ClientConnection::new(Arc::new(ccfg), name).expect("client").into();
    let mut s: rustls::Connection = rustls::ServerConnection::new(Arc::new(scfg)).expect("server").into();
    let mut buf = Vec::new();
    while c.is_handshaking() || s.is_handshaking() {
        pump(&mut c, &mut s, &mut buf);
        pump(&mut s, &mut c, &mut buf);
    }
    let suite = c.negotiated_cipher_suite().expect("a cipher suite").suite();
    let (req, resp) = (vec![7u8; 120], vec![9u8; 24]);
    let (mut out, mut plain) = (Vec::with_capacity(4096), vec![0u8; 4096]);
    for round in 0..3 {
        let t = Instant::now();
        for _ in 0..n {
            send(&mut c, &mut s, &req, &mut out, &mut plain);
            send(&mut s, &mut c, &resp, &mut out, &mut plain);
        }
        let per = t.elapsed().as_nanos() as f64 / f64::from(n);
        println!("round {round}: {per:.0} ns per round trip ({suite:?}, {n} round trips)");
    }
}
