"""A recorded closed-loop load for the failover benchmark (server/tests/failover.rs,
``every_fault_kind_resumes_writes``; benches/failover.sh): the Python client's version of
the Rust workload (history/src/run.rs, `corelog workload`), in its history format, so that the same
checks (read-back, epoch order, Porcupine) and the same writes-resumed figures apply.

``CONNS`` asyncio clients (each its own connection, one append in flight) append unique
payloads ``TAG-CONN-SEQ-`` padded with ``.`` to 48 bytes; after a failed or unknown
outcome a client waits 10 ms doubling to 200 ms and goes on with the next payload
(nothing is sent twice). Times are µs of CLOCK_MONOTONIC since ``--t0-ns`` (the caller's
clock: the same clock). Prints ``ready``, then ``oks N`` every 20 ms; stops when stdin
closes (appends still in flight get 5 s), writes the history to ``--out`` and prints
``done``.

    python3 failover_load.py --addrs A,B --certs DIR --tag T --conns 16 --t0-ns N --out FILE
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from typing import List, Tuple

import corelog.aio
from corelog.errors import NOT_WRITTEN, CorelogError

GRACE = 5.0
PAYLOAD = 48


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--addrs", required=True)
    ap.add_argument("--certs", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--t0-ns", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    asyncio.run(run(a))


async def run(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
    ops: List[Tuple[int, int, int, int, str, str]] = []
    oks = [0]

    async def grace() -> None:
        await stop.wait()
        await asyncio.sleep(GRACE)

    # Appends still in flight this long after the stop are abandoned (bounded shutdown).
    over = asyncio.ensure_future(grace())

    def now_us() -> int:
        return (time.monotonic_ns() - a.t0_ns) // 1000

    async def conn(i: int) -> None:
        c = corelog.aio.Client(a.addrs, certs=a.certs, failover_timeout=3.0, request_timeout=5.0)
        seq, backoff = 0, 0.01
        while not stop.is_set():
            p = f"{a.tag}-{i}-{seq}-".ljust(PAYLOAD, ".")
            t = now_us()
            task = asyncio.ensure_future(c.append(p.encode()))
            done, _ = await asyncio.wait({task, over}, return_when=asyncio.FIRST_COMPLETED)
            if task not in done:
                task.cancel()
                ops.append((i, seq, t, now_us(), p, f"unknown abandoned: no answer {GRACE} s after the run ended"))
                break
            try:
                pos = task.result()
                ops.append((i, seq, t, now_us(), p, f"ok {pos.shard} {pos.offset}"))
                oks[0] += 1
                backoff = 0.01
            except CorelogError as e:
                why = str(e).replace("\n", " ")
                kind = "failed" if e.outcome == NOT_WRITTEN else "unknown"
                ops.append((i, seq, t, now_us(), p, f"{kind} {why}"))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.2)
            seq += 1
        await c.close()

    async def progress() -> None:
        while not stop.is_set():
            print(f"oks {oks[0]}", flush=True)
            await asyncio.sleep(0.02)

    print("ready", flush=True)
    tasks = [asyncio.ensure_future(conn(i)) for i in range(a.conns)]
    p = asyncio.ensure_future(progress())
    await asyncio.gather(*tasks, return_exceptions=True)
    p.cancel()
    over.cancel()
    with open(a.out, "w") as f:
        f.write("# corelog workload history v1 (Python client)\n")
        f.write(f"tag {a.tag}\n")
        for i, seq, t, d, payload, result in sorted(ops, key=lambda o: (o[2], o[0], o[1])):
            f.write(f"op {i} {seq} {t} {d} {payload} {result}\n")
    print(f"oks {oks[0]}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
