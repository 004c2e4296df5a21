#!/usr/bin/env python3
"""Append, read back and tail against the nodes of ``corelog quickstart --dir D``.

``corelog quickstart --dir D`` writes certificates to ``D/certs`` and data to
``D/leader`` and ``D/follower`` (leader clients on port P = 19400, follower on P + 100),
runs its load, then stops both nodes. Start them again on that data, then run this:

    corelog quickstart --dir D --seconds 1
    python examples/quickstart.py --dir D --start     # starts the pair from D, stops it at exit

or, with the nodes already running (as README.md shows):

    python examples/quickstart.py --dir D
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from typing import List

import corelog


def serve_args(exe: str, d: str, role: str, port: int) -> List[str]:
    """The `corelog serve` command line quickstart uses for ``role`` (its port layout)."""
    certs = os.path.join(d, "certs")
    ident = "server" if role == "leader" else "follower"
    listen = port if role == "leader" else port + 100
    a = [exe, "serve", "--role", role, "--data-dir", os.path.join(d, role), "--listen", f"127.0.0.1:{listen}",
         "--repl-listen", f"127.0.0.1:{port + 200 if role == 'leader' else port + 300}",
         "--cert", os.path.join(certs, f"{ident}.pem"), "--key", os.path.join(certs, f"{ident}.key"),
         "--client-ca", os.path.join(certs, "ca.pem"), "--segment-bytes", str(64 << 20)]
    if role == "leader":
        return a + ["--follower-addr", f"127.0.0.1:{port + 300}"]
    return a + ["--leader-addr", f"127.0.0.1:{port}"]


def wait_port(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="the directory given to `corelog quickstart --dir`")
    ap.add_argument("--port", type=int, default=19400, help="quickstart's --port (default 19400)")
    ap.add_argument("--start", action="store_true", help="start the leader and follower from DIR first")
    ap.add_argument("--corelog", default=shutil.which("corelog") or "corelog", help="the corelog binary (--start)")
    a = ap.parse_args()

    procs: List[subprocess.Popen] = []
    try:
        if a.start:
            for role in ("follower", "leader"):
                log = open(os.path.join(a.dir, f"{role}.example.log"), "ab")
                procs.append(subprocess.Popen(serve_args(a.corelog, a.dir, role, a.port), stdout=log,
                                              stderr=subprocess.STDOUT))
                log.close()
            wait_port(a.port + 100)
            wait_port(a.port)
        run(a.dir, a.port)
    finally:
        for p in procs:  # stop what we started, by pid
            p.kill()
            p.wait()
    return 0


def run(d: str, port: int) -> None:
    addrs = f"127.0.0.1:{port},127.0.0.1:{port + 100}"  # leader, follower: either order works
    with corelog.Client(addrs, certs=os.path.join(d, "certs")) as client:
        # Append (pipelined: all three in flight at once), each durable on both nodes.
        events = [b"Hello World", b"order-42 created", b"order-42 paid"]
        positions = client.append_many(events)
        for pos, e in zip(positions, events):
            print(f"appended {e!r} at shard {pos.shard} offset {pos.offset}")

        # Read back.
        first = positions[0]
        for rec in client.read(first.shard, first.offset)[: len(events)]:
            print(f"read     {rec.offset}\t{rec.payload.decode()}")

        # Tail from the first one: the three, then live ones as they are committed.
        with client.tail(first.shard, first.offset) as tail:
            late = client.append(b"appended while tailing")
            for rec in tail:
                print(f"tailed   {rec.offset}\t{rec.payload.decode()}")
                if rec.offset >= late.offset:
                    break

        # A stream with optimistic concurrency.
        stream = f"order-{os.getpid()}-{time.time_ns()}"
        v0 = client.append_to(stream, b"created", expect="none")
        v1 = client.append_to(stream, b"paid", expect=v0.version)
        print(f"stream {stream}: versions {v0.version}, {v1.version}")
        try:
            client.append_to(stream, b"paid twice", expect=v0.version)
        except corelog.WrongExpectedVersion as e:
            print(f"stale expectation refused, stream is at version {e.current}")
    print("ok")


if __name__ == "__main__":
    sys.exit(main())
