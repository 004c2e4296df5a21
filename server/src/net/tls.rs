//! TLS configuration for the server side of client and replication ports: TLS 1.3,
//! client certificate required and verified against a CA. Session tickets are off and
//! secret extraction is on, so a session can be handed to kernel TLS after the handshake.

use std::path::Path;
use std::sync::{Arc, RwLock};

use corelog_client::tls::{load_certs, load_key, provider, root_store};
use rustls::server::danger::ClientCertVerifier;

use super::peer::{FollowerVerifier, LeaderVerifier, PeerName};

/// The client port's server side: any certificate chaining to `client_ca`.
pub fn server_config(cert: &Path, key: &Path, client_ca: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    build_server(cert, key, client_ca, None)
}

/// The replication port's server side (a follower): the leader's certificate must chain
/// to `ca` and name the replication peer (`peer.rs`).
pub fn repl_server_config(
    cert: &Path,
    key: &Path,
    ca: &Path,
    peer: &PeerName,
) -> Result<Arc<rustls::ServerConfig>, String> {
    build_server(cert, key, ca, Some(peer))
}

fn build_server(
    cert: &Path,
    key: &Path,
    client_ca: &Path,
    peer: Option<&PeerName>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let roots = Arc::new(root_store(client_ca)?);
    let webpki = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| format!("client CA {}: {e}", client_ca.display()))?;
    let verifier: Arc<dyn ClientCertVerifier> = match peer {
        Some(name) => Arc::new(LeaderVerifier { inner: webpki, name: name.clone() }),
        None => webpki,
    };
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(load_certs(cert)?, load_key(key)?)
        .map_err(|e| format!("server certificate/key: {e}"))?;
    cfg.send_tls13_tickets = 0;
    cfg.enable_secret_extraction = true;
    Ok(Arc::new(cfg))
}

/// The replication client side (a leader): trusts `ca`, presents `cert`/`key`, and
/// requires the follower's certificate to name the replication peer (`peer.rs`).
pub fn client_config(cert: &Path, key: &Path, ca: &Path, peer: &PeerName) -> Result<Arc<rustls::ClientConfig>, String> {
    let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(root_store(ca)?), provider())
        .build()
        .map_err(|e| format!("replication CA {}: {e}", ca.display()))?;
    let verifier = Arc::new(FollowerVerifier { inner: webpki, name: peer.clone() });
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
        .map_err(|e| format!("replication certificate/key: {e}"))?;
    cfg.enable_secret_extraction = true;
    Ok(Arc::new(cfg))
}

/// A TLS configuration that a certificate reload ([`super::reload`]) may replace: each
/// new connection takes the current one; open connections keep the one they began with.
pub struct Live<T>(Arc<RwLock<Arc<T>>>);

impl<T> Clone for Live<T> {
    fn clone(&self) -> Self {
        Live(self.0.clone())
    }
}

impl<T> Live<T> {
    pub fn new(v: Arc<T>) -> Self {
        Live(Arc::new(RwLock::new(v)))
    }
    pub fn current(&self) -> Arc<T> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
    pub fn replace(&self, v: Arc<T>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = v;
    }
}

/// Server side of a port: None = plain TCP.
pub type ServerTls = Option<Live<rustls::ServerConfig>>;
/// Client side of the replication link: None = plain TCP.
pub type ClientTls = Option<Live<rustls::ClientConfig>>;

pub fn accept(cfg: &ServerTls) -> Option<rustls::Connection> {
    cfg.as_ref()
        .map(|c| rustls::Connection::Server(rustls::ServerConnection::new(c.current()).expect("valid server config")))
}

pub fn connect(cfg: &ClientTls, name: &str) -> Result<Option<rustls::Connection>, String> {
    let Some(c) = cfg else { return Ok(None) };
    let name =
        rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|e| format!("server name {name}: {e}"))?;
    let conn = rustls::ClientConnection::new(c.current(), name).map_err(|e| e.to_string())?;
    Ok(Some(rustls::Connection::Client(conn)))
}

/// A node's certificate, key and CA files (PEM), re-read when they change (`reload`).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub ca: std::path::PathBuf,
}
