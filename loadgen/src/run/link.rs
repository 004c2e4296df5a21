//! A load connection and how it is opened: TCP from a spread of loopback source
//! addresses, TLS, `Hello` (falling back to the older protocol version), and in failover
//! mode the choice of node by the leadership rules and the reconnection after a loss.

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use corelog_client::codec::{
    decode_frame, ErrorCode, Leadership, Request, Response, Role, CLIENT_VERSION, FALLBACK_VERSION, LEADERSHIP_VERSION,
};
use corelog_client::leadership::Seen;
use corelog_runtime::tls_io::{self, Reader, Writer};
use glommio::net::TcpStream;

use super::RunConfig;

/// A failover connect that has not completed in this long moves on to the next node
/// (a lease, once a node has advertised one: `Seen::connect_timeout`).
const FAILOVER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Failover back-off: from 20 ms, doubling, at most 100 ms (or a refusal's retry hint).
pub(super) const BACKOFF_START: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(100);

/// What a `HelloOk` said that a connection keeps.
pub(super) struct HelloInfo {
    /// (shard, shard count).
    pub(super) home: (u16, u16),
    pub(super) role: Role,
    pub(super) epoch: u32,
    pub(super) leadership: Option<Leadership>,
    /// The protocol version the connection was opened with.
    pub(super) version: u16,
}

/// Opens connection `i`: to its target, or (failover) to the first alternative from
/// index `from` on that accepts and may carry appends (`Seen::usable`; suspects only when
/// every alternative is one). Returns the index of the target it reached.
pub(super) async fn connect(
    cfg: &RunConfig,
    i: usize,
    from: usize,
    seen: &RefCell<Seen>,
) -> Result<(Reader, Writer, usize, HelloInfo), String> {
    let n = cfg.targets.len();
    if !cfg.failover {
        return connect_to(cfg, cfg.targets[i % n], i).await.map(|(r, w, h)| (r, w, i % n, h));
    }
    let mut errs = Vec::new();
    let now = Instant::now();
    let order: Vec<usize> = (0..n).map(|k| (from + k) % n).collect();
    let fresh: Vec<usize> =
        order.iter().copied().filter(|&t| !seen.borrow().is_suspect(&cfg.targets[t].to_string(), now)).collect();
    for t in if fresh.is_empty() { order } else { fresh } {
        let addr = cfg.targets[t].to_string();
        let limit = seen.borrow().connect_timeout(FAILOVER_CONNECT_TIMEOUT);
        let attempt = glommio::timer::timeout(limit, async {
            connect_to(cfg, cfg.targets[t], i)
                .await
                .map_err(|e| glommio::GlommioError::IoError(std::io::Error::other(e)))
        });
        match attempt.await {
            Ok((r, w, h)) => match seen.borrow_mut().usable(&addr, h.role, h.epoch, h.leadership, Instant::now()) {
                Ok(()) => return Ok((r, w, t, h)),
                Err(why) => errs.push(why),
            },
            Err(glommio::GlommioError::TimedOut(_)) => {
                let mut s = seen.borrow_mut();
                if s.lease.is_some() {
                    let epoch = s.epoch;
                    s.suspect(&addr, epoch, Instant::now());
                }
                errs.push(format!("{addr}: no HelloOk within {limit:?}"));
            }
            Err(e) => errs.push(format!("{addr}: {e}")),
        }
    }
    Err(errs.join("; "))
}

/// Connects and says Hello; returns the streams and what the `HelloOk` said.
/// Opens connection `i` to `target` with this build's protocol version, and once more
/// with `FALLBACK_VERSION` when the server refuses that with `BadVersion` (a server older
/// than this load generator: docs/operations.md §15).
async fn connect_to(cfg: &RunConfig, target: SocketAddr, i: usize) -> Result<(Reader, Writer, HelloInfo), String> {
    match connect_with(cfg, target, i, CLIENT_VERSION).await {
        Err(Refused::BadVersion(_)) => connect_with(cfg, target, i, FALLBACK_VERSION).await,
        r => r,
    }
    .map_err(|e| match e {
        Refused::BadVersion(m) | Refused::Other(m) => m,
    })
}

/// Why a connection did not open: the server refused its `Hello` version, or anything else.
enum Refused {
    BadVersion(String),
    Other(String),
}

impl From<String> for Refused {
    fn from(m: String) -> Refused {
        Refused::Other(m)
    }
}

impl From<&str> for Refused {
    fn from(m: &str) -> Refused {
        Refused::Other(m.to_string())
    }
}

async fn connect_with(
    cfg: &RunConfig,
    target: SocketAddr,
    i: usize,
    version: u16,
) -> Result<(Reader, Writer, HelloInfo), Refused> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sk = Socket::new(Domain::for_address(target), Type::STREAM, Some(Protocol::TCP)).map_err(|e| e.to_string())?;
    if let IpAddr::V4(ip) = target.ip() {
        if ip.is_loopback() && (cfg.source_ips > 1 || cfg.source_ip_base > 1) {
            // One source address reaches only ~28k ports of one destination: spread.
            let last = cfg.source_ip_base as usize + i % cfg.source_ips.max(1) as usize;
            let src = Ipv4Addr::new(127, 0, 0, last.clamp(1, 254) as u8);
            let one: libc::c_int = 1;
            // SAFETY: valid fd and option value.
            unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&sk),
                    libc::IPPROTO_IP,
                    libc::IP_BIND_ADDRESS_NO_PORT,
                    &one as *const _ as *const libc::c_void,
                    std::mem::size_of_val(&one) as libc::socklen_t,
                )
            };
            sk.bind(&SocketAddr::new(IpAddr::V4(src), 0).into()).map_err(|e| format!("bind {src}: {e}"))?;
        }
    }
    sk.set_nodelay(true).map_err(|e| e.to_string())?;
    sk.set_nonblocking(true).map_err(|e| e.to_string())?;
    match sk.connect(&target.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(format!("connect {target}: {e}").into()),
    }
    // The first write (ClientHello or Hello) waits for the connection to complete.
    // SAFETY: we hand the connected-or-connecting socket's fd over to glommio.
    let sock = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(sk)) };
    let tls = match &cfg.tls {
        Some(c) => {
            let name = rustls::pki_types::ServerName::try_from(cfg.server_name.clone()).map_err(|e| e.to_string())?;
            Some(rustls::Connection::Client(rustls::ClientConnection::new(c.clone(), name).map_err(|e| e.to_string())?))
        }
        None => None,
    };
    let (mut r, mut w) = tls_io::establish(sock, tls).await.map_err(|e| format!("handshake: {e}"))?;
    let mut hello = Vec::new();
    Request::Hello { version }.encode(0, &mut hello);
    w.write(&hello).await.map_err(|e| e.to_string())?;
    loop {
        if let Some((f, used)) = decode_frame(r.data()).map_err(|e| e.to_string())? {
            let hello = match Response::parse(&f).map_err(|e| e.to_string())? {
                Response::HelloOk { shard, shard_count, role, epoch, leadership, .. } => {
                    HelloInfo { home: (shard, shard_count), role, epoch, leadership, version }
                }
                Response::Error { code, message } if code == ErrorCode::BadVersion as u16 => {
                    return Err(Refused::BadVersion(format!("server refused: {code} {message}")))
                }
                Response::Error { code, message } | Response::Refusal { code, message, .. } => {
                    return Err(format!("server refused: {code} {message}").into())
                }
                _ => return Err(format!("unexpected opcode 0x{:02x} to Hello", f.op).into()),
            };
            r.consume(used);
            return Ok((r, w, hello));
        }
        if !r.fill().await.map_err(|e| e.to_string())? {
            return Err("server closed the connection".into());
        }
    }
}

