//! TLS configuration for the server side of client and replication ports: TLS 1.3,
//! client certificate required and verified against a CA. Session tickets are off and
//! secret extraction is on, so a session can be handed to kernel TLS after the handshake.

use std::path::Path;
use std::sync::{Arc, RwLock};

use corelog_client::tls::{load_certs, load_key, provider, root_store};

pub fn server_config(cert: &Path, key: &Path, client_ca: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let roots = Arc::new(root_store(client_ca)?);
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| format!("client CA {}: {e}", client_ca.display()))?;
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

/// The replication client side: trusts `ca`, presents `cert`/`key` to the follower.
pub fn client_config(cert: &Path, key: &Path, ca: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    Ok(Arc::new(corelog_client::tls::client_config(ca, Some((cert, key)))?))
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
