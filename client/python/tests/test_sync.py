"""The blocking client against a real leader + follower pair, cross-checked with the Rust
CLI (``corelog append`` / ``corelog read``) in both directions."""

from __future__ import annotations

import concurrent.futures
import random
import threading

import pytest

import corelog
from corelog import Role, codec

from conftest import Pair, uniq


def test_append_read_back_and_server_info(pair: Pair) -> None:
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        info = c.info()
        assert (info.role, info.shard_count, info.version) == (Role.LEADER, 2, codec.CLIENT_VERSION)
        pos = c.append(b"Hello World")
        assert isinstance(pos, corelog.Position)
        recs = c.read(pos.shard, pos.offset, 4096)
        assert recs[0].offset == pos.offset and recs[0].payload == b"Hello World"
        assert recs[0].producer is None and recs[0].stream is None
        assert c.read(pos.shard, 10**12) == []


def test_1000_pipelined_appends_are_read_back_by_the_rust_cli(pair: Pair) -> None:
    rng = random.Random(5)
    # Binary payloads (every byte value, empty, the maximum size) compared byte for byte
    # through `corelog read --hex`.
    payloads = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64))) for _ in range(998)]
    payloads += [b"", bytes(range(256)) * 256]
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        positions = c.append_many(payloads)
        conn = c._aio._conn
        assert conn is not None
        # All on one connection: one shard, offsets increasing in request order.
        assert len({p.shard for p in positions}) == 1
        offsets = [p.offset for p in positions]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    shard = positions[0].shard
    lo, hi = offsets[0], offsets[-1]
    out = pair.cli("read", "--shard", str(shard), "--from", str(lo), "--limit", str(hi - lo + 1), "--hex",
                   addr=pair.leader.addr).stdout.decode()
    got = {}
    for line in out.splitlines():
        off, _, hexed = line.partition("\t")
        got[int(off)] = bytes.fromhex(hexed)
    for p, payload in zip(positions, payloads):
        assert got[p.offset] == payload, p
    # The follower holds the same bytes (replicated before the acknowledgement).
    out_f = pair.cli("read", "--shard", str(shard), "--from", str(lo), "--limit", str(hi - lo + 1), "--hex",
                     addr=pair.follower.addr).stdout.decode()
    assert out_f == out


def test_rust_cli_appends_are_read_back_by_python(pair: Pair) -> None:
    tag = uniq("cli-")
    payloads = [f"{tag} {i} é€😀 tab\tin".encode() for i in range(50)]
    r = pair.cli("append", *[p.decode() for p in payloads])
    positions = [tuple(map(int, line.split())) for line in r.stdout.decode().splitlines()]
    assert len(positions) == 50
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        for (shard, offset), payload in zip(positions, payloads):
            rec = c.read(shard, offset, 1)[0]
            assert (rec.offset, rec.payload) == (offset, payload)
        shard = positions[0][0]
        got = c.read_all(shard, positions[0][1], positions[-1][1] + 1)
        assert [r.payload for r in got if r.payload.startswith(tag.encode())] == payloads


def test_append_nowait_keeps_many_in_flight_from_threads(pair: Pair) -> None:
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        futs = [c.append_nowait(b"nowait %d" % i) for i in range(300)]
        positions = [f.result(timeout=60) for f in futs]
        assert len(set(positions)) == 300
        results = []
        lock = threading.Lock()

        def worker(k: int) -> None:
            ps = [c.append(b"thread %d %d" % (k, i)) for i in range(20)]
            with lock:
                results.extend(ps)

        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            list(ex.map(worker, range(8)))
        assert len(set(results)) == 160


def test_leader_following_from_the_follower_and_a_dead_address(pair: Pair, certs: object) -> None:
    # The follower answers NotLeader naming the leader (not in the list): the client follows it.
    with corelog.Client(pair.follower.addr, certs=str(pair.certs)) as c:
        assert c.info().role == Role.FOLLOWER
        pos = c.append(b"via the follower's hint")
        assert c._aio._conn is not None and c._aio._conn.addr == pair.leader.addr
        assert c.read(pos.shard, pos.offset)[0].payload == b"via the follower's hint"
    # A refused address first: the next one is tried.
    dead = "127.0.0.1:1"
    with corelog.Client(f"{dead},{pair.follower.addr},{pair.leader.addr}", certs=str(pair.certs)) as c:
        pos = c.append(b"after a refused connect")
        assert c._aio._conn is not None and c._aio._conn.addr == pair.leader.addr
    with pytest.raises(corelog.Unreachable) as e:
        corelog.Client(dead, certs=str(pair.certs), failover_timeout=0.2).connect()
    assert e.value.outcome == corelog.errors.NOT_WRITTEN


def test_reads_are_served_by_either_node_and_routed_to_the_shards_port(pair: Pair) -> None:
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        pos = c.append(b"read me anywhere")
    with corelog.Client(pair.follower.addr, certs=str(pair.certs)) as f:
        for shard in (0, 1):
            f.read(shard, 0, 1)  # each shard through its direct port
        assert f.read(pos.shard, pos.offset)[0].payload == b"read me anywhere"


def test_tail_iterator_sees_live_appends_in_order(pair: Pair) -> None:
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        first = c.append(b"tail start")
        with c.tail(first.shard, first.offset) as t:
            assert next(t).payload == b"tail start"
            # Later appends of this connection go to the same shard (HelloOk.shard).
            want = [(c.append(b"live %d" % i).offset, b"live %d" % i) for i in range(20)]
            assert c.info().shard == first.shard
            got = []
            for rec in t:
                if rec.payload.startswith(b"live "):
                    got.append((rec.offset, rec.payload))
                if len(got) == 20:
                    break
            assert got == want
            assert t.next_offset == want[-1][0] + 1
            with pytest.raises(corelog.RequestTimeout):
                t.next(timeout=0.3)


def test_tail_with_the_rust_cli_appending(pair: Pair) -> None:
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        start = c.append(b"x")
        shard = start.shard
        with c.tail(shard, start.offset + 1) as t:
            tag = uniq("cli-tail-")
            # The CLI's appends land on whichever shard takes its connection: append until
            # one lands on ours (bounded).
            seen = None
            for _ in range(40):
                out = pair.cli("append", tag).stdout.decode().split()
                if int(out[0]) == shard:
                    seen = int(out[1])
                    break
            assert seen is not None
            while True:
                rec = t.next(timeout=10)
                assert rec is not None
                if rec.offset == seen:
                    assert rec.payload == tag.encode()
                    break


def test_payload_limit_is_checked_before_sending(pair: Pair) -> None:
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        with pytest.raises(corelog.InvalidArgument):
            c.append(bytes(corelog.codec.MAX_PAYLOAD + 1))
        assert c.append(bytes(corelog.codec.MAX_PAYLOAD)).offset >= 0
