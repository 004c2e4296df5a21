"""The leadership rules of docs/protocol.md §6.3 in the asyncio client, against fake nodes
speaking the real codec (plaintext; the Rust client's client/tests/failover_client.rs
has the same cases): a silent leader is abandoned after its lease and not tried again, a
slow one that answers probes is waited for, a stale name is not followed, and "no live
leader" means asking the same node again."""

from __future__ import annotations

import asyncio
import time
from typing import Optional, Tuple

import pytest

import corelog.aio
from corelog import codec, errors
from corelog.codec import ErrorCode, Hint, LeaderState, Leadership, Role

from conftest import requests_of

LEASE_MS = 200


class Fake:
    """A fake node: `mode` is "accept", "frozen" (answers its first Hello, then nothing),
    "hold:N" (answers Hellos at once, the appends after the N-th probe), "drop" (closes
    the connection on reading an append), "refuse" (every append answered with
    `refusal`) or "old:S" (a server older than protocol version 3: refuses a newer Hello
    with BadVersion and closes; answers each append after S seconds)."""

    def __init__(self, mode: str, role: Role, epoch: int, leadership: Optional[Leadership],
                 refusal: Optional[Tuple[int, str, Hint]] = None) -> None:
        self.mode, self.role, self.epoch, self.leadership, self.refusal = mode, role, epoch, leadership, refusal
        self.appends = 0
        self.conns = 0
        self.server: Optional[asyncio.base_events.Server] = None
        self.addr = ""

    async def start(self) -> "Fake":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = "127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.conns += 1
        hellos, held = 0, []
        offset = 0
        try:
            async for f, req in requests_of(r):
                if isinstance(req, codec.Hello):
                    if self.mode == "frozen" and hellos > 0:
                        continue
                    if self.mode.startswith("old:") and req.version > 2:
                        msg = f"protocol version {req.version} unsupported; this server speaks 1 to 2"
                        w.write(codec.ErrorResponse(ErrorCode.BAD_VERSION, msg, None).encode(f.req_id))
                        await w.drain()
                        w.close()
                        return
                    hellos += 1
                    w.write(codec.HelloOk(req.version, 0, 1, self.role, self.epoch, self.leadership).encode(f.req_id))
                    if self.mode.startswith("hold:") and hellos > int(self.mode[5:]):
                        for rid in held:
                            w.write(codec.Appended(0, offset).encode(rid))
                            offset += 1
                        held = []
                else:
                    self.appends += 1
                    if self.mode == "drop":
                        w.close()
                        return
                    if self.mode == "frozen":
                        continue
                    if self.mode.startswith("hold:"):
                        held.append(f.req_id)
                    elif self.mode.startswith("old:"):
                        await asyncio.sleep(float(self.mode[4:]))
                        w.write(codec.Appended(0, offset).encode(f.req_id))
                        offset += 1
                    elif self.mode == "refuse":
                        assert self.refusal is not None
                        code, msg, h = self.refusal
                        w.write(codec.ErrorResponse(code, msg, h).encode(f.req_id))
                    else:
                        w.write(codec.Appended(0, offset).encode(f.req_id))
                        offset += 1
                await w.drain()
        except (ConnectionError, OSError):
            return


def leader(epoch: int) -> Leadership:
    return Leadership(LEASE_MS, epoch, LeaderState.LIVE)


def cfg() -> dict:
    return dict(insecure=True, failover_timeout=0.6, request_timeout=30.0)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_a_silent_leader_is_abandoned_after_its_lease_and_not_tried_again() -> None:
    async def go() -> None:
        frozen = await Fake("frozen", Role.LEADER, 5, leader(5)).start()
        new = await Fake("accept", Role.LEADER, 7, leader(7)).start()
        async with corelog.aio.Client(f"{frozen.addr},{new.addr}", **cfg()) as c:
            t0 = time.monotonic()
            with pytest.raises(errors.Abandoned) as e:
                await c.append(b"x")
            took = time.monotonic() - t0
            assert e.value.outcome == errors.UNKNOWN
            assert LEASE_MS / 1000 <= took < 2, took
            await c.append(b"y")
            await c.append(b"z")
        assert (frozen.appends, frozen.conns, new.appends) == (1, 1, 2)
        frozen.close(); new.close()
    run(go())


