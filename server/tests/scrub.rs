//! Scrubbing (`scrub/`) against real processes. A start trusts a sealed segment's index
//! file and reads only its last batch, so a flipped byte in the middle of a sealed
//! segment goes unnoticed by a start (checked here): the scrubber, re-reading sealed
//! segments in the background, is what finds it — logged, counted, shown on `/health` —
//! and reads of the damaged record fail on the server (never a wrong payload) while
//! every other record reads back as written.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use corelog_client::{Client, Error};

/// Payload bytes per record: with its headers one batch takes 64 KiB, so a 4 MiB
/// segment holds 64 one-record batches.
const PAYLOAD: usize = 60 * 1024;
/// Fast enough to re-read a few 4 MiB segments in well under a second.
const SCRUB_ARGS: [&str; 4] = ["--shard-count", "1", "--scrub-mib-per-s", "256"];

fn payload(offset: u64) -> Vec<u8> {
    let head = format!("record {offset} ");
    let mut p = head.into_bytes();
    p.extend((0..PAYLOAD - p.len()).map(|i| (i as u64 * 31 + offset) as u8));
    p
}

/// Appends records `0..n` one at a time (one batch each), checking each offset.
fn write(addr: &str, n: u64) {
    runtime().block_on(async {
        let c = Client::connect(addr, &client_config(None)).await.unwrap();
        for o in 0..n {
            assert_eq!(c.append(&payload(o)).await.unwrap().offset, o);
        }
    })
}

fn shard_dir(data: &Path) -> PathBuf {
    data.join("shard-0")
}

/// Polls `cond` every 20 ms until it holds; panics with `what` and the node's log after
/// `within`.
fn wait_for(node: &Node, within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}\n{}", node.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every sealed segment (all but the last) has its index file: the seal is written in
/// the background after a roll, and a start rebuilds a missing one by a scan — which
/// would read the damaged segment and defeat the point of the test.
fn wait_sealed(node: &Node, data: &Path, sealed: &[u64]) {
    wait_for(node, Duration::from_secs(10), "index files of the sealed segments", || {
        sealed.iter().all(|f| shard_dir(data).join(format!("{f:020}.idx")).exists())
    });
}

/// (byte position, first offset, count) of each batch of a segment file.
fn batches(seg: &Path) -> Vec<(u64, u64, u32)> {
    let bytes = std::fs::read(seg).unwrap();
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 32 <= bytes.len() && bytes[pos..pos + 4] == *b"CLGB" {
        let u32_at = |at: usize| u32::from_le_bytes(bytes[pos + at..pos + at + 4].try_into().unwrap());
        let first = u64::from_le_bytes(bytes[pos + 8..pos + 16].try_into().unwrap());
        out.push((pos as u64, first, u32_at(16)));
        pos += (32 + u32_at(20) as usize).div_ceil(4096) * 4096;
    }
    out
}

/// The log text of the node's latest start.
fn last_start(node: &Node) -> String {
    let text = node.log_text();
    let at = text.rfind("---- start #").expect("a start");
    text[at..].to_string()
}