/// One load connection: its streams, its index, and which target it is on.
pub(super) struct Link {
    pub(super) r: Reader,
    pub(super) w: Writer,
    pub(super) i: usize,
    pub(super) alt: usize,
    /// (shard, shard count) from the server's `HelloOk`.
    pub(super) home: (u16, u16),
    /// The role and epoch its `HelloOk` said.
    pub(super) role: Role,
    pub(super) epoch: u32,
    /// Its node tells leases (protocol version 3): probes may be sent on it.
    pub(super) leases: bool,
}

/// Failover: replaces `c` with a connection to the alternative `from` (or the next
/// ones), after `wait` (a refusal's retry hint) or else `backoff` (doubled, up to
/// 100 ms); false once `until` has passed.
pub(super) async fn reconnect(
    c: &mut Link,
    from: usize,
    cfg: &RunConfig,
    seen: &RefCell<Seen>,
    (wait, backoff): (Option<Duration>, &mut Duration),
    until: Instant,
) -> bool {
    loop {
        // A hint (a take-over under way) paces every retry: the node is restarting, and a
        // refused connection is cheap.
        match wait {
            Some(w) => glommio::timer::sleep(w).await,
            None => {
                glommio::timer::sleep(*backoff).await;
                *backoff = (*backoff * 2).min(BACKOFF_MAX);
            }
        }
        if Instant::now() >= until {
            return false;
        }
        if let Ok((r, w, alt, hello)) = connect(cfg, c.i, from, seen).await {
            let leases = hello.version >= LEADERSHIP_VERSION;
            *c = Link { r, w, i: c.i, alt, home: hello.home, role: hello.role, epoch: hello.epoch, leases };
            return true;
        }
    }
}
