#!/usr/bin/env python3
"""Throughput of the Python asyncio client, two package trees against one node,
alternately: each round runs ``asyncio.gather`` of N appends (one connection,
pipelined) once with each tree, in a fresh interpreter, and prints appends/s; the
summary is the median of each and their ratio (B / A).

    python3 benches/py_client_throughput.py --a OLD/client/python/src \
        --b client/python/src [--appends 10000] [--rounds 5] [--bin target/release/corelog]

The node is a standalone ``corelog serve`` with mTLS (certificates from ``corelog
certs``) on loopback, started here and killed by pid at the end.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

RUN = r"""
import asyncio, sys, time
import corelog, corelog.aio
async def main():
    async with corelog.aio.Client(sys.argv[1], certs=sys.argv[2]) as c:
        await c.append_many([b"warm"] * 200)
        t0 = time.perf_counter()
        got = await asyncio.gather(*(c.append(b"x" * 64) for _ in range(int(sys.argv[3]))))
        dt = time.perf_counter() - t0
        assert len(got) == int(sys.argv[3])
        print(len(got) / dt)
asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="package source tree A (the baseline)")
    ap.add_argument("--b", required=True, help="package source tree B")
    ap.add_argument("--appends", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bin", default=os.environ.get("CORELOG_BIN", "target/release/corelog"))
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="pythroughput-")
    subprocess.run([a.bin, "certs", "--out", f"{d}/certs"], check=True, capture_output=True)
    port = free_port()
    addr = f"127.0.0.1:{port}"
    node = subprocess.Popen([a.bin, "serve", "--role", "standalone", "--data-dir", f"{d}/data", "--listen", addr,
                             "--shard-count", "1", "--cert", f"{d}/certs/server.pem", "--key",
                             f"{d}/certs/server.key", "--client-ca", f"{d}/certs/ca.pem"],
                            stdout=subprocess.DEVNULL, stderr=open(f"{d}/node.log", "wb"))
    try:
        end = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > end or node.poll() is not None:
                    raise SystemExit(f"node not up: see {d}/node.log")
                time.sleep(0.05)
        rates = {"A": [], "B": []}
        for r in range(a.rounds):
            for name, src in (("A", a.a), ("B", a.b)):
                env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
                out = subprocess.run([sys.executable, "-c", RUN, addr, f"{d}/certs", str(a.appends)], env=env,
                                     capture_output=True, timeout=300, check=True)
                rate = float(out.stdout.split()[-1])
                rates[name].append(rate)
                print(f"round {r + 1} {name}: {rate:,.0f} appends/s", flush=True)
        ma, mb = statistics.median(rates["A"]), statistics.median(rates["B"])
        print(f"median A {ma:,.0f}/s, B {mb:,.0f}/s, B/A = {mb / ma:.3f} ({a.appends} gathered appends, "
              f"{a.rounds} rounds alternating, Python {sys.version.split()[0]})")
    finally:
        node.kill()
        node.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
