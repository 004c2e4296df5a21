//! `corelog certs --out DIR`: a development CA plus ECDSA P-256 certificates for the
//! leader node (`server`), the follower node and a client; `--client NAME` adds a client
//! certificate whose common name is the principal NAME (`principal`), by the CA already
//! in DIR when there is one. Keys are written mode 0600.
//! Node certificates carry both serverAuth and clientAuth (a node is dialled on its
//! client and replication ports and dials its peer when it leads) and the DNS name
//! `corelog-replication-peer` that a replication peer must present (`net::peer`); the
//! client certificate does not, so it cannot open a replication link. Leaf certificates carry
//! Authority and Subject Key Identifiers (`openssl verify -x509_strict` accepts them).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, KeyPair, KeyUsagePurpose,
};

fn write(path: &Path, data: &str, private: bool) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(path)
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    f.write_all(data.as_bytes()).map_err(|e| format!("write {}: {e}", path.display()))
}

/// The development CA: its certificate (as issuer) and key. The certificate is rebuilt
/// from fixed parameters, so a CA loaded from its key issues certificates that chain to
/// the `ca.pem` written when it was made (same name, same key identifier).
fn ca(key: KeyPair) -> Result<(rcgen::Certificate, KeyPair), String> {
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "corelog dev CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let cert = ca.self_signed(&key).map_err(|e| e.to_string())?;
    Ok((cert, key))
}

/// Writes `{file}.pem` and `{file}.key`: a certificate for `cn`, signed by the CA.
fn issue(
    out: &Path,
    file: &str,
    cn: &str,
    eku: Vec<Eku>,
    sans: &[String],
    ca: &(rcgen::Certificate, KeyPair),
) -> Result<(), String> {
    let err = |e: rcgen::Error| e.to_string();
    let mut p = CertificateParams::new(sans.to_vec()).map_err(err)?;
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = eku;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Authority Key Identifier (RFC 5280 4.2.1.1): strict validators reject a chain
    // without it. ExplicitNoCa adds the Subject Key Identifier and CA:FALSE.
    p.use_authority_key_identifier_extension = true;
    p.is_ca = IsCa::ExplicitNoCa;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(err)?;
    let cert = p.signed_by(&key, &ca.0, &ca.1).map_err(err)?;
    write(&out.join(format!("{file}.pem")), &cert.pem(), false)?;
    write(&out.join(format!("{file}.key")), &key.serialize_pem(), true)
}

/// A principal name usable as a file name and a common name.
fn check_principal(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= crate::principal::MAX_PRINCIPAL
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("--client {name:?}: a principal name of 1 to 255 letters, digits, '-', '_', '.' or '@'"))
    }
}

/// Writes the CA and the node and client certificates into `out`, and a client
/// certificate `client-NAME` whose common name is NAME for each of `clients`. With
/// `clients` and a CA already in `out`, only those are issued, by that CA.
pub fn generate(out: &Path, names: &[String], clients: &[String]) -> Result<String, String> {
    for c in clients {
        check_principal(c)?;
    }
    std::fs::create_dir_all(out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    sans.extend(names.iter().cloned());
    let ca_key = out.join("ca.key");
    let (ca, said) = if !clients.is_empty() && ca_key.exists() {
        let pem = std::fs::read_to_string(&ca_key).map_err(|e| format!("read {}: {e}", ca_key.display()))?;
        let key = KeyPair::from_pem(&pem).map_err(|e| format!("{}: {e}", ca_key.display()))?;
        (ca(key)?, format!("the CA in {}", out.display()))
    } else {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?;
        let ca = ca(key)?;
        write(&out.join("ca.pem"), &ca.0.pem(), false)?;
        write(&ca_key, &ca.1.serialize_pem(), true)?;
        let mut node_sans = sans.clone();
        node_sans.push(crate::net::peer::DEFAULT_PEER_NAME.to_string());
        let both = || vec![Eku::ServerAuth, Eku::ClientAuth];
        issue(out, "server", "corelog leader", both(), &node_sans, &ca)?;
        issue(out, "follower", "corelog follower", both(), &node_sans, &ca)?;
        issue(out, "client", "corelog client", vec![Eku::ClientAuth], &sans, &ca)?;
        (ca, format!("CA, server, follower and client certificates to {}", out.display()))
    };
    // No subjectAltName: a client certificate needs none, and `--principal-from dns`
    // would map every one of them to `localhost`.
    for c in clients {
        issue(out, &format!("client-{c}"), c, vec![Eku::ClientAuth], &[], &ca)?;
    }
    Ok(match clients {
        [] => format!("wrote {said}"),
        _ if said.starts_with("the CA") => {
            format!("wrote client-NAME.pem/.key for {} signed by {said}", clients.join(", "))
        }
        _ => format!("wrote {said}, and client-NAME.pem/.key for {}", clients.join(", ")),
    })
}
