//! Where the policy is enforced (issue 34): the live policy of a node (`--authz`,
//! reloaded by `net::reload`), each connection's principal, the check before a request
//! touches data, and the audit of denials.
//!
//! Cost: a check is one relaxed atomic load (the policy's generation) and a walk of the
//! principal's own prefixes. Each executor keeps the compiled rights of the principals
//! it serves (bounded), rebuilt when the policy changes; a connection holds a reference
//! to its principal's.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::authz::{Op, Policy, Resource, Rights};
use crate::principal::Mapping;

/// Compiled rights kept per executor; past it the cache starts again.
const MAX_CACHED_PRINCIPALS: usize = 4096;
/// Denials logged per executor per second; the rest are counted and summed up.
const AUDIT_LINES_PER_S: u32 = 20;

/// Generations of every policy loaded in this process, so that an executor's cache never
/// mistakes one policy for another.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// A node's policy: the file it came from, the mapping of certificates to principals,
/// and the policy now in force.
#[derive(Debug)]
pub struct Authz {
    pub path: PathBuf,
    pub mapping: Mapping,
    generation: AtomicU64,
    policy: RwLock<Arc<Policy>>,
}

pub fn read_policy(path: &Path) -> Result<Policy, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Policy::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

impl Authz {
    pub fn load(path: &Path, mapping: Mapping) -> Result<Authz, String> {
        let policy = read_policy(path)?;
        let generation = AtomicU64::new(GENERATIONS.fetch_add(1, Ordering::Relaxed));
        Ok(Authz { path: path.to_path_buf(), mapping, generation, policy: RwLock::new(Arc::new(policy)) })
    }

    /// Reads the file again; a policy that does not parse is refused (the one in force
    /// stays). Returns the number of grants now in force.
    pub fn reload(&self) -> Result<usize, String> {
        let p = read_policy(&self.path)?;
        let grants = p.grants();
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(p);
        self.generation.store(GENERATIONS.fetch_add(1, Ordering::Relaxed), Ordering::Release);
        Ok(grants)
    }

    pub fn grants(&self) -> usize {
        self.current().grants()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn current(&self) -> Arc<Policy> {
        self.policy.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The compiled rights of the principals this executor serves, for one generation.
#[derive(Default)]
struct Cache {
    generation: u64,
    rights: HashMap<Rc<str>, Rc<Rights>>,
    /// Denials logged in the current second, and those left out.
    audit_second: Option<Instant>,
    logged: u32,
    unlogged: u64,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

fn rights_of(authz: &Authz, generation: u64, who: &Rc<str>) -> Rc<Rights> {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.generation != generation || c.rights.len() >= MAX_CACHED_PRINCIPALS {
            c.generation = generation;
            c.rights.clear();
        }
        if let Some(r) = c.rights.get(who) {
            return r.clone();
        }
        let r = Rc::new(authz.current().rights(who));
        c.rights.insert(who.clone(), r.clone());
        r
    })
}

/// One connection's principal and its rights under the policy it last checked against.
pub struct Access {
    /// None: the certificate maps to no principal (with a policy: nothing is allowed).
    who: Option<Rc<str>>,
    rights: Option<(u64, Rc<Rights>)>,
    /// The client's address, for the audit.
    peer: Option<std::net::SocketAddr>,
}

impl Access {
    pub fn new(who: Option<String>, peer: Option<std::net::SocketAddr>) -> Access {
        Access { who: who.map(Rc::from), rights: None, peer }
    }

    /// Ok when the policy allows `op` on `r`; else the `Forbidden` message (the denial is
    /// audited and counted).
    pub fn check(&mut self, authz: &Authz, op: Op, r: Resource<'_>) -> Result<(), String> {
        let generation = authz.generation();
        let allowed = match &self.who {
            None => false,
            Some(who) => {
                let fresh = matches!(&self.rights, Some((g, _)) if *g == generation);
                if !fresh {
                    self.rights = Some((generation, rights_of(authz, generation, who)));
                }
                self.rights.as_ref().is_some_and(|(_, rights)| rights.allows(op, r))
            }
        };
        if allowed {
            return Ok(());
        }
        let msg = match &self.who {
            Some(who) => format!("principal {who:?} may not {} {r}", op.name()),
            None => format!(
                "the client certificate maps to no principal (--principal-from), so it may not {} {r}",
                op.name()
            ),
        };
        audit(op, &msg, self.peer);
        Err(msg)
    }
}

/// Counts a denial and logs it, at most `AUDIT_LINES_PER_S` lines per executor per second;
/// the first line of the next second says how many were left out.
fn audit(op: Op, msg: &str, peer: Option<std::net::SocketAddr>) {
    metrics::counter!("corelog_denied_total", "op" => op.name()).increment(1);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let now = Instant::now();
        if c.audit_second.is_none_or(|s| now.duration_since(s) >= Duration::from_secs(1)) {
            if c.unlogged > 0 {
                log::warn!("denied: {} more requests in the last second (not logged one by one)", c.unlogged);
            }
            c.audit_second = Some(now);
            c.logged = 0;
            c.unlogged = 0;
        }
        if c.logged < AUDIT_LINES_PER_S {
            c.logged += 1;
            match peer {
                Some(p) => log::warn!("denied: {msg} (client {p})"),
                None => log::warn!("denied: {msg}"),
            }
        } else {
            c.unlogged += 1;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_reaches_a_connection_at_its_next_check_and_a_bad_file_keeps_the_old_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("authz.toml");
        let grant =
            |prefix: &str| format!("[[grant]]\nprincipals = [\"a\"]\nops = [\"append\"]\nstreams = [\"{prefix}\"]\n");
        std::fs::write(&path, grant("x-")).unwrap();
        let authz = Authz::load(&path, Mapping::default()).unwrap();
        let mut a = Access::new(Some("a".into()), None);
        let mut nobody = Access::new(None, None);
        assert!(a.check(&authz, Op::Append, Resource::Stream("x-1")).is_ok());
        let e = a.check(&authz, Op::Append, Resource::Stream("y-1")).unwrap_err();
        assert_eq!(e, "principal \"a\" may not append stream \"y-1\"");
        assert!(nobody.check(&authz, Op::Append, Resource::Stream("x-1")).unwrap_err().contains("no principal"));

        std::fs::write(&path, grant("y-")).unwrap();
        assert_eq!(authz.reload(), Ok(1));
        assert!(a.check(&authz, Op::Append, Resource::Stream("y-1")).is_ok(), "the new policy");
        assert!(a.check(&authz, Op::Append, Resource::Stream("x-1")).is_err(), "the old grant is gone");

        std::fs::write(&path, "[[grant]\n").unwrap();
        let e = authz.reload().unwrap_err();
        assert!(e.contains("line 1") && e.contains("authz.toml"), "{e}");
        assert!(a.check(&authz, Op::Append, Resource::Stream("y-1")).is_ok(), "kept after a bad file");
    }
}
