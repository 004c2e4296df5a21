//! Who may do what: a policy of grants over principals, operations and resources, deny by
//! default (issue 34). Sans-IO: this module parses a policy and answers `allows`; where a
//! request's principal comes from and where the answer is enforced live elsewhere.
//!
//! A policy file (TOML):
//!
//! ```toml
//! [groups]
//! readers = ["reporting", "audit"]
//!
//! [[grant]]
//! principals = ["orders"]
//! ops = ["append", "read"]
//! streams = ["order-"]          # name prefixes; "" = every stream
//!
//! [[grant]]
//! principals = ["group:readers"]
//! ops = ["read"]
//! streams = [""]
//! shards = true                 # whole shards (plain records, and every stream's events)
//!
//! [[grant]]
//! principals = ["ops"]
//! ops = ["admin", "read"]
//! shards = true
//! ```
//!
//! A request is allowed when one grant names its principal (by name, through a group, or
//! `"*"`: any principal), its operation, and its resource:
//! - a stream (an append to it, a read or a subscription of it): one of the grant's
//!   `streams` prefixes is a prefix of the name;
//! - a prefix subscription: one of the grant's prefixes is a prefix of the subscribed
//!   prefix, so that every stream it can ever deliver is granted (a subscription the
//!   principal may read only partly is refused, not filtered);
//! - a shard (a plain append, a read or tail of the shard's records, a trim): `shards =
//!   true`. A shard's records include every stream's events: grant `read` on shards only
//!   to principals that may read every stream.
//!
//! Nothing else is allowed. Unknown keys, operations and groups are errors, so that a typo
//! cannot widen or narrow a policy unseen.

use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Append,
    /// Reads, tails, subscriptions.
    Read,
    /// Anything that deletes or changes data other than by appending (trim).
    Admin,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        match s {
            "append" => Some(Op::Append),
            "read" => Some(Op::Read),
            "admin" => Some(Op::Admin),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Append => "append",
            Op::Read => "read",
            Op::Admin => "admin",
        }
    }
}

/// Names longer than this are cut in messages (a request may carry 64 KiB of name).
const SHOWN: usize = 80;

impl std::fmt::Display for Resource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cut = |n: &str| -> String {
            match n.char_indices().nth(SHOWN) {
                Some((i, _)) => format!("{:?}… ({} bytes)", &n[..i], n.len()),
                None => format!("{n:?}"),
            }
        };
        match self {
            Resource::Shard => write!(f, "the shard"),
            Resource::Stream(n) => write!(f, "stream {}", cut(n)),
            Resource::Prefix(p) => write!(f, "streams with prefix {}", cut(p)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource<'a> {
    Shard,
    Stream(&'a str),
    Prefix(&'a str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    /// Principal names, groups resolved; `"*"` matches any.
    principals: Vec<String>,
    ops: Vec<Op>,
    streams: Vec<String>,
    shards: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    grants: Vec<Grant>,
}

impl Policy {
    /// Parses a policy file's text. The error names the line and column of a syntax error,
    /// or the grant and key of a bad value.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let t: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string().trim_end().to_string())?;
        let mut groups: HashMap<String, Vec<String>> = HashMap::new();
        for (k, v) in &t {
            match k.as_str() {
                "groups" => {
                    let g = v.as_table().ok_or("[groups] must be a table of name = [principals]")?;
                    for (name, members) in g {
                        groups.insert(name.clone(), strings(members, &format!("groups.{name}"))?);
                    }
                }
                "grant" => {}
                other => return Err(format!("unknown key {other:?} (expected [groups] and [[grant]])")),
            }
        }
        let mut grants = Vec::new();
        let list = match t.get("grant") {
            None => &Vec::new(),
            Some(v) => v.as_array().ok_or("grant must be an array of tables: [[grant]]")?,
        };
        for (i, g) in list.iter().enumerate() {
            let at = format!("grant {}", i + 1);
            let g = g.as_table().ok_or_else(|| format!("{at}: not a table"))?;
            let (mut principals, mut ops, mut streams, mut shards) = (Vec::new(), Vec::new(), Vec::new(), false);
            for (k, v) in g {
                let key = format!("{at}: {k}");
                match k.as_str() {
                    "principals" => {
                        for p in strings(v, &key)? {
                            match p.strip_prefix("group:") {
                                Some(name) => principals.extend(
                                    groups
                                        .get(name)
                                        .ok_or_else(|| format!("{key}: no group {name:?}"))?
                                        .iter()
                                        .cloned(),
                                ),
                                None => principals.push(p),
                            }
                        }
                    }
                    "ops" => {
                        for o in strings(v, &key)? {
                            ops.push(
                                Op::parse(&o)
                                    .ok_or_else(|| format!("{key}: unknown operation {o:?} (append, read, admin)"))?,
                            );
                        }
                    }
                    "streams" => streams = strings(v, &key)?,
                    "shards" => shards = v.as_bool().ok_or_else(|| format!("{key}: true or false"))?,
                    other => return Err(format!("{at}: unknown key {other:?} (principals, ops, streams, shards)")),
                }
            }
            if principals.is_empty() || ops.is_empty() || (streams.is_empty() && !shards) {
                return Err(format!("{at}: grants nothing (it needs principals, ops, and streams or shards = true)"));
            }
            grants.push(Grant { principals, ops, streams, shards });
        }
        Ok(Policy { grants })
    }

    /// Whether `principal` may do `op` on `r`.
    pub fn allows(&self, principal: &str, op: Op, r: Resource<'_>) -> bool {
        self.grants.iter().any(|g| {
            g.ops.contains(&op)
                && g.principals.iter().any(|p| p == "*" || p == principal)
                && match r {
                    Resource::Shard => g.shards,
                    Resource::Stream(name) | Resource::Prefix(name) => {
                        g.streams.iter().any(|p| name.starts_with(p.as_str()))
                    }
                }
        })
    }

    pub fn grants(&self) -> usize {
        self.grants.len()
    }

    /// What `principal` may do, compiled once so that a check walks only its own
    /// prefixes: `rights(p).allows(op, r) == allows(p, op, r)` for every `op` and `r`.
    pub fn rights(&self, principal: &str) -> Rights {
        let mut r = Rights::default();
        for g in self.grants.iter().filter(|g| g.principals.iter().any(|p| p == "*" || p == principal)) {
            for op in &g.ops {
                let s = r.scope_mut(*op);
                s.shards |= g.shards;
                s.prefixes.extend(g.streams.iter().cloned());
            }
        }
        for s in [&mut r.append, &mut r.read, &mut r.admin] {
            s.minimise();
        }
        r
    }
}

/// One principal's rights under a policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rights {
    append: Scope,
    read: Scope,
    admin: Scope,
}

/// What one operation may touch: whole shards, and streams under some prefixes (none of
/// them a prefix of another).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Scope {
    shards: bool,
    prefixes: Vec<String>,
}

