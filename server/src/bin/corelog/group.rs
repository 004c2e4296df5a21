//! `corelog tail --group G`: consume as a member of a consumer group, printing the
//! events as `tail --prefix` does and committing after each batch printed; with
//! `--trace`, machine-readable lines instead (for tests that kill members):
//!
//! - `A <shard> <gen> <bucket>,<bucket>,...` when an assignment arrives (`-`: no bucket);
//! - `D <shard> <gen> <offset> <stream> <version> <payload in lowercase hex>` per event;
//! - `C <shard> <gen> <next> <log_offset>` per commit the shard made durable;
//! - `S <shard> <gen> <next>` per commit refused because its generation was over.
//!
//! Every line is flushed as it is printed, so a batch's lines are out before its commit
//! is sent. A commit whose connection ended before its answer prints nothing (its
//! events come again).

use std::io::Write;

use corelog_client::group::{CommitOutcome, Consumer, ConsumerOptions, Delivery};
use corelog_client::{Client, Error};
use corelog_server::group::event::Event;
use corelog_server::group::{Config, Group};

use crate::cli::{print_record, runtime, ConnArgs};

/// `corelog group …`.
#[derive(clap::Subcommand)]
pub enum GroupCmd {
    /// Per shard, a consumer group's generation, prefix, and each bucket's owner and
    /// committed position, folded from the group's stream on that shard
    /// (`$g/<group>/<shard>`): `shard S gen G k K prefix P`, then `bucket B owner M
    /// committed N` lines (`-`: none). Reads every shard's whole log (a diagnostic).
    Describe {
        #[command(flatten)]
        conn: ConnArgs,
        group: String,
    },
}

/// `tail`'s consumer-group options.
#[derive(clap::Args, Debug, Clone)]
pub struct GroupArgs {
    /// Consume as a member of this consumer group: the events of the streams under
    /// --prefix (default: all) on every shard, shared among the group's members, each
    /// batch committed once printed (`shard<TAB>offset<TAB>stream<TAB>version<TAB>payload`).
    #[arg(long, conflicts_with_all = ["stream", "shard", "from"])]
    pub group: Option<String>,
    /// This member's id (default: hostname-pid).
    #[arg(long, requires = "group")]
    pub member: Option<String>,
    /// Buckets per shard of a new group (default: the group's own, or the server's).
    #[arg(long, requires = "group", value_parser = clap::value_parser!(u8).range(1..=64))]
    pub k: Option<u8>,
    /// Print machine-readable lines instead, flushed per line: `A shard gen buckets`
    /// (assigned), `D shard gen offset stream version hex` (an event), `C shard gen next
    /// log_offset` (committed), `S shard gen next` (a commit refused as stale).
    #[arg(long, requires = "group")]
    pub trace: bool,
}

/// The default member id: this host's name and this process's id.
fn default_member() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "corelog".to_string());
    format!("{host}-{}", std::process::id())
}

/// Joins `group` and prints what it delivers; stops after `count` events when given
/// (committing them first).
pub fn tail(conn: &ConnArgs, args: &GroupArgs, prefix: &str, count: Option<u64>, hex: bool) -> Result<(), String> {
    let cfg = conn.config()?;
    let group = args.group.as_deref().ok_or("no --group")?;
    let member = args.member.clone().unwrap_or_else(default_member);
    let opts = ConsumerOptions { k: args.k.unwrap_or(0), auto_commit: true, ..Default::default() };
    runtime().block_on(async {
        let mut c = Consumer::join(&conn.addr, &cfg, group, &member, prefix, &opts).await.map_err(|e| e.to_string())?;
        let mut out = std::io::stdout();
        let mut n = 0;
        while count.is_none_or(|c| n < c) {
            let Some(d) = c.next_delivery().await.map_err(|e| e.to_string())? else { break };
            n += u64::from(matches!(d, Delivery::Event(_)));
            print(&mut out, &d, args.trace, hex)?;
        }
        for done in c.commit().await.map_err(|e| e.to_string())? {
            print(&mut out, &Delivery::Committed(done), args.trace, hex)?;
        }
        Ok(())
    })
}

/// Prints what the group's streams say of it, shard by shard.
pub fn describe(conn: &ConnArgs, group: &str) -> Result<(), String> {
    let cfg = conn.config()?;
    runtime().block_on(async {
        let client = Client::connect(&conn.addr, &cfg).await.map_err(|e| e.to_string())?;
        let shard_count = client.info().await.shard_count.max(1);
        for shard in 0..shard_count {
            let events = group_log(&client, group, shard).await.map_err(|e| e.to_string())?;
            // A fold starts at the last `State` (a generation or a snapshot): it names
            // the owners, and the commits after it move the positions.
            let Some(last) = events.iter().rposition(|e| matches!(e, Event::State { .. })) else {
                println!("shard {shard}: no generation");
                continue;
            };
            let Event::State { k, owners, .. } = &events[last] else { unreachable!("found as a State") };
            let mut g = Group::new(Config { shard, shard_count, k: *k, session_ms: 1, settle_ms: 0 });
            for e in &events[last..] {
                g.apply(e).map_err(|e| format!("shard {shard}: the group's stream is damaged: {e}"))?;
            }
            println!("shard {shard} gen {} k {k} prefix {:?}", g.gen(), g.prefix);
            for b in g.buckets() {
                let owner = owners.iter().find(|(_, bs)| bs.contains(b)).map_or("-", |(m, _)| m.as_str());
                let committed = g.committed(*b).map_or("-".to_string(), |n| n.to_string());
                println!("bucket {b} owner {owner} committed {committed}");
            }
        }
        Ok(())
    })
}

