//! Client-side subcommands on the `corelog` binary (in the spirit of rpk): append, read,
//! tail. They use the `corelog-client` library on a small tokio runtime.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use corelog_client::{Client, ClientConfig, Tail};

#[derive(clap::Args, Debug, Clone)]
pub struct ConnArgs {
    /// Node client address (host:port), or several separated by commas: appends follow
    /// the leader among them (docs/protocol.md §6); reads use the first that answers.
    #[arg(long, default_value = "127.0.0.1:9400")]
    pub addr: String,
    /// CA that signed the server certificate.
    #[arg(long, default_value = "certs/ca.pem")]
    pub ca: PathBuf,
    /// Client certificate (PEM).
    #[arg(long, default_value = "certs/client.pem")]
    pub cert: PathBuf,
    /// Client private key (PEM).
    #[arg(long, default_value = "certs/client.key")]
    pub key: PathBuf,
    /// Name to verify in the server certificate.
    #[arg(long, default_value = "localhost")]
    pub server_name: String,
    /// Plaintext (only against a server started with --insecure).
    #[arg(long)]
    pub insecure: bool,
}

impl ConnArgs {
    pub fn config(&self) -> Result<ClientConfig, String> {
        if self.insecure {
            return Ok(ClientConfig::insecure());
        }
        ClientConfig::mtls(&self.ca, &self.cert, &self.key, &self.server_name).map_err(|e| e.to_string())
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

/// Appends each payload (or each stdin line with `-`); prints `shard offset` per event.
pub fn append(conn: &ConnArgs, payloads: &[String]) -> Result<(), String> {
    let cfg = conn.config()?;
    runtime().block_on(async {
        let c = Client::connect(&conn.addr, &cfg).await.map_err(|e| e.to_string())?;
        let mut out = std::io::stdout().lock();
        if payloads.len() == 1 && payloads[0] == "-" {
            for line in std::io::stdin().lock().lines() {
                let line = line.map_err(|e| e.to_string())?;
                let pos = c.append(line.as_bytes()).await.map_err(|e| e.to_string())?;
                writeln!(out, "{} {}", pos.shard, pos.offset).map_err(|e| e.to_string())?;
            }
        } else {
            for p in payloads {
                let pos = c.append(p.as_bytes()).await.map_err(|e| e.to_string())?;
                writeln!(out, "{} {}", pos.shard, pos.offset).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    })
}

fn print_record(out: &mut impl Write, offset: u64, payload: &[u8], hex: bool) -> Result<(), String> {
    let r = if hex {
        let h: String = payload.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(out, "{offset}\t{h}")
    } else {
        writeln!(out, "{offset}\t{}", String::from_utf8_lossy(payload))
    };
    r.map_err(|e| e.to_string())
}

/// Reads committed records of one shard: `offset<TAB>payload` per line.
pub fn read(conn: &ConnArgs, shard: u16, from: u64, limit: u64, hex: bool) -> Result<(), String> {
    let cfg = conn.config()?;
    runtime().block_on(async {
        let c = Client::connect_shard(&conn.addr, shard, &cfg).await.map_err(|e| e.to_string())?;
        let mut out = std::io::stdout().lock();
        let (mut at, mut n) = (from, 0u64);
        while n < limit {
            let recs = c.read(shard, at, 1 << 20).await.map_err(|e| e.to_string())?;
            if recs.is_empty() {
                break;
            }
            for r in recs.iter().take((limit - n) as usize) {
                print_record(&mut out, r.offset, &r.payload, hex)?;
                n += 1;
                at = r.offset + 1;
            }
        }
        Ok(())
    })
}

/// Follows one shard live; stops after `count` records when given.
pub fn tail(conn: &ConnArgs, shard: u16, from: u64, count: Option<u64>, hex: bool) -> Result<(), String> {
    let cfg = conn.config()?;
    runtime().block_on(async {
        let mut t = Tail::start(&conn.addr, &cfg, shard, from).await.map_err(|e| e.to_string())?;
        let mut out = std::io::stdout();
        let mut n = 0;
        while count.is_none_or(|c| n < c) {
            match t.next().await.map_err(|e| e.to_string())? {
                Some(r) => {
                    print_record(&mut out.lock(), r.offset, &r.payload, hex)?;
                    let _ = out.flush();
                    n += 1;
                }
                None => break,
            }
        }
        Ok(())
    })
}
