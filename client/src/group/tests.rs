//! The consumer against a scripted node: each test plays the server's side of the wire
//! contract frame by frame on plain TCP.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::codec::{
    decode_frame, ErrorCode, GroupReq, GroupResp, LeaderState, Leadership, Request, Response, Role, NO_COMMIT,
};
use crate::record::{encode_ex, Ext, StreamPos};

/// One end of a connection, speaking frames.
struct Peer(TcpStream);

impl Peer {
    async fn frame(&mut self) -> Vec<u8> {
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len).await.unwrap();
        let mut rest = vec![0u8; u32::from_le_bytes(len) as usize];
        self.0.read_exact(&mut rest).await.unwrap();
        [&len[..], &rest].concat()
    }

    /// The next request other than a heartbeat, with its id.
    async fn request<T>(&mut self, f: impl FnOnce(u64, Request<'_>) -> T) -> T {
        loop {
            let buf = self.frame().await;
            let (fr, _) = decode_frame(&buf).unwrap().unwrap();
            match Request::parse(&fr).unwrap() {
                Request::Group(GroupReq::Heartbeat { .. }) => continue,
                r => return f(fr.req_id, r),
            }
        }
    }

    async fn send(&mut self, req_id: u64, r: Response<'_>) {
        let mut out = Vec::new();
        r.encode(req_id, &mut out);
        self.0.write_all(&out).await.unwrap();
    }

    /// Answers the `Hello`.
    async fn hello(&mut self, role: Role) {
        self.request(|_, r| assert!(matches!(r, Request::Hello { version: 4 | 3 }), "{r:?}")).await;
        let leadership = Some(Leadership { lease_ms: 0, epoch: 1, state: LeaderState::Unknown });
        self.send(0, Response::HelloOk { version: 4, shard: 0, shard_count: 1, role, epoch: 1, leadership }).await;
    }

    /// Answers the `Hello` and takes the join: its id.
    async fn joined(&mut self, role: Role) -> u64 {
        self.hello(role).await;
        self.request(|id, r| {
            let want = GroupReq::Join { group: "g", member: "m1", prefix: "ord-", k: 2 };
            assert_eq!(r, Request::Group(want));
            id
        })
        .await
    }
}

/// A scripted node of one shard: its client port (answering `Hello`s, for the shard
/// count) and its shard 0 direct port (the client port + 1). Returns its client address.
async fn node(role: Role) -> (String, TcpListener) {
    loop {
        let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = client.local_addr().unwrap().port();
        let Ok(direct) = TcpListener::bind(("127.0.0.1", port + 1)).await else { continue };
        tokio::spawn(async move {
            while let Ok((s, _)) = client.accept().await {
                tokio::spawn(async move {
                    let mut p = Peer(s);
                    p.hello(role).await;
                    let _ = p.0.read(&mut [0u8; 64]).await; // held until the client closes it
                });
            }
        });
        return (format!("127.0.0.1:{port}"), direct);
    }
}

/// The next connection to `l`, its `Hello` answered as `role` and its join taken: the
/// peer and the join's id.
async fn accept_join(l: &TcpListener, role: Role) -> (Peer, u64) {
    let mut p = Peer(l.accept().await.unwrap().0);
    let join = p.joined(role).await;
    (p, join)
}

/// A `GroupRecords` body of stream events at `offsets` of stream "ord-1".
fn records(offsets: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    for (v, &o) in offsets.iter().enumerate() {
        let ext = Ext { producer: None, stream: Some(StreamPos { name: "ord-1", version: v as u64 }) };
        encode_ex(o, 1, ext, format!("e{o}").as_bytes(), &mut out);
    }
    out
}

fn opts() -> ConsumerOptions {
    ConsumerOptions { k: 2, auto_commit: false, heartbeat: Duration::from_millis(20), ..Default::default() }
}

async fn push_records(p: &mut Peer, join: u64, gen: u64, offsets: &[u64], next_offset: u64) {
    let recs = records(offsets);
    let count = offsets.len() as u32;
    p.send(join, Response::Group(GroupResp::Records { gen, next_offset, count, records: &recs })).await;
}