/// The events of `group`'s stream on `shard` from its last `State` on (read back from
/// the stream's end, `FOLD_CHUNK` events at a time, as the server's fold does): the
/// server writes a `State` at least every `SNAPSHOT_EVERY` commits, so this is bounded.
async fn group_log(client: &Client, group: &str, shard: u16) -> Result<Vec<Event>, Error> {
    const CHUNK: u64 = 2 * corelog_server::group::SNAPSHOT_EVERY as u64;
    let name = format!("$g/{group}/{shard}");
    let end = client.read_stream_on(shard, &name, u64::MAX, 0).await?.end_version;
    let (mut tail, mut lo) = (Vec::new(), end);
    for _ in 0..4 {
        if lo == 0 {
            break;
        }
        let from = lo.saturating_sub(CHUNK);
        let read = match client.read_stream_on(shard, &name, from, (lo - from) as u32).await {
            Err(Error::OutOfRange { first, .. }) if first > from && first < lo => {
                client.read_stream_on(shard, &name, first, (lo - first) as u32).await?
            }
            r => r?,
        };
        let mut chunk = Vec::with_capacity(read.events.len());
        for r in &read.events {
            chunk.push(Event::decode(&r.payload).map_err(|e| Error::Protocol(format!("offset {}: {e}", r.offset)))?);
        }
        let found = chunk.iter().rposition(|e| matches!(e, Event::State { .. }));
        chunk.extend(tail);
        tail = chunk;
        if let Some(at) = found {
            return Ok(tail.split_off(at));
        }
        lo = from;
    }
    Ok(tail)
}

/// Prints one delivery (with `trace`, as the module docs say; else only the events, and
/// rejoins on stderr), and flushes it.
fn print(out: &mut std::io::Stdout, d: &Delivery, trace: bool, hex: bool) -> Result<(), String> {
    let mut o = out.lock();
    let r = match (d, trace) {
        (Delivery::Event(e), false) => {
            let s = e.record.stream.as_ref().ok_or("an event without a stream")?;
            write!(o, "{}\t{}\t{}\t", e.shard, e.record.offset, s.name)
                .map_err(|e| e.to_string())
                .and_then(|_| print_record(&mut o, s.version, &e.record.payload, hex))
        }
        (Delivery::Rejoining { shard, why }, false) => {
            eprintln!("shard {shard}: joining again ({why})");
            Ok(())
        }
        (d, true) => match trace_line(d) {
            Some(line) => writeln!(o, "{line}").map_err(|e| e.to_string()),
            None => Ok(()),
        },
        _ => Ok(()),
    };
    r.and_then(|_| o.flush().map_err(|e| e.to_string()))
}

/// The `--trace` line of a delivery (`None`: it has none).
fn trace_line(d: &Delivery) -> Option<String> {
    Some(match d {
        Delivery::Assigned { shard, assignment } => {
            let buckets: Vec<String> = assignment.buckets.iter().map(|(b, _)| b.to_string()).collect();
            let buckets = if buckets.is_empty() { "-".to_string() } else { buckets.join(",") };
            format!("A {shard} {} {buckets}", assignment.gen)
        }
        Delivery::Event(e) => {
            let (name, version) = e.record.stream.as_ref().map_or(("-", 0), |s| (s.name.as_str(), s.version));
            let payload: String = e.record.payload.iter().map(|b| format!("{b:02x}")).collect();
            format!("D {} {} {} {name} {version} {payload}", e.shard, e.gen, e.record.offset)
        }
        Delivery::Committed(c) => match c.outcome {
            CommitOutcome::Committed { offset } => format!("C {} {} {} {offset}", c.shard, c.gen, c.next),
            CommitOutcome::Skipped => format!("S {} {} {}", c.shard, c.gen, c.next),
            CommitOutcome::Lost => return None,
        },
        Delivery::Rejoining { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use corelog_client::group::{Assignment, Commit, GroupEvent};
    use corelog_client::{Record, StreamVersion};

    use super::*;

    #[test]
    fn trace_lines() {
        let assigned = |buckets| Delivery::Assigned { shard: 1, assignment: Assignment { gen: 3, buckets } };
        assert_eq!(trace_line(&assigned(vec![(0, 5), (6, u64::MAX)])).unwrap(), "A 1 3 0,6");
        assert_eq!(trace_line(&assigned(vec![])).unwrap(), "A 1 3 -");
        let stream = Some(StreamVersion { name: "ord-1".into(), version: 9 });
        let record = Record { offset: 42, epoch: 1, producer: None, stream, payload: b"\x00hi".to_vec() };
        let e = Delivery::Event(GroupEvent { shard: 1, gen: 3, record });
        assert_eq!(trace_line(&e).unwrap(), "D 1 3 42 ord-1 9 006869");
        let commit = |outcome| Delivery::Committed(Commit { shard: 1, gen: 3, next: 43, outcome });
        assert_eq!(trace_line(&commit(CommitOutcome::Committed { offset: 50 })).unwrap(), "C 1 3 43 50");
        assert_eq!(trace_line(&commit(CommitOutcome::Skipped)).unwrap(), "S 1 3 43");
        assert_eq!(trace_line(&commit(CommitOutcome::Lost)), None);
    }
}
