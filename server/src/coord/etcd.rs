//! A minimal etcd v3 client over etcd's JSON gateway (`POST /v3/...`, HTTP/1.1, plain
//! TCP), blocking with short timeouts. Only what the coordinator needs: range, txn
//! (compare mod_revision / version / value; put), lease grant and keep-alive, compaction.
//!
//! Why not the `etcd-client` crate: it generates its gRPC code at build time and needs
//! `protoc`, which a fresh machine lacks; the README's first command must build there.
//! The gateway is part of every etcd ≥ 3.4 and speaks the same API (keys and values
//! base64, 64-bit numbers as strings).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::{json, Value};

/// One key as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: String,
    pub mod_revision: i64,
    pub lease: i64,
}

/// A comparison in a transaction.
pub enum Cmp<'a> {
    /// The key does not exist.
    Absent(&'a str),
    /// The key was last modified at this revision.
    ModRev(&'a str, i64),
    /// The key holds exactly this value.
    Value(&'a str, &'a str),
}

/// An operation of a transaction's success branch.
pub enum Op<'a> {
    Put { key: &'a str, value: &'a str, lease: i64 },
}

pub struct Etcd {
    endpoints: Vec<String>,
    /// Index of the endpoint that answered last (tried first next time).
    current: usize,
    timeout: Duration,
}

impl Etcd {
    /// `endpoints`: `http://host:port` (comma-separated list accepted).
    pub fn new(endpoints: &str, timeout: Duration) -> Result<Etcd, String> {
        let mut v = Vec::new();
        for e in endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let hp = e.strip_prefix("http://").ok_or_else(|| {
                format!("--coordinator endpoint {e:?}: only http:// endpoints are supported (etcd's JSON gateway)")
            })?;
            v.push(hp.trim_end_matches('/').to_string());
        }
        if v.is_empty() {
            return Err("--coordinator needs at least one http://HOST:PORT endpoint".into());
        }
        Ok(Etcd { endpoints: v, current: 0, timeout })
    }

    /// POSTs `body` to `path` on the current endpoint, then the others; the first answer wins.
    fn call(&mut self, path: &str, body: &Value) -> Result<Value, String> {
        let body = body.to_string();
        let mut errs = Vec::new();
        for i in 0..self.endpoints.len() {
            let at = (self.current + i) % self.endpoints.len();
            match post(&self.endpoints[at], path, &body, self.timeout) {
                Ok(v) => {
                    self.current = at;
                    return Ok(v);
                }
                Err(e) => errs.push(format!("{}: {e}", self.endpoints[at])),
            }
        }
        Err(errs.join("; "))
    }

    /// Every key starting with `prefix`.
    pub fn range_prefix(&mut self, prefix: &str) -> Result<Vec<Kv>, String> {
        self.range_prefix_at(prefix).map(|(kvs, _)| kvs)
    }

    /// Every key starting with `prefix`, and the store's revision when it was read.
    pub fn range_prefix_at(&mut self, prefix: &str) -> Result<(Vec<Kv>, i64), String> {
        let v =
            self.call("/v3/kv/range", &json!({"key": b64(prefix.as_bytes()), "range_end": b64(&prefix_end(prefix))}))?;
        let revision = num(v.get("header").and_then(|h| h.get("revision")));
        let mut out = Vec::new();
        for kv in v.get("kvs").and_then(Value::as_array).into_iter().flatten() {
            out.push(Kv {
                key: unb64_str(kv.get("key"))?,
                value: unb64_str(kv.get("value"))?,
                mod_revision: num(kv.get("mod_revision")),
                lease: num(kv.get("lease")),
            });
        }
        Ok((out, revision))
    }

    /// Discards the store's history of every key below `revision` (etcd keeps every
    /// version of every key until it is compacted; the leader's heartbeat writes one
    /// version per beat). A revision already compacted is not an error.
    pub fn compact(&mut self, revision: i64) -> Result<(), String> {
        match self.call("/v3/kv/compaction", &json!({"revision": revision.to_string()})) {
            Ok(_) => Ok(()),
            Err(e) if e.contains("compacted") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Runs `ops` if every comparison holds; returns whether it did.
    pub fn txn(&mut self, cmps: &[Cmp], ops: &[Op]) -> Result<bool, String> {
        self.txn_at(cmps, ops).map(|r| r.is_some())
    }

    /// [`Etcd::txn`]; `Some(revision)` when it ran: the store's revision it created (the
    /// `mod_revision` of every key it put).
    pub fn txn_at(&mut self, cmps: &[Cmp], ops: &[Op]) -> Result<Option<i64>, String> {
        let compare: Vec<Value> = cmps
            .iter()
            .map(|c| match c {
                Cmp::Absent(k) => {
                    json!({"key": b64(k.as_bytes()), "result": "EQUAL", "target": "VERSION", "version": "0"})
                }
                Cmp::ModRev(k, r) => {
                    json!({"key": b64(k.as_bytes()), "result": "EQUAL", "target": "MOD", "mod_revision": r.to_string()})
                }
                Cmp::Value(k, v) => {
                    json!({"key": b64(k.as_bytes()), "result": "EQUAL", "target": "VALUE", "value": b64(v.as_bytes())})
                }
            })
            .collect();
        let success: Vec<Value> = ops
            .iter()
            .map(|o| match o {
                Op::Put { key, value, lease } => json!({"request_put": {
                    "key": b64(key.as_bytes()), "value": b64(value.as_bytes()), "lease": lease.to_string()}}),
            })
            .collect();
        let v = self.call("/v3/kv/txn", &json!({"compare": compare, "success": success}))?;
        if let Some(e) = v.get("error").or_else(|| v.get("message")) {
            return Err(format!("txn refused: {e}"));
        }
        let ran = v.get("succeeded").and_then(Value::as_bool).unwrap_or(false);
        Ok(ran.then(|| num(v.get("header").and_then(|h| h.get("revision")))))
    }

    /// A new lease of `ttl_s` seconds; returns its id.
    pub fn grant(&mut self, ttl_s: i64) -> Result<i64, String> {
        let v = self.call("/v3/lease/grant", &json!({"TTL": ttl_s.to_string()}))?;
        match num(v.get("ID")) {
            0 => Err(format!("lease grant refused: {v}")),
            id => Ok(id),
        }
    }

    /// Renews lease `id`: its TTL as granted again, or None when it has already expired.
    pub fn keep_alive(&mut self, id: i64) -> Result<Option<Duration>, String> {
        let v = self.call("/v3/lease/keepalive", &json!({"ID": id.to_string()}))?;
        let r = v.get("result").ok_or_else(|| format!("keep-alive: unexpected answer {v}"))?;
        let ttl = num(r.get("TTL"));
        Ok((ttl > 0).then(|| Duration::from_secs(ttl as u64)))
    }
}

fn post(hostport: &str, path: &str, body: &str, timeout: Duration) -> Result<Value, String> {
    let addr: SocketAddr = hostport.to_socket_addrs().map_err(|e| e.to_string())?.next().ok_or("no address")?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(|e| format!("send: {e}"))?;
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).map_err(|e| format!("read: {e}"))?;
    let code: u16 = status.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or("bad HTTP status line")?;
    let mut len = None;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).map_err(|e| format!("read: {e}"))?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse::<usize>().ok();
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut sz = String::new();
            r.read_line(&mut sz).map_err(|e| format!("read: {e}"))?;
            let n = usize::from_str_radix(sz.trim(), 16).map_err(|_| "bad chunk size")?;
            if n == 0 {
                break;
            }
            let at = body.len();
            body.resize(at + n + 2, 0);
            r.read_exact(&mut body[at..]).map_err(|e| format!("read: {e}"))?;
            body.truncate(at + n);
        }
    } else if let Some(n) = len {
        body.resize(n.min(1 << 20), 0);
        r.read_exact(&mut body).map_err(|e| format!("read: {e}"))?;
    } else {
        r.take(1 << 20).read_to_end(&mut body).map_err(|e| format!("read: {e}"))?;
    }
    // The keep-alive stream answers one JSON object per line: take the first.
    let text = String::from_utf8_lossy(&body);
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let v: Value = serde_json::from_str(first).map_err(|e| format!("HTTP {code}: bad JSON {first:?}: {e}"))?;
    if code != 200 {
        return Err(format!("HTTP {code}: {v}"));
    }
    Ok(v)
}

