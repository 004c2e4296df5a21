//! Who a client is: a principal name taken from its certificate by mapping rules
//! (`--principal-from`, issue 34). Sans-IO: the certificate comes in as DER, already
//! verified by the TLS handshake (chain, validity); this module only reads names from it.
//!
//! Rules, tried in order; the first that yields a name wins:
//! - `cn`: the subject's common name;
//! - `dns` / `dns:SUFFIX`: a DNS subjectAltName (with SUFFIX: one that ends with it, the
//!   suffix removed, so `dns:.clients.example.com` maps `orders.clients.example.com` to
//!   `orders`);
//! - `uri` / `uri:PREFIX`: a URI subjectAltName (with PREFIX: one that starts with it, the
//!   prefix removed, so `uri:spiffe://example.com/app/` maps SPIFFE IDs to app names).
//!
//! The default is `cn`. A certificate no rule maps has no principal: with a policy, it may
//! do nothing.

/// A name longer than this is not taken as a principal (it would fill log lines).
pub const MAX_PRINCIPAL: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    Cn,
    Dns(String),
    Uri(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping(Vec<Rule>);

impl Default for Mapping {
    fn default() -> Self {
        Mapping(vec![Rule::Cn])
    }
}

impl Mapping {
    /// Parses a comma-separated list of rules (`cn,dns:.svc.example.com`).
    pub fn parse(text: &str) -> Result<Mapping, String> {
        let mut rules = Vec::new();
        for r in text.split(',').map(str::trim) {
            let (kind, arg) = r.split_once(':').unwrap_or((r, ""));
            rules.push(match kind {
                "cn" if arg.is_empty() && !r.contains(':') => Rule::Cn,
                "dns" => Rule::Dns(arg.to_string()),
                "uri" => Rule::Uri(arg.to_string()),
                _ => {
                    return Err(format!(
                        "--principal-from: unknown rule {r:?} (cn, dns, dns:SUFFIX, uri, uri:PREFIX; comma-separated)"
                    ))
                }
            });
        }
        Ok(Mapping(rules))
    }

    /// The principal of a DER certificate, or None when no rule maps it.
    pub fn principal(&self, der: &[u8]) -> Option<String> {
        let names = Names::of(der)?;
        let ok = |s: &str| (!s.is_empty() && s.len() <= MAX_PRINCIPAL).then(|| s.to_string());
        self.0.iter().find_map(|rule| match rule {
            Rule::Cn => names.cn.as_deref().and_then(ok),
            Rule::Dns(suffix) => names.dns.iter().find_map(|n| n.strip_suffix(suffix.as_str()).and_then(ok)),
            Rule::Uri(prefix) => names.uris.iter().find_map(|n| n.strip_prefix(prefix.as_str()).and_then(ok)),
        })
    }
}

/// The names a certificate carries: the subject's first common name, and its DNS and URI
/// subjectAltNames.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Names {
    pub cn: Option<String>,
    pub dns: Vec<String>,
    pub uris: Vec<String>,
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTETS: u8 = 0x04;
const BOOLEAN: u8 = 0x01;
const EXPLICIT_0: u8 = 0xa0;
const EXPLICIT_3: u8 = 0xa3;
const SAN_DNS: u8 = 0x82;
const SAN_URI: u8 = 0x86;
/// id-at-commonName (2.5.4.3) and id-ce-subjectAltName (2.5.29.17), DER-encoded.
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

/// One DER element: its tag, its contents, and what follows it.
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |a, b| a << 8 | *b as usize), &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

fn expect(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, body, rest) = tlv(b)?;
    (t == tag).then_some((body, rest))
}

/// A string attribute value (UTF8String, PrintableString, IA5String).
fn text(tag: u8, body: &[u8]) -> Option<String> {
    matches!(tag, 0x0c | 0x13 | 0x16).then(|| std::str::from_utf8(body).ok().map(String::from)).flatten()
}

impl Names {
    /// Reads the names of a DER X.509 certificate (RFC 5280 §4.1); None when it does not
    /// have that shape.
    pub fn of(der: &[u8]) -> Option<Names> {
        let (cert, _) = expect(der, SEQUENCE)?;
        let (mut tbs, _) = expect(cert, SEQUENCE)?;
        if tbs.first() == Some(&EXPLICIT_0) {
            tbs = tlv(tbs)?.2; // version
        }
        // serialNumber, signature, issuer, validity, then the subject.
        for _ in 0..4 {
            tbs = tlv(tbs)?.2;
        }
        let (subject, mut rest) = expect(tbs, SEQUENCE)?;
        let mut names = Names { cn: common_name(subject)?, ..Names::default() };
        rest = tlv(rest)?.2; // subjectPublicKeyInfo
        while let Some((tag, body, next)) = tlv(rest) {
            if tag == EXPLICIT_3 {
                names.read_extensions(body)?;
            }
            rest = next;
        }
        Some(names)
    }

