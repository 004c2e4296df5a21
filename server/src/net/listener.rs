//! Listening sockets built with socket2 (glommio's own bind hard-codes listen(1024)):
//! SO_REUSEPORT so every executor, and every process of a node, shares the client port.

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use glommio::net::TcpListener;
use socket2::{Domain, Protocol, Socket, Type};

use super::{conn, tls};
use crate::shard::Shard;

/// Accept backlog; the kernel caps it at net.core.somaxconn (4096 here).
pub const BACKLOG: i32 = 8192;

/// `reuse_port`: one listener per shard on the shared client port. Each of those also
/// sets SO_INCOMING_CPU to the CPU its executor is pinned to, so the kernel hands a new
/// connection to the shard on the CPU that processed its SYN — the client's CPU on
/// loopback, the receive queue's CPU with a NIC — and a connection's packets and its
/// shard meet on one CPU: the wake-ups on every reply stay local. Waking a thread on
/// another CPU costs an inter-processor interrupt, which is dear in a VM: closed loop
/// 1,000 connections on 2 vCPUs went from 61k to 127k–133k acked/s (docs/results).
pub fn bind(addr: SocketAddr, reuse_port: bool) -> std::io::Result<TcpListener> {
    listen(claim(addr, reuse_port)?)
}

/// How long a start-up waits for a port that is still in use. A process that was killed
/// or re-executed (a coordinator-mode role change) loses its listeners only once the
/// kernel has torn down its io_uring instances, a little after the process is gone; a
/// port held longer than this is taken by someone else.
pub const BIND_WAIT: Duration = Duration::from_secs(5);

/// A socket bound to `addr` that does not listen yet: the address is taken (a clash is
/// found now), while a connection to it is still refused. Call on the executor that will
/// accept (SO_INCOMING_CPU is its CPU); start-up only (it may block up to `BIND_WAIT`).
pub fn claim(addr: SocketAddr, reuse_port: bool) -> std::io::Result<Socket> {
    let until = std::time::Instant::now() + BIND_WAIT;
    loop {
        match claim_once(addr, reuse_port) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

fn claim_once(addr: SocketAddr, reuse_port: bool) -> std::io::Result<Socket> {
    let sk = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sk.set_reuse_address(true)?;
    if reuse_port {
        sk.set_reuse_port(true)?;
        // SAFETY: no arguments; the CPU this thread runs on (its executor is pinned).
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu >= 0 {
            sk.set_cpu_affinity(cpu as usize)?;
        }
    }
    sk.bind(&addr.into())?;
    Ok(sk)
}

/// Starts listening on a socket from [`claim`].
pub fn listen(sk: Socket) -> std::io::Result<TcpListener> {
    sk.listen(BACKLOG)?;
    // SAFETY: the fd is a bound, listening TCP socket whose ownership we hand over.
    Ok(unsafe { TcpListener::from_raw_fd(sk.into_raw_fd()) })
}

/// The client connections of this process, across its executors. Touched only at accept
/// and close, never per request.
pub struct ConnCap {
    open: AtomicUsize,
    pub max: usize,
}

impl ConnCap {
    pub fn new(max: usize) -> Arc<ConnCap> {
        Arc::new(ConnCap { open: AtomicUsize::new(0), max })
    }

    fn try_take(self: &Arc<Self>) -> Option<ConnSlot> {
        let n = self.open.fetch_add(1, Ordering::Relaxed);
        if n >= self.max {
            self.open.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnSlot(self.clone()))
    }
}

/// One open client connection; released when dropped.
pub struct ConnSlot(Arc<ConnCap>);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts client connections forever, one task each, on the calling executor. Beyond
/// `cap` open connections in this process a new one is closed at once (counted), before
/// any TLS work or buffer: the descriptors left are for replication and metrics.
pub async fn accept_clients(shard: Rc<Shard>, listener: TcpListener, tls_cfg: tls::ServerTls, cap: Arc<ConnCap>) {
    loop {
        match listener.accept().await {
            Ok(sock) => {
                if shard.draining() {
                    drop(sock); // shutting down: closed at once
                    continue;
                }
                let Some(slot) = cap.try_take() else {
                    shard.metrics().connections_refused.increment(1);
                    drop(sock);
                    continue;
                };
                let t = tls::accept(&tls_cfg).map(Box::new); // see `conn::serve` on memory
                let shard = shard.clone();
                glommio::spawn_local(async move {
                    conn::serve(shard, sock, t).await;
                    drop(slot);
                })
                .detach();
            }
            Err(e) => {
                // EMFILE and friends: say so, back off briefly, keep serving the others.
                log::warn!("shard {}: accept failed: {e}", shard.id());
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
