//! The client's failover rules against fake nodes speaking the real codec (plaintext):
//! refusals where nothing was written are retried elsewhere; a connection that breaks
//! after the append was sent is an unknown outcome and is never re-sent.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use corelog_client::codec::{self, decode_frame, ErrorCode, Request, Response, Role};
use corelog_client::{Client, ClientConfig, Outcome};
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
}

/// A fake node: returns its address and the number of appends it received.
async fn fake(b: Behaviour) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let (b, count) = (b.clone(), count.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Ok(Some((f, used))) = decode_frame(&buf) {
                        let mut out = Vec::new();
                        match Request::parse(&f).unwrap() {
                            Request::Hello { .. } => Response::HelloOk {
                                version: codec::PROTOCOL_VERSION,
                                shard: 0,
                                shard_count: 1,
                                role: Role::Leader,
                                epoch: 1,
                            }
                            .encode(f.req_id, &mut out),
                            Request::Append { .. } => {
                                let n = count.fetch_add(1, Ordering::SeqCst);
                                match &b {
                                    Behaviour::Refuse(code, msg) => {
                                        codec::encode_error(f.req_id, *code as u16, msg, &mut out)
                                    }
                                    Behaviour::Drop => return,
                                    Behaviour::Accept => codec::encode_appended(f.req_id, 0, n as u64, &mut out),
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
    (addr, seen)
}

fn cfg() -> ClientConfig {
    ClientConfig::insecure().with_failover_timeout(Duration::from_millis(600))
}

#[tokio::test]
async fn not_leader_with_an_address_is_followed() {
    let (leader, at_leader) = fake(Behaviour::Accept).await;
    let (follower, at_follower) = fake(Behaviour::Refuse(ErrorCode::NotLeader, leader.clone())).await;
    let c = Client::connect(&format!("{follower},{leader}"), &cfg()).await.unwrap();
    assert_eq!(c.append(b"x").await.unwrap().offset, 0);
    assert_eq!(c.append(b"y").await.unwrap().offset, 1, "stays on the leader");
    assert_eq!((at_follower.load(Ordering::SeqCst), at_leader.load(Ordering::SeqCst)), (1, 2));
}

#[tokio::test]
async fn empty_not_leader_and_unavailable_move_to_the_next_address() {
    let (f, _) = fake(Behaviour::Refuse(ErrorCode::NotLeader, String::new())).await;
    let (u, _) = fake(Behaviour::Refuse(ErrorCode::Unavailable, "held".into())).await;
    let (l, at_l) = fake(Behaviour::Accept).await;
    let c = Client::connect(&format!("{f},{u},{l}"), &cfg()).await.unwrap();
    c.append(b"x").await.unwrap();
    assert_eq!(at_l.load(Ordering::SeqCst), 1);
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
    let e = c.append(b"x").await.unwrap_err();
    assert_eq!(e.outcome(), Outcome::NotWritten, "{e}");
    assert!(at_a.load(Ordering::SeqCst) >= 2 && at_b.load(Ordering::SeqCst) >= 1, "retried on both");
    assert!(matches!(e.code(), Some(ErrorCode::NotLeader | ErrorCode::Fenced)));
}

#[tokio::test]
async fn unknown_outcome_answers_are_not_retried() {
    let (a, at_a) = fake(Behaviour::Refuse(ErrorCode::OutcomeUnknown, "lost".into())).await;
    let (b, at_b) = fake(Behaviour::Accept).await;
    let c = Client::connect(&format!("{a},{b}"), &cfg()).await.unwrap();
    let e = c.append(b"x").await.unwrap_err();
    assert_eq!(e.outcome(), Outcome::Unknown);
    assert_eq!((at_a.load(Ordering::SeqCst), at_b.load(Ordering::SeqCst)), (1, 0));
}