#[tokio::test]
async fn joins_delivers_commits_heartbeats_and_joins_again_after_the_session_ended() {
    let (addr, direct) = node(Role::Leader).await;
    let server = async {
        let (mut p, join) = accept_join(&direct, Role::Leader).await;
        let buckets = vec![(0, NO_COMMIT), (1, NO_COMMIT)];
        p.send(join, Response::Group(GroupResp::Assigned { gen: 1, shard_count: 1, k: 2, buckets })).await;
        push_records(&mut p, join, 1, &[0, 2], 3).await;
        let (id, commit) = p.request(|id, r| (id, commit_of(r))).await;
        assert_eq!(commit, GroupReq::Commit { gen: 1, next: 3 });
        p.send(id, Response::Group(GroupResp::Committed { gen: 1, next: 3, offset: 7 })).await;
        // Idle now: the member keeps its session with heartbeats of its generation.
        let buf = p.frame().await;
        let (fr, _) = decode_frame(&buf).unwrap().unwrap();
        assert_eq!(Request::parse(&fr).unwrap(), Request::Group(GroupReq::Heartbeat { gen: 1 }));
        // The session runs out: the server ends the connection.
        p.send(join, Response::Error { code: ErrorCode::StaleGeneration as u16, message: "session ended" }).await;
        drop(p);
        let (mut p, join) = accept_join(&direct, Role::Leader).await;
        let buckets = vec![(1, 3)];
        p.send(join, Response::Group(GroupResp::Assigned { gen: 2, shard_count: 1, k: 2, buckets })).await;
        push_records(&mut p, join, 2, &[4], 5).await;
        // A newer generation opened before the member's commit of gen 2 arrived.
        let (id, commit) = p.request(|id, r| (id, commit_of(r))).await;
        assert_eq!(commit, GroupReq::Commit { gen: 2, next: 5 });
        p.send(id, Response::Error { code: ErrorCode::StaleGeneration as u16, message: "generation 3" }).await;
        p
    };
    let client = async {
        let mut c = Consumer::join(&addr, &ClientConfig::insecure(), "g", "m1", "ord-", &opts()).await.unwrap();
        let got = [c.next().await.unwrap().unwrap(), c.next().await.unwrap().unwrap()];
        let offsets: Vec<_> = got.iter().map(|e| (e.shard, e.gen, e.record.offset)).collect();
        assert_eq!(offsets, [(0, 1, 0), (0, 1, 2)]);
        assert_eq!(got[1].record.stream.as_ref().map(|s| s.version), Some(1));
        assert_eq!(c.assignment()[&0].buckets, vec![(0, NO_COMMIT), (1, NO_COMMIT)]);
        let done = c.commit().await.unwrap();
        let want = Commit { shard: 0, gen: 1, next: 3, outcome: CommitOutcome::Committed { offset: 7 } };
        assert_eq!(done, vec![want]);
        assert!(c.commit().await.unwrap().is_empty(), "nothing new to commit");
        assert!(matches!(c.next_delivery().await.unwrap(), Some(Delivery::Rejoining { shard: 0, .. })));
        assert!(c.assignment().is_empty());
        let Some(Delivery::Assigned { shard: 0, assignment }) = c.next_delivery().await.unwrap() else { panic!() };
        assert_eq!(assignment, Assignment { gen: 2, buckets: vec![(1, 3)] });
        let e = c.next().await.unwrap().unwrap();
        assert_eq!((e.gen, e.record.offset, &e.record.payload[..]), (2, 4, &b"e4"[..]));
        let done = c.commit().await.unwrap();
        assert_eq!(done, vec![Commit { shard: 0, gen: 2, next: 5, outcome: CommitOutcome::Skipped }]);
        let s = c.stats();
        assert_eq!((s.events, s.assignments, s.rejoins, s.committed, s.skipped), (3, 2, 1, 1, 1));
        c
    };
    let (_server, _client) = tokio::join!(server, client);
}

#[tokio::test]
async fn a_follower_refusal_sends_the_join_to_the_leader_it_names() {
    let (follower, f_direct) = node(Role::Follower).await;
    let (leader, l_direct) = node(Role::Leader).await;
    let server = async {
        let (mut p, join) = accept_join(&f_direct, Role::Follower).await;
        p.send(join, Response::Error { code: ErrorCode::NotLeader as u16, message: &leader }).await;
        let (mut p, join) = accept_join(&l_direct, Role::Leader).await;
        p.send(join, Response::Group(GroupResp::Assigned { gen: 4, shard_count: 1, k: 2, buckets: vec![] })).await;
        p
    };
    let client = async {
        let c = Consumer::join(&follower, &ClientConfig::insecure(), "g", "m1", "ord-", &opts()).await.unwrap();
        assert_eq!(c.assignment().len(), 0, "nothing yielded yet");
        c
    };
    let (mut p, mut c) = tokio::join!(server, client);
    let Some(Delivery::Assigned { shard: 0, assignment }) = c.next_delivery().await.unwrap() else { panic!() };
    assert_eq!(assignment, Assignment { gen: 4, buckets: vec![] });
    // Dropping the consumer leaves the group: its connection closes.
    drop(c);
    let closed = async {
        while p.0.read(&mut [0u8; 64]).await.unwrap() > 0 {} // heartbeats, then the end
    };
    tokio::time::timeout(Duration::from_secs(10), closed).await.expect("the member's connection closed");
}

#[tokio::test]
async fn a_refusal_no_retry_cures_fails_the_join_at_once() {
    let (addr, direct) = node(Role::Leader).await;
    let server = async {
        let (mut p, join) = accept_join(&direct, Role::Leader).await;
        p.send(join, Response::Error { code: ErrorCode::BadRequest as u16, message: "the group's prefix is \"x\"" })
            .await;
        p
    };
    let (cfg, opts) = (ClientConfig::insecure(), opts());
    let client = Consumer::join(&addr, &cfg, "g", "m1", "ord-", &opts);
    let (_server, r) = tokio::join!(server, client);
    let e = r.err().expect("refused");
    assert_eq!(e.code(), Some(ErrorCode::BadRequest), "{e}");
}

/// A commit request, detached from its frame's buffer.
fn commit_of(r: Request<'_>) -> GroupReq<'static> {
    match r {
        Request::Group(GroupReq::Commit { gen, next }) => GroupReq::Commit { gen, next },
        r => panic!("expected a commit, got {r:?}"),
    }
}
