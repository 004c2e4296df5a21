//! Micro-benchmarks of corelog's hot paths (criterion). Kept short: `cargo bench -p
//! corelog-benches` takes about a minute on 2 cores. Groups:
//!
//! - `codec`: Append / Appended frames, encode and decode (cut + parse).
//! - `record`: one record encoded with its CRC-32, and decoded with the CRC checked.
//! - `batch`: group-commit assembly, N records of 11 bytes into one 4 KiB-aligned,
//!   zero-padded batch with its header CRC (what one fdatasync covers).
//! - `tls`: rustls in memory with the production configs (TLS 1.3, ECDSA P-256 from
//!   `corelog certs`, i.e. rcgen): seal+open of one small frame, of 64 frames in one
//!   record (a batch of acknowledgements), and one full mTLS handshake (the cost paid
//!   36,000 times when a sweep step connects).

use std::hint::black_box;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use corelog_client::codec::{self, decode_frame, Request, Response};
use corelog_client::record;
use corelog_server::wal::batch::{self, BatchHeader};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

const PAYLOAD: &[u8] = b"Hello World";

fn group<'a>(c: &'a mut Criterion, name: &str) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(30);
    g
}

fn bench_codec(c: &mut Criterion) {
    let mut g = group(c, "codec");
    g.throughput(Throughput::Elements(1));
    let mut buf = Vec::with_capacity(64);
    g.bench_function("encode_append_11B", |b| {
        b.iter(|| {
            buf.clear();
            codec::encode_append(black_box(42), black_box(PAYLOAD), &mut buf);
            black_box(buf.len())
        })
    });
    let mut frame = Vec::new();
    codec::encode_append(42, PAYLOAD, &mut frame);
    g.bench_function("decode_append_11B", |b| {
        b.iter(|| {
            let (f, used) = decode_frame(black_box(&frame)).unwrap().unwrap();
            let Request::Append { payload } = Request::parse(&f).unwrap() else { unreachable!() };
            black_box((payload.len(), used))
        })
    });
    g.bench_function("encode_appended", |b| {
        b.iter(|| {
            buf.clear();
            codec::encode_appended(black_box(42), black_box(1), black_box(123_456_789), &mut buf);
            black_box(buf.len())
        })
    });
    let mut ack = Vec::new();
    codec::encode_appended(42, 1, 123_456_789, &mut ack);
    g.bench_function("decode_appended", |b| {
        b.iter(|| {
            let (f, _) = decode_frame(black_box(&ack)).unwrap().unwrap();
            let Response::Appended { offset, .. } = Response::parse(&f).unwrap() else { unreachable!() };
            black_box(offset)
        })
    });
    g.finish();
}

fn bench_record(c: &mut Criterion) {
    let mut g = group(c, "record");
    g.throughput(Throughput::Elements(1));
    for (name, payload) in [("11B", PAYLOAD.to_vec()), ("1KiB", vec![7u8; 1024])] {
        let mut buf = Vec::with_capacity(2048);
        g.bench_function(format!("encode_crc_{name}"), |b| {
            b.iter(|| {
                buf.clear();
                record::encode(black_box(1_000_000), 3, black_box(&payload), &mut buf);
                black_box(buf.len())
            })
        });
        let mut enc = Vec::new();
        record::encode(1_000_000, 3, &payload, &mut enc);
        g.bench_function(format!("decode_crc_{name}"), |b| {
            b.iter(|| {
                let (r, n) = record::decode(black_box(&enc)).unwrap();
                black_box((r.offset, n))
            })
        });
    }
    g.finish();
}

fn bench_batch(c: &mut Criterion) {
    let mut g = group(c, "batch");
    for n in [1usize, 64, 1024] {
        g.throughput(Throughput::Elements(n as u64));
        let mut records = Vec::with_capacity(n * 40);
        let mut out = Vec::new();
        g.bench_function(format!("assemble_{n}x11B"), |b| {
            b.iter(|| {
                records.clear();
                for i in 0..n as u64 {
                    record::encode(1_000 + i, 3, PAYLOAD, &mut records);
                }
                let h =
                    BatchHeader { first_offset: 1_000, count: n as u32, records_len: records.len() as u32, epoch: 3 };
                out.resize(batch::span(records.len()) as usize, 0);
                batch::encode_into(&h, &records, &mut out);
                black_box(out.len())
            })
        });
    }
    g.finish();
}

