//! mTLS refusal, malformed input, tail, metrics — against real processes.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use corelog_client::codec::{self, decode_frame, ErrorCode, Request, Response, PROTOCOL_VERSION};
use corelog_client::{Client, ClientConfig, Tail};

fn node(dir: &TempDir, certs: Option<&std::path::Path>, extra: &[&str]) -> Node {
    Node::standalone("node", &dir.path().join("data"), certs, extra)
}

/// `node`, started.
fn started(dir: &TempDir, certs: Option<&std::path::Path>, extra: &[&str]) -> Node {
    let mut n = node(dir, certs, extra);
    n.start();
    n
}

#[test]
fn clients_without_a_valid_certificate_are_refused_and_others_keep_working() {
    let (dir, certs) = dir_with_certs("mtls");
    let (_other, other_certs) = dir_with_certs("mtls-other");
    let mut n = started(&dir, Some(&certs), &[]);
    let rt = runtime();
    rt.block_on(async {
        let good = Client::connect(&n.addr(), &client_config(Some(&certs))).await.unwrap();
        good.append(b"before").await.unwrap();
        // 1. No client certificate.
        let no_cert = corelog_client::tls::client_config(&certs.join("ca.pem"), None).unwrap();
        let cfg = ClientConfig::from_rustls(Arc::new(no_cert), "localhost").unwrap();
        let r = async { Client::connect(&n.addr(), &cfg).await?.append(b"x").await }.await;
        assert!(r.is_err(), "no client certificate must be refused");
        // 2. A client certificate from another CA (trusting our server's CA).
        let foreign = corelog_client::tls::client_config(
            &certs.join("ca.pem"),
            Some((&other_certs.join("client.pem"), &other_certs.join("client.key"))),
        )
        .unwrap();
        let cfg = ClientConfig::from_rustls(Arc::new(foreign), "localhost").unwrap();
        let r = async { Client::connect(&n.addr(), &cfg).await?.append(b"x").await }.await;
        assert!(r.is_err(), "a certificate from another CA must be refused");
        // 3. Plaintext.
        let r = async { Client::connect(&n.addr(), &ClientConfig::insecure()).await?.append(b"x").await }.await;
        assert!(r.is_err(), "plaintext must be refused");
        // The good connection and new good ones still work.
        good.append(b"after").await.unwrap();
        let again = Client::connect(&n.addr(), &client_config(Some(&certs))).await.unwrap();
        again.append(b"again").await.unwrap();
    });
    assert!(n.is_running());
    assert!(n.metric_sum("corelog_tls_handshake_failures_total") >= 2.0);
}

fn raw(n: &Node) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", n.ports.client)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn hello() -> Vec<u8> {
    let mut v = Vec::new();
    Request::Hello { version: PROTOCOL_VERSION }.encode(1, &mut v);
    v
}

/// Reads frames until the server closes; returns the error codes seen.
fn error_codes_until_close(mut s: TcpStream) -> Vec<u16> {
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf); // ends when the server closes
    let mut codes = Vec::new();
    let mut at = 0;
    while let Ok(Some((f, used))) = decode_frame(&buf[at..]) {
        if let Ok(Response::Error { code, .. }) = Response::parse(&f) {
            codes.push(code);
        }
        at += used;
    }
    codes
}

