//! Certificate rotation and policy changes without a restart. A thread checks the
//! certificate, key and CA files of the client and replication ports, and the
//! authorization policy (`--authz`), every half second (size, mtime, inode) and at once
//! on SIGHUP. When a file changed and then stayed the same for one more check (a
//! writer has finished), the configurations are rebuilt from the files and swapped in:
//! new connections (client, replication in both directions) use them, open ones keep the
//! keys they began with; a new policy applies to the next request of every connection.
//! A set that does not load (unreadable, bad PEM, a key that does not match its
//! certificate, a policy that does not parse) is refused: the node keeps the previous
//! one, logs why once per file state and counts `corelog_tls_reloads_total` or
//! `corelog_authz_reloads_total` with `result="error"`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use super::peer::PeerName;
use super::tls::{self, Live, TlsFiles};

const POLL: Duration = Duration::from_millis(500);
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
    /// The authorization policy (`--authz`), reloaded from its file.
    pub authz: Option<std::sync::Arc<crate::access::Authz>>,
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
    /// starts the watching thread (nothing to watch without TLS or a policy).
    pub fn spawn(self) -> Result<(), String> {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        let prev = unsafe { libc::signal(libc::SIGHUP, on_hangup as extern "C" fn(libc::c_int) as libc::sighandler_t) };
        if prev == libc::SIG_ERR {
            return Err("cannot install the SIGHUP handler".into());
        }
        let mut items = Vec::new();
        if let Some(a) = self.authz.clone() {
            let what = ("authorization policy", "authorization policy reload refused, keeping the previous policy");
            items.push(Item::new(what, "corelog_authz_reloads_total", vec![a.path.clone()], move || {
                a.reload().map(|n| format!("{n} grants in force for new requests"))
            }));
        }
        if self.client.is_some() || self.repl.is_some() {
            let files = self.files().iter().map(|p| p.to_path_buf()).collect();
            let what = ("TLS certificates", "TLS reload refused, keeping the previous certificates");
            items.push(Item::new(what, "corelog_tls_reloads_total", files, move || {
                self.reload().map(|()| "new connections use them".to_string())
            }));
        }
        if items.is_empty() {
            return Ok(());
        }
        std::thread::Builder::new()
            .name("reload".into())
            .spawn(move || watch(items))
            .map(|_| ())
            .map_err(|e| format!("reload thread: {e}"))
    }
}

/// Files loaded together, and how to load them.
struct Item {
    /// What it is, and how a refusal is logged.
    what: (&'static str, &'static str),
    counter: &'static str,
    files: Vec<PathBuf>,
    load: Box<dyn Fn() -> Result<String, String> + Send>,
    /// The files' state when last loaded, at the last check, and at the last refusal.
    loaded: Stamp,
    seen: Stamp,
    failed: Option<Stamp>,
}

impl Item {
    fn new(
        what: (&'static str, &'static str),
        counter: &'static str,
        files: Vec<PathBuf>,
        load: impl Fn() -> Result<String, String> + Send + 'static,
    ) -> Item {
        let now = stamp(&files.iter().map(PathBuf::as_path).collect::<Vec<_>>());
        Item { what, counter, files, load: Box::new(load), loaded: now.clone(), seen: now, failed: None }
    }

    fn check(&mut self, hangup: bool) {
        let now = stamp(&self.files.iter().map(PathBuf::as_path).collect::<Vec<_>>());
        // Changed since the last load and settled (the same at two checks), or SIGHUP.
        let settled = now == self.seen && now != self.loaded && self.failed.as_ref() != Some(&now);
        self.seen = now.clone();
        if !(hangup || settled) {
            return;
        }
        let why = if hangup { "SIGHUP" } else { "files changed" };
        match (self.load)() {
            Ok(said) => {
                metrics::counter!(self.counter, "result" => "ok").increment(1);
                log::info!("{} reloaded ({why}): {said}", self.what.0);
                self.loaded = now;
                self.failed = None;
            }
            Err(e) => {
                metrics::counter!(self.counter, "result" => "error").increment(1);
                if self.failed.as_ref() != Some(&now) || hangup {
                    log::warn!("{}: {e}", self.what.1);
                }
                self.failed = Some(now);
            }
        }
    }
}

fn watch(mut items: Vec<Item>) {
    let mut since_poll = Duration::ZERO;
    loop {
        std::thread::sleep(TICK);
        since_poll += TICK;
        let hangup = HANGUP.swap(false, Ordering::Relaxed);
        if !hangup && since_poll < POLL {
            continue;
        }
        since_poll = Duration::ZERO;
        for item in &mut items {
            item.check(hangup);
        }
    }
}
