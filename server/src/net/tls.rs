//! TLS configuration for the server side of client and replication ports: TLS 1.3,
//! client certificate required and verified against a CA. Session tickets are off and
//! secret extraction is on, so a session can be handed to kernel TLS after the handshake.

use std::path::Path;
use std::sync::Arc;

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

pub fn accept(cfg: &Option<Arc<rustls::ServerConfig>>) -> Option<rustls::Connection> {
    cfg.as_ref()
        .map(|c| rustls::Connection::Server(rustls::ServerConnection::new(c.clone()).expect("valid server config")))
}

pub fn connect(cfg: &Option<Arc<rustls::ClientConfig>>, name: &str) -> Result<Option<rustls::Connection>, String> {
    let Some(c) = cfg else { return Ok(None) };
    let name =
        rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|e| format!("server name {name}: {e}"))?;
    let conn = rustls::ClientConnection::new(c.clone(), name).map_err(|e| e.to_string())?;
    Ok(Some(rustls::Connection::Client(conn)))
}
