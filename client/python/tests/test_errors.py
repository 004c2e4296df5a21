"""Every error code the server sends, provoked for real against running nodes, and seen
both on the wire (raw frames) and as the client's typed exception.

Codes this suite does not provoke, and why (docs/protocol.md §4; server/src/net/conn.rs,
server/src/shard.rs, server/src/producers.rs):

* 9 ``Overloaded`` — defined, never sent (back-pressure instead, protocol.md §7).
* 12 ``Internal`` — only on an I/O error reading the log; not provoked.
* 16 ``Diverged`` — sent only on the replication link, never to a client.
"""

from __future__ import annotations

import asyncio
import os
import signal
import urllib.request
import struct
import subprocess
import time
from typing import Tuple

import pytest

import corelog
import corelog.aio
from corelog import ErrorCode, codec
from corelog.codec import Append, Append2, Hello, ProducerSeq, Read, ReadStream, StreamReq, Subscribe, Tail, Trim

from conftest import BIN, Pair, RawConn, Trimmed, error_of, frame, free_base, uniq, wait_until

#: Code -> the test that provokes it (checked against ErrorCode below).
PROVOKED = {
    ErrorCode.BAD_FRAME: "test_bad_frame",
    ErrorCode.UNKNOWN_OPCODE: "test_unknown_opcode",
    ErrorCode.TOO_LARGE: "test_too_large",
    ErrorCode.BAD_VERSION: "test_bad_version",
    ErrorCode.NOT_LEADER: "test_not_leader",
    ErrorCode.NO_SUCH_SHARD: "test_no_such_shard",
    ErrorCode.OUT_OF_RANGE: "test_out_of_range",
    ErrorCode.REPLICATION_TIMEOUT: "test_replication_timeout",
    ErrorCode.FENCED: "test_fenced_unavailable_and_outcome_unknown",
    ErrorCode.BAD_HANDSHAKE: "test_bad_handshake",
    ErrorCode.UNEXPECTED: "test_unexpected_after_tail",
    ErrorCode.UNAVAILABLE: "test_fenced_unavailable_and_outcome_unknown",
    ErrorCode.OUTCOME_UNKNOWN: "test_fenced_unavailable_and_outcome_unknown",
    ErrorCode.SEQUENCE_GAP: "test_producer_sequence_errors",
    ErrorCode.UNKNOWN_PRODUCER: "test_producer_sequence_errors",
    ErrorCode.STALE_SEQUENCE: "test_producer_sequence_errors",
    ErrorCode.WRONG_EXPECTED_VERSION: "test_wrong_expected_version",
    ErrorCode.WRONG_SHARD: "test_wrong_shard",
    ErrorCode.BAD_REQUEST: "test_bad_request",
    ErrorCode.SHUTTING_DOWN: "test_shutting_down",
    ErrorCode.FORBIDDEN: "test_forbidden",
    ErrorCode.STALE_GENERATION: "test_stale_generation",
}
#: Defined but not provoked here (see the module docstring for why).
NOT_PROVOKED = {
    ErrorCode.OVERLOADED: "defined, never sent: back-pressure instead",
    ErrorCode.INTERNAL: "only on a server I/O error reading the log",
    ErrorCode.DIVERGED: "replication link only",
}


def test_every_code_is_provoked_or_listed_with_a_reason() -> None:
    assert set(PROVOKED) | set(NOT_PROVOKED) == set(ErrorCode)
    assert not set(PROVOKED) & set(NOT_PROVOKED)
    names = {n for n in globals() if n.startswith("test_")}
    assert set(PROVOKED.values()) <= names


def _raw(pair: Pair, port: int) -> RawConn:
    return RawConn(f"127.0.0.1:{port}", pair.certs)


def _leader_shard_port(pair: Pair, shard: int) -> int:
    return pair.leader.client_port + 1 + shard


def _error_then_close(c: RawConn, req_id: int) -> Tuple[int, str]:
    """The error (code, message) answering request ``req_id``, once the server has
    closed the connection after it, sending nothing more."""
    f = c.frame()
    assert f is not None and f.req_id == req_id
    err = error_of(codec.parse_response(f))
    assert c.closed_after()
    return err