#[test]
fn malformed_input_gets_an_error_or_a_close_and_never_hurts_other_connections() {
    let dir = TempDir::new("malformed");
    let mut n = started(&dir, None, &[]);
    let rt = runtime();
    let good = rt.block_on(Client::connect(&n.addr(), &ClientConfig::insecure())).unwrap();
    rt.block_on(good.append(b"before")).unwrap();
    // Bad length (below the minimum).
    let mut s = raw(&n);
    s.write_all(&hello()).unwrap();
    s.write_all(&[1, 0, 0, 0, 0]).unwrap();
    assert!(error_codes_until_close(s).contains(&(ErrorCode::BadFrame as u16)));
    // Unknown opcode.
    let mut s = raw(&n);
    let mut f = hello();
    f.extend_from_slice(&[9, 0, 0, 0, 0x7e, 0, 0, 0, 0, 0, 0, 0, 0]);
    s.write_all(&f).unwrap();
    assert!(error_codes_until_close(s).contains(&(ErrorCode::UnknownOpcode as u16)));
    // Oversized payload (valid frame size, payload above MAX_PAYLOAD).
    let mut s = raw(&n);
    let mut f = hello();
    let body = vec![0u8; codec::MAX_PAYLOAD + 1];
    f.extend_from_slice(&((9 + body.len()) as u32).to_le_bytes());
    f.push(codec::op::APPEND);
    f.extend_from_slice(&7u64.to_le_bytes());
    f.extend_from_slice(&body);
    s.write_all(&f).unwrap();
    assert!(error_codes_until_close(s).contains(&(ErrorCode::TooLarge as u16)));
    // Frame length above MAX_FRAME: refused unread.
    let mut s = raw(&n);
    let mut f = hello();
    f.extend_from_slice(&(u32::MAX).to_le_bytes());
    s.write_all(&f).unwrap();
    assert!(error_codes_until_close(s).contains(&(ErrorCode::TooLarge as u16)));
    // A request before Hello.
    let mut s = raw(&n);
    let mut f = Vec::new();
    codec::encode_append(1, b"x", &mut f);
    s.write_all(&f).unwrap();
    assert!(error_codes_until_close(s).contains(&(ErrorCode::BadHandshake as u16)));
    // Truncated frame, then the client goes away.
    let mut s = raw(&n);
    let mut f = hello();
    let mut a = Vec::new();
    codec::encode_append(2, b"truncated", &mut a);
    f.extend_from_slice(&a[..a.len() - 3]);
    s.write_all(&f).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = error_codes_until_close(s);
    // Random bytes on many connections.
    for i in 0..200 {
        let mut s = raw(&n);
        let len = 1 + (rand::random::<usize>() % 300);
        let mut junk: Vec<u8> = (0..len).map(|_| rand::random()).collect();
        if i % 2 == 0 {
            junk.splice(0..0, hello());
        }
        let _ = s.write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = error_codes_until_close(s);
    }
    assert!(n.is_running(), "server survived:\n{}", n.log_text());
    rt.block_on(good.append(b"after")).unwrap();
    assert!(!n.log_text().contains("panicked"), "{}", n.log_text());
}

#[test]
fn bad_idempotent_appends_get_clear_errors_and_never_hurt_other_connections() {
    let dir = TempDir::new("bad_append2");
    let mut n = started(&dir, None, &["--shard-count", "1"]);
    let rt = runtime();
    let good = rt.block_on(Client::connect(&n.addr(), &ClientConfig::insecure())).unwrap();
    rt.block_on(good.append(b"before")).unwrap();
    let p = |seq| Some(codec::ProducerSeq { id: 77, seq });
    // Append2 on a connection that said Hello with version 1.
    let mut s = raw(&n);
    let mut f = Vec::new();
    Request::Hello { version: 1 }.encode(1, &mut f);
    codec::encode_append2(2, p(0), None, b"x", &mut f);
    s.write_all(&f).unwrap();
    assert_eq!(error_codes_until_close(s), vec![ErrorCode::BadVersion as u16]);
    // A protocol version this server does not speak.
    let mut s = raw(&n);
    let mut f = Vec::new();
    Request::Hello { version: PROTOCOL_VERSION + 1 }.encode(1, &mut f);
    s.write_all(&f).unwrap();
    assert_eq!(error_codes_until_close(s), vec![ErrorCode::BadVersion as u16]);
    // Unknown Append2 flags, and a producer header cut short: BadFrame, then close.
    for body in [vec![0x80u8, b'x'], vec![codec::APPEND_FLAG_PRODUCER, 1, 2, 3]] {
        let mut s = raw(&n);
        let mut f = hello();
        f.extend_from_slice(&((9 + body.len()) as u32).to_le_bytes());
        f.push(codec::op::APPEND2);
        f.extend_from_slice(&2u64.to_le_bytes());
        f.extend_from_slice(&body);
        s.write_all(&f).unwrap();
        assert_eq!(error_codes_until_close(s), vec![ErrorCode::BadFrame as u16]);
    }
    // Sequences out of line are refused on a connection that stays usable: the first
    // sequence of an unknown producer must be 0; one far in the future is a gap; the
    // appends after them in the same pipeline are answered in order.
    let mut s = raw(&n);
    let mut f = hello();
    codec::encode_append2(2, p(5), None, b"a", &mut f);
    codec::encode_append2(3, p(0), None, b"b", &mut f);
    codec::encode_append2(4, p(u64::MAX - 1), None, b"c", &mut f);
    codec::encode_append2(5, p(1), None, b"d", &mut f);
    codec::encode_append2(6, p(0), None, b"e", &mut f);
    codec::encode_append2(7, None, None, b"f", &mut f);
    s.write_all(&f).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let mut got = Vec::new();
    let mut at = 0;
    while let Ok(Some((f, used))) = decode_frame(&buf[at..]) {
        got.push((f.req_id, owned(&Response::parse(&f).unwrap())));
        at += used;
    }
    let ids: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 6, 7], "answers in request order: {got:?}");
    assert!(
        matches!(&got[1].1, Owned::Error(c, m) if *c == ErrorCode::UnknownProducer as u16 && m.contains("sequence 5")),
        "{got:?}"
    );
    let Owned::Appended2(off0, false) = got[2].1 else { panic!("{got:?}") };
    assert!(
        matches!(&got[3].1, Owned::Error(c, m) if *c == ErrorCode::SequenceGap as u16 && m.contains("expects sequence 1")),
        "{got:?}"
    );
    assert!(matches!(got[4].1, Owned::Appended2(o, false) if o == off0 + 1), "{got:?}");
    assert!(matches!(got[5].1, Owned::Appended2(o, true) if o == off0), "retry of 0: {got:?}");
    assert!(matches!(got[6].1, Owned::Appended2(o, false) if o == off0 + 2), "{got:?}");
    assert!(n.is_running(), "server survived:\n{}", n.log_text());
    rt.block_on(good.append(b"after")).unwrap();
    let recs = rt.block_on(read_all(&n.addr(), &ClientConfig::insecure(), 0));
    let payloads: Vec<&[u8]> = recs.iter().map(|r| r.payload.as_slice()).collect();
    assert_eq!(payloads, vec![&b"before"[..], b"b", b"d", b"f", b"after"], "only the accepted appends are stored");
}

