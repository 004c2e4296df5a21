//! Who may do what (issue 34), with a real node and one certificate per principal
//! (`corelog certs --client NAME`): an `orders` writer may append to and read `order-*`
//! only, a `reporting` reader may read, tail and subscribe to everything but not append or
//! trim, an `ops` operator may trim. A denial is `Forbidden`, nothing is written (every
//! shard read back), and the connection stays; a changed policy file applies to the next
//! request of open connections and ends a running tail it no longer allows, a policy
//! that does not parse is refused and the previous one kept. The CLI exits with 77 on a denial. (A client certificate on the replication
//! port: `stock_machine.rs`.)

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use corelog_client::codec::{ErrorCode, Expect};
use corelog_client::{Client, ClientConfig, Error, Outcome, Subscription, Tail};

const POLICY: &str = r#"
[[grant]]
principals = ["orders"]
ops = ["append", "read"]
streams = ["order-"]

[[grant]]
principals = ["reporting"]
ops = ["read"]
streams = [""]
shards = true

[[grant]]
principals = ["ops"]
ops = ["admin", "read"]
shards = true
"#;

fn as_principal(certs: &Path, who: &str) -> ClientConfig {
    let (cert, key) = (certs.join(format!("client-{who}.pem")), certs.join(format!("client-{who}.key")));
    ClientConfig::mtls(certs.join("ca.pem"), cert, key, "localhost").unwrap()
}

/// The next item of a subscription or tail, within 10 s.
fn next<T>(rt: &tokio::runtime::Runtime, f: impl std::future::Future<Output = T>) -> T {
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), f).await.expect("nothing within 10 s") })
}

#[track_caller]
fn forbidden<T: std::fmt::Debug>(r: Result<T, Error>, says: &str) {
    match r {
        Err(e) => {
            assert_eq!(e.code(), Some(ErrorCode::Forbidden), "{e}");
            assert_eq!(e.outcome(), Outcome::NotWritten, "{e}");
            assert!(e.to_string().contains(says), "{e} should say {says:?}");
        }
        Ok(v) => panic!("allowed, should be Forbidden ({says}): {v:?}"),
    }
}

