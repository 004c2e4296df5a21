//! Hosts in network namespaces joined by veth pairs, for partition tests (needs root and
//! `ip`). Each host but `c` is a namespace; `c` is the root namespace, where the test
//! process itself runs (the client host). Every link is its own /30, so each host has
//! one address per link: `addr(x, y)` is x's address as seen from y.
//!
//! `cut(x, y)` sets x's end of the x–y link down: x gets "network unreachable" at once
//! (its route is gone), y's packets are dropped silently (its end has no carrier), as in
//! a partition seen from the far side. `heal` sets it up again. Dropping a `Net` deletes
//! the namespaces (their veth pairs go with them); stop the processes in them first.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Net {
    /// Host name → namespace name (None: the root namespace).
    hosts: Vec<(String, Option<String>)>,
    links: Vec<Link>,
}

struct Link {
    /// (host, interface, address) at each end.
    ends: [(String, String, Ipv4Addr); 2],
}

/// Runs `ip ARGS`; its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()))
    }
}

impl Net {
    /// Namespaces for `hosts` (`c` = the root namespace) and a veth pair per link. None
    /// (after `common::skip`) where namespaces cannot be made (not root, no `ip`).
    pub fn new(test: &str, hosts: &[&str], links: &[(&str, &str)]) -> Option<Net> {
        static N: AtomicU32 = AtomicU32::new(0);
        let (pid, n) = (std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let tag = format!("cl{pid}x{n}");
        let mut net = Net { hosts: Vec::new(), links: Vec::new() };
        for &h in hosts {
            let ns = (h != "c").then(|| format!("{tag}-{h}"));
            if let Some(ns) = &ns {
                if let Err(e) = ip(&["netns", "add", ns]) {
                    super::skip(test, &format!("no network namespaces here ({e})"));
                    return None;
                }
                net.hosts.push((h.into(), Some(ns.clone())));
                ip(&["-n", ns, "link", "set", "lo", "up"]).expect("lo up");
            } else {
                net.hosts.push((h.into(), None));
            }
        }
        // 10.P.Q.0/24 for this Net (P from the pid, Q counts), unless the root namespace
        // already routes it; link k is 10.P.Q.4k/30.
        let routes = Command::new("ip").args(["-4", "route"]).output().expect("ip route").stdout;
        let routes = String::from_utf8_lossy(&routes).to_string();
        let (p, mut q) = (64 + (pid % 128) as u8, n as u8);
        while routes.contains(&format!("10.{p}.{q}.")) {
            q = q.wrapping_add(1);
        }
        for (k, &(x, y)) in links.iter().enumerate() {
            let addr = |i: u8| Ipv4Addr::new(10, p, q, 4 * k as u8 + i);
            // Interface names: `to-<peer>` in a namespace, unique ones in the root.
            let name = |h: &str, peer: &str| if h == "c" { format!("{tag}{peer}") } else { format!("to-{peer}") };
            let ends = [(x.to_string(), name(x, y), addr(1)), (y.to_string(), name(y, x), addr(2))];
            let mut cmd = vec!["link", "add", ends[0].1.as_str()];
            let (nx, ny) = (net.ns(x), net.ns(y));
            cmd.extend(nx.as_deref().map(|ns| ["netns", ns]).into_iter().flatten());
            cmd.extend(["type", "veth", "peer", "name", ends[1].1.as_str()]);
            cmd.extend(ny.as_deref().map(|ns| ["netns", ns]).into_iter().flatten());
            ip(&cmd).expect("veth pair");
            net.links.push(Link { ends: ends.clone() });
            for (h, dev, a) in &ends {
                net.ip_in(h, &["addr", "add", &format!("{a}/30"), "dev", dev]).expect("address");
                net.ip_in(h, &["link", "set", dev, "up"]).expect("link up");
            }
        }
        Some(net)
    }

    fn ns(&self, host: &str) -> Option<String> {
        self.hosts.iter().find(|(h, _)| h == host).unwrap_or_else(|| panic!("no host {host}")).1.clone()
    }

    /// `ip ARGS` in `host`'s namespace.
    fn ip_in(&self, host: &str, args: &[&str]) -> Result<(), String> {
        match self.ns(host) {
            Some(ns) => ip(&[&["-n", ns.as_str()], args].concat()),
            None => ip(args),
        }
    }

    fn end(&self, x: &str, y: &str) -> &(String, String, Ipv4Addr) {
        let l = self
            .links
            .iter()
            .find(|l| (l.ends[0].0 == x && l.ends[1].0 == y) || (l.ends[0].0 == y && l.ends[1].0 == x));
        let l = l.unwrap_or_else(|| panic!("no link {x}–{y}"));
        if l.ends[0].0 == x {
            &l.ends[0]
        } else {
            &l.ends[1]
        }
    }

    /// x's address on the x–y link.
    pub fn addr(&self, x: &str, y: &str) -> String {
        self.end(x, y).2.to_string()
    }

    /// The command prefix that runs a program in `host`'s namespace.
    pub fn exec(&self, host: &str) -> Vec<String> {
        match self.ns(host) {
            Some(ns) => ["ip", "netns", "exec", &ns].iter().map(|s| s.to_string()).collect(),
            None => Vec::new(),
        }
    }

    /// Sets x's end of the x–y link down.
    pub fn cut(&self, x: &str, y: &str) {
        self.ip_in(x, &["link", "set", &self.end(x, y).1, "down"]).expect("link down");
    }

    /// Sets x's end of the x–y link up again.
    pub fn heal(&self, x: &str, y: &str) {
        self.ip_in(x, &["link", "set", &self.end(x, y).1, "up"]).expect("link up");
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (_, ns) in &self.hosts {
            if let Some(ns) = ns {
                let _ = ip(&["netns", "del", ns]);
            }
        }
        // Root-side ends vanish with their peers; delete any left (e.g. a peer's
        // namespace still held by a process).
        for l in &self.links {
            for (h, dev, _) in &l.ends {
                if h == "c" {
                    let _ = ip(&["link", "del", dev]);
                }
            }
        }
    }
}