def test_bad_frame(pair: Pair) -> None:
    # A body of the wrong size (Read one byte short): error, then the server closes.
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        c.hello()
        bad = Read(0, 0, 1).encode(5)
        c.send(struct.pack("<I", len(bad) - 5) + bad[4:-1])
        r = c.response()
        code, msg = error_of(r)
        assert code == ErrorCode.BAD_FRAME and "body truncated" in msg
        assert c.closed_after()
    # A length field below 9: refused from the header alone, with req_id 0.
    with _raw(pair, pair.leader.client_port) as c:
        c.hello()
        c.send(struct.pack("<I", 3) + b"\x02\x00\x00")
        assert _error_then_close(c, 0)[0] == ErrorCode.BAD_FRAME
    # Hello with a bad magic.
    with _raw(pair, pair.leader.client_port) as c:
        c.send(frame(codec.Op.HELLO, 1, b"XLOG\x02\x00"))
        assert error_of(c.response()) == (ErrorCode.BAD_FRAME, "bad body for opcode 0x01: bad magic")


def test_unknown_opcode(pair: Pair) -> None:
    with _raw(pair, pair.leader.client_port) as c:
        c.hello()
        c.send(frame(0x7E, 9, b""))
        assert _error_then_close(c, 9)[0] == ErrorCode.UNKNOWN_OPCODE
    # A response opcode sent as a request is not a request either.
    with _raw(pair, pair.leader.client_port) as c:
        c.hello()
        c.send(codec.Appended(0, 0).encode(3))
        assert error_of(c.response())[0] == ErrorCode.UNKNOWN_OPCODE


def test_too_large(pair: Pair) -> None:
    # Announced above MAX_REQUEST_FRAME: refused from the 4 length bytes alone.
    with _raw(pair, pair.leader.client_port) as c:
        c.hello()
        c.send(struct.pack("<I", codec.MAX_REQUEST_FRAME - 3))
        assert _error_then_close(c, 0)[0] == ErrorCode.TOO_LARGE
    # An Append payload one byte above 64 KiB (the frame itself is within bounds).
    with _raw(pair, pair.leader.client_port) as c:
        c.hello()
        c.send(frame(codec.Op.APPEND, 4, bytes(codec.MAX_PAYLOAD + 1)))
        assert error_of(c.response())[0] == ErrorCode.TOO_LARGE
        assert c.closed_after()

    # Through the client: the typed exception (sent raw on a client connection).
    async def go() -> None:
        conn = await corelog.aio.Connection.open(pair.leader.addr, corelog.ClientConfig(certs=str(pair.certs)))
        try:
            fut = conn.send(frame(codec.Op.APPEND, 0, bytes(codec.MAX_PAYLOAD + 1)))
            with pytest.raises(corelog.TooLarge) as e:
                corelog.aio._response(await conn.wait(fut, 10))
            assert e.value.outcome == corelog.errors.NOT_WRITTEN
        finally:
            await conn.aclose()

    asyncio.run(go())


def test_bad_version(pair: Pair) -> None:
    with _raw(pair, pair.leader.client_port) as c:
        c.send(Hello(codec.PROTOCOL_VERSION + 1).encode(0))
        code, msg = error_of(c.response())
        assert code == ErrorCode.BAD_VERSION and "unsupported" in msg
        assert c.closed_after()
    # Append2 on a connection whose Hello said version 1.
    with _raw(pair, pair.leader.client_port) as c:
        assert c.hello(1).version == 1
        c.send(Append2(None, None, b"v2 on v1").encode(2))
        assert error_of(c.response())[0] == ErrorCode.BAD_VERSION
        assert c.closed_after()

    async def go() -> None:
        with pytest.raises(corelog.BadVersion):
            await corelog.aio.Connection.open(pair.leader.addr, corelog.ClientConfig(certs=str(pair.certs)), 7)
        with pytest.raises(corelog.BadVersion):
            corelog.aio._response(await _hello_only(pair, 9))

    asyncio.run(go())


async def _hello_only(pair: Pair, version: int) -> codec.Frame:
    reader, writer = await corelog.aio._open_stream(pair.leader.addr, corelog.ClientConfig(certs=str(pair.certs)))
    try:
        writer.write(Hello(version).encode(0))
        f = await corelog.aio._read_frame(reader, codec.FrameDecoder())
        assert f is not None
        return f
    finally:
        writer.close()