/// A response detached from its buffer (for comparisons in tests).
#[derive(Debug)]
enum Owned {
    HelloOk,
    Appended2(u64, bool),
    Error(u16, String),
    Other,
}

fn owned(r: &Response<'_>) -> Owned {
    match r {
        Response::HelloOk { .. } => Owned::HelloOk,
        Response::Appended2 { offset, duplicate, .. } => Owned::Appended2(*offset, *duplicate),
        Response::Error { code, message } => Owned::Error(*code, message.to_string()),
        _ => Owned::Other,
    }
}

#[test]
fn a_tail_started_before_a_burst_delivers_all_of_it_in_order() {
    let (dir, certs) = dir_with_certs("tail");
    let n = started(&dir, Some(&certs), &["--shard-count", "1"]);
    let cfg = client_config(Some(&certs));
    let rt = runtime();
    rt.block_on(async {
        let mut tail = Tail::start(&n.addr(), &cfg, 0, 0).await.unwrap();
        let acked = Acked::default();
        assert_eq!(load(&n.addr(), &cfg, 10, 300, "burst", &acked).await, 0);
        let acked = acked.lock().unwrap().clone();
        for off in 0..3000u64 {
            let r = tokio::time::timeout(Duration::from_secs(20), tail.next())
                .await
                .expect("tail delivers")
                .unwrap()
                .unwrap();
            assert_eq!(r.offset, off);
            let pos = corelog_client::Position { shard: 0, offset: off };
            assert_eq!(&r.payload, acked.get(&pos).unwrap());
        }
    });
}

#[test]
fn metrics_reflect_the_appends_made() {
    let dir = TempDir::new("metrics");
    let n = started(&dir, None, &[]);
    let rt = runtime();
    let acked = Acked::default();
    assert_eq!(rt.block_on(load(&n.addr(), &ClientConfig::insecure(), 8, 125, "m", &acked)), 0);
    assert_eq!(n.metric_sum("corelog_appends_total"), 1000.0);
    let batches = n.metric_sum("corelog_batches_total");
    assert!((1.0..=1000.0).contains(&batches), "batches {batches}");
    assert_eq!(n.metric_sum("corelog_fsync_seconds_count"), batches);
    assert_eq!(n.metric_sum("corelog_batch_records_sum"), 1000.0);
    let payload_bytes: usize = acked.lock().unwrap().values().map(|p| p.len() + 24).sum();
    assert_eq!(n.metric_sum("corelog_append_bytes_total"), payload_bytes as f64);
    let body = http_get(n.ports.metrics, "/metrics").unwrap();
    assert!(body.contains("corelog_appends_total{shard=\"0\"}") && body.contains("corelog_appends_total{shard=\"1\"}"));
    assert!(http_get(n.ports.metrics, "/health").unwrap().starts_with("HTTP/1.1 200"));
}