struct Tls {
    client: rustls::Connection,
    server: rustls::Connection,
}

fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let dir = tempfile::tempdir().unwrap();
    corelog_server::certs::generate(dir.path(), &[], &[]).unwrap();
    let p = |f: &str| dir.path().join(f);
    let s = corelog_server::net::tls::server_config(&p("server.pem"), &p("server.key"), &p("ca.pem")).unwrap();
    let c = corelog_client::tls::client_config(&p("ca.pem"), Some((&p("client.pem"), &p("client.key")))).unwrap();
    (s, Arc::new(c))
}

/// Moves every pending TLS byte from `a` to `b`; returns how many.
fn pump(a: &mut rustls::Connection, b: &mut rustls::Connection, wire: &mut Vec<u8>) -> usize {
    wire.clear();
    while a.wants_write() {
        a.write_tls(wire).unwrap();
    }
    let mut input = &wire[..];
    while !input.is_empty() {
        b.read_tls(&mut input).unwrap();
        b.process_new_packets().unwrap();
    }
    wire.len()
}

/// One seal and one open: `msg` written on `a`, its records carried to `b` and read
/// back there into `plain` (which must hold it).
fn seal_open(
    a: &mut rustls::Connection,
    b: &mut rustls::Connection,
    msg: &[u8],
    wire: &mut Vec<u8>,
    plain: &mut [u8],
) -> usize {
    a.writer().write_all(msg).unwrap();
    pump(a, b, wire);
    let n = b.reader().read(plain).unwrap();
    assert_eq!(n, msg.len());
    n
}

fn handshake(s: &Arc<rustls::ServerConfig>, c: &Arc<rustls::ClientConfig>) -> Tls {
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut t = Tls {
        client: rustls::Connection::Client(rustls::ClientConnection::new(c.clone(), name).unwrap()),
        server: rustls::Connection::Server(rustls::ServerConnection::new(s.clone()).unwrap()),
    };
    let mut wire = Vec::new();
    for _ in 0..10 {
        if !t.client.is_handshaking() && !t.server.is_handshaking() {
            break;
        }
        pump(&mut t.client, &mut t.server, &mut wire);
        pump(&mut t.server, &mut t.client, &mut wire);
    }
    assert!(!t.client.is_handshaking() && !t.server.is_handshaking());
    t
}

fn bench_tls(c: &mut Criterion) {
    let (scfg, ccfg) = configs();
    let mut g = group(c, "tls");
    let mut t = handshake(&scfg, &ccfg);
    let mut wire = Vec::with_capacity(4096);
    let mut plain = vec![0u8; 64 * 1024];
    let mut frame = Vec::new();
    codec::encode_append(1, PAYLOAD, &mut frame);
    g.throughput(Throughput::Elements(1));
    g.bench_function("seal_open_append_frame", |b| {
        b.iter(|| black_box(seal_open(&mut t.client, &mut t.server, black_box(&frame), &mut wire, &mut plain)))
    });
    let mut acks = Vec::new();
    for i in 0..64 {
        codec::encode_appended(i, 0, i, &mut acks);
    }
    g.throughput(Throughput::Elements(64));
    g.bench_function("seal_open_64_appended_in_one_record", |b| {
        b.iter(|| black_box(seal_open(&mut t.server, &mut t.client, black_box(&acks), &mut wire, &mut plain)))
    });
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    g.bench_function("mtls_handshake_p256_both_sides", |b| {
        b.iter_batched(|| (), |_| black_box(handshake(&scfg, &ccfg).server.is_handshaking()), BatchSize::PerIteration)
    });
    g.finish();
}

criterion_group!(benches, bench_codec, bench_record, bench_batch, bench_tls);
criterion_main!(benches);