#[test]
fn a_flipped_byte_in_a_sealed_segment_is_found_by_the_scrubber_not_by_a_start_and_never_served() {
    let dir = TempDir::new("scrub-damage");
    let data = dir.path().join("data");
    let mut node = Node::standalone("standalone", &data, None, &SCRUB_ARGS).started();
    // Segments at offsets 0, 64, 128 (sealed) and 192 (being written).
    let n = 200;
    write(&node.addr(), n);
    wait_sealed(&node, &data, &[0, 64, 128]);
    node.kill9();

    // One bit of a payload in the middle batch of the first segment.
    let seg = shard_dir(&data).join(format!("{:020}.log", 0));
    let b = batches(&seg);
    assert_eq!(b.len(), 64, "one-record batches of 64 KiB: {b:?}");
    let (pos, damaged, count) = b[b.len() / 2];
    assert_eq!(count, 1);
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&seg).unwrap();
    let at = pos + 32 + 24 + 1000;
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, at).unwrap();
    f.write_all_at(&[byte[0] ^ 0x20], at).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // A full scan sees it: the damage is real.
    let (code, out) = inspect(&data);
    assert_eq!(code, 2, "inspect must report corruption: {out}");
    assert!(out.contains("CORRUPT") && out.contains(&format!("byte offset {pos}")), "{out}");

    // A start does not read it: it trusts the index files and starts as usual.
    node.start();
    let start = last_start(&node);
    assert!(start.contains("3 sealed segment(s) from their index files"), "{start}");
    assert!(!start.contains("rebuilt") && !start.contains("DAMAGED"), "{start}");

    // The scrubber finds it.
    wait_for(&node, Duration::from_secs(15), "the scrubber reporting the damage", || {
        node.metric_sum("corelog_scrub_damage_total") >= 1.0
    });
    let line = last_start(&node)
        .lines()
        .find(|l| l.contains("scrub: DAMAGED"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no damage line:\n{}", node.log_text()));
    assert!(line.contains(" ERROR ") && line.contains("shard 0:"), "{line}");
    assert!(line.contains(&seg.display().to_string()), "{line}");
    assert!(line.contains(&format!("byte {pos} (offsets {damaged}..={damaged})")), "{line}");
    assert!(line.contains(&format!("CRC mismatch in record {damaged}")), "{line}");
    assert_eq!(node.metric_sum("corelog_scrub_damaged"), 1.0);
    let health = node.http("/health").unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.trim_end().ends_with("ok scrub=damaged"), "{health}");

    runtime().block_on(async {
        let cfg = client_config(None);
        let mut c = Client::connect(&node.addr(), &cfg).await.unwrap();
        // The damaged record: the server refuses it (the client checks CRCs as well, but
        // never gets the bytes).
        match c.read(0, damaged, 1).await {
            Err(Error::Server { code: 12, message, .. }) => assert!(message.contains("CRC"), "{message}"),
            other => panic!("read of damaged offset {damaged}: {:?}", other.map(|r| r.len())),
        }
        // Every other record, alone and in runs of ~4 from every start: exactly as
        // written, or (a run that reaches the damaged record) refused.
        for o in 0..n {
            for max in [1u32, 256 << 10] {
                c = Client::connect(&node.addr(), &cfg).await.unwrap(); // an error closes it
                match c.read(0, o, max).await {
                    Ok(recs) => {
                        assert!(!recs.is_empty(), "read at {o}");
                        for (i, r) in recs.iter().enumerate() {
                            assert_eq!(r.offset, o + i as u64);
                            assert!(r.offset != damaged, "the damaged record was served");
                            assert!(r.payload == payload(r.offset), "record {} differs", r.offset);
                        }
                    }
                    Err(Error::Server { code: 12, .. }) => {
                        assert!(o <= damaged && (o == damaged || max > 1), "read at {o} ({max} bytes) failed")
                    }
                    Err(e) => panic!("read at {o}: {e}"),
                }
            }
        }
    });

    // Counted once: later passes find the same damage again without counting it.
    let passes = node.metric_sum("corelog_scrub_passes_total");
    wait_for(&node, Duration::from_secs(10), "two more passes", || {
        node.metric_sum("corelog_scrub_passes_total") >= passes + 2.0
    });
    assert_eq!(node.metric_sum("corelog_scrub_damage_total"), 1.0);
    assert_eq!(node.metric_sum("corelog_scrub_damaged"), 1.0);
}

#[test]
fn a_sound_log_is_scrubbed_round_and_round_and_found_whole() {
    let dir = TempDir::new("scrub-sound");
    let data = dir.path().join("data");
    let node = Node::standalone("standalone", &data, None, &SCRUB_ARGS).started();
    write(&node.addr(), 150); // segments at 0, 64 (sealed) and 128
    wait_sealed(&node, &data, &[0, 64]);
    // A pass under way now may have begun before both segments were sealed; the two
    // after it read both, each to its end.
    let (passes, read) = (node.metric_sum("corelog_scrub_passes_total"), node.metric_sum("corelog_scrub_bytes_total"));
    wait_for(&node, Duration::from_secs(15), "three more scrub passes", || {
        node.metric_sum("corelog_scrub_passes_total") >= passes + 3.0
    });
    assert_eq!(node.metric_sum("corelog_scrub_damage_total"), 0.0);
    assert_eq!(node.metric_sum("corelog_scrub_damaged"), 0.0);
    let read = node.metric_sum("corelog_scrub_bytes_total") - read;
    assert!(read >= (2 * 2 * (4 << 20)) as f64, "{read} bytes read in three passes");
    let health = node.http("/health").unwrap();
    assert!(health.starts_with("HTTP/1.1 200") && health.trim_end().ends_with("\r\n\r\nok"), "{health}");
    let log = node.log_text();
    assert!(log.contains("shard 0: scrubbing sealed segments at 256.0 MiB/s"), "{log}");
    assert!(!log.contains("DAMAGED"), "{log}");
}
