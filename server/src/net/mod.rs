//! Networking: listeners, client connections, TLS (rustls driven by hand, handed to
//! kernel TLS after the handshake where the kernel has the `tls` ULP).

pub mod conn;
pub mod listener;
pub mod outbox;
pub mod peer;
pub mod reload;
pub mod tls;

pub use corelog_runtime::{fds, ktls, tls_io};
