//! PEM loading and rustls configuration shared by the client library, the server and
//! the load generator. TLS 1.3 only; certificates are ECDSA P-256 (`corelog certs`).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(path)?;
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut pem.as_slice()).collect();
    let certs = certs.map_err(|e| format!("bad PEM in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(certs)
}

pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read(path)?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| format!("bad PEM in {}: {e}", path.display()))?
        .ok_or_else(|| format!("no private key in {}", path.display()))
}

pub fn root_store(ca: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in load_certs(ca)? {
        roots.add(c).map_err(|e| format!("bad CA certificate {}: {e}", ca.display()))?;
    }
    Ok(roots)
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS 1.3 client config trusting `ca`, presenting `identity` (cert, key) when given.
pub fn client_config(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<rustls::ClientConfig, String> {
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(root_store(ca)?);
    let mut cfg = match identity {
        Some((cert, key)) => b
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|e| format!("client certificate/key: {e}"))?,
        None => b.with_no_client_auth(),
    };
    cfg.enable_secret_extraction = true;
    Ok(cfg)
}