def test_not_leader(pair: Pair) -> None:
    with _raw(pair, pair.follower.client_port) as c:
        assert c.hello().role == codec.Role.FOLLOWER
        c.send(Append(b"to a follower").encode(1))
        assert error_of(c.response()) == (ErrorCode.NOT_LEADER, pair.leader.addr)
        # The connection stays open: the next request is answered.
        c.send(Append2(ProducerSeq(1, 0), None, b"again").encode(2))
        assert error_of(c.response()) == (ErrorCode.NOT_LEADER, pair.leader.addr)
    # A subscription on a follower is refused too (only a leader serves them).
    with _raw(pair, pair.follower.client_port + 1) as c:
        c.hello()
        c.send(Subscribe(False, b"", 0).encode(3))
        assert error_of(c.response())[0] == ErrorCode.NOT_LEADER

    # The typed exception (a raw client connection: a Client would follow the hint).
    async def go() -> None:
        conn = await corelog.aio.Connection.open(pair.follower.addr, corelog.ClientConfig(certs=str(pair.certs)))
        try:
            with pytest.raises(corelog.NotLeader) as e:
                corelog.aio._response(await conn.call(Append(b"x").encode(0), 10))
            assert e.value.leader == pair.leader.addr and e.value.outcome == corelog.errors.NOT_WRITTEN
        finally:
            await conn.aclose()

    asyncio.run(go())


def test_no_such_shard(pair: Pair) -> None:
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        assert c.hello().shard == 0
        c.send(Read(1, 0, 100).encode(1))
        code, msg = error_of(c.response())
        assert code == ErrorCode.NO_SUCH_SHARD and "direct port" in msg
        assert c.closed_after()
    with _raw(pair, _leader_shard_port(pair, 1)) as c:
        c.hello()
        c.send(Tail(99, 0).encode(1))
        code, msg = error_of(c.response())
        assert code == ErrorCode.NO_SUCH_SHARD and "no shard 99" in msg

    async def go() -> None:
        conn = await corelog.aio.Connection.open(codec.shard_addr(pair.leader.addr, 0),
                                                 corelog.ClientConfig(certs=str(pair.certs)))
        try:
            with pytest.raises(corelog.NoSuchShard):
                corelog.aio._response(await conn.call(Read(1, 0, 10).encode(0), 10))
        finally:
            await conn.aclose()

    asyncio.run(go())