/// The metrics endpoint serves requests side by side: clients that connect and send
/// nothing (or half a request line), or ask for /metrics and never read, do not keep
/// `/health` from answering; beyond `MAX_HTTP_CONCURRENT` connections are closed at once
/// and counted, and the slots come back when the stuck clients go.
#[test]
fn health_answers_while_scrapers_are_stuck() {
    let dir = TempDir::new("metrics_stuck");
    let n = started(&dir, None, &[]);
    let at = ("127.0.0.1", n.ports.metrics);
    let mut stuck = Vec::new();
    for i in 0..3 {
        let mut s = TcpStream::connect(at).unwrap();
        match i {
            0 => {}
            1 => s.write_all(b"GET /metr").unwrap(),
            _ => s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap(), // and never read
        }
        stuck.push(s);
    }
    let h = http_get(n.ports.metrics, "/health").unwrap();
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    // The silent ones are still open: /health was not waiting for them to time out.
    for s in &stuck[..2] {
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let r = (&*s).read(&mut b);
        assert!(matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "closed early: {r:?}");
    }
    // Fill every slot: the next connection is closed unanswered and counted.
    let more: Vec<TcpStream> =
        (0..corelog_server::metrics::MAX_HTTP_CONCURRENT).map(|_| TcpStream::connect(at).unwrap()).collect();
    let mut refused = TcpStream::connect(at).unwrap();
    refused.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = Vec::new();
    assert_eq!(refused.read_to_end(&mut b).unwrap_or(0), 0, "answered beyond the bound");
    drop(more);
    drop(stuck);
    // Slots are freed when the clients go (their reads fail at once): /health again.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if http_get(n.ports.metrics, "/health").is_ok_and(|h| h.starts_with("HTTP/1.1 200")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "/health never answered again");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(n.metric_sum("corelog_http_refused_total") >= 1.0);
}

/// Connections that never finish the handshake are closed at `--handshake-timeout-ms`:
/// a plain TCP connection that sends nothing to an mTLS node, a half-sent ClientHello,
/// and (plaintext node) a connection that never sends `Hello` (answered `BadHandshake`).
/// Real clients are served meanwhile.
#[test]
fn connections_that_never_finish_the_handshake_are_closed_at_the_deadline() {
    let (dir, certs) = dir_with_certs("hs-deadline");
    let mut tls_node = started(&dir, Some(&certs), &["--handshake-timeout-ms", "500"]);
    let silent = raw(&tls_node);
    let mut half = raw(&tls_node);
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).unwrap(); // a ClientHello's first bytes
    let rt = runtime();
    let good = rt.block_on(Client::connect(&tls_node.addr(), &client_config(Some(&certs)))).unwrap();
    for s in [silent, half] {
        let mut s = s;
        let mut buf = Vec::new();
        // The read timeout (10 s) is far above the deadline: an error here means the
        // server never closed the connection.
        s.read_to_end(&mut buf).expect("the server closes a connection stuck in its TLS handshake");
    }
    rt.block_on(good.append(b"still served")).unwrap();
    assert!(tls_node.metric_sum("corelog_handshake_timeouts_total") >= 2.0);
    tls_node.kill9();

    let dir2 = TempDir::new("hs-deadline-plain");
    let plain = started(&dir2, None, &["--handshake-timeout-ms", "500"]);
    let codes = error_codes_until_close(raw(&plain));
    assert_eq!(codes, vec![ErrorCode::BadHandshake as u16]);
    assert!(plain.metric_sum("corelog_handshake_timeouts_total") >= 1.0);
}

/// The client port refuses a frame larger than the largest request (an `Append` of
/// 64 KiB) from its header alone, without waiting for the body.
#[test]
fn a_frame_above_the_largest_request_is_refused_unread() {
    let dir = TempDir::new("req-limit");
    let n = started(&dir, None, &[]);
    let mut s = raw(&n);
    let mut f = hello();
    f.extend_from_slice(&((codec::MAX_REQUEST_FRAME - 4 + 1) as u32).to_le_bytes());
    f.push(codec::op::APPEND);
    f.extend_from_slice(&7u64.to_le_bytes());
    s.write_all(&f).unwrap(); // the header only: the body never comes
    assert_eq!(error_codes_until_close(s), vec![ErrorCode::TooLarge as u16]);
}

