//! Shared by the loadgen integration tests: find the `corelog` binary, free ports, and a
//! standalone mTLS server that is killed (by pid) when dropped.
#![allow(dead_code)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A server child: SIGCONT (in case a test failed mid-stall) and kill on drop.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our own child; CONT first in case a test failed mid-stall.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGCONT) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server binary next to the load generator, if built.
pub fn server_bin() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_BIN_EXE_corelog-loadgen")).with_file_name("corelog");
    p.exists().then_some(p)
}

/// A port p such that p and p+1 (shard 0's direct port) are free now.
pub fn free_port_pair() -> u16 {
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < 65000 && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no free port pair");
}

/// Starts a standalone 1-shard mTLS server (certs under `dir/certs`); returns once it
/// logged `ready`, with its client and metrics ports.
pub fn start_server(bin: &Path, dir: &Path) -> (Server, u16, u16) {
    let certs = dir.join("certs");
    let st = Command::new(bin).arg("certs").arg("--out").arg(&certs).stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "corelog certs failed");
    let port = free_port_pair();
    let metrics = free_port_pair();
    let mut child = Command::new(bin)
        .args(["serve", "--role", "standalone", "--shard-count", "1", "--segment-bytes", "67108864"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .args(cert_args(&certs, [("--cert", "server.pem"), ("--key", "server.key"), ("--client-ca", "ca.pem")]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("server: {l}");
            if l.contains("ready") {
                let _ = tx.send(());
            }
        }
    });
    let server = Server(child);
    rx.recv_timeout(Duration::from_secs(30)).expect("server ready within 30 s");
    (server, port, metrics)
}

/// `FLAG FILE` for each pair, the files under `certs`.
pub fn cert_args(certs: &Path, pairs: [(&str, &str); 3]) -> Vec<OsString> {
    pairs.iter().flat_map(|(flag, file)| [OsString::from(flag), certs.join(file).into_os_string()]).collect()
}

/// The client's TLS flags (`--ca`, `--cert`, `--key`) for the certificates under `certs`.
pub fn client_tls(certs: &Path) -> Vec<OsString> {
    cert_args(certs, [("--ca", "ca.pem"), ("--cert", "client.pem"), ("--key", "client.key")])
}

/// A test that cannot run here: prints `SKIP <test>: <why>` and returns, unless
/// `CORELOG_NO_SKIP=1` (set by .ci/run), where it fails instead: a green CI proves the
/// test ran.
pub fn skip(test: &str, why: &str) {
    if std::env::var("CORELOG_NO_SKIP").is_ok_and(|v| v == "1") {
        panic!("{test} cannot run here ({why}), and CORELOG_NO_SKIP=1 forbids skipping it");
    }
    eprintln!("SKIP {test}: {why}");
}
