"""Idempotent producers, streams with expected versions, subscriptions (blocking API),
cross-checked with the Rust CLI."""

from __future__ import annotations

import collections

import pytest

import corelog
from corelog import codec

from conftest import Pair, uniq


def test_idempotent_resend_gets_the_same_position(pair: Pair) -> None:
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        p = c.producer(1)
        got = p.append_many([b"idem %d" % i for i in range(10)])
        assert [a.sequence for a in got] == list(range(10))
        assert all(a.shard == 1 and not a.duplicate for a in got)
        again = c.producer(1, id=p.id, next_seq=3).append(b"idem 3")
        assert (again.shard, again.offset, again.duplicate) == (got[3].shard, got[3].offset, True)
        # The record carries the producer's identity.
        rec = c.read(1, got[3].offset, 1)[0]
        assert rec.producer == codec.ProducerSeq(p.id, 3) and rec.payload == b"idem 3"
    # The Rust CLI re-sending the same (producer, sequence): same position, "duplicate".
    r = pair.cli("append", "--producer", hex(p.id), "--seq", "5", "--shard", "1", "idem 5")
    fields = r.stdout.decode().split()
    assert (int(fields[0]), int(fields[1])) == (1, got[5].offset) and "duplicate" in fields


def test_producer_resumes_an_id_the_rust_cli_started(pair: Pair) -> None:
    r = pair.cli("append", "--idempotent", "--shard", "0", "cli-0", "cli-1")
    positions = [tuple(map(int, line.split()[:2])) for line in r.stdout.decode().splitlines()]
    err = r.stderr.decode()
    pid = next(int(tok, 0) for tok in err.replace(",", " ").split() if tok.startswith("0x"))
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        dup = c.producer(0, id=pid, next_seq=1).append(b"cli-1")
        assert dup.duplicate and (dup.shard, dup.offset) == positions[1]
        nxt = c.producer(0, id=pid, next_seq=2).append(b"py-2")
        assert not nxt.duplicate and nxt.offset > positions[1][1]


def test_stream_appends_versions_and_reads(pair: Pair) -> None:
    s = uniq("order-")
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        a0 = c.append_to(s, b"created", "none")
        a1 = c.append_to(s, b"paid", 0)
        a2 = c.append_to(s, b"shipped")  # any
        assert [a.version for a in (a0, a1, a2)] == [0, 1, 2]
        assert a0.shard == codec.stream_shard(s, c.shard_count()) == c.shard_of(s)
        shard, offset, version = a1  # a (shard, offset, version) tuple
        assert (shard, version) == (a0.shard, 1) and offset > a0.offset
        got = c.read_stream(s)
        assert [(e.stream, e.payload) for e in got.events] == [
            (codec.StreamPos(s, 0), b"created"), (codec.StreamPos(s, 1), b"paid"), (codec.StreamPos(s, 2), b"shipped")]
        assert (got.next_version, got.end_version) == (3, 3)
        assert [e.offset for e in got.events] == [a0.offset, a1.offset, a2.offset]
        assert c.read_stream(s, 2).events[0].payload == b"shipped"
        assert c.read_stream(s, 3).events == []
        assert c.read_stream(uniq("nothing-")).end_version == 0
        assert [e.payload for e in c.read_stream_all(s, 1)] == [b"paid", b"shipped"]
    # The Rust CLI sees the same stream: version<TAB>offset<TAB>payload.
    out = pair.cli("read", "--stream", s).stdout.decode().splitlines()
    assert out == [f"0\t{a0.offset}\tcreated", f"1\t{a1.offset}\tpaid", f"2\t{a2.offset}\tshipped"]
    # And appends to it with an expectation the Python client set up.
    r = pair.cli("append", "--stream", s, "--expect", "2", "returned")
    assert r.stdout.decode().split()[2] == "3"
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        assert c.read_stream(s, 3).events[0].payload == b"returned"


def test_racing_conditional_appends_one_wins(pair: Pair) -> None:
    s = uniq("race-")
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        c.append_to(s, b"v0", "none")
        futs = [c._loop.submit(c._aio.append_to(s, b"racer %d" % i, 0)) for i in range(10)]
        won, lost = 0, 0
        for f in futs:
            try:
                assert f.result(timeout=30).version == 1
                won += 1
            except corelog.WrongExpectedVersion as e:
                assert e.current == 1
                lost += 1
        assert (won, lost) == (1, 9)


def test_producer_stream_appends_and_expectation_failures_keep_it_usable(pair: Pair) -> None:
    s = uniq("acct-")
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        p = c.producer_for_stream(s)
        assert p.shard == c.shard_of(s)
        a = p.append_to(s, b"open", "none")
        assert (a.version, a.sequence) == (0, 0)
        with pytest.raises(corelog.WrongExpectedVersion) as e:
            p.append_to(s, b"bad", 5)
        assert e.value.current == 0
        b = p.append_to(s, b"deposit", 0)
        assert (b.version, b.sequence) == (1, 1)  # the refused sequence was handed back
        # A retry of a conditional append that was written: duplicate, original version.
        dup = c.producer(p.shard, id=p.id, next_seq=1).append_to(s, b"deposit", 0)
        assert dup.duplicate and (dup.offset, dup.version) == (b.offset, 1)
        other = next(n for n in (uniq("x-") for _ in range(100)) if c.shard_of(n) != p.shard)
        with pytest.raises(corelog.InvalidArgument):
            p.append_to(other, b"elsewhere")


def test_prefix_subscription_catch_up_then_live_across_shards(pair: Pair) -> None:
    prefix = uniq("sub-") + "-"
    names = [f"{prefix}{i}" for i in range(6)]
    assert len({codec.stream_shard(n, 2) for n in names}) == 2, "names on both shards"
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        for n in names:
            c.append_to(n, b"before", "none")
        c.append(b"not a stream event")
        with c.subscribe_prefix(prefix) as sub:
            seen = collections.defaultdict(list)
            for _ in range(6):
                ev = sub.next(timeout=10)
                seen[ev.record.stream.name].append((ev.record.stream.version, ev.record.payload))
            for n in names:
                c.append_to(n, b"live", 0)
            for _ in range(6):
                ev = sub.next(timeout=10)
                assert ev.shard == codec.stream_shard(ev.record.stream.name, 2)
                seen[ev.record.stream.name].append((ev.record.stream.version, ev.record.payload))
            assert dict(seen) == {n: [(0, b"before"), (1, b"live")] for n in names}
            with pytest.raises(corelog.RequestTimeout):
                sub.next(timeout=0.3)  # nothing else matches the prefix
            positions = dict(sub.positions)
        # Resuming from the positions sees only what came after.
        c.append_to(names[0], b"later", 1)
        with c.subscribe_prefix(prefix, positions) as again:
            ev = again.next(timeout=10)
            assert (ev.record.stream, ev.record.payload) == (codec.StreamPos(names[0], 2), b"later")


def test_stream_subscription_from_a_version(pair: Pair) -> None:
    s = uniq("one-")
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        for i in range(3):
            c.append_to(s, b"e%d" % i, i - 1 if i else "none")
        with c.subscribe(s, 1) as sub:
            assert [sub.next(timeout=10).record.payload for _ in range(2)] == [b"e1", b"e2"]
            c.append_to(s, b"e3", 2)
            ev = sub.next(timeout=10)
            assert ev.record.stream == codec.StreamPos(s, 3) and sub.next_version == 4
        # From a version not written yet: only what comes next.
        with c.subscribe(s, 4) as sub:
            c.append_to(s, b"e4", 3)
            assert sub.next(timeout=10).record.payload == b"e4"