def test_out_of_range(trimmed: Trimmed) -> None:
    """Retention deleted the start of shard 0 on both nodes (the ``trimmed`` fixture):
    a ``Read``, ``Tail``, prefix ``Subscribe`` below the first offset, a ``ReadStream``
    or stream ``Subscribe`` below the stream's first version get code 7 with the first
    offset (version) after the message on a version-2 connection, without it on a
    version-1 connection. Reads keep the connection open; push streams end."""
    t = trimmed
    s = t.stream.encode()
    for node in (t.pair.leader, t.pair.follower):
        first = t.first[node.addr]
        with RawConn(codec.shard_addr(node.addr, 0), t.pair.certs) as c:
            c.hello()
            c.send(Read(0, 0, 4096).encode(1))
            f = c.frame()
            assert f is not None and f.req_id == 1
            r = codec.parse_response(f)
            assert isinstance(r, codec.OutOfRangeResponse) and r.first == first, r
            code, msg = error_of(r)
            assert code == ErrorCode.OUT_OF_RANGE and "offset 0" in msg and f"is {first}" in msg, msg
            c.send(ReadStream(s, 0).encode(2))
            r = c.response()
            assert isinstance(r, codec.OutOfRangeResponse) and r.first == t.stream_first, r
            # Still open: reads at the first offset and version answer.
            c.send(Read(0, first, 4096).encode(3))
            r = c.response()
            assert isinstance(r, codec.Records) and r.count >= 1
            assert next(codec.iter_records(r.records)).offset == first
            c.send(Trim(0, 0).encode(4))
            r = c.response()
            assert r == codec.Trimmed(0, first)
            # A tail below the first offset: the push stream ends with the error (the server
            # keeps the connection until the client closes it; the client's Tail does).
            c.send(Tail(0, first - 1).encode(5))
            r = c.response()
            assert isinstance(r, codec.OutOfRangeResponse) and r.first == first
        # Version 1: code 7 without the trailing first offset.
        with RawConn(codec.shard_addr(node.addr, 0), t.pair.certs) as c:
            assert c.hello(1).version == 1
            c.send(Read(0, 0, 4096).encode(1))
            r = c.response()
            assert isinstance(r, codec.ErrorResponse) and r.code == ErrorCode.OUT_OF_RANGE, r
            c.send(Trim(0, 0).encode(2))  # a version-2 request
            assert error_of(c.response())[0] == ErrorCode.BAD_VERSION
    lfirst = t.first[t.pair.leader.addr]
    with RawConn(codec.shard_addr(t.pair.leader.addr, 0), t.pair.certs) as c:
        c.hello()
        c.send(Subscribe(False, s, 0).encode(6))
        r = c.response()
        assert isinstance(r, codec.OutOfRangeResponse) and r.first == lfirst
        assert c.closed_after()
    with RawConn(codec.shard_addr(t.pair.leader.addr, 0), t.pair.certs) as c:
        c.hello()
        c.send(Subscribe(True, s, 1).encode(7))
        r = c.response()
        assert isinstance(r, codec.OutOfRangeResponse) and r.first == t.stream_first
        assert c.closed_after()

    # The typed exception: `.first`, nothing written.
    async def go() -> None:
        conn = await corelog.aio.Connection.open(codec.shard_addr(t.pair.follower.addr, 0),
                                                 corelog.ClientConfig(certs=str(t.pair.certs)))
        try:
            with pytest.raises(corelog.OutOfRange) as e:
                corelog.aio._response(await conn.call(Read(0, 0, 10).encode(0), 10))
            assert e.value.first == t.first[t.pair.follower.addr] and e.value.outcome == corelog.errors.NOT_WRITTEN
            assert isinstance(e.value, corelog.ServerError) and e.value.code == 7
        finally:
            await conn.aclose()

    asyncio.run(go())


def test_bad_handshake(pair: Pair) -> None:
    with _raw(pair, pair.leader.client_port) as c:
        c.send(Read(0, 0, 10).encode(4))
        assert _error_then_close(c, 4) == (ErrorCode.BAD_HANDSHAKE, "first frame must be Hello")


def test_unexpected_after_tail(pair: Pair) -> None:
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        c.hello()
        c.send(Tail(0, 10**12).encode(6))  # far past the end: nothing is pushed
        c.send(Hello().encode(7))
        assert _error_then_close(c, 6)[0] == ErrorCode.UNEXPECTED


def test_producer_sequence_errors(pair: Pair) -> None:
    pid = int.from_bytes(os.urandom(8), "little")
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        c.hello()
        # Unknown producer: a first sequence other than 0.
        c.send(Append2(ProducerSeq(pid, 5), None, b"p").encode(1))
        code, msg = error_of(c.response())
        assert code == ErrorCode.UNKNOWN_PRODUCER and "nothing written" in msg
        # 0 is written; 2 skips 1.
        c.send(Append2(ProducerSeq(pid, 0), None, b"p0").encode(2))
        first = c.response()
        assert isinstance(first, codec.Appended2) and not first.duplicate
        c.send(Append2(ProducerSeq(pid, 2), None, b"p2").encode(3))
        code, msg = error_of(c.response())
        assert code == ErrorCode.SEQUENCE_GAP and "expects sequence 1" in msg
        # 1..=65 written; then 0 is more than 64 behind the next (66): stale.
        for s in range(1, 66):
            c.send(Append2(ProducerSeq(pid, s), None, b"p%d" % s).encode(10 + s))
        for s in range(1, 66):
            r = c.response()
            assert isinstance(r, codec.Appended2) and r.offset > first.offset
        c.send(Append2(ProducerSeq(pid, 0), None, b"p0").encode(99))
        assert error_of(c.response())[0] == ErrorCode.STALE_SEQUENCE
        # A recent one is a duplicate with its original position.
        c.send(Append2(ProducerSeq(pid, 60), None, b"p60").encode(100))
        dup = c.response()
        assert isinstance(dup, codec.Appended2) and dup.duplicate

    # The typed exceptions, through a producer resumed at those sequences.
    with corelog.Client(pair.addrs, certs=str(pair.certs), failover_timeout=0.3) as cl:
        with pytest.raises(corelog.StaleSequence):
            cl.producer(0, id=pid, next_seq=0).append(b"p0")
        stopped = cl.producer(0, id=pid, next_seq=70)
        with pytest.raises(corelog.SequenceGap):  # retried (an earlier one may be on its way), then given up
            stopped.append(b"gap")
        with pytest.raises(corelog.ProducerStopped):
            stopped.append(b"after")
        fresh = int.from_bytes(os.urandom(8), "little")
        with pytest.raises(corelog.UnknownProducer):
            cl.producer(0, id=fresh, next_seq=3).append(b"unknown")


