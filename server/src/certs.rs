//! `corelog certs --out DIR`: a development CA plus ECDSA P-256 certificates for the
//! leader node (`server`), the follower node and a client. Keys are written mode 0600.
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

pub fn generate(out: &Path, names: &[String]) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let err = |e: rcgen::Error| e.to_string();
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "corelog dev CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(err)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
    write(&out.join("ca.pem"), &ca_cert.pem(), false)?;
    write(&out.join("ca.key"), &ca_key.serialize_pem(), true)?;
    let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    sans.extend(names.iter().cloned());
    let mut node_sans = sans.clone();
    node_sans.push(crate::net::peer::DEFAULT_PEER_NAME.to_string());
    for (name, cn, eku, sans) in [
        ("server", "corelog leader", vec![Eku::ServerAuth, Eku::ClientAuth], &node_sans),
        ("follower", "corelog follower", vec![Eku::ServerAuth, Eku::ClientAuth], &node_sans),
        ("client", "corelog client", vec![Eku::ClientAuth], &sans),
    ] {
        let mut p = CertificateParams::new(sans.clone()).map_err(err)?;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = eku;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Authority Key Identifier (RFC 5280 4.2.1.1): strict validators reject a chain
        // without it. ExplicitNoCa adds the Subject Key Identifier and CA:FALSE.
        p.use_authority_key_identifier_extension = true;
        p.is_ca = IsCa::ExplicitNoCa;
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(err)?;
        let cert = p.signed_by(&key, &ca_cert, &ca_key).map_err(err)?;
        write(&out.join(format!("{name}.pem")), &cert.pem(), false)?;
        write(&out.join(format!("{name}.key")), &key.serialize_pem(), true)?;
    }
    Ok(())
}
