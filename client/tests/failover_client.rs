//! The client's failover rules against fake nodes speaking the real codec (plaintext):
//! refusals where nothing was written are retried elsewhere; a connection that breaks
//! after the append was sent is an unknown outcome and is never re-sent; the leadership
//! rules of docs/protocol.md §6.3 (epochs, hints, probes of silent leaders, suspects).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use corelog_client::codec::{self, decode_frame, ErrorCode, Hint, LeaderState, Leadership, Request, Response, Role};
use corelog_client::{Client, ClientConfig, Error, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Clone)]
enum Behaviour {
    /// Answer every append with this error code and message.
    Refuse(ErrorCode, String),
    /// Close the connection after reading an append, without answering.
    Drop,
    /// Store it at the next offset.
    Accept,
    /// Never answer anything, not even Hello.
    Silent,
    /// Answer the first Hello, then nothing at all (a frozen process).
    Frozen,
    /// Answer every Hello (probes too) at once, never an append (a live, slow leader),
    /// until the `usize`-th probe: then answer the held appends.
    Hold(usize),
    /// Refuse every append with this code, message and hint (protocol version 3).
    Hint(ErrorCode, String, Hint),
    /// A server older than protocol version 3: refuses a newer `Hello` with `BadVersion`
    /// and closes; stores appends, each answered after this many milliseconds.
    Old(u64),
}

/// What a fake's `HelloOk` says: role, epoch, leadership (version 3).
#[derive(Clone, Copy)]
struct Hello(Role, u32, Option<Leadership>);

const OLD_LEADER: Hello = Hello(Role::Leader, 1, None);

fn leader(epoch: u32, lease_ms: u32) -> Hello {
    Hello(Role::Leader, epoch, Some(Leadership { lease_ms, epoch, state: LeaderState::Live }))
}

/// A fake node: returns its address and the number of appends it received.
async fn fake(b: Behaviour) -> (String, Arc<AtomicUsize>) {
    let (addr, seen, _) = fake_counting(b).await;
    (addr, seen)
}

/// Also returns the number of connections it accepted.
async fn fake_counting(b: Behaviour) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    fake_node(b, OLD_LEADER).await
}