def test_wrong_expected_version(pair: Pair) -> None:
    s = uniq("wev-")
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as c:
        with pytest.raises(corelog.WrongExpectedVersion) as e:
            c.append_to(s, b"x", 0)
        assert e.value.current is None  # u64::MAX on the wire: no stream
        assert c.append_to(s, b"created", "none").version == 0
        with pytest.raises(corelog.WrongExpectedVersion) as e:
            c.append_to(s, b"again", "none")
        assert e.value.current == 0 and e.value.outcome == corelog.errors.NOT_WRITTEN
        with pytest.raises(corelog.WrongExpectedVersion) as e:
            c.append_to(s, b"stale", 7)
        assert e.value.current == 0 and "nothing written" in e.value.message
        shard = c.shard_of(s)
    with _raw(pair, _leader_shard_port(pair, shard)) as rc:
        rc.hello()
        rc.send(Append2(None, StreamReq.new(s, 5), b"raw").encode(3))
        r = rc.response()
        assert isinstance(r, codec.WrongVersion) and r.current == 0


def _other_shard_stream(pair: Pair, shard: int) -> str:
    while True:
        s = uniq("ws-")
        if codec.stream_shard(s, 2) != shard:
            return s


def test_wrong_shard(pair: Pair) -> None:
    s = _other_shard_stream(pair, 0)
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        c.hello()
        c.send(Append2(None, StreamReq.new(s, "any"), b"x").encode(1))
        code, msg = error_of(c.response())
        assert code == ErrorCode.WRONG_SHARD and "lives on shard 1" in msg
        c.send(ReadStream(s.encode()).encode(2))  # the connection stayed open
        assert error_of(c.response())[0] == ErrorCode.WRONG_SHARD
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        c.hello()
        c.send(Subscribe(True, s.encode(), 0).encode(3))
        assert error_of(c.response())[0] == ErrorCode.WRONG_SHARD
        assert c.closed_after()

    async def go() -> None:
        conn = await corelog.aio.Connection.open(codec.shard_addr(pair.leader.addr, 0),
                                                 corelog.ClientConfig(certs=str(pair.certs)))
        try:
            with pytest.raises(corelog.WrongShard):
                corelog.aio._response(await conn.call(Append2(None, StreamReq.new(s), b"x").encode(0), 10))
        finally:
            await conn.aclose()

    asyncio.run(go())


def test_bad_request(pair: Pair) -> None:
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        c.hello()
        for i, st in enumerate([StreamReq(b"", 0, 0), StreamReq(b"n" * 256, 0, 0), StreamReq(b"\xc3\x28", 0, 0),
                                StreamReq(b"ok", 9, 0)]):
            c.send(Append2(None, st, b"x").encode(i))
            code, msg = error_of(c.response())
            assert code == ErrorCode.BAD_REQUEST, (st, msg)
        c.send(ReadStream(b"").encode(10))
        assert error_of(c.response())[0] == ErrorCode.BAD_REQUEST
        c.send(Append(b"still open").encode(11))
        assert isinstance(c.response(), codec.Appended)
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        c.hello()
        c.send(Subscribe(False, b"\xff", 0).encode(1))  # a prefix that is not UTF-8
        assert error_of(c.response())[0] == ErrorCode.BAD_REQUEST
        assert c.closed_after()
    # The client checks names itself (InvalidArgument, nothing sent).
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as cl:
        with pytest.raises(corelog.InvalidArgument):
            cl.append_to("", b"x")
        with pytest.raises(corelog.InvalidArgument):
            cl.append_to("n" * 256, b"x")


