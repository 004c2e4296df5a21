//! How to reach a server ([`ClientConfig`]): TLS (mTLS by default, or plaintext) and the
//! failover, connect and request timeouts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::error::Error;
use crate::tls;

/// How to reach a server: mTLS (the default) or plaintext (`--insecure` servers only).
#[derive(Clone)]
pub struct ClientConfig {
    pub(super) tls: Option<(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
    pub(crate) failover_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

const FAILOVER_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl ClientConfig {
    pub fn mtls(
        ca: impl AsRef<Path>,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
        server_name: &str,
    ) -> Result<Self, Error> {
        let cfg = tls::client_config(ca.as_ref(), Some((cert.as_ref(), key.as_ref()))).map_err(Error::Tls)?;
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| Error::Tls(format!("server name {server_name}: {e}")))?;
        Ok(ClientConfig::with_tls(Some((Arc::new(cfg), name))))
    }

    fn with_tls(tls: Option<(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>) -> Self {
        ClientConfig {
            tls,
            failover_timeout: FAILOVER_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
        }
    }

    /// How long an append keeps looking for a leader that takes it (default 5 s).
    pub fn with_failover_timeout(mut self, d: Duration) -> Self {
        self.failover_timeout = d;
        self
    }

    /// How long opening a connection may take — TCP, TLS and the `HelloOk` — before the
    /// next address is tried (default 3 s).
    pub fn with_connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// How long a request waits for its answer (default 30 s; then outcome unknown).
    pub fn with_request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }
    /// From an already built rustls config (e.g. one with no client certificate, for tests).
    pub fn from_rustls(cfg: Arc<rustls::ClientConfig>, server_name: &str) -> Result<Self, Error> {
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| Error::Tls(format!("server name {server_name}: {e}")))?;
        Ok(ClientConfig::with_tls(Some((cfg, name))))
    }
    pub fn insecure() -> Self {
        ClientConfig::with_tls(None)
    }
}
