//! `stream_reads`: the latency of reading one event of a stream at a random version, as
//! a client sees it (the Rust client, one request at a time, on loopback).
//!
//! Picks `--reads` (stream, version) pairs at random among `stream-0 .. stream-<K-1>`
//! (the names `corelog-biglog` writes), each version below the stream's end as the node
//! reports it, and times `read_stream(name, version, 1)` — checking that the event that
//! comes back is that version of that stream. The ends are asked for first (a read past
//! the end returns none, and reads no event), and one such read per shard opens the
//! connections, so that the timed reads are only reads. Drop the page cache before it to
//! time reads from the device.
//!
//! Prints `reads N p50_ms A p90_ms B p99_ms C max_ms D` on stdout.

use std::time::{Duration, Instant};

use corelog_client::{Client, ClientConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |name: &str, default: &str| -> String {
        match args.iter().position(|a| a == name) {
            Some(i) => args.get(i + 1).cloned().unwrap_or_else(|| die(&format!("{name} needs a value"))),
            None => default.to_string(),
        }
    };
    let addr = get("--addr", "127.0.0.1:9400");
    let streams: u64 = get("--streams", "1000").parse().unwrap_or_else(|_| die("--streams: a number"));
    let reads: usize = get("--reads", "200").parse().unwrap_or_else(|_| die("--reads: a number"));
    let seed: u64 = get("--seed", "1").parse().unwrap_or_else(|_| die("--seed: a number"));
    if streams == 0 || reads == 0 {
        die("--streams and --reads must be above 0");
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    match rt.block_on(run(&addr, streams, reads, seed)) {
        Ok(mut lat) => {
            lat.sort();
            let q = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1].as_secs_f64() * 1e3;
            println!(
                "reads {} p50_ms {:.3} p90_ms {:.3} p99_ms {:.3} max_ms {:.3}",
                lat.len(),
                q(0.50),
                q(0.90),
                q(0.99),
                q(1.0)
            );
        }
        Err(e) => die(&e),
    }
}

fn die(msg: &str) -> ! {
    eprintln!("stream_reads: {msg}");
    std::process::exit(2)
}

async fn run(addr: &str, streams: u64, reads: usize, seed: u64) -> Result<Vec<Duration>, String> {
    let client = Client::connect(addr, &ClientConfig::insecure()).await.map_err(|e| format!("connect {addr}: {e}"))?;
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut picks = Vec::with_capacity(reads);
    for _ in 0..reads * 10 {
        let name = format!("stream-{}", next() % streams);
        let end = client.read_stream(&name, u64::MAX, 1).await.map_err(|e| format!("{name}: {e}"))?.end_version;
        if end > 0 {
            picks.push((name, next() % end));
        }
        if picks.len() == reads {
            break;
        }
    }
    if picks.len() < reads {
        return Err(format!("{} of {} streams picked held events", picks.len(), reads * 10));
    }
    let mut lat = Vec::with_capacity(reads);
    for (name, v) in picks {
        let t = Instant::now();
        let r = client.read_stream(&name, v, 1).await.map_err(|e| format!("{name} version {v}: {e}"))?;
        lat.push(t.elapsed());
        let got = r.events.first().and_then(|e| e.stream.as_ref()).map(|s| (s.name.as_str(), s.version));
        if got != Some((name.as_str(), v)) {
            return Err(format!("{name} version {v}: got {got:?}"));
        }
    }
    Ok(lat)
}