    fn read_extensions(&mut self, body: &[u8]) -> Option<()> {
        let (mut exts, _) = expect(body, SEQUENCE)?;
        while !exts.is_empty() {
            let (ext, next) = expect(exts, SEQUENCE)?;
            exts = next;
            let (oid, mut rest) = expect(ext, OID)?;
            if oid != SAN_OID {
                continue;
            }
            if rest.first() == Some(&BOOLEAN) {
                rest = tlv(rest)?.2; // critical
            }
            let (value, _) = expect(rest, OCTETS)?;
            let (mut general, _) = expect(value, SEQUENCE)?;
            while let Some((tag, body, next)) = tlv(general) {
                let s = std::str::from_utf8(body).ok().map(String::from);
                match (tag, s) {
                    (SAN_DNS, Some(s)) => self.dns.push(s),
                    (SAN_URI, Some(s)) => self.uris.push(s),
                    _ => {}
                }
                general = next;
            }
        }
        Some(())
    }
}

/// The first common name of a Name (a SEQUENCE of SETs of type-and-value SEQUENCEs);
/// Some(None) when it has none.
fn common_name(mut name: &[u8]) -> Option<Option<String>> {
    while !name.is_empty() {
        let (mut set, next) = expect(name, SET)?;
        name = next;
        while !set.is_empty() {
            let (atv, next) = expect(set, SEQUENCE)?;
            set = next;
            let (oid, value) = expect(atv, OID)?;
            if oid == CN_OID {
                let (tag, body, _) = tlv(value)?;
                return Some(text(tag, body));
            }
        }
    }
    Some(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    fn cert(cn: Option<&str>, dns: &[&str], uris: &[&str]) -> Vec<u8> {
        let mut p = CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::OrganizationName, "corelog tests");
        if let Some(cn) = cn {
            p.distinguished_name.push(DnType::CommonName, cn);
        }
        for u in uris {
            p.subject_alt_names.push(SanType::URI(u.to_string().try_into().unwrap()));
        }
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn names_are_read_from_a_certificate() {
        let der = cert(Some("orders"), &["orders.svc.example.com", "localhost"], &["spiffe://example.com/app/orders"]);
        let n = Names::of(&der).unwrap();
        assert_eq!(n.cn.as_deref(), Some("orders"));
        assert_eq!(n.dns, ["orders.svc.example.com", "localhost"]);
        assert_eq!(n.uris, ["spiffe://example.com/app/orders"]);
        assert_eq!(Names::of(&cert(None, &[], &[])).unwrap(), Names::default());
    }

    #[test]
    fn the_first_rule_that_maps_wins() {
        let der = cert(Some("cn-name"), &["pay.svc.example.com"], &["spiffe://example.com/app/billing"]);
        let map = |rules: &str| Mapping::parse(rules).unwrap().principal(&der);
        assert_eq!(Mapping::default().principal(&der).as_deref(), Some("cn-name"));
        assert_eq!(map("uri:spiffe://example.com/app/,cn").as_deref(), Some("billing"));
        assert_eq!(map("uri:spiffe://other/,dns:.svc.example.com,cn").as_deref(), Some("pay"));
        assert_eq!(map("dns:.other.com").as_deref(), None, "no rule maps it");
        assert_eq!(map("dns").as_deref(), Some("pay.svc.example.com"));
        assert_eq!(map("uri:spiffe://example.com/app/billing").as_deref(), None, "an empty rest is no name");
        assert_eq!(Mapping::default().principal(&cert(None, &["x"], &[])), None, "no common name");
    }

    #[test]
    fn bad_rules_and_bad_certificates_are_refused() {
        for r in ["CN", "cn:x", "email", "dns,", ""] {
            let e = Mapping::parse(r).unwrap_err();
            assert!(e.contains("unknown rule"), "{r:?}: {e}");
        }
        let der = cert(Some("a"), &["b"], &[]);
        for cut in [0, 1, 10, der.len() / 2] {
            assert_eq!(Names::of(&der[..cut]), None, "cut at {cut}");
        }
        assert_eq!(Names::of(b"\x30\x84\xff\xff\xff\xff"), None, "a length past the end");
    }
}
