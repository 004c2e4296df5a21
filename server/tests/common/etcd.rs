//! A single-member etcd for coordinator-mode tests, from the `etcd` binary (Debian
//! etcd-server), on loopback ports or in a network namespace, stopped by pid when dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Option<Child>,
    /// Client port (plain HTTP; the v3 JSON gateway answers on it).
    pub port: u16,
    /// Where the test reaches it.
    pub host: String,
    pub log: PathBuf,
}

impl Etcd {
    /// Starts etcd with its data in `dir/etcd` and waits until `POST /v3/kv/range`
    /// answers (bounded). Where etcd is not installed: `common::skip` and None.
    pub fn start(test: &str, dir: &Path) -> Option<Etcd> {
        let p = super::ports();
        let url = |p: u16| format!("http://127.0.0.1:{p}");
        Etcd::spawn(test, dir, &[], "127.0.0.1", [url(p.client), url(p.client), url(p.client + 1)])
    }

    /// Like `start`, run under `wrap` (`ip netns exec NS`): clients on `0.0.0.0:2379`
    /// (the test reaches it at `host`), peers on the namespace's loopback.
    pub fn start_in(test: &str, dir: &Path, wrap: &[String], host: &str) -> Option<Etcd> {
        let urls = ["http://0.0.0.0:2379".into(), format!("http://{host}:2379"), "http://127.0.0.1:2380".into()];
        Etcd::spawn(test, dir, wrap, host, urls)
    }

    /// Whether the `etcd` binary runs here; `common::skip` where not.
    pub fn installed(test: &str) -> bool {
        let ok = Command::new("etcd").arg("--version").output().is_ok_and(|o| o.status.success());
        if !ok {
            super::skip(test, "etcd not installed: apt-get install etcd-server");
        }
        ok
    }

    /// `urls`: listen-client, advertise-client, peer.
    fn spawn(test: &str, dir: &Path, wrap: &[String], host: &str, urls: [String; 3]) -> Option<Etcd> {
        if !Etcd::installed(test) {
            return None;
        }
        let [listen, advertise, peer] = urls;
        let port = advertise.rsplit(':').next().and_then(|p| p.parse().ok()).expect("client url port");
        let data = dir.join("etcd");
        let log = dir.join("etcd.log");
        let child = super::wrapped(wrap, "etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(&data)
            .args(["--listen-client-urls", &listen, "--advertise-client-urls", &advertise])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("t={peer}")])
            .args(["--heartbeat-interval", "50", "--election-timeout", "250"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("etcd log"))
            .spawn()
            .expect("spawn etcd");
        let mut e = Etcd { child: Some(child), port, host: host.into(), log };
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
        let addr = format!("{}:{}", self.host, self.port).parse().expect("etcd address");
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
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

    /// `http://HOST:PORT` as the test reaches it, for `--coordinator`.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
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
