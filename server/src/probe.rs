//! The HTTP probe of a node's metrics port (`/health`, `/metrics`): one plain-HTTP GET
//! on loopback, the whole answer (status line, headers, body) as text. For the tools and
//! tests that start a node and wait for it or read its counters; the node never calls it.

use std::io::{Read, Write};
use std::time::Duration;

/// `GET path` from `127.0.0.1:port`; the server closes the connection after answering,
/// so the answer is read to the end (a stalled server fails after 2 s).
pub fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}
