//! A single-member etcd for coordinator-mode tests, from the `etcd` binary (Debian
//! etcd-server), on loopback ports, stopped by pid when dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Option<Child>,
    /// Client port (plain HTTP; the v3 JSON gateway answers on it).
    pub port: u16,
    pub log: PathBuf,
}

impl Etcd {
    /// Starts etcd with its data in `dir/etcd` and waits until `POST /v3/kv/range`
    /// answers (bounded). Where etcd is not installed: `common::skip` and None.
    pub fn start(test: &str, dir: &Path) -> Option<Etcd> {
        if !Command::new("etcd").arg("--version").output().is_ok_and(|o| o.status.success()) {
            super::skip(test, "etcd not installed: apt-get install etcd-server");
            return None;
        }
        let p = super::ports();
        let (port, peer) = (p.client, p.client + 1);
        let url = |p: u16| format!("http://127.0.0.1:{p}");
        let data = dir.join("etcd");
        let log = dir.join("etcd.log");
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(&data)
            .args(["--listen-client-urls", &url(port), "--advertise-client-urls", &url(port)])
            .args(["--listen-peer-urls", &url(peer), "--initial-advertise-peer-urls", &url(peer)])
            .args(["--initial-cluster", &format!("t={}", url(peer))])
            .args(["--heartbeat-interval", "50", "--election-timeout", "250"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("etcd log"))
            .spawn()
            .expect("spawn etcd");
        let mut e = Etcd { child: Some(child), port, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if e.answers() {
                return Some(e);
            }
            if let Some(st) = e.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("etcd exited at start-up ({st}):\n{}", e.log_text());
            }
            assert!(Instant::now() < deadline, "etcd not answering within 20 s:\n{}", e.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether a range request on the JSON gateway is answered with 200.
    pub fn answers(&self) -> bool {
        let body = r#"{"key":"aGVhbHRo"}"#; // "health"
        let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_secs(1)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let req = format!(
            "POST /v3/kv/range HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(req.as_bytes()).is_err() {
            return false;
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.starts_with("HTTP/1.1 200") && out.contains("\"header\"")
    }

    /// `http://127.0.0.1:PORT`, for `--coordinator`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("etcd running").id() as i32
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL, by pid
            let _ = c.wait();
        }
    }
}
