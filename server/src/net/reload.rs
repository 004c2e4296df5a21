//! Certificate rotation without a restart. A thread checks the certificate, key and CA
//! files of the client and replication ports every second (size, mtime, inode) and at
//! once on SIGHUP. When a file changed and then stayed the same for one more check (a
//! writer has finished), the configurations are rebuilt from the files and swapped in:
//! new connections (client, replication in both directions) use them, open ones keep the
//! keys they began with. A set that does not load (unreadable, bad PEM, a key that does
//! not match its certificate) is refused: the node keeps the previous one, logs why once
//! per file state and counts `corelog_tls_reloads_total{result="error"}`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use super::peer::PeerName;
use super::tls::{self, Live};
use crate::node::TlsFiles;

const POLL: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(100);

static HANGUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUP.store(true, Ordering::Relaxed);
}

/// The TLS configurations of one process and the files they came from.
pub struct Watched {
    /// Client port (server side).
    pub client: Option<(TlsFiles, Live<rustls::ServerConfig>)>,
    /// Replication: accepting (follower) and dialling (leader).
    pub repl: Option<(TlsFiles, Live<rustls::ServerConfig>, Live<rustls::ClientConfig>)>,
    /// The name a replication peer's certificate must carry.
    pub peer: PeerName,
}

type Stamp = Vec<Option<(u64, SystemTime, u64)>>;

fn stamp(files: &[&Path]) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let one = |f: &&Path| {
        let m = std::fs::metadata(f).ok()?;
        Some((m.len(), m.modified().ok()?, m.ino()))
    };
    files.iter().map(one).collect()
}

impl Watched {
    fn files(&self) -> Vec<&Path> {
        let mut v = Vec::new();
        for t in self.client.iter().map(|c| &c.0).chain(self.repl.iter().map(|r| &r.0)) {
            v.extend([t.cert.as_path(), t.key.as_path(), t.ca.as_path()]);
        }
        v
    }

    /// Builds every configuration from its files; swaps them in only if all loaded.
    pub fn reload(&self) -> Result<(), String> {
        let client = match &self.client {
            Some((f, _)) => Some(tls::server_config(&f.cert, &f.key, &f.ca)?),
            None => None,
        };
        let repl = match &self.repl {
            Some((f, _, _)) => {
                let (c, k, ca) = (&f.cert, &f.key, &f.ca);
                Some((tls::repl_server_config(c, k, ca, &self.peer)?, tls::client_config(c, k, ca, &self.peer)?))
            }
            None => None,
        };
        if let (Some(new), Some((_, live))) = (client, &self.client) {
            live.replace(new);
        }
        if let (Some((srv, cli)), Some((_, ls, lc))) = (repl, &self.repl) {
            ls.replace(srv);
            lc.replace(cli);
        }
        Ok(())
    }

    /// Installs the SIGHUP handler (with or without TLS: SIGHUP never stops a node) and
    /// starts the watching thread (nothing to watch without TLS).
    pub fn spawn(self) -> Result<(), String> {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        let prev = unsafe { libc::signal(libc::SIGHUP, on_hangup as extern "C" fn(libc::c_int) as libc::sighandler_t) };
        if prev == libc::SIG_ERR {
            return Err("cannot install the SIGHUP handler".into());
        }
        if self.client.is_none() && self.repl.is_none() {
            return Ok(());
        }
        std::thread::Builder::new()
            .name("tls-reload".into())
            .spawn(move || self.watch())
            .map(|_| ())
            .map_err(|e| format!("tls-reload thread: {e}"))
    }

    fn watch(self) {
        let names: Vec<PathBuf> = self.files().iter().map(|p| p.to_path_buf()).collect();
        let paths: Vec<&Path> = names.iter().map(PathBuf::as_path).collect();
        let mut loaded = stamp(&paths);
        let mut seen = loaded.clone();
        let mut failed: Option<Stamp> = None;
        let mut since_poll = Duration::ZERO;
        loop {
            std::thread::sleep(TICK);
            since_poll += TICK;
            let hangup = HANGUP.swap(false, Ordering::Relaxed);
            if !hangup && since_poll < POLL {
                continue;
            }
            since_poll = Duration::ZERO;
            let now = stamp(&paths);
            // Changed since the last load and settled (the same at two checks), or SIGHUP.
            let settled = now == seen && now != loaded && failed.as_ref() != Some(&now);
            seen = now.clone();
            if !(hangup || settled) {
                continue;
            }
            match self.reload() {
                Ok(()) => {
                    metrics::counter!("corelog_tls_reloads_total", "result" => "ok").increment(1);
                    log::info!(
                        "TLS certificates reloaded ({}): new connections use them",
                        if hangup { "SIGHUP" } else { "files changed" }
                    );
                    loaded = now;
                    failed = None;
                }
                Err(e) => {
                    metrics::counter!("corelog_tls_reloads_total", "result" => "error").increment(1);
                    if failed.as_ref() != Some(&now) || hangup {
                        log::warn!("TLS reload refused, keeping the previous certificates: {e}");
                    }
                    failed = Some(now);
                }
            }
        }
    }
}
