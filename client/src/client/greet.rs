//! Opening a connection: TCP, TLS (a certificate that does not match is said as a
//! setting to fix, not an outage), then the `Hello`, falling back to an older protocol
//! version for an older server.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::addrs::check_addr;
use super::config::ClientConfig;
use super::error::Error;
use super::frames::FrameReader;
use super::values::ServerInfo;
use crate::codec::{self, ErrorCode, Request, Response, CLIENT_VERSION};

pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A connection after its `Hello`: the reader and writer halves and the server's `HelloOk`
/// (`version`: the protocol version it was opened with).
pub(crate) struct Greeted {
    pub reader: FrameReader<tokio::io::ReadHalf<Box<dyn Stream>>>,
    pub writer: tokio::io::WriteHalf<Box<dyn Stream>>,
    pub info: ServerInfo,
    pub version: u16,
}

/// Opens a connection and says `Hello`, then `then` in the same write (its answer is left
/// to the caller): with this build's protocol version, and once more on a new connection
/// with [`codec::FALLBACK_VERSION`] when the server refuses that with `BadVersion` — a
/// server older than this client, as half-way through a rolling upgrade
/// (docs/operations.md §15).
pub(crate) async fn greet(addr: &str, cfg: &ClientConfig, then: Option<&Request<'_>>) -> Result<Greeted, Error> {
    match greet_with(addr, cfg, then, CLIENT_VERSION).await {
        Err(Error::Server { code, .. }) if code == ErrorCode::BadVersion as u16 => {
            greet_with(addr, cfg, then, codec::FALLBACK_VERSION).await
        }
        r => r,
    }
}

/// [`greet`] with protocol `version` and no fallback (consumer groups need version 4:
/// an older server's `BadVersion` is the answer then).
pub(crate) async fn greet_with(
    addr: &str,
    cfg: &ClientConfig,
    then: Option<&Request<'_>>,
    version: u16,
) -> Result<Greeted, Error> {
    let stream = open(addr, cfg).await?;
    let (r, mut writer) = tokio::io::split(stream);
    let mut reader = FrameReader::new(r);
    let mut out = Vec::new();
    Request::Hello { version }.encode(0, &mut out);
    if let Some(req) = then {
        req.encode(1, &mut out);
    }
    writer.write_all(&out).await?;
    let reply = reader.next().await?.ok_or(Error::Closed)?;
    let info = match reply.response()? {
        Response::HelloOk { shard, shard_count, role, epoch, leadership, .. } => {
            ServerInfo { shard, shard_count, role, epoch, leadership }
        }
        _ => return Err(Error::Protocol("expected HelloOk".into())),
    };
    Ok(Greeted { reader, writer, info, version })
}

pub(crate) async fn open(addr: &str, cfg: &ClientConfig) -> Result<Box<dyn Stream>, Error> {
    check_addr(addr)?;
    let tcp = tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| Error::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")))??;
    tcp.set_nodelay(true)?;
    match &cfg.tls {
        None => Ok(Box::new(tcp)),
        Some((c, name)) => {
            let conn = tokio_rustls::TlsConnector::from(c.clone());
            let s = conn.connect(name.clone(), tcp).await.map_err(|e| {
                let bad_cert = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()).is_some_and(|r| {
                    matches!(r, rustls::Error::InvalidCertificate(_))
                });
                if bad_cert {
                    // No retry cures a certificate that does not match: say which setting.
                    Error::Invalid(format!(
                        "{addr}: TLS with server name {:?} failed: {e} (check the server name and the CA, or the client certificate)",
                        name.to_str()
                    ))
                } else {
                    Error::Tls(e.to_string())
                }
            })?;
            Ok(Box::new(s))
        }
    }
}