fn num(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// The end of the key range holding every key with `prefix` (prefix + 1 in the last byte).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut e = prefix.as_bytes().to_vec();
    while let Some(last) = e.pop() {
        if last < 0xff {
            e.push(last + 1);
            return e;
        }
    }
    vec![0]
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn b64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn unb64(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0);
    for ch in s.bytes().filter(|&c| c != b'=') {
        let v = B64.iter().position(|&b| b == ch).ok_or_else(|| format!("bad base64 {s:?}"))? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

fn unb64_str(v: Option<&Value>) -> Result<String, String> {
    let s = v.and_then(Value::as_str).unwrap_or("");
    String::from_utf8(unb64(s)?).map_err(|e| format!("non-UTF-8 etcd key/value: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length() {
        for n in 0..20u8 {
            let d: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37).wrapping_add(200)).collect();
            assert_eq!(unb64(&b64(&d)).unwrap(), d);
        }
        assert_eq!(b64(b"a"), "YQ==");
        assert_eq!(b64(b"corelog"), "Y29yZWxvZw==");
    }

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end("/c/"), b"/c0".to_vec());
    }

    #[test]
    fn only_http_endpoints() {
        assert!(Etcd::new("https://x:1", Duration::from_secs(1)).is_err());
        assert!(Etcd::new("", Duration::from_secs(1)).is_err());
        assert_eq!(Etcd::new("http://a:1, http://b:2/", Duration::from_secs(1)).unwrap().endpoints, vec!["a:1", "b:2"]);
    }
}
