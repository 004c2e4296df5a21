//! One node process: its command line, start, stop (kill -9) and restart by pid, and
//! what the test reads from it (log, /health, /metrics).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{wrapped, Ports, BIN};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Standalone,
    Leader { follower_repl: u16 },
    Follower { leader_client: u16 },
}

/// One node process with the arguments to restart it identically.
pub struct Node {
    pub name: String,
    pub child: Option<Child>,
    pub data: PathBuf,
    pub ports: Ports,
    pub args: Vec<String>,
    pub log: PathBuf,
    /// Where the test reaches it (default 127.0.0.1).
    pub host: String,
    /// Command prefix, e.g. `ip netns exec NS` (execs in place: the pid stays the node's).
    pub wrap: Vec<String>,
    /// The binary it runs (default this tree's `corelog`; the upgrade test swaps it).
    pub program: String,
    starts: u32,
}

impl Node {
    pub fn args(
        mode: Mode,
        data: &Path,
        ports: Ports,
        certs: Option<&Path>,
        cert_name: &str,
        extra: &[&str],
    ) -> Vec<String> {
        let role = match mode {
            Mode::Standalone => "standalone",
            Mode::Leader { .. } => "leader",
            Mode::Follower { .. } => "follower",
        };
        let mut a: Vec<String> = vec![
            "serve".into(),
            "--role".into(),
            role.into(),
            "--data-dir".into(),
            data.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{}", ports.client),
            "--metrics-listen".into(),
            format!("127.0.0.1:{}", ports.metrics),
        ];
        if !extra.contains(&"--segment-bytes") {
            a.extend(["--segment-bytes".into(), (4u64 << 20).to_string()]);
        }
        match certs {
            Some(c) => a.extend([
                "--cert".into(),
                c.join(format!("{cert_name}.pem")).display().to_string(),
                "--key".into(),
                c.join(format!("{cert_name}.key")).display().to_string(),
                "--client-ca".into(),
                c.join("ca.pem").display().to_string(),
            ]),
            None => a.push("--insecure".into()),
        }
        match mode {
            Mode::Standalone => {}
            Mode::Leader { follower_repl } => a.extend([
                "--repl-listen".into(),
                format!("127.0.0.1:{}", ports.repl),
                "--follower-addr".into(),
                format!("127.0.0.1:{follower_repl}"),
            ]),
            Mode::Follower { leader_client } => a.extend([
                "--repl-listen".into(),
                format!("127.0.0.1:{}", ports.repl),
                "--leader-addr".into(),
                format!("127.0.0.1:{leader_client}"),
            ]),
        }
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    pub fn new(name: &str, data: PathBuf, ports: Ports, args: Vec<String>) -> Node {
        let log = data.with_extension(format!("{name}.log"));
        let (host, wrap) = ("127.0.0.1".into(), Vec::new());
        let program = BIN.into();
        Node { name: name.into(), child: None, data, ports, args, log, host, wrap, program, starts: 0 }
    }

    /// Spawns the process; does not wait for readiness.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "{} already running", self.name);
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        self.starts += 1;
        writeln!(f, "---- start #{} ({}) ----", self.starts, self.program).unwrap();
        let child =
            wrapped(&self.wrap, &self.program).args(&self.args).stdout(Stdio::null()).stderr(f).spawn().unwrap();
        self.child = Some(child);
    }

    /// Spawns and waits until /health answers 200 (bounded); panics with the log if not.
    pub fn start(&mut self) {
        self.spawn();
        self.wait_healthy();
    }

    pub fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("{} exited during start-up ({st}):\n{}", self.name, self.log_text());
            }
            if self.http("/health").map(|r| r.starts_with("HTTP/1.1 200")).unwrap_or(false) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{} not healthy within 30 s:\n{}", self.name, self.log_text());
    }

    /// Waits for the process to exit by itself (bounded); returns its exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{} did not exit within {within:?}", self.name);
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What the process is doing, for a failure message: exited (and how) or, per
    /// thread, its state, wait channel and kernel stack (a hung exec or a stuck
    /// syscall shows there, not in the log).
    pub fn proc_report(&self) -> String {
        let Some(c) = self.child.as_ref() else { return "not running (stopped by the test)".into() };
        let pid = c.id();
        let read = |p: String| std::fs::read_to_string(p).unwrap_or_else(|e| format!("({e})"));
        // SAFETY: a zeroed siginfo_t is valid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: our own child's pid and a valid siginfo_t to fill; WNOWAIT leaves the
        // child unreaped for `try_wait`.
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
        // SAFETY: si_pid/si_status are valid for a CLD_* siginfo filled by waitid.
        if r == 0 && unsafe { info.si_pid() } == pid as i32 {
            let (code, status) = (info.si_code, unsafe { info.si_status() });
            let how = match code {
                libc::CLD_EXITED => format!("exited with code {status}"),
                libc::CLD_KILLED | libc::CLD_DUMPED => format!("killed by signal {status}"),
                _ => format!("ended (si_code {code}, status {status})"),
            };
            return format!("pid {pid} {how} (not yet reaped)");
        }
        let mut out = format!("pid {pid}: {}", read(format!("/proc/{pid}/cmdline")).replace('\0', " "));
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.flatten().collect::<Vec<_>>());
        for t in tasks.unwrap_or_default() {
            let dir = t.path().display().to_string();
            let stat = read(format!("{dir}/stat"));
            // Fields after the parenthesised command name: state first.
            let state = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().next().unwrap_or("?")).unwrap_or("?");
            out += &format!(
                "\n  tid {} {} state {state} wchan {}\n{}",
                t.file_name().to_string_lossy(),
                read(format!("{dir}/comm")).trim(),
                read(format!("{dir}/wchan")).trim(),
                read(format!("{dir}/stack")).lines().map(|l| format!("    {l}\n")).collect::<String>()
            );
        }
        out
    }

    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.ports.client)
    }

    /// GET `path` on its metrics port (bounded: 300 ms to connect, 2 s to answer).
    pub fn http(&self, path: &str) -> std::io::Result<String> {
        use std::io::Read;
        let addr = format!("{}:{}", self.host, self.ports.metrics).parse().expect("metrics address");
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }

    pub fn metric_sum(&self, name: &str) -> f64 {
        let m = self.http("/metrics").unwrap_or_default();
        m.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}