/// Any byte after a `Tail` is answered with `Unexpected` (docs/protocol.md §5.5), the
/// last frame before the close.
#[test]
fn a_byte_after_a_tail_is_answered_unexpected() {
    let dir = TempDir::new("tail-unexpected");
    let n = started(&dir, None, &["--shard-count", "1"]);
    let mut s = raw(&n);
    let mut f = hello();
    Request::Tail { shard: 0, from: 0 }.encode(2, &mut f);
    s.write_all(&f).unwrap();
    let rt = runtime();
    let c = rt.block_on(Client::connect(&n.addr(), &ClientConfig::insecure())).unwrap();
    rt.block_on(c.append(b"tailed")).unwrap();
    s.write_all(&[0]).unwrap();
    let codes = error_codes_until_close(s);
    assert_eq!(codes, vec![ErrorCode::Unexpected as u16]);
}

/// More silent connections than `--max-connections`: the excess is closed at accept
/// (counted), the held ones are closed at the handshake deadline, and a real mTLS client
/// is served afterwards; the process never runs out of descriptors.
#[test]
fn silent_connections_beyond_the_cap_are_refused_and_real_clients_are_served_after() {
    let (dir, certs) = dir_with_certs("conn-cap");
    let n = started(&dir, Some(&certs), &["--max-connections", "20", "--handshake-timeout-ms", "2000"]);
    let silent: Vec<TcpStream> = (0..30).map(|_| raw(&n)).collect();
    for mut s in silent {
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).expect("every silent connection is closed by the server");
    }
    assert_eq!(n.metric_sum("corelog_connections_refused_total"), 10.0);
    assert_eq!(n.metric_sum("corelog_handshake_timeouts_total"), 20.0);
    let rt = runtime();
    let c = rt.block_on(Client::connect(&n.addr(), &client_config(Some(&certs)))).unwrap();
    rt.block_on(c.append(b"served")).unwrap();
    assert!(n.log_text().contains("at most 20 client connections"));
}

/// `corelog certs` output passes a strict RFC 5280 check: `openssl verify -x509_strict`
/// (which requires the Authority Key Identifier) and both key identifiers are present.
#[test]
fn generated_certificates_pass_a_strict_rfc5280_verification() {
    let (_dir, certs) = dir_with_certs("certs-strict");
    if std::process::Command::new("openssl").arg("version").output().is_err() {
        skip("generated_certificates_pass_a_strict_rfc5280_verification", "no openssl binary");
        return;
    }
    for leaf in ["server", "follower", "client"] {
        let pem = certs.join(format!("{leaf}.pem"));
        let v = std::process::Command::new("openssl")
            .args(["verify", "-x509_strict", "-CAfile"])
            .arg(certs.join("ca.pem"))
            .arg(&pem)
            .output()
            .unwrap();
        let out = format!("{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
        assert!(v.status.success() && out.contains(": OK"), "{leaf}: {out}");
        let t =
            std::process::Command::new("openssl").args(["x509", "-noout", "-text", "-in"]).arg(&pem).output().unwrap();
        let text = String::from_utf8_lossy(&t.stdout);
        assert!(
            text.contains("Authority Key Identifier") && text.contains("Subject Key Identifier"),
            "{leaf}:\n{text}"
        );
    }
}

/// `YYYY-MM-DDThh:mm:ss.uuuuuuZ`.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 27
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            26 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Every line a serving node writes carries a UTC timestamp and a level, as text or
/// (`--log-format json`) as one JSON object per line; the start-up lines operators look
/// for (recovery, ready) are among them.
#[test]
fn server_log_lines_carry_a_timestamp_and_a_level() {
    for json in [false, true] {
        let dir = TempDir::new(if json { "log_json" } else { "log_text" });
        let extra: &[&str] = if json { &["--log-format", "json"] } else { &[] };
        let mut n = started(&dir, None, extra);
        common::pair::wait_log(&n, "ready: role");
        n.kill9();
        let text = n.log_text();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("---- start")).collect();
        for l in &lines {
            let (ts, level, msg) = if json {
                let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
                let s = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("{l:?}: no {k}")).to_string();
                (s("ts"), s("level"), s("msg"))
            } else {
                let (ts, rest) = l.split_at(l.find(' ').unwrap_or_else(|| panic!("{l:?}")));
                let (level, msg) = rest.trim_start().split_once(' ').unwrap_or_else(|| panic!("{l:?}"));
                (ts.to_string(), level.to_string(), msg.trim_start().to_string())
            };
            assert!(is_timestamp(&ts), "{l:?}: timestamp {ts:?}");
            assert!(["INFO", "WARN", "ERROR"].contains(&level.as_str()), "{l:?}: level {level:?}");
            assert!(!msg.is_empty(), "{l:?}");
        }
        for needle in ["recovered 0 records", "ready: role"] {
            assert!(lines.iter().any(|l| l.contains(needle)), "no {needle:?} line in:\n{text}");
        }
    }
}