impl Scope {
    fn minimise(&mut self) {
        self.prefixes.sort();
        self.prefixes.dedup();
        // Sorted, a prefix comes right before the names it covers.
        let mut kept: Vec<String> = Vec::with_capacity(self.prefixes.len());
        for p in self.prefixes.drain(..) {
            if !kept.last().is_some_and(|k| p.starts_with(k.as_str())) {
                kept.push(p);
            }
        }
        self.prefixes = kept;
    }
}

impl Rights {
    fn scope_mut(&mut self, op: Op) -> &mut Scope {
        match op {
            Op::Append => &mut self.append,
            Op::Read => &mut self.read,
            Op::Admin => &mut self.admin,
        }
    }

    pub fn allows(&self, op: Op, r: Resource<'_>) -> bool {
        let s = match op {
            Op::Append => &self.append,
            Op::Read => &self.read,
            Op::Admin => &self.admin,
        };
        match r {
            Resource::Shard => s.shards,
            Resource::Stream(name) | Resource::Prefix(name) => s.prefixes.iter().any(|p| name.starts_with(p.as_str())),
        }
    }

    /// No grant at all (a principal the policy does not name).
    pub fn none(&self) -> bool {
        *self == Rights::default()
    }
}

fn strings(v: &toml::Value, key: &str) -> Result<Vec<String>, String> {
    let a = v.as_array().ok_or_else(|| format!("{key}: a list of strings"))?;
    a.iter().map(|s| s.as_str().map(String::from).ok_or_else(|| format!("{key}: a list of strings"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const POLICY: &str = r#"
        [groups]
        readers = ["reporting", "audit"]

        [[grant]]
        principals = ["orders"]
        ops = ["append", "read"]
        streams = ["order-"]

        [[grant]]
        principals = ["group:readers"]
        ops = ["read"]
        streams = [""]
        shards = true

        [[grant]]
        principals = ["ops"]
        ops = ["admin"]
        shards = true
    "#;

    #[test]
    fn the_documented_example_grants_what_it_says_and_nothing_else() {
        let p = Policy::parse(POLICY).unwrap();
        assert!(p.allows("orders", Op::Append, Resource::Stream("order-42")));
        assert!(!p.allows("orders", Op::Append, Resource::Stream("pay-1")), "another prefix");
        assert!(!p.allows("orders", Op::Append, Resource::Shard), "plain appends not granted");
        assert!(p.allows("orders", Op::Read, Resource::Prefix("order-4")));
        assert!(!p.allows("orders", Op::Read, Resource::Prefix("order")), "a prefix wider than the grant");
        assert!(p.allows("audit", Op::Read, Resource::Prefix("")));
        assert!(p.allows("audit", Op::Read, Resource::Shard));
        assert!(!p.allows("audit", Op::Append, Resource::Stream("order-1")));
        assert!(p.allows("ops", Op::Admin, Resource::Shard));
        assert!(!p.allows("ops", Op::Read, Resource::Shard));
        assert!(!p.allows("nobody", Op::Read, Resource::Stream("x")), "deny by default");
        assert!(!Policy::default().allows("ops", Op::Admin, Resource::Shard), "an empty policy denies all");
    }

    #[test]
    fn bad_policies_are_refused_with_where_and_why() {
        let e = Policy::parse("[[grant]\nprincipals = [").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        for (text, says) in [
            ("[[grant]]\nprincipals=[\"a\"]\nops=[\"write\"]\nstreams=[\"\"]", "unknown operation \"write\""),
            ("[[grant]]\nprincipals=[\"group:x\"]\nops=[\"read\"]\nstreams=[\"\"]", "no group \"x\""),
            ("[[grant]]\nprincipal=[\"a\"]", "unknown key \"principal\""),
            ("[[grant]]\nprincipals=[\"a\"]\nops=[\"read\"]", "grants nothing"),
            ("[[grant]]\nprincipals=[\"a\"]\nops=[\"read\"]\nshards=\"yes\"", "true or false"),
            ("[[grant]]\nprincipals=\"a\"\nops=[\"read\"]\nshards=true", "a list of strings"),
            ("[grants]\nx=1", "unknown key \"grants\""),
        ] {
            let e = Policy::parse(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    /// A grant as the reference holds it: principals, operations, stream prefixes, shards.
    type Rule<'a> = (Vec<&'a str>, Vec<Op>, Vec<String>, bool);

    /// The reference: what a policy allows, by the sets of names it grants. A stream is
    /// allowed when some grant for the principal and op holds that name; a prefix when
    /// every name the prefix can deliver is (here: the names over the alphabet up to a
    /// length, and each with a letter no grant uses appended, which stands for the
    /// unbounded rest).
    fn reference(rules: &[Rule<'_>], who: &str, op: Op, r: Resource<'_>) -> bool {
        let grants_name = |name: &str| {
            rules.iter().any(|(ps, ops, streams, _)| {
                ops.contains(&op)
                    && ps.iter().any(|p| *p == "*" || *p == who)
                    && streams.iter().any(|s| name.starts_with(s.as_str()))
            })
        };
        match r {
            Resource::Shard => rules
                .iter()
                .any(|(ps, ops, _, sh)| *sh && ops.contains(&op) && ps.iter().any(|p| *p == "*" || *p == who)),
            Resource::Stream(n) => grants_name(n),
            Resource::Prefix(q) => {
                let mut names = vec![q.to_string()];
                for _ in 0..3 {
                    let more: Vec<String> =
                        names.iter().flat_map(|n| ["a", "b", "c"].map(|c| format!("{n}{c}"))).collect();
                    names.extend(more);
                }
                names.iter().all(|n| (n.is_empty() || grants_name(n)) && grants_name(&format!("{n}z")))
            }
        }
    }

    #[test]
    fn allows_agrees_with_the_reference_on_random_policies() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(34);
        let word = |rng: &mut rand::rngs::StdRng| -> String {
            (0..rng.gen_range(0..3)).map(|_| ["a", "b", "c"][rng.gen_range(0..3)]).collect()
        };
        let ops = [Op::Append, Op::Read, Op::Admin];
        let who = ["p", "q", "r"];
        for _ in 0..2_000 {
            let n = rng.gen_range(0..4);
            let mut text = String::new();
            let mut rules = Vec::new();
            for _ in 0..n {
                let ps: Vec<&str> = who.iter().copied().chain(["*"]).filter(|_| rng.gen_bool(0.4)).collect();
                let os: Vec<Op> = ops.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
                let ss: Vec<String> = (0..rng.gen_range(0..3)).map(|_| word(&mut rng)).collect();
                let sh = rng.gen_bool(0.3);
                if ps.is_empty() || os.is_empty() || (ss.is_empty() && !sh) {
                    continue;
                }
                let q = |v: Vec<String>| v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
                let op_names = os.iter().map(|o| format!("{o:?}").to_lowercase()).collect();
                text += &format!(
                    "[[grant]]\nprincipals = [{}]\nops = [{}]\nstreams = [{}]\nshards = {sh}\n",
                    q(ps.iter().map(|s| s.to_string()).collect()),
                    q(op_names),
                    q(ss.clone())
                );
                rules.push((ps, os, ss, sh));
            }
            let p = Policy::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            for _ in 0..20 {
                let (w, op) = (who[rng.gen_range(0..3)], ops[rng.gen_range(0..3)]);
                let name = format!("{}{}", ["a", "b", "c"][rng.gen_range(0..3)], word(&mut rng));
                let prefix = word(&mut rng);
                let rights = p.rights(w);
                for r in [Resource::Shard, Resource::Stream(&name), Resource::Prefix(&prefix)] {
                    let want = reference(&rules, w, op, r);
                    assert_eq!(p.allows(w, op, r), want, "{text}\n{w} {op:?} {r:?}");
                    assert_eq!(rights.allows(op, r), want, "compiled: {text}\n{w} {op:?} {r:?}");
                }
            }
        }
    }
}