def test_a_slow_leader_that_answers_probes_is_waited_for() -> None:
    async def go() -> None:
        slow = await Fake("hold:2", Role.LEADER, 5, leader(5)).start()
        async with corelog.aio.Client(slow.addr, **cfg()) as c:
            t0 = time.monotonic()
            await c.append(b"x")
            assert time.monotonic() - t0 >= LEASE_MS / 1000, "answered before being probed"
        assert slow.appends == 1
        slow.close()
    run(go())


def test_a_name_from_an_older_epoch_and_a_former_leader_are_not_followed() -> None:
    async def go() -> None:
        x = await Fake("refuse", Role.FOLLOWER, 7, Leadership(LEASE_MS, 7, LeaderState.UNKNOWN),
                       (ErrorCode.NOT_LEADER, "", Hint(7, LeaderState.UNKNOWN, 0))).start()
        old = await Fake("accept", Role.LEADER, 5, leader(5)).start()
        new = await Fake("accept", Role.LEADER, 7, leader(7)).start()
        f = await Fake("refuse", Role.FOLLOWER, 5, None,
                       (ErrorCode.NOT_LEADER, old.addr, Hint(5, LeaderState.LIVE, 0))).start()
        async with corelog.aio.Client(f"{x.addr},{f.addr},{new.addr}", **cfg()) as c:
            await c.append(b"a")
        assert (f.appends, old.conns, new.appends) == (1, 0, 1), "followed a stale name"
        async with corelog.aio.Client(f"{x.addr},{old.addr},{new.addr}", **cfg()) as c:
            await c.append(b"b")
        assert (old.appends, old.conns, new.appends) == (0, 1, 2), "used a former leader"
        for n in (x, old, new, f):
            n.close()
    run(go())


def test_no_live_leader_means_waiting_on_the_node_that_said_so() -> None:
    async def go() -> None:
        f = await Fake("refuse", Role.FOLLOWER, 6, None,
                       (ErrorCode.NOT_LEADER, "", Hint(6, LeaderState.LAPSED, 30))).start()
        other = await Fake("accept", Role.LEADER, 5, leader(5)).start()
        async with corelog.aio.Client(f"{f.addr},{other.addr}", **cfg()) as c:
            with pytest.raises(errors.NotLeader) as e:
                await c.append(b"x")
            assert e.value.outcome == errors.NOT_WRITTEN
        assert f.appends >= 10, f.appends
        assert f.conns == 1, "a poll goes on the same connection"
        assert other.appends == 0
        f.close(); other.close()
    run(go())


def test_an_attempt_lost_on_a_followers_connection_was_not_written_and_moves_on() -> None:
    async def go() -> None:
        f = await Fake("frozen", Role.FOLLOWER, 5, None).start()
        f.mode = "drop"
        new = await Fake("accept", Role.LEADER, 6, leader(6)).start()
        async with corelog.aio.Client(f"{f.addr},{new.addr}", **cfg()) as c:
            await c.append(b"x")
        assert (f.appends, new.appends) == (1, 1)
        f.close(); new.close()
    run(go())


def test_a_server_older_than_the_client_is_spoken_to_in_version_2() -> None:
    async def go() -> None:
        old = await Fake("old:0", Role.LEADER, 1, None).start()
        async with corelog.aio.Client(old.addr, **cfg()) as c:
            for want in range(3):
                assert (await c.append(b"x")).offset == want
        assert (old.appends, old.conns) == (3, 2), "one refused, one used"
        old.close()
    run(go())


def test_no_probe_on_a_version_2_connection_after_a_lease_was_learned() -> None:
    async def go() -> None:
        old = await Fake("old:0.7", Role.LEADER, 1, None).start()
        new = await Fake("refuse", Role.FOLLOWER, 1, leader(1),
                         (ErrorCode.NOT_LEADER, old.addr, Hint(1, LeaderState.LIVE, 0))).start()
        async with corelog.aio.Client(f"{new.addr},{old.addr}", **cfg()) as c:
            assert (await c.append(b"x")).offset == 0
        assert old.appends == 1, "sent once, answered after 0.7 s"
        old.close()
        new.close()
    run(go())
