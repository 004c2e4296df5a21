"""The sans-IO codec: documented examples byte for byte, randomized round trips (fixed
seed; hypothesis is not used), records and their CRC, stream placement."""

from __future__ import annotations

import random
import struct

import pytest

from corelog import codec, errors
from corelog.codec import (
    Append, Append2, Appended, Appended2, ErrorCode, ErrorResponse, Expect, Frame, FrameDecoder, GroupAssigned,
    GroupCommit, GroupCommitted, GroupHeartbeat, GroupJoin, GroupRecords, Hello, HelloOk, OutOfRangeResponse,
    ProducerSeq, Read, ReadStream, Records, Role, StreamPos, StreamRecords, StreamReq, Subscribe, Tail, Trim, Trimmed,
    WrongVersion,
)

H = bytes.fromhex


def cut(data: bytes) -> Frame:
    got = codec.decode_frame(data)
    assert got is not None
    f, used = got
    assert used == len(data)
    return f


def test_protocol_md_examples_byte_for_byte() -> None:
    """docs/protocol.md §3 'Examples (hex, as on the wire)'."""
    assert Hello(1).encode(0) == H("0f000000 01 0000000000000000 434c4f47 0100".replace(" ", ""))
    assert Append(b"Hello World").encode(1) == H(
        "14000000 02 0100000000000000 48656c6c6f20576f726c64".replace(" ", ""))
    hello_ok = H("14000000 81 0000000000000000 0100 0000 0200 01 01000000".replace(" ", ""))
    assert codec.parse_response(cut(hello_ok)) == HelloOk(1, 0, 2, Role.LEADER, 1)
    assert HelloOk(1, 0, 2, Role.LEADER, 1).encode(0) == hello_ok
    appended = H("13000000 82 0100000000000000 0000 0000000000000000".replace(" ", ""))
    assert codec.parse_response(cut(appended)) == Appended(0, 0)


def test_format_md_worked_example_record() -> None:
    """docs/format.md §4: 'Hello World' at offset 0, epoch 1, CRC 0xefaf5865."""
    rec = codec.encode_record(0, 1, b"Hello World")
    assert rec == H("4352 01 00 0b000000 0000000000000000 01000000 6558afef 48656c6c6f20576f726c64".replace(" ", ""))
    r, n = codec.decode_record(rec)
    assert (r.offset, r.epoch, r.crc, r.payload, n) == (0, 1, 0xEFAF5865, b"Hello World", 35)


