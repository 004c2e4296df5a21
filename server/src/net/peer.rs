//! Who may be a replication peer: a certificate signed by the replication CA is not
//! enough (that CA is the client CA unless `--repl-ca` says otherwise, so every
//! application's certificate chains to it). The peer's certificate must also name the
//! replication peer (`--repl-peer-name`, a DNS subjectAltName that `corelog certs` puts
//! in node certificates only). Both ends check: the follower checks the leader's client
//! certificate, the leader the follower's server certificate. A refusal fails the TLS
//! handshake, is logged with the names the certificate does carry, and is counted in
//! `corelog_replication_peer_refused_total`.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// The name node certificates from `corelog certs` carry and a replication peer must
/// present by default.
pub const DEFAULT_PEER_NAME: &str = "corelog-replication-peer";

/// The required peer name, checked on the end-entity certificate after its chain.
#[derive(Clone, Debug)]
pub struct PeerName(ServerName<'static>);

impl PeerName {
    pub fn new(name: &str) -> Result<PeerName, String> {
        let n = ServerName::try_from(name.to_string())
            .map_err(|e| format!("--repl-peer-name {name:?}: not a DNS name or IP address ({e})"))?;
        Ok(PeerName(n))
    }

    pub fn name(&self) -> String {
        self.0.to_str().into_owned()
    }

    /// Ok when `cert` names the peer; else logs the refusal, counts it, and returns the
    /// handshake error.
    fn check(&self, cert: &CertificateDer<'_>, side: &str) -> Result<(), rustls::Error> {
        let parsed = ParsedCertificate::try_from(cert)?;
        rustls::client::verify_server_name(&parsed, &self.0).map_err(|e| {
            metrics::counter!("corelog_replication_peer_refused_total").increment(1);
            log::warn!(
                "replication: refused the {side}'s certificate: it is signed by the replication CA but does not name the replication peer `{}` ({e}). A client certificate cannot open a replication link; node certificates need that DNS name (`corelog certs` adds it), or set --repl-peer-name to a name the node certificates carry",
                self.0.to_str()
            );
            e
        })
    }
}

/// The signature checks of a verifier that adds only the peer-name check: those of its
/// `inner` verifier, unchanged (the client- and server-side traits declare the same ones).
macro_rules! delegate_signatures {
    ($($verify:ident),+) => {
        $(
            fn $verify(
                &self,
                message: &[u8],
                cert: &CertificateDer<'_>,
                dss: &DigitallySignedStruct,
            ) -> Result<HandshakeSignatureValid, rustls::Error> {
                self.inner.$verify(message, cert, dss)
            }
        )+

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.inner.supported_verify_schemes()
        }
    };
}

/// Follower side: the client-CA verifier, then the peer name.
#[derive(Debug)]
pub struct LeaderVerifier {
    pub inner: Arc<dyn ClientCertVerifier>,
    pub name: PeerName,
}

impl ClientCertVerifier for LeaderVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        self.name.check(end_entity, "leader")?;
        Ok(ok)
    }

    delegate_signatures!(verify_tls12_signature, verify_tls13_signature);
}

/// Leader side: the CA and server-name verifier, then the peer name.
#[derive(Debug)]
pub struct FollowerVerifier {
    pub inner: Arc<dyn ServerCertVerifier>,
    pub name: PeerName,
}

impl ServerCertVerifier for FollowerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ok = self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)?;
        self.name.check(end_entity, "follower")?;
        Ok(ok)
    }

    delegate_signatures!(verify_tls12_signature, verify_tls13_signature);
}
