#!/usr/bin/env python3
"""Writes a seed corpus of valid frames for the `codec` fuzz target.

Built from the byte layouts in docs/protocol.md and docs/format.md, not from the Rust
encoder, so the fuzz run also checks that the documents and the code agree (every seed
must parse). Usage, from client/fuzz:  python3 gen_corpus.py corpus/codec
"""

import os
import struct
import sys
import zlib

MAGIC = b"CLOG"


def frame(op, req_id, body):
    return struct.pack("<IBQ", 1 + 8 + len(body), op, req_id) + body


def record(offset, epoch, payload, flags=0, producer=None, stream=None):
    """format.md §3: version 1, or version 2 with the producer extension (id, seq) and/or
    the stream extension (name, version)."""
    ext = b"" if producer is None else struct.pack("<QQ", *producer)
    if stream is not None:
        name = stream[0].encode()
        ext += struct.pack("<QB", stream[1], len(name)) + name
    version = 1 if producer is None and stream is None else 2
    if producer is not None:
        flags |= 1
    if stream is not None:
        flags |= 2
    body = ext + payload
    head = b"CR" + bytes([version, flags]) + struct.pack("<IQI", len(body), offset, epoch)
    crc = zlib.crc32(head + body) & 0xFFFFFFFF
    return head + struct.pack("<I", crc) + body


def records(first, epoch, payloads):
    return b"".join(record(first + i, epoch, p) for i, p in enumerate(payloads))


def error(req_id, code, msg):
    m = msg.encode()
    return frame(0xFF, req_id, struct.pack("<HH", code, len(m)) + m)


def seeds():
    pays = [b"", b"Hello World", bytes(range(256)), b"\x00" * 100, "h\u00e9llo \u2603".encode()]
    recs = records(5, 2, pays)
    s = {}
    # Client requests.
    s["hello"] = frame(0x01, 0, MAGIC + struct.pack("<H", 1))
    s["hello_v2"] = frame(0x01, 9, MAGIC + struct.pack("<H", 2))
    for i, p in enumerate(pays):
        s[f"append_{i}"] = frame(0x02, i + 1, p)
    s["read"] = frame(0x03, 3, struct.pack("<HQI", 0, 0, 1 << 20))
    s["read_big"] = frame(0x03, 4, struct.pack("<HQI", 7, 2**64 - 1, 2**32 - 1))
    s["tail"] = frame(0x04, 5, struct.pack("<HQ", 1, 42))
    s["append2_plain"] = frame(0x05, 6, b"\x00" + b"Hello World")
    s["append2_producer"] = frame(0x05, 7, b"\x01" + struct.pack("<QQ", 0xFEED, 41) + b"idem")
    s["append2_bad_flags"] = frame(0x05, 8, b"\x80x")
    name = "order-42".encode()
    s["append2_stream"] = frame(0x05, 9, b"\x02" + struct.pack("<H", len(name)) + name + struct.pack("<BQ", 2, 3) + b"paid")
    s["append2_both"] = frame(
        0x05, 10, b"\x03" + struct.pack("<QQH", 0xFEED, 42, len(name)) + name + struct.pack("<BQ", 1, 0) + b"x"
    )
    s["read_stream"] = frame(0x06, 11, struct.pack("<H", len(name)) + name + struct.pack("<QII", 0, 100, 1 << 20))
    # Responses.
    for role in (1, 2, 3):
        s[f"hello_ok_{role}"] = frame(0x81, 0, struct.pack("<HHHBI", 1, 0, 4, role, 7))
    s["appended"] = frame(0x82, 1, struct.pack("<HQ", 2, 1 << 40))
    s["appended2"] = frame(0x84, 7, struct.pack("<HQB", 0, 99, 0))
    s["appended2_dup"] = frame(0x84, 7, struct.pack("<HQB", 1, 5, 1))
    s["error_sequence_gap"] = error(7, 18, "producer 0xfeed sequence 50: this shard expects sequence 42 next")
    s["appended2_version"] = frame(0x84, 9, struct.pack("<HQBQ", 1, 77, 2, 3))
    m = 'stream "order-42" is at version 4, not 3 as expected'.encode()
    s["wrong_version"] = frame(0xFF, 9, struct.pack("<HH", 21, len(m)) + m + struct.pack("<Q", 4))
    ev = record(7, 1, b"created", stream=("order-42", 0)) + record(9, 1, b"paid", producer=(1, 2), stream=("order-42", 1))
    s["stream_records"] = frame(0x85, 11, struct.pack("<HQQI", 0, 2, 2, 2) + ev)
    # Retention.
    s["trim"] = frame(0x08, 12, struct.pack("<HQ", 0, 1 << 20))
    s["trimmed"] = frame(0x86, 12, struct.pack("<HQ", 0, 4096))
    m = "offset 0 was deleted by retention; the first still held is 4096".encode()
    s["out_of_range"] = frame(0xFF, 13, struct.pack("<HH", 7, len(m)) + m + struct.pack("<Q", 4096))
    s["out_of_range_v1"] = frame(0xFF, 13, struct.pack("<HH", 7, len(m)) + m)
    s["records"] = frame(0x83, 3, struct.pack("<HQI", 0, 5 + len(pays), len(pays)) + recs)
    s["records_empty"] = frame(0x83, 3, struct.pack("<HQI", 0, 0, 0))
    s["error_not_leader"] = error(1, 5, "10.0.0.1:9400")
    s["error_utf8"] = error(2, 12, "d\u00e9j\u00e0 vu \u2603")
    s["error_long"] = error(3, 8, "x" * 1100)
    # Replication.
    s["repl_hello"] = frame(0x10, 0, MAGIC + struct.pack("<HHHIQI", 1, 3, 4, 2, 100, 1))
    s["repl_welcome"] = frame(0x90, 0, struct.pack("<IQ", 2, 90))
    s["repl_batch"] = frame(0x91, 0, struct.pack("<IQI", 2, 5, len(pays)) + recs)
    s["repl_batch_one"] = frame(0x91, 0, struct.pack("<IQI", 1, 0, 1) + record(0, 1, b"Hello World"))
    s["repl_ack"] = frame(0x11, 0, struct.pack("<Q", 11))
    s["repl_error"] = error(0, 10, "stale epoch 1: this node is at epoch 2")
    # Streams of several frames, as a connection sees them.
    s["stream_client"] = s["hello"] + s["append_1"] + s["append_2"] + s["read"] + s["tail"]
    s["stream_server"] = s["hello_ok_1"] + s["appended"] + s["records"] + s["error_not_leader"]
    s["stream_repl"] = s["repl_hello"] + s["repl_welcome"] + s["repl_batch"] + s["repl_ack"]
    s["stream_partial"] = s["hello"] + s["read"][:-3]
    # Bare records (the record decoder runs on the whole input too).
    s["records_raw"] = recs
    s["record_one"] = record(0, 1, b"Hello World")
    s["record_flags"] = record(3, 1, b"flagged", flags=1)
    s["record_producer"] = record(4, 2, b"idem", producer=(0xFEED, 41))
    s["records_mixed"] = record(0, 1, b"plain") + record(1, 1, b"idem", producer=(7, 0))
    s["repl_batch_mixed"] = frame(0x91, 0, struct.pack("<IQI", 1, 0, 2) + s["records_mixed"])
    return s


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "corpus/codec"
    os.makedirs(out, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(out, "seed_" + name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds())} seeds to {out}")


if __name__ == "__main__":
    main()
