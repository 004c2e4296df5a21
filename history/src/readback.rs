//! Reading a node's whole log back to compare it with the history.

use std::collections::BTreeMap;

use corelog_client::{Client, ClientConfig, Record, Role};

/// Every record of every shard of one node: shard → records, offsets 0, 1, 2, ….
pub type Logs = BTreeMap<u16, Vec<Record>>;

/// Reads every record of every shard from the node at `addr` (one address), through
/// each shard's direct port.
pub async fn read_all(addr: &str, cfg: &ClientConfig) -> Result<Logs, String> {
    let c = Client::connect(addr, cfg).await.map_err(|e| format!("connect {addr}: {e}"))?;
    let shards = c.info().await.shard_count;
    if shards == 0 {
        return Err(format!("{addr}: no shard count (connection lost)"));
    }
    let mut logs = Logs::new();
    for shard in 0..shards {
        let c = Client::connect_shard(addr, shard, cfg).await.map_err(|e| format!("{addr} shard {shard}: {e}"))?;
        let mut v: Vec<Record> = Vec::new();
        loop {
            let from = v.len() as u64;
            let recs =
                c.read(shard, from, 1 << 20).await.map_err(|e| format!("{addr} read shard {shard} at {from}: {e}"))?;
            if recs.is_empty() {
                break;
            }
            for r in recs {
                if r.offset != v.len() as u64 {
                    return Err(format!("{addr} shard {shard}: offset {} where {} was due", r.offset, v.len()));
                }
                v.push(r);
            }
        }
        logs.insert(shard, v);
    }
    Ok(logs)
}

/// Reads back from the node of `addrs` that says it leads, else from the first that
/// answers; returns its address and its logs.
pub async fn read_back(addrs: &[String], cfg: &ClientConfig) -> Result<(String, Logs), String> {
    let mut reachable = Vec::new();
    let mut errs = Vec::new();
    for a in addrs {
        match Client::connect(a, cfg).await {
            Ok(c) if c.info().await.role == Role::Leader => return Ok((a.clone(), read_all(a, cfg).await?)),
            Ok(_) => reachable.push(a.clone()),
            Err(e) => errs.push(format!("{a}: {e}")),
        }
    }
    match reachable.first() {
        Some(a) => Ok((a.clone(), read_all(a, cfg).await?)),
        None => Err(format!("no node reachable to read back: {}", errs.join("; "))),
    }
}