def test_forbidden(make_pair, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The test certificate's principal (its common name) may append to order-* only.
    policy = tmp_path / "authz.toml"
    policy.write_text('[[grant]]\nprincipals = ["corelog client"]\nops = ["append", "read"]\nstreams = ["order-"]\n')
    pair = make_pair(leader_extra=("--authz", str(policy)))
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        c.hello()
        c.send(Append(b"plain").encode(1))
        code, msg = error_of(c.response())
        assert code == ErrorCode.FORBIDDEN and "may not append the shard" in msg, msg
        c.send(Trim(0, 1).encode(2))  # the connection stayed open
        code, msg = error_of(c.response())
        assert code == ErrorCode.FORBIDDEN and "may not admin the shard" in msg, msg
    with corelog.Client(pair.addrs, certs=str(pair.certs)) as cl:
        with pytest.raises(corelog.Forbidden) as e:
            cl.append_to("pay-1", b"x")
        assert e.value.outcome == corelog.NOT_WRITTEN and 'stream "pay-1"' in e.value.message
        cl.append_to("order-1", b"allowed")
        assert [ev.payload for ev in cl.read_stream("order-1").events] == [b"allowed"]


def test_stale_generation(pair: Pair) -> None:
    """A consumer group's commit naming a generation other than the member's is refused
    with code 25; the member's connection stays."""
    with _raw(pair, _leader_shard_port(pair, 0)) as c:
        assert c.hello(codec.GROUPS_VERSION).version == codec.GROUPS_VERSION
        c.send(codec.GroupJoin(uniq("stale-"), "m", uniq("none-")).encode(1))
        assigned = c.response()
        assert isinstance(assigned, codec.GroupAssigned), assigned
        for req_id in (2, 3):  # the first refusal left the connection open
            c.send(codec.GroupCommit(assigned.gen + 1, 0).encode(req_id))
            f = c.frame()
            while f is not None and f.op == codec.Op.GROUP_RECORDS:  # progress of a prefix with no event
                f = c.frame()
            assert f is not None and f.req_id == req_id
            code, _ = error_of(codec.parse_response(f))
            assert code == ErrorCode.STALE_GENERATION
    assert type(corelog.errors.error_for_code(25, "")) is corelog.StaleGeneration


def test_replication_timeout(make_pair) -> None:  # type: ignore[no-untyped-def]
    p: Pair = make_pair(leader_extra=("--ack-timeout-ms", "400"))
    with corelog.Client(p.leader.addr, certs=str(p.certs)) as c:
        c.append(b"accepted")  # the follower accepted the leader's epoch
        p.follower.pause()
        try:
            t0 = time.monotonic()
            with pytest.raises(corelog.ReplicationTimeout) as e:
                c.append(b"not confirmed")
            assert time.monotonic() - t0 >= 0.35
            assert e.value.outcome == corelog.errors.UNKNOWN  # not retried by a plain append
        finally:
            p.follower.resume()
        # The record is durable on the leader and appears once the follower is back.
        shard = c.info().shard

        def shows() -> bool:
            return any(r.payload == b"not confirmed" for r in c.read_all(shard))

        wait_until(shows, 30, "the timed-out append to appear")


def test_fenced_unavailable_and_outcome_unknown(make_pair) -> None:  # type: ignore[no-untyped-def]
    """Leader A (ack timeout 60 s), follower B. B is killed; an append waits on A for a
    follower. B's data dir is promoted (`corelog admin promote`) and B starts as leader
    with a higher epoch pointing at A: B dials A, A fences itself, and the waiting
    append is answered OutcomeUnknown; later appends on A: Fenced. B's own appends wait
    for a follower that never accepts its epoch: Unavailable."""
    p: Pair = make_pair(leader_extra=("--ack-timeout-ms", "60000"))
    a, b = p.leader, p.follower
    cfg = corelog.ClientConfig(certs=str(p.certs))

    async def go() -> None:
        conn = await corelog.aio.Connection.open(codec.shard_addr(a.addr, 0), cfg)
        try:
            corelog.aio._response(await conn.call(Append(b"accepted").encode(0), 30))
            b.kill()
            waiting = conn.send(Append(b"waits for a follower").encode(0))
            assert not waiting.done()
            r = subprocess.run([str(BIN), "admin", "promote", "--data-dir", str(b.data)], capture_output=True,
                               timeout=60)
            assert r.returncode == 0, r.stderr
            b.start(role="leader", extra=("--ack-timeout-ms", "500"))
            with pytest.raises(corelog.OutcomeUnknown) as e:
                corelog.aio._response(await conn.wait(waiting, 60))
            assert e.value.outcome == corelog.errors.UNKNOWN
            # Fenced: refused, nothing written, connection stays open.
            with pytest.raises(corelog.Fenced) as e2:
                corelog.aio._response(await conn.call(Append(b"on a fenced node").encode(0), 30))
            assert e2.value.outcome == corelog.errors.NOT_WRITTEN
        finally:
            await conn.aclose()
        # Shard 0's direct port: the shared port may hand a connection to shard 1, whose
        # fencing depends on when B's shard-1 link reaches A (seen as a rare flake).
        fresh = await corelog.aio.Connection.open(codec.shard_addr(a.addr, 0), cfg)
        assert fresh.info.role == codec.Role.FENCED
        await fresh.aclose()

    asyncio.run(go())
    b.wait_ready()
    # B leads (epoch above A's) but no follower accepts its epoch: held, then Unavailable.
    with corelog.Client(b.addr, certs=str(p.certs), failover_timeout=0.2) as c:
        assert c.info().role == codec.Role.LEADER
        t0 = time.monotonic()
        with pytest.raises(corelog.Unavailable) as e:
            c.append(b"no follower for this epoch")
        assert time.monotonic() - t0 >= 0.45
        assert e.value.outcome == corelog.errors.NOT_WRITTEN
    # A client given both nodes gives up after its budget with a not-written error.
    with corelog.Client(f"{a.addr},{b.addr}", certs=str(p.certs), failover_timeout=1.0) as c:
        with pytest.raises((corelog.Fenced, corelog.Unavailable)) as e3:
            c.append(b"nowhere to go")
        assert e3.value.outcome == corelog.errors.NOT_WRITTEN


def test_shutting_down(make_pair) -> None:  # type: ignore[no-untyped-def]
    """An append taken before SIGTERM is still answered; one after it gets ShuttingDown
    (nothing written); then the node closes the connection and exits 0. The follower is
    frozen so that the first append keeps the leader draining until it is resumed."""
    mport = free_base([0])
    p: Pair = make_pair(leader_extra=("--ack-timeout-ms", "60000", "--metrics-listen", f"127.0.0.1:{mport}"))

    def log_end() -> float:
        body = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
        return sum(float(l.split()[-1]) for l in body.splitlines() if l.startswith("corelog_log_end_offset{"))

    with _raw(p, _leader_shard_port(p, 0)) as c:
        c.hello()
        c.send(Append(b"before").encode(1))
        f1 = c.frame()  # answered: the follower accepted the leader's epoch
        assert f1 is not None and isinstance(codec.parse_response(f1), codec.Appended)
        p.follower.pause()
        try:
            end = log_end()
            c.send(Append(b"taken before SIGTERM").encode(2))
            wait_until(lambda: log_end() > end, 20, "the leader to write the append")  # taken
            os.kill(p.leader.pid, signal.SIGTERM)
            wait_until(lambda: "received SIGTERM" in p.leader.log_text(), 20, "the leader to begin its shutdown")
            c.send(Append(b"after SIGTERM").encode(3))
        finally:
            p.follower.resume()
        f2, f3 = c.frame(), c.frame()
        assert f2 is not None and f2.req_id == 2
        assert isinstance(codec.parse_response(f2), codec.Appended), codec.parse_response(f2)
        assert f3 is not None and f3.req_id == 3
        assert error_of(codec.parse_response(f3))[0] == ErrorCode.SHUTTING_DOWN
        assert c.closed_after()
    assert p.leader.proc is not None
    assert p.leader.proc.wait(timeout=30) == 0, p.leader.log_text()[-2000:]
    assert "shut down cleanly" in p.leader.log_text()