def _crc32_table_driven(data: bytes) -> int:
    """An independent, table-driven CRC-32/IEEE (reflected 0xEDB88320)."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def test_crc32_is_crc32_ieee() -> None:
    assert codec.crc32(b"123456789") == 0xCBF43926
    rng = random.Random(1)
    for _ in range(200):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
        assert codec.crc32(data) == _crc32_table_driven(data)
        k = rng.randrange(0, len(data) + 1)
        assert codec.crc32(data[k:], codec.crc32(data[:k])) == codec.crc32(data)


def test_stream_shard_is_fnv1a_64() -> None:
    # Published FNV-1a 64-bit vectors: "" -> offset basis, "a" -> 0xaf63dc4c8601ec8c.
    assert codec.stream_shard("", 2**64 - 1) == 0xCBF29CE484222325 % (2**64 - 1)
    assert codec.stream_shard("a", 2**64 - 1) == 0xAF63DC4C8601EC8C % (2**64 - 1)
    assert codec.stream_shard(b"foobar", 2**64 - 1) == 0x85944171F73967E8
    assert codec.stream_shard("order-42", 1) == 0
    for n in (2, 3, 16):
        assert codec.stream_shard("order-42", n) == codec.stream_shard(b"order-42", n) < n
    with pytest.raises(ValueError):
        codec.stream_shard("x", 0)


def test_addresses() -> None:
    assert codec.split_addrs(" a:1, b:2 ,,") == ["a:1", "b:2"]
    assert codec.shard_addr("127.0.0.1:9400", 0) == "127.0.0.1:9401"
    assert codec.shard_addr("127.0.0.1:9400", 3) == "127.0.0.1:9404"
    with pytest.raises(ValueError):
        codec.shard_addr("nohost", 0)


def _rand_bytes(rng: random.Random, n: int) -> bytes:
    return rng.getrandbits(8 * n).to_bytes(n, "little") if n else b""


def _rand_text(rng: random.Random, n: int) -> str:
    """``n`` characters of 1 to 4 bytes of UTF-8 each."""
    return "".join(rng.choice("ab-é€😀") for _ in range(n))


def _rand_request(rng: random.Random) -> codec.Request:
    k = rng.randrange(12)
    u64 = lambda: rng.getrandbits(64)  # noqa: E731
    if k == 0:
        return Hello(rng.getrandbits(16))
    if k == 1:
        return Append(_rand_bytes(rng, codec.MAX_PAYLOAD if rng.random() < 0.02 else rng.randrange(300)))
    if k == 2:
        producer = ProducerSeq(u64(), u64()) if rng.random() < 0.7 else None
        stream = None
        if rng.random() < 0.5:
            name = _rand_bytes(rng, codec.MAX_STREAM_NAME if rng.random() < 0.1 else rng.randrange(1, 40))
            stream = StreamReq(name, rng.randrange(3), u64())
        n = codec.MAX_PAYLOAD if rng.random() < 0.02 else rng.randrange(300)
        return Append2(producer, stream, _rand_bytes(rng, n))
    if k == 3:
        return Read(rng.getrandbits(16), u64(), rng.getrandbits(32))
    if k == 4:
        return Tail(rng.getrandbits(16), u64())
    if k == 5:
        return ReadStream(_rand_bytes(rng, rng.randrange(0, 300)), u64(), rng.getrandbits(32), rng.getrandbits(32))
    if k == 6:
        return Subscribe(rng.random() < 0.5, _rand_bytes(rng, rng.randrange(0, 50)), u64())
    if k == 7:
        return Trim(rng.getrandbits(16), u64())
    if k == 8:
        return GroupJoin(_rand_text(rng, rng.randrange(1, 33)), _rand_text(rng, rng.randrange(1, 33)),
                         _rand_text(rng, rng.randrange(0, 63)), rng.randrange(codec.MAX_GROUP_K + 1))
    if k == 9:
        return GroupCommit(u64(), u64())
    if k == 10:
        return GroupHeartbeat(u64())
    return Append2(None, None, b"")


def _rand_response(rng: random.Random) -> codec.Response:
    k = rng.randrange(12)
    u64 = lambda: rng.getrandbits(64)  # noqa: E731
    if k == 0:
        version, epoch = rng.getrandbits(16), rng.getrandbits(32)
        leadership = None
        if version >= codec.LEADERSHIP_VERSION:
            state = codec.LeaderState(rng.randrange(3))
            leadership = codec.Leadership(rng.getrandbits(32), rng.getrandbits(32), state)
        return HelloOk(version, rng.getrandbits(16), rng.getrandbits(16), Role(rng.randrange(1, 4)), epoch, leadership)
    if k == 1:
        return Appended(rng.getrandbits(16), u64())
    if k == 2:
        return Appended2(rng.getrandbits(16), u64(), rng.random() < 0.5, u64() if rng.random() < 0.5 else None)
    if k == 3:
        return Records(rng.getrandbits(16), u64(), rng.getrandbits(32), _rand_bytes(rng, rng.randrange(100)))
    if k == 4:
        return StreamRecords(rng.getrandbits(16), u64(), u64(), rng.getrandbits(32), _rand_bytes(rng, rng.randrange(100)))
    if k == 5:
        v = rng.getrandbits(64)
        return WrongVersion(None if v == codec.NO_STREAM_VERSION or rng.random() < 0.3 else v, "stream at v")
    if k == 6:
        return OutOfRangeResponse(u64(), "trimmed")
    if k == 7:
        return Trimmed(rng.getrandbits(16), u64())
    if k == 8:
        buckets = tuple((rng.getrandbits(16), u64()) for _ in range(rng.randrange(codec.MAX_GROUP_K + 1)))
        return GroupAssigned(u64(), rng.getrandbits(16), rng.getrandbits(8), buckets)
    if k == 9:
        return GroupRecords(u64(), u64(), rng.getrandbits(32), _rand_bytes(rng, rng.randrange(100)))
    if k == 10:
        return GroupCommitted(u64(), u64(), u64())
    code = rng.choice([c for c in range(1, 30) if c not in (7, 21)])
    msg = "".join(rng.choice("abcé€😀 \t") for _ in range(rng.randrange(0, 60)))
    hint = None
    if code in codec.HINT_CODES and rng.random() < 0.5:
        hint = codec.Hint(rng.getrandbits(32), codec.LeaderState(rng.randrange(3)), rng.getrandbits(16))
    return ErrorResponse(code, msg, hint)


def test_version_3_leadership_bytes_are_the_documented_layout() -> None:
    # docs/protocol.md §3: HelloOk version 3 = version u16 · shard u16 · shard_count u16 ·
    # role u8 · epoch u32 · lease_ms u32 · epoch u32 · state u8.
    h = HelloOk(3, 1, 2, Role.LEADER, 7, codec.Leadership(400, 9, codec.LeaderState.LAPSED))
    body = bytes.fromhex("0300" "0100" "0200" "01" "07000000" "90010000" "09000000" "02")
    assert h.encode(5)[13:] == body
    f, _ = codec.decode_frame(h.encode(5))
    assert codec.parse_response(f) == h
    # A version-2 HelloOk carries none; a cut or unknown state is refused.
    f, _ = codec.decode_frame(HelloOk(2, 1, 2, Role.LEADER, 7).encode(0))
    assert codec.parse_response(f).leadership is None and len(f.body) == 11
    for bad in (h.encode(0)[:-1], h.encode(0)[:-1] + b"\x03"):
        bad = struct.pack("<I", len(bad) - 4) + bad[4:]
        with pytest.raises(codec.CodecError):
            codec.parse_response(codec.decode_frame(bad)[0])
    # A refusal's hint: epoch u32 · state u8 · retry_ms u16 after the message.
    e = ErrorResponse(ErrorCode.NOT_LEADER, "", codec.Hint(3, codec.LeaderState.LAPSED, 50))
    assert e.encode(0)[13:] == bytes.fromhex("0500" "0000" "03000000" "02" "3200")
    assert codec.parse_response(codec.decode_frame(e.encode(0))[0]) == e
    # Only on the codes that send a client elsewhere.
    internal = bytes.fromhex("0c00" "0000" "03000000" "02" "3200")
    with pytest.raises(codec.CodecError):
        codec.parse_response(Frame(codec.Op.ERROR, 0, internal))


def test_random_requests_roundtrip_and_split_anywhere() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        req = _rand_request(rng)
        req_id = rng.getrandbits(64)
        data = req.encode(req_id)
        got = codec.decode_frame(data, codec.MAX_REQUEST_FRAME)
        assert got is not None
        f, used = got
        assert (used, f.req_id) == (len(data), req_id)
        assert codec.parse_request(f) == req
        # Any prefix is "need more bytes", never an error.
        for at in {0, 1, 3, 4, 12, 13, len(data) - 1}:
            if 0 <= at < len(data):
                assert codec.decode_frame(data[:at]) is None


def test_random_responses_roundtrip_through_a_decoder_fed_in_pieces() -> None:
    rng = random.Random(11)
    resps = [_rand_response(rng) for _ in range(1500)]
    stream = b"".join(r.encode(i) for i, r in enumerate(resps))
    dec = FrameDecoder()
    out = []
    at = 0
    while at < len(stream):
        n = rng.randrange(1, 200)
        dec.feed(stream[at:at + n])
        at += n
        out.extend(dec)
    assert dec.buffered == 0
    assert [f.req_id for f in out] == list(range(len(resps)))
    assert [codec.parse_response(f) for f in out] == resps


def test_random_records_roundtrip_and_every_flip_is_caught() -> None:
    rng = random.Random(3)
    for _ in range(1500):
        n = codec.MAX_PAYLOAD if rng.random() < 0.02 else rng.randrange(300)
        payload = _rand_bytes(rng, n)
        producer = ProducerSeq(rng.getrandbits(64), rng.getrandbits(64)) if rng.random() < 0.5 else None
        stream = None
        if rng.random() < 0.5:
            ln = codec.MAX_STREAM_NAME if rng.random() < 0.1 else rng.randrange(1, 40)
            stream = StreamPos("".join(rng.choice("abcxyz-") for _ in range(ln)), rng.getrandbits(64))
        offset, epoch = rng.getrandbits(64), rng.getrandbits(32)
        rec = codec.encode_record(offset, epoch, payload, producer, stream)
        r, used = codec.decode_record(rec)
        assert (r.offset, r.epoch, r.payload, r.producer, r.stream, used) == (
            offset, epoch, payload, producer, stream, len(rec))
        assert r.encoded_len == len(rec)
        assert rec[2] == (2 if (producer or stream) else 1)
        bad = bytearray(rec)
        at = rng.randrange(len(bad))
        bad[at] ^= 1 << rng.randrange(8)
        with pytest.raises(codec.RecordError):
            codec.decode_record(bytes(bad))


def test_verify_run_and_record_errors() -> None:
    buf = codec.encode_record(5, 1, b"hello") + codec.encode_record(6, 1, b"")
    assert [r.payload for r in codec.verify_run(buf, 5, 2)] == [b"hello", b""]
    with pytest.raises(codec.RecordError) as e:
        codec.verify_run(buf, 4, 2)
    assert e.value.kind == "OffsetGap"
    with pytest.raises(codec.RecordError) as e:
        codec.verify_run(buf, 5, 1)
    assert e.value.kind == "Truncated"
    rec = bytearray(codec.encode_record(1, 1, b"x"))
    for (at, v, kind) in [(0, 0x41, "BadMagic"), (2, 3, "BadVersion"), (3, 1, "BadVersion")]:
        b = bytearray(rec)
        b[at] = v
        with pytest.raises(codec.RecordError) as e:
            codec.decode_record(bytes(b))
        assert e.value.kind == kind
    ext = bytearray(codec.encode_record(1, 1, b"x", producer=ProducerSeq(1, 2)))
    ext[3] = 0x80
    with pytest.raises(codec.RecordError) as e:
        codec.decode_record(bytes(ext))
    assert e.value.kind == "BadFlags"
    with pytest.raises(codec.RecordError) as e:
        codec.decode_record(bytes(rec[:20]))
    assert e.value.kind == "Truncated"
    # A stream name running past the body.
    st = bytearray(codec.encode_record(1, 1, b"", stream=StreamPos("ab", 0)))
    st[24 + 8] = 200
    with pytest.raises(codec.RecordError) as e:
        codec.decode_record(bytes(st))
    assert e.value.kind == "BadStream"


def test_malformed_frames_are_errors_with_the_servers_codes() -> None:
    with pytest.raises(codec.CodecError) as e:
        codec.decode_frame(struct.pack("<I", 8) + b"\x02")
    assert e.value.code == ErrorCode.BAD_FRAME
    with pytest.raises(codec.CodecError) as e:
        codec.decode_frame(struct.pack("<I", codec.MAX_REQUEST_FRAME - 3), codec.MAX_REQUEST_FRAME)
    assert e.value.code == ErrorCode.TOO_LARGE
    assert codec.MAX_REQUEST_FRAME == 65_832 and codec.MAX_FRAME == 2_097_216
    with pytest.raises(codec.CodecError) as e:
        codec.parse_request(cut(struct.pack("<IBQ", 9, 0x7E, 0)))
    assert e.value.code == ErrorCode.UNKNOWN_OPCODE
    trunc = Read(0, 0, 1).encode(0)[:-1]
    trunc = struct.pack("<I", len(trunc) - 4) + trunc[4:]
    with pytest.raises(codec.CodecError, match="body truncated"):
        codec.parse_request(cut(trunc))
    trailing = Tail(0, 0).encode(0) + b"\x00"
    trailing = struct.pack("<I", len(trailing) - 4) + trailing[4:]
    with pytest.raises(codec.CodecError, match="trailing bytes"):
        codec.parse_request(cut(trailing))
    bad_magic = bytearray(Hello().encode(0))
    bad_magic[13] = ord("X")
    with pytest.raises(codec.CodecError, match="bad magic"):
        codec.parse_request(cut(bytes(bad_magic)))
    big = struct.pack("<IBQ", 9 + codec.MAX_PAYLOAD + 1, codec.Op.APPEND, 0) + bytes(codec.MAX_PAYLOAD + 1)
    with pytest.raises(codec.CodecError) as e:
        codec.parse_request(cut(big))
    assert e.value.code == ErrorCode.TOO_LARGE
    with pytest.raises(codec.CodecError, match="unknown role"):
        codec.parse_response(cut(struct.pack("<IBQHHHBI", 20, 0x81, 0, 1, 0, 2, 9, 1)))
    with pytest.raises(codec.CodecError, match="not UTF-8"):
        codec.parse_response(cut(struct.pack("<IBQHH", 9 + 5, 0xFF, 0, 5, 1) + b"\xff"))
    with pytest.raises(codec.CodecError, match="unknown Append2 flags"):
        codec.parse_request(cut(struct.pack("<IBQB", 10, codec.Op.APPEND2, 0, 4)))


def test_largest_request_fits_exactly() -> None:
    name = "n" * codec.MAX_STREAM_NAME
    data = Append2(ProducerSeq(1, 2), StreamReq.new(name, "none"), bytes(codec.MAX_PAYLOAD)).encode(0)
    assert len(data) == codec.MAX_REQUEST_FRAME
    assert codec.decode_frame(data, codec.MAX_REQUEST_FRAME) is not None


def test_error_messages_are_cut_to_1kib_on_a_char_boundary() -> None:
    msg = "é" * 600  # 1,200 bytes
    r = codec.parse_response(cut(codec.encode_error(3, 5, msg)))
    assert isinstance(r, ErrorResponse) and r.message == "é" * 512


def test_wrong_version_layout() -> None:
    """Code 21 carries the current version after the message; u64::MAX = no stream."""
    data = WrongVersion(None, "none").encode(9)
    assert data[-8:] == b"\xff" * 8
    assert codec.parse_response(cut(data)) == WrongVersion(None, "none")
    assert codec.parse_response(cut(WrongVersion(4, "at 4").encode(9))) == WrongVersion(4, "at 4")
    # A version-1 style OutOfRange (no trailing field) stays a plain error.
    plain = codec.encode_error(1, ErrorCode.OUT_OF_RANGE, "gone")
    assert codec.parse_response(cut(plain)) == ErrorResponse(7, "gone")


def test_expect_parsing() -> None:
    assert Expect.parse("any") == Expect.ANY == Expect.parse(None)
    assert Expect.parse("none") == Expect.NO_STREAM == Expect.parse("no-stream")
    assert Expect.parse(3) == Expect.exact(3) == Expect.parse("3")
    for bad in ("x", -1, True, 2**64):
        with pytest.raises(ValueError):
            Expect.parse(bad)  # type: ignore[arg-type]
    assert StreamReq.new("s", 5) == StreamReq(b"s", codec.EXPECT_EXACT, 5)
    assert Expect.ANY.met_by(None) and Expect.NO_STREAM.met_by(None) and not Expect.exact(1).met_by(None)


def test_every_code_has_its_exception() -> None:
    assert set(errors.SERVER_ERRORS) == {int(c) for c in ErrorCode}
    for code, cls in errors.SERVER_ERRORS.items():
        e = errors.error_for_code(code, "m")
        assert type(e) is cls and e.code == code and isinstance(e, errors.CorelogError)
        assert ErrorCode(code).name in str(e)
    w = errors.error_for_code(21, "m", current=None)
    assert isinstance(w, errors.WrongExpectedVersion) and w.current is None
    assert errors.error_for_code(99, "m").code == 99
    assert errors.NotLeader("127.0.0.1:1").leader == "127.0.0.1:1"
    assert errors.ReplicationTimeout().outcome == errors.UNKNOWN
    assert errors.NotLeader().outcome == errors.NOT_WRITTEN


def test_group_frames_are_the_documented_layout() -> None:
    """Consumer groups (protocol version 4, client/src/codec/group.rs), byte for byte."""
    assert (codec.PROTOCOL_VERSION, codec.GROUPS_VERSION, codec.CLIENT_VERSION) == (4, 4, 3)
    assert ErrorCode.STALE_GENERATION == 25 and Hello().version == codec.CLIENT_VERSION
    # len u32 · op u8 · req_id u64 · body
    join = H("23000000" "0a" "0900000000000000" "07" + b"billing".hex() + "08" + b"worker-1".hex()
             + "0600" + b"order-".hex() + "04")
    commit = H("19000000" "0b" "0200000000000000" "0700000000000000" "0000000000010000")
    beat = H("11000000" "0c" "0300000000000000" "ffffffffffffffff")
    for req, data, req_id in [(GroupJoin("billing", "worker-1", "order-", 4), join, 9),
                              (GroupCommit(7, 1 << 40), commit, 2), (GroupHeartbeat(2**64 - 1), beat, 3)]:
        assert req.encode(req_id) == data
        assert codec.parse_request(cut(data)) == req
    assert GroupJoin("g", "m").encode(1)[13:] == H("01" "67" "01" "6d" "0000" "00")
    assigned = H("2a000000" "88" "0500000000000000" "0300000000000000" "0200" "04" "0200"
                 "0000" "ffffffffffffffff" "0600" "0c00000000000000")
    empty = H("16000000" "88" "0500000000000000" "0400000000000000" "0100" "01" "0000")
    records = H("20000000" "89" "0500000000000000" "0300000000000000" "6300000000000000" "01000000" "010203")
    committed = H("21000000" "8a" "0500000000000000" "0300000000000000" "6300000000000000" "7800000000000000")
    for resp, data in [(GroupAssigned(3, 2, 4, ((0, codec.NO_COMMIT), (6, 12))), assigned),
                       (GroupAssigned(4, 1, 1, ()), empty), (GroupRecords(3, 99, 1, b"\x01\x02\x03"), records),
                       (GroupCommitted(3, 99, 120), committed)]:
        assert resp.encode(5) == data
        assert codec.parse_response(cut(data)) == resp
    # StaleGeneration is a plain error frame (no hint), raised as its own class.
    stale = codec.parse_response(cut(codec.encode_error(2, ErrorCode.STALE_GENERATION, "gen 3 is not 4")))
    assert stale == ErrorResponse(25, "gen 3 is not 4")
    assert type(errors.error_for_code(25, "x")) is errors.StaleGeneration


def test_bad_group_frames_are_errors() -> None:
    join = bytearray(GroupJoin("ab", "m").encode(1))
    join[13 + 1] = 0xFF  # the group name is not UTF-8
    with pytest.raises(codec.CodecError, match="group not UTF-8"):
        codec.parse_request(cut(bytes(join)))
    short = GroupJoin("ab", "m").encode(1)[:-1]  # k missing
    with pytest.raises(codec.CodecError, match="body truncated"):
        codec.parse_request(cut(struct.pack("<I", len(short) - 4) + short[4:]))
    long_name = struct.pack("<IBQB", 9 + 1 + 129, codec.Op.GROUP_JOIN, 1, 129) + b"g" * 129
    with pytest.raises(codec.CodecError, match="group too long"):
        codec.parse_request(cut(long_name))
    too_many = struct.pack("<IBQQHBH", 9 + 13, codec.Op.GROUP_ASSIGNED, 1, 3, 1, 1, 500)
    with pytest.raises(codec.CodecError, match="more buckets"):
        codec.parse_response(cut(too_many))
    trailing = GroupCommitted(1, 2, 3).encode(1) + b"\x00"
    with pytest.raises(codec.CodecError, match="trailing bytes"):
        codec.parse_response(cut(struct.pack("<I", len(trailing) - 4) + trailing[4:]))
    for bad in (GroupJoin("g" * 129, "m"), GroupJoin("g", "m" * 129), GroupJoin("g", "m", "p" * 256)):
        with pytest.raises(ValueError):
            bad.encode(1)
