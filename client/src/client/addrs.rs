//! Node addresses: `host:port` checks, comma-separated lists, and a shard's direct port.

use super::error::Error;

/// `"A,B"` → `["A", "B"]`.
pub(crate) fn split_addrs(addrs: &str) -> Vec<String> {
    addrs.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect()
}

/// `Error::Invalid` unless `addr` is `host:port`.
pub(crate) fn check_addr(addr: &str) -> Result<(), Error> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => Ok(()),
        _ => Err(Error::Invalid(format!("address {addr:?} is not host:port"))),
    }
}

/// The direct address of `shard` given a node's client address `host:port`.
pub fn shard_addr(addr: &str, shard: u16) -> Result<String, Error> {
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| Error::Invalid(format!("address {addr:?} has no port")))?;
    let port: u16 = port.parse().map_err(|_| Error::Invalid(format!("bad port in {addr:?}")))?;
    let p =
        port.checked_add(1 + shard).ok_or_else(|| Error::Invalid(format!("port overflow: {addr:?} shard {shard}")))?;
    Ok(format!("{host}:{p}"))
}
