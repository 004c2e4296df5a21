//! Networking: listeners, client connections, TLS (rustls driven by hand).

pub mod conn;
pub mod listener;
pub mod tls;
pub mod tls_io;