#[test]
fn each_principal_may_do_what_the_policy_grants_and_nothing_else() {
    let (dir, certs) = dir_with_certs("authz");
    let st = Command::new(BIN)
        .args(["certs", "--out"])
        .arg(&certs)
        .args(["--client", "orders", "--client", "reporting", "--client", "ops", "--client", "stranger"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    let policy = dir.path().join("authz.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let extra = ["--authz", policy.to_str().unwrap(), "--shard-count", "2"];
    let mut node = Node::standalone("standalone", &dir.path().join("data"), Some(&certs), &extra).started();
    assert!(node.log_text().contains("authorization: policy"), "{}", node.log_text());
    let addr = node.addr();
    let rt = runtime();
    let connect = |who: &str| rt.block_on(Client::connect(&addr, &as_principal(&certs, who))).unwrap();
    let (orders, reporting, ops, stranger) =
        (connect("orders"), connect("reporting"), connect("ops"), connect("stranger"));

    // orders: its streams, nothing else; the connection stays after each refusal.
    let ok = rt.block_on(orders.append_to("order-1", Expect::Any, b"order event")).unwrap();
    forbidden(rt.block_on(orders.append_to("pay-1", Expect::Any, b"denied pay")), "may not append stream \"pay-1\"");
    forbidden(rt.block_on(orders.append(b"denied plain")), "may not append the shard");
    forbidden(rt.block_on(orders.read(0, 0, 1 << 20)), "may not read the shard");
    rt.block_on(orders.append_to("order-1", Expect::Exact(0), b"order event 2")).expect("the connection stayed");
    assert_eq!(rt.block_on(orders.read_stream("order-1", 0, 10)).unwrap().events.len(), 2);
    // A subscription's refusal is its first answer (as a push's records would be).
    let mut wide =
        rt.block_on(Subscription::prefix(&addr, &as_principal(&certs, "orders"), "order", &HashMap::new())).unwrap();
    let refused = next(&rt, wide.next());
    forbidden(refused, "may not read streams with prefix \"order\"");
    let mut mine =
        rt.block_on(Subscription::prefix(&addr, &as_principal(&certs, "orders"), "order-", &HashMap::new())).unwrap();
    let first = next(&rt, mine.next()).unwrap().unwrap();
    assert_eq!(first.record.payload, b"order event");

    // reporting: reads, tails and subscribes; no append, no trim.
    let read = rt.block_on(reporting.read_stream("order-1", 0, 10)).unwrap();
    assert_eq!(read.events[0].offset, ok.position.offset);
    let shard = ok.position.shard;
    let mut tail = rt.block_on(Tail::start(&addr, &as_principal(&certs, "reporting"), shard, 0)).unwrap();
    let t = next(&rt, tail.next()).unwrap().unwrap();
    assert_eq!(t.payload, b"order event");
    forbidden(
        rt.block_on(reporting.append_to("order-2", Expect::Any, b"denied report")),
        "\"reporting\" may not append",
    );
    forbidden(rt.block_on(reporting.trim(0, 1)), "may not admin the shard");
    let mut denied_tail = rt.block_on(Tail::start(&addr, &as_principal(&certs, "orders"), shard, 0)).unwrap();
    let refused = next(&rt, denied_tail.next());
    forbidden(refused, "may not read the shard");

    // stranger: named by no grant; ops: trims.
    forbidden(rt.block_on(stranger.append_to("order-9", Expect::Any, b"denied stranger")), "\"stranger\" may not");
    forbidden(rt.block_on(stranger.read_stream("order-1", 0, 1)), "may not read");
    let ops0 = rt.block_on(ops.for_shard(0)).unwrap();
    rt.block_on(ops0.trim(0, 0)).expect("ops may trim");

    // The CLI: a denial exits with 77 (EX_NOPERM) and says why.
    let cli = Command::new(BIN)
        .args(["append", "--addr", &addr, "--stream", "pay-9"])
        .args(client_tls_args(&certs, "client-orders"))
        .arg("denied cli")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&cli.stderr);
    assert_eq!(cli.status.code(), Some(77), "{said}");
    assert!(said.contains("Forbidden") && said.contains("pay-9"), "{said}");

    // Nothing denied was written: every record of every shard, read by ops.
    let mut all = Vec::new();
    for s in 0..2u16 {
        let c = rt.block_on(ops.for_shard(s)).unwrap();
        all.extend(rt.block_on(c.read(s, 0, 1 << 20)).unwrap());
    }
    let payloads: Vec<&[u8]> = all.iter().map(|r| r.payload.as_slice()).collect();
    assert_eq!(payloads.len(), 2, "{payloads:?}");
    assert!(payloads.iter().all(|p| p.starts_with(b"order event")), "{payloads:?}");
    let audit = node.log_text();
    assert!(
        audit.contains("denied: principal \"orders\" may not append stream \"pay-1\" (client 127.0.0.1:"),
        "{audit}"
    );
    assert!(node.metric_sum("corelog_denied_total{op=\"append\"}") >= 5.0);
    assert!(node.metric_sum("corelog_denied_total{op=\"admin\"}") >= 1.0);

    // A policy change: orders may now append to pay-*, on the connection it already has;
    // reporting's tail, which the change does not touch, goes on.
    let wider = POLICY.replace("streams = [\"order-\"]", "streams = [\"order-\", \"pay-\"]");
    let written = Instant::now();
    std::fs::write(&policy, &wider).unwrap();
    let mut took = None;
    while took.is_none() {
        assert!(written.elapsed() < Duration::from_secs(10), "the new policy not in force after 10 s");
        match rt.block_on(orders.append_to("pay-1", Expect::Any, b"pay event")) {
            Ok(_) => took = Some(written.elapsed()),
            Err(e) if e.code() == Some(ErrorCode::Forbidden) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!("policy change in force after {:?}", took.unwrap());
    rt.block_on(orders.append_to("order-1", Expect::Exact(1), b"order event 3")).unwrap();
    let t = next(&rt, tail.next()).unwrap().unwrap();
    assert_eq!(t.payload, b"order event 2", "reporting's tail goes on across the change");

    // A policy that does not parse: refused, with where; the one in force stays.
    std::fs::write(&policy, "[[grant]\nprincipals = [").unwrap();
    wait_until("the refusal logged", Duration::from_secs(10), || {
        node.log_text().contains("authorization policy reload refused, keeping the previous policy")
    });
    assert!(node.log_text().contains("line 1"), "{}", node.log_text());
    rt.block_on(orders.append_to("pay-1", Expect::Exact(0), b"pay event 2")).expect("the previous policy stays");
    forbidden(rt.block_on(orders.append(b"denied plain 2")), "may not append the shard");

    // reporting's grant removed: its running tail ends with Forbidden.
    let without = wider.replace("principals = [\"reporting\"]", "principals = [\"nobody\"]");
    std::fs::write(&policy, &without).unwrap();
    let ended = loop {
        match next(&rt, tail.next()) {
            Ok(Some(_)) => continue, // records still buffered before the change
            other => break other,
        }
    };
    forbidden(ended, "\"reporting\" may not read the shard");
    assert!(node.is_running());
}

#[test]
fn a_policy_without_mtls_or_that_does_not_parse_stops_the_start() {
    let dir = TempDir::new("authz_start");
    let policy = dir.path().join("authz.toml");
    std::fs::write(&policy, "[[grant]]\nprincipals = [\"a\"]\nops = [\"write\"]\nstreams = [\"\"]\n").unwrap();
    let data = dir.path().join("data");
    let run = |certs: Option<&Path>, extra: &[&str]| {
        let args = Node::args(Mode::Standalone, &data, ports(), certs, "server", extra);
        let out = Command::new(BIN).args(&args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, said) = run(None, &["--authz", policy.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("--authz needs mTLS"), "{said}");
    let certs = certs(dir.path());
    let (code, said) = run(Some(&certs), &["--authz", policy.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("unknown operation \"write\"") && said.contains("authz.toml"), "{said}");
    // The same policy named by the environment (and so by a --config file's `authz`).
    let args = Node::args(Mode::Standalone, &data, ports(), Some(&certs), "server", &[]);
    let out = Command::new(BIN).args(&args).env("CORELOG_AUTHZ", &policy).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("unknown operation \"write\""), "CORELOG_AUTHZ not read: {said}");
    let (code, said) = run(Some(&certs), &["--principal-from", "email"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("unknown rule \"email\""), "{said}");
}

/// `--metrics-tls`: `/metrics` and `/health` need TLS and a client certificate signed by
/// the client CA; plain HTTP gets no answer.
#[test]
fn the_metrics_port_can_require_a_client_certificate() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (dir, certs) = dir_with_certs("authz_metrics");
    let data = dir.path().join("data");
    let mut node = Node::standalone("standalone", &data, Some(&certs), &["--metrics-tls"]);
    let p = node.ports;
    node.spawn();
    let rt = runtime();
    let get = |path: &str| {
        rt.block_on(async {
            let mut s = raw_mtls(p.metrics, &certs).await?;
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut out = String::new();
            s.read_to_string(&mut out).await.map_err(|e| e.to_string())?;
            Ok::<String, String>(out)
        })
    };
    wait_until("/health over TLS answers 200", Duration::from_secs(30), || {
        get("/health").is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    assert!(get("/metrics").unwrap().contains("corelog_appends_total"), "metrics over TLS");
    let plain = node.http("/health");
    assert!(plain.as_ref().map_or(true, |r| !r.contains("HTTP/1.1 200")), "plain HTTP answered: {plain:?}");
    // A client certificate from another CA (the node's CA trusted): no answer.
    let other = common::certs(&dir.path().join("other"));
    std::fs::copy(certs.join("ca.pem"), other.join("ca.pem")).unwrap();
    let foreign = rt.block_on(async {
        let mut s = raw_mtls(p.metrics, &other).await?;
        s.write_all(b"GET /health HTTP/1.1\r\n\r\n").await.map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.map_err(|e| e.to_string())?;
        Ok::<String, String>(out)
    });
    assert!(foreign.as_ref().map_or(true, |r| !r.contains("200")), "another CA's certificate answered: {foreign:?}");
    assert!(node.is_running());
}
