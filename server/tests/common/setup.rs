//! Shorthands for how most tests begin and end: a node serving a data dir, a started
//! pair, certificates in a fresh directory, a client's TLS flags, a pair's final check.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

impl Node {
    /// A node (not started) serving `data` in `mode` on `ports`, without TLS.
    pub fn serving(name: &str, mode: Mode, data: &Path, ports: Ports, extra: &[&str]) -> Node {
        Node::new(name, data.to_path_buf(), ports, Node::args(mode, data, ports, None, "", extra))
    }

    /// This node, started (`start`).
    pub fn started(mut self) -> Node {
        self.start();
        self
    }

    /// A standalone node (not started) on fresh ports serving `data`, with the `server`
    /// certificate from `certs` when given.
    pub fn standalone(name: &str, data: &Path, certs: Option<&Path>, extra: &[&str]) -> Node {
        let ports = ports();
        Node::new(name, data.to_path_buf(), ports, Node::args(Mode::Standalone, data, ports, certs, "server", extra))
    }
}

/// A started pair without TLS in a fresh directory named after `name`.
pub fn started_pair_in(name: &str, extra: &[&str]) -> (TempDir, Pair) {
    let dir = TempDir::new(name);
    let p = started_pair(&dir, None, extra);
    (dir, p)
}

/// `pair`, started: the follower first, so that the leader finds it listening.
pub fn started_pair(dir: &TempDir, certs: Option<&Path>, extra: &[&str]) -> Pair {
    let mut p = pair(dir, certs, extra);
    p.follower.start();
    p.leader.start();
    p
}

impl Pair {
    /// Kills both -9; asserts their logs inspect clean and hold the same records, which
    /// it returns.
    pub fn kill_and_compare(&mut self) -> Vec<(u64, String)> {
        self.leader.kill9();
        self.follower.kill9();
        assert_same_logs(&self.leader.data, &self.follower.data)
    }

    /// Waits (bounded) for the follower to catch up, then `kill_and_compare`.
    pub fn caught_up_and_compared(mut self, within: Duration) -> Vec<(u64, String)> {
        wait_caught_up(&self, within);
        self.kill_and_compare()
    }
}

/// A fresh directory named after `name`, with certificates from `corelog certs` in it.
pub fn dir_with_certs(name: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(name);
    let certs = certs(dir.path());
    (dir, certs)
}

/// The flags of a CLI client presenting certificate `who` from `certs`:
/// `--ca ca.pem --cert WHO.pem --key WHO.key`.
pub fn client_tls_args(certs: &Path, who: &str) -> [OsString; 6] {
    let file = |name: String| certs.join(name).into_os_string();
    [
        "--ca".into(),
        file("ca.pem".into()),
        "--cert".into(),
        file(format!("{who}.pem")),
        "--key".into(),
        file(format!("{who}.key")),
    ]
}
