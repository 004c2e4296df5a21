//! `run --addr A,B`: the addresses are alternatives of one cluster. Against fake nodes
//! (plaintext, speaking the real codec): a connection lost before an answer moves to the
//! next node and that append counts as `unknown` (not as an error, and never re-sent); a
//! `NotLeader` naming a node sends the connection there, skipping the next address; a
//! leader that goes silent past its lease is abandoned and never used again once a newer
//! epoch has shown (docs/protocol.md §6.3).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use corelog_client::codec::{self, decode_frame, ErrorCode, LeaderState, Leadership, Request, Response, Role};
use corelog_loadgen::result::RunResult;

#[derive(Clone)]
enum Behaviour {
    /// Store every append.
    Accept,
    /// Store the first n appends of each connection, then close it on reading the next.
    DropAfter(usize),
    /// Answer every append with this error.
    Refuse(ErrorCode, String),
    /// Lead `epoch` with a 200 ms lease; after the first Hello of a connection answer
    /// nothing (a frozen process).
    Frozen(u32),
    /// Lead `epoch` with a 200 ms lease, storing every append.
    Leads(u32),
}

const LEASE_MS: u32 = 200;

/// A fake node on its own threads: its address and the appends it has read.
fn fake(b: Behaviour) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let offset = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let (b, count, offset) = (b.clone(), count.clone(), offset.clone());
            std::thread::spawn(move || serve(s, b, &count, &offset));
        }
    });
    (addr, seen)
}

fn serve(mut s: TcpStream, b: Behaviour, count: &AtomicUsize, offset: &AtomicUsize) {
    let (mut buf, mut chunk, mut mine, mut hellos) = (Vec::new(), [0u8; 4096], 0usize, 0usize);
    loop {
        while let Ok(Some((f, used))) = decode_frame(&buf) {
            let mut out = Vec::new();
            let epoch = match b {
                Behaviour::Frozen(e) | Behaviour::Leads(e) => e,
                _ => 1,
            };
            let leadership = matches!(b, Behaviour::Frozen(_) | Behaviour::Leads(_)).then_some(Leadership {
                lease_ms: LEASE_MS,
                epoch,
                state: LeaderState::Live,
            });
            match Request::parse(&f).unwrap() {
                Request::Hello { .. } if matches!(b, Behaviour::Frozen(_)) && hellos > 0 => {}
                Request::Hello { version } => {
                    hellos += 1;
                    Response::HelloOk { version, leadership, shard: 0, shard_count: 1, role: Role::Leader, epoch }
                        .encode(f.req_id, &mut out)
                }
                Request::Append { .. } if matches!(b, Behaviour::Frozen(_)) => {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                Request::Append { .. } => {
                    count.fetch_add(1, Ordering::SeqCst);
                    mine += 1;
                    match &b {
                        Behaviour::DropAfter(n) if mine > *n => return,
                        Behaviour::Refuse(code, msg) => codec::encode_error(f.req_id, *code as u16, msg, &mut out),
                        _ => {
                            let at = offset.fetch_add(1, Ordering::SeqCst) as u64;
                            codec::encode_appended(f.req_id, 0, at, &mut out)
                        }
                    }
                }
                _ => return,
            }
            buf.drain(..used);
            if s.write_all(&out).is_err() {
                return;
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A short closed-loop run over `addrs` as alternatives.
fn run(addrs: &[&str], connections: usize, name: &str) -> RunResult {
    run_for(addrs, connections, name, "400ms")
}

fn run_for(addrs: &[&str], connections: usize, name: &str, duration: &str) -> RunResult {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join(format!("{name}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_corelog-loadgen"))
        .arg("run")
        .args(["--addr", &addrs.join(",")])
        .args(["--connections", &connections.to_string(), "--cores", "1", "--source-ips", "1", "--unpinned"])
        .args(["--warmup", "0s", "--duration", duration, "--insecure", "--label", name, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "loadgen failed:\n{text}");
    assert!(text.contains("failover:"), "no failover summary:\n{text}");
    RunResult::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn a_lost_answer_is_unknown_and_the_connection_moves_on() {
    let (a, at_a) = fake(Behaviour::DropAfter(3));
    let (b, at_b) = fake(Behaviour::Accept);
    let r = run(&[&a, &b], 2, "lost");
    // Each connection: 3 acked on A, the 4th read by A and its answer lost, then B.
    assert_eq!(at_a.load(Ordering::SeqCst), 8);
    assert_eq!(r.unknown, 2, "{r:?}");
    assert_eq!(r.reconnects, 2, "{r:?}");
    assert_eq!((r.errors, r.timeouts), (0, 0), "{r:?}");
    let at_b = at_b.load(Ordering::SeqCst) as u64;
    assert!(at_b > 0, "nothing reached B");
    // Every append read by a node was acked except the lost ones: none was re-sent.
    assert_eq!(r.acked_total, 6 + at_b, "{r:?}");
}

#[test]
fn not_leader_sends_the_connection_to_the_named_node() {
    let (leader, at_leader) = fake(Behaviour::Accept);
    let (other, at_other) = fake(Behaviour::Accept);
    let (follower, at_follower) = fake(Behaviour::Refuse(ErrorCode::NotLeader, leader.clone()));
    let r = run(&[&follower, &other, &leader], 2, "not-leader");
    assert_eq!(at_follower.load(Ordering::SeqCst), 2, "one refusal per connection");
    assert_eq!(at_other.load(Ordering::SeqCst), 0, "the named leader, not the next address");
    assert_eq!(r.error_codes.get("5"), Some(&2), "{r:?}");
    assert_eq!((r.unknown, r.reconnects), (0, 2), "{r:?}");
    assert_eq!(r.acked_total, at_leader.load(Ordering::SeqCst) as u64, "{r:?}");
    assert!(r.acked_total > 0);
}

#[test]
fn a_silent_leader_is_abandoned_after_its_lease_and_its_old_epoch_not_used_again() {
    let (frozen, at_frozen) = fake(Behaviour::Frozen(5));
    let (new, at_new) = fake(Behaviour::Leads(7));
    // Longer than the suspicion (1 s): the frozen node is connected to again, seen to
    // lead epoch 5 < 7, and not used.
    let r = run_for(&[&frozen, &new], 2, "silent", "1500ms");
    assert_eq!(at_frozen.load(Ordering::SeqCst), 2, "one append per connection reached the silent leader");
    assert_eq!(r.unknown, 2, "its appends are outcome-unknown: {r:?}");
    assert_eq!((r.errors, r.timeouts), (0, 0), "abandoned after the lease, not timed out: {r:?}");
    assert!(at_new.load(Ordering::SeqCst) > 0 && r.acked_total == at_new.load(Ordering::SeqCst) as u64, "{r:?}");
}
