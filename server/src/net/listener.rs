//! Listening sockets built with socket2 (glommio's own bind hard-codes listen(1024)):
//! SO_REUSEPORT so every executor, and every process of a node, shares the client port.

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use glommio::net::TcpListener;
use socket2::{Domain, Protocol, Socket, Type};

use super::{conn, tls};
use crate::shard::Shard;

/// Accept backlog; the kernel caps it at net.core.somaxconn (4096 here).
pub const BACKLOG: i32 = 8192;

pub fn bind(addr: SocketAddr, reuse_port: bool) -> std::io::Result<TcpListener> {
    let sk = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sk.set_reuse_address(true)?;
    if reuse_port {
        sk.set_reuse_port(true)?;
    }
    sk.bind(&addr.into())?;
    sk.listen(BACKLOG)?;
    // SAFETY: the fd is a bound, listening TCP socket whose ownership we hand over.
    Ok(unsafe { TcpListener::from_raw_fd(sk.into_raw_fd()) })
}

/// Accepts client connections forever, one task each, on the calling executor.
pub async fn accept_clients(shard: Rc<Shard>, listener: TcpListener, tls_cfg: Option<Arc<rustls::ServerConfig>>) {
    loop {
        match listener.accept().await {
            Ok(sock) => {
                let t = tls::accept(&tls_cfg);
                glommio::spawn_local(conn::serve(shard.clone(), sock, t)).detach();
            }
            Err(e) => {
                // EMFILE and friends: say so, back off briefly, keep serving the others.
                eprintln!("corelog: shard {}: accept failed: {e}", shard.id());
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