/// A fake node answering Hello with `hello`.
async fn fake_node(b: Behaviour, hello: Hello) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (count, acc) = (seen.clone(), accepted.clone());
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            acc.fetch_add(1, Ordering::SeqCst);
            let (b, count) = (b.clone(), count.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (mut hellos, mut held) = (0usize, Vec::new());
                loop {
                    while let Ok(Some((f, used))) = decode_frame(&buf) {
                        let mut out = Vec::new();
                        match Request::parse(&f).unwrap() {
                            Request::Hello { .. } if matches!(b, Behaviour::Silent) => {}
                            Request::Hello { .. } if matches!(b, Behaviour::Frozen) && hellos > 0 => {}
                            Request::Hello { version } if matches!(b, Behaviour::Old(_)) && version > 2 => {
                                let msg = format!("protocol version {version} unsupported; this server speaks 1 to 2");
                                codec::encode_error(f.req_id, ErrorCode::BadVersion as u16, &msg, &mut out);
                                let _ = s.write_all(&out).await;
                                return;
                            }
                            Request::Hello { version } => {
                                hellos += 1;
                                let Hello(role, epoch, leadership) = hello;
                                Response::HelloOk { version, leadership, shard: 0, shard_count: 1, role, epoch }
                                    .encode(f.req_id, &mut out);
                                if matches!(b, Behaviour::Hold(n) if hellos > n) {
                                    for (id, n) in held.drain(..) {
                                        codec::encode_appended(id, 0, n, &mut out);
                                    }
                                }
                            }
                            Request::Append { .. } => {
                                let n = count.fetch_add(1, Ordering::SeqCst);
                                match &b {
                                    Behaviour::Refuse(code, msg) => {
                                        codec::encode_error(f.req_id, *code as u16, msg, &mut out)
                                    }
                                    Behaviour::Hint(code, msg, h) => {
                                        codec::encode_refusal(f.req_id, *code as u16, msg, *h, &mut out)
                                    }
                                    Behaviour::Drop | Behaviour::Silent => return,
                                    Behaviour::Frozen => {}
                                    Behaviour::Hold(_) => held.push((f.req_id, n as u64)),
                                    Behaviour::Accept => codec::encode_appended(f.req_id, 0, n as u64, &mut out),
                                    Behaviour::Old(ms) => {
                                        tokio::time::sleep(Duration::from_millis(*ms)).await;
                                        codec::encode_appended(f.req_id, 0, n as u64, &mut out)
                                    }
                                }
                            }
                            _ => return,
                        }
                        buf.drain(..used);
                        if s.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (addr, seen, accepted)
}

/// Nothing listens on port 1: connecting is refused.
const DEAD: &str = "127.0.0.1:1";

fn cfg() -> ClientConfig {
    ClientConfig::insecure().with_failover_timeout(Duration::from_millis(600))
}

#[tokio::test]
async fn not_leader_with_an_address_is_followed() {
    let (leader, at_leader) = fake(Behaviour::Accept).await;
    let (other, at_other) = fake(Behaviour::Accept).await;
    let (follower, at_follower) = fake(Behaviour::Refuse(ErrorCode::NotLeader, leader.clone())).await;
    // The named leader, not the next address in the list.
    let c = Client::connect(&format!("{follower},{other},{leader}"), &cfg()).await.unwrap();
    assert_eq!(c.append(b"x").await.unwrap().offset, 0);
    assert_eq!(c.append(b"y").await.unwrap().offset, 1, "stays on the leader");
    let seen = |a: &AtomicUsize| a.load(Ordering::SeqCst);
    assert_eq!((seen(&at_follower), seen(&at_other), seen(&at_leader)), (1, 0, 2));
}

#[tokio::test]
async fn a_leader_outside_the_list_is_followed() {
    let (leader, at_leader) = fake(Behaviour::Accept).await;
    let (follower, at_follower) = fake(Behaviour::Refuse(ErrorCode::NotLeader, leader.clone())).await;
    let c = Client::connect(&follower, &cfg()).await.unwrap();
    c.append(b"x").await.unwrap();
    assert_eq!((at_follower.load(Ordering::SeqCst), at_leader.load(Ordering::SeqCst)), (1, 1));
}

#[tokio::test]
async fn empty_not_leader_unreachable_and_unavailable_move_to_the_next_address() {
    let (f, at_f) = fake(Behaviour::Refuse(ErrorCode::NotLeader, String::new())).await;
    let (u, at_u) = fake(Behaviour::Refuse(ErrorCode::Unavailable, "held".into())).await;
    let (l, at_l) = fake(Behaviour::Accept).await;
    let c = Client::connect_any(&[f, DEAD.into(), u, l], &cfg()).await.unwrap();
    c.append(b"x").await.unwrap();
    let seen = |a: &AtomicUsize| a.load(Ordering::SeqCst);
    assert_eq!((seen(&at_f), seen(&at_u), seen(&at_l)), (1, 1, 1));
}

#[tokio::test]
async fn connect_takes_the_first_reachable_address() {
    let (a, at_a) = fake(Behaviour::Accept).await;
    let (b, at_b) = fake(Behaviour::Accept).await;
    let c = Client::connect(&format!("{DEAD}, {a},{b}"), &cfg()).await.unwrap();
    c.append(b"x").await.unwrap();
    assert_eq!((at_a.load(Ordering::SeqCst), at_b.load(Ordering::SeqCst)), (1, 0));
    let e = Client::connect(DEAD, &cfg()).await.err().expect("nothing listens");
    assert_eq!(e.outcome(), Outcome::NotWritten, "{e}");
}

#[tokio::test]
async fn a_node_that_never_says_hello_is_skipped() {
    let (silent, _) = fake(Behaviour::Silent).await;
    let (l, at_l) = fake(Behaviour::Accept).await;
    let cfg = cfg().with_connect_timeout(Duration::from_millis(200));
    let c = Client::connect(&format!("{silent},{l}"), &cfg).await.unwrap();
    c.append(b"x").await.unwrap();
    assert_eq!(at_l.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn many_tasks_replace_the_connection_once() {
    let (leader, at_leader, conns_leader) = fake_counting(Behaviour::Accept).await;
    let (follower, _) = fake(Behaviour::Refuse(ErrorCode::NotLeader, leader.clone())).await;
    let c = Client::connect(&format!("{follower},{leader}"), &cfg()).await.unwrap();
    let tasks: Vec<_> = (0..16u8)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move { c.append(&[i]).await })
        })
        .collect();
    let mut offsets = Vec::new();
    for t in tasks {
        offsets.push(t.await.unwrap().unwrap().offset);
    }
    offsets.sort();
    assert_eq!(offsets, (0..16).collect::<Vec<u64>>());
    assert_eq!(at_leader.load(Ordering::SeqCst), 16);
    assert_eq!(conns_leader.load(Ordering::SeqCst), 1, "one new connection shared by every task");
}

#[tokio::test]
async fn a_connection_lost_after_sending_is_unknown_and_never_resent() {
    let (d, at_d) = fake(Behaviour::Drop).await;
    let (l, at_l) = fake(Behaviour::Accept).await;
    let c = Client::connect(&format!("{d},{l}"), &cfg()).await.unwrap();
    let e = c.append(b"x").await.unwrap_err();
    assert_eq!(e.outcome(), Outcome::Unknown, "{e}");
    assert_eq!((at_d.load(Ordering::SeqCst), at_l.load(Ordering::SeqCst)), (1, 0), "not re-sent anywhere");
    // The next append goes to the other node.
    c.append(b"y").await.unwrap();
    assert_eq!(at_l.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_budget_ends_with_a_not_written_error_when_every_node_refuses() {
    let (a, at_a) = fake(Behaviour::Refuse(ErrorCode::NotLeader, String::new())).await;
    let (b, at_b) = fake(Behaviour::Refuse(ErrorCode::Fenced, "old".into())).await;
    let c = Client::connect(&format!("{a},{b}"), &cfg()).await.unwrap();
    let t0 = std::time::Instant::now();
    let e = c.append(b"x").await.unwrap_err();
    let took = t0.elapsed();
    assert_eq!(e.outcome(), Outcome::NotWritten, "{e}");
    assert!(at_a.load(Ordering::SeqCst) >= 2 && at_b.load(Ordering::SeqCst) >= 1, "retried on both");
    assert!(matches!(e.code(), Some(ErrorCode::NotLeader | ErrorCode::Fenced)));
    // Back-off 20+40+80+100+100+100+100 ms fits in the 600 ms budget; the next would not.
    assert!(took >= Duration::from_millis(500), "gave up early: {took:?}");
    assert!(took < Duration::from_secs(3), "budget not enforced: {took:?}");
}

#[tokio::test]
async fn unknown_outcome_answers_are_not_retried() {
    for code in [ErrorCode::OutcomeUnknown, ErrorCode::ReplicationTimeout, ErrorCode::Internal] {
        let (a, at_a) = fake(Behaviour::Refuse(code, "lost".into())).await;
        let (b, at_b) = fake(Behaviour::Accept).await;
        let c = Client::connect(&format!("{a},{b}"), &cfg()).await.unwrap();
        let e = c.append(b"x").await.unwrap_err();
        assert_eq!(e.code(), Some(code));
        assert_eq!(e.outcome(), Outcome::Unknown, "{code:?}");
        assert_eq!((at_a.load(Ordering::SeqCst), at_b.load(Ordering::SeqCst)), (1, 0), "{code:?}");
    }
}

/// Plaintext, a 600 ms budget; the lease the fakes advertise is 200 ms.
const LEASE_MS: u32 = 200;

#[tokio::test]
async fn a_silent_leader_is_abandoned_after_its_lease_and_not_tried_again() {
    let (frozen, at_frozen, conns_frozen) = fake_node(Behaviour::Frozen, leader(5, LEASE_MS)).await;
    let (next, at_next, _) = fake_node(Behaviour::Accept, leader(7, LEASE_MS)).await;
    let c = Client::connect(&format!("{frozen},{next}"), &cfg().with_request_timeout(Duration::from_secs(30)))
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    let e = c.append(b"x").await.unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(e, Error::Abandoned(_)), "{e}");
    assert_eq!(e.outcome(), Outcome::Unknown);
    // Abandoned after a lease of silence (probed after half of it), not the request timeout.
    assert!(took >= Duration::from_millis(LEASE_MS as u64) && took < Duration::from_secs(2), "{took:?}");
    for p in [b"y", b"z"] {
        c.append(p).await.unwrap();
    }
    let n = |a: &AtomicUsize| a.load(Ordering::SeqCst);
    assert_eq!((n(&at_frozen), n(&conns_frozen), n(&at_next)), (1, 1, 2), "went back to the silent node");
}

#[tokio::test]
async fn a_slow_leader_that_answers_probes_is_waited_for() {
    // It answers the append only after the second probe: three half-leases at least.
    let (slow, at_slow, _) = fake_node(Behaviour::Hold(2), leader(5, LEASE_MS)).await;
    let c = Client::connect(&slow, &cfg()).await.unwrap();
    let t0 = std::time::Instant::now();
    c.append(b"x").await.unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(LEASE_MS as u64), "answered before being probed");
    assert_eq!(at_slow.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_name_from_an_older_epoch_and_a_former_leader_are_not_followed() {
    // X: a follower that knows epoch 7 and names no leader (an older server's form).
    let x_view = Some(Leadership { lease_ms: LEASE_MS, epoch: 7, state: LeaderState::Unknown });
    let no_name = Hint { epoch: 7, state: LeaderState::Unknown, retry_ms: 0 };
    let (x, _, _) =
        fake_node(Behaviour::Hint(ErrorCode::NotLeader, String::new(), no_name), Hello(Role::Follower, 7, x_view))
            .await;
    let (old, at_old, conns_old) = fake_node(Behaviour::Accept, leader(5, LEASE_MS)).await;
    let (new, at_new, _) = fake_node(Behaviour::Accept, leader(7, LEASE_MS)).await;
    // F: a follower still naming the leader of epoch 5.
    let stale = Hint { epoch: 5, state: LeaderState::Live, retry_ms: 0 };
    let (f, at_f, _) =
        fake_node(Behaviour::Hint(ErrorCode::NotLeader, old.clone(), stale), Hello(Role::Follower, 5, None)).await;
    let n = |a: &AtomicUsize| a.load(Ordering::SeqCst);
    // Epoch 7 learned from X; F's name (epoch 5, outside the list) is not followed.
    let c = Client::connect(&format!("{x},{f},{new}"), &cfg()).await.unwrap();
    c.append(b"a").await.unwrap();
    assert_eq!((n(&at_f), n(&conns_old), n(&at_new)), (1, 0, 1), "followed a stale name");
    // A node that still leads epoch 5 is connected to, seen to be a former leader, and
    // not used.
    let c = Client::connect(&format!("{x},{old},{new}"), &cfg()).await.unwrap();
    c.append(b"b").await.unwrap();
    assert_eq!((n(&at_old), n(&conns_old), n(&at_new)), (0, 1, 2), "used a former leader");
}

#[tokio::test]
async fn no_live_leader_means_waiting_on_the_node_that_said_so() {
    let lapsed = Hint { epoch: 6, state: LeaderState::Lapsed, retry_ms: 30 };
    let (f, at_f, conns_f) =
        fake_node(Behaviour::Hint(ErrorCode::NotLeader, String::new(), lapsed), Hello(Role::Follower, 6, None)).await;
    let (other, at_other, _) = fake_node(Behaviour::Accept, leader(5, LEASE_MS)).await;
    let c = Client::connect(&format!("{f},{other}"), &cfg()).await.unwrap();
    let e = c.append(b"x").await.unwrap_err();
    assert_eq!(e.outcome(), Outcome::NotWritten, "{e}");
    let n = |a: &AtomicUsize| a.load(Ordering::SeqCst);
    // Asked again every 30 ms (the hint) for the 600 ms budget, on the same connection (a
    // poll costs no handshake), never the other node (whose epoch 5 is older than the 6
    // the follower told anyway).
    assert!(n(&at_f) >= 10, "asked {} times", n(&at_f));
    assert_eq!(n(&conns_f), 1);
    assert_eq!(n(&at_other), 0);
}

#[tokio::test]
async fn an_attempt_lost_on_a_followers_connection_was_not_written_and_moves_on() {
    // A follower restarting to take over closes its connections: what it had read it
    // had refused anyway.
    let (f, at_f, _) = fake_node(Behaviour::Drop, Hello(Role::Follower, 5, None)).await;
    let (l, at_l, _) = fake_node(Behaviour::Accept, leader(6, LEASE_MS)).await;
    let c = Client::connect(&format!("{f},{l}"), &cfg()).await.unwrap();
    c.append(b"x").await.unwrap();
    assert_eq!((at_f.load(Ordering::SeqCst), at_l.load(Ordering::SeqCst)), (1, 1));
}

#[test]
fn every_error_code_is_classified() {
    let not_written = [
        ErrorCode::BadFrame,
        ErrorCode::UnknownOpcode,
        ErrorCode::TooLarge,
        ErrorCode::BadVersion,
        ErrorCode::NotLeader,
        ErrorCode::NoSuchShard,
        ErrorCode::Overloaded,
        ErrorCode::Fenced,
        ErrorCode::ShuttingDown,
        ErrorCode::BadHandshake,
        ErrorCode::Unavailable,
    ];
    for v in 1..=17u16 {
        let code = ErrorCode::from_u16(v).unwrap();
        let e = Error::Server { code: v, message: String::new(), hint: None };
        let want = if not_written.contains(&code) { Outcome::NotWritten } else { Outcome::Unknown };
        assert_eq!(e.outcome(), want, "{code:?}");
    }
    assert_eq!(Error::Server { code: 999, message: String::new(), hint: None }.outcome(), Outcome::Unknown);
    assert_eq!(Error::Closed.outcome(), Outcome::Unknown);
    assert_eq!(Error::Io(std::io::Error::other("reset")).outcome(), Outcome::Unknown);
    assert_eq!(Error::Timeout(Duration::from_secs(1)).outcome(), Outcome::Unknown);
    assert_eq!(Error::Protocol("x".into()).outcome(), Outcome::Unknown);
    assert_eq!(Error::NotSent.outcome(), Outcome::NotWritten);
    assert_eq!(Error::Unreachable("x".into()).outcome(), Outcome::NotWritten);
}

/// Half-way through a rolling upgrade a client newer than a node: it opens with protocol
/// version 3, is refused with `BadVersion`, and opens again with version 2.
#[tokio::test]
async fn a_server_older_than_the_client_is_spoken_to_in_version_2() {
    let (old, appends, conns) = fake_node(Behaviour::Old(0), OLD_LEADER).await;
    let c = Client::connect(&old, &cfg()).await.unwrap();
    for want in 0..3 {
        assert_eq!(c.append(b"x").await.unwrap().offset, want);
    }
    assert_eq!((appends.load(Ordering::SeqCst), conns.load(Ordering::SeqCst)), (3, 2), "one refused, one used");
}

/// A lease learned from a version-3 node is not applied to a version-2 connection: its
/// node tells nothing of leases and would refuse a version-3 probe, so a slow answer
/// there is waited for (as before version 3), not given up after the lease.
#[tokio::test]
async fn no_probe_on_a_version_2_connection_after_a_lease_was_learned() {
    let (old, appends, _) = fake_node(Behaviour::Old(700), OLD_LEADER).await;
    let (new, _, _) = fake_node(
        Behaviour::Refuse(ErrorCode::NotLeader, old.clone()),
        Hello(Role::Follower, 1, Some(Leadership { lease_ms: 200, epoch: 1, state: LeaderState::Live })),
    )
    .await;
    let c = Client::connect(&format!("{new},{old}"), &cfg()).await.unwrap();
    assert_eq!(c.append(b"x").await.unwrap().offset, 0);
    assert_eq!(appends.load(Ordering::SeqCst), 1, "sent once, answered after 700 ms");
}
