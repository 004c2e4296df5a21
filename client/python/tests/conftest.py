"""Fixtures: real corelog nodes (a leader + follower pair on loopback, mTLS), started
from the binary in ``$CORELOG_BIN`` (default ``../../target/release/corelog`` relative to
the package), with certificates from ``corelog certs --out``; free ports; every process
stopped by pid in teardown. ``CORELOG_NO_SKIP=1`` turns any skip into a failure."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

import pytest

import corelog
import corelog.aio
from corelog import codec

PKG = Path(__file__).resolve().parent.parent
REPO = PKG.parent.parent
BIN = Path(os.environ.get("CORELOG_BIN") or PKG / "../../target/release/corelog").resolve()
SHARDS = 2


# ----------------------------------------------------------------------------- no skips


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    report = yield
    if os.environ.get("CORELOG_NO_SKIP") == "1" and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped while CORELOG_NO_SKIP=1: {report.longrepr}"
    return report


def wait_until(cond: Callable[[], object], timeout: float, what: str, every: float = 0.02) -> object:
    """Polls ``cond`` until it returns something truthy, at most ``timeout`` seconds."""
    end = time.monotonic() + timeout
    last: Optional[BaseException] = None
    while time.monotonic() < end:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - keep polling, report the last error
            last = e
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last error: {last!r})")


# ----------------------------------------------------------------------------- ports


def _port_free(p: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", p))
            return True
        except OSError:
            return False


_taken: set = set()


def free_base(offsets: List[int]) -> int:
    """A base port B such that B + o is free for every o in ``offsets`` (and not handed
    out before in this run)."""
    rng = random.Random()
    for _ in range(2000):
        b = rng.randrange(20000, 60000)
        ports = [b + o for o in offsets]
        if not any(p in _taken for p in ports) and all(_port_free(p) for p in ports):
            _taken.update(ports)
            return b
    raise RuntimeError("no free port range on 127.0.0.1")


# ----------------------------------------------------------------------------- processes


class Node:
    """One ``corelog serve`` process (killed by pid in teardown)."""

    def __init__(self, name: str, workdir: Path, certs: Path, role: str, client_port: int, repl_port: int,
                 peer: str, extra: Tuple[str, ...] = ()) -> None:
        self.name = name
        self.data = workdir / name
        self.log = workdir / f"{name}.log"
        self.certs = certs
        self.client_port = client_port
        self.repl_port = repl_port
        self.addr = f"127.0.0.1:{client_port}"
        self.peer = peer
        self.extra = tuple(extra)
        self.role = role
        self.proc: Optional[subprocess.Popen] = None

    def args(self, role: str) -> List[str]:
        ident = "follower" if role == "follower" else "server"
        a = [str(BIN), "serve", "--role", role, "--data-dir", str(self.data), "--listen", self.addr,
             "--repl-listen", f"127.0.0.1:{self.repl_port}", "--shard-count", str(SHARDS),
             "--segment-bytes", str(4 << 20), "--cert", str(self.certs / f"{ident}.pem"),
             "--key", str(self.certs / f"{ident}.key"), "--client-ca", str(self.certs / "ca.pem")]
        a += ["--leader-addr", self.peer] if role == "follower" else ["--follower-addr", self.peer]
        return a + list(self.extra)

    def start(self, role: Optional[str] = None, extra: Optional[Tuple[str, ...]] = None) -> "Node":
        if role is not None:
            self.role = role
        if extra is not None:
            self.extra = tuple(extra)
        assert self.proc is None or self.proc.poll() is not None, "already running"
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(self.args(self.role), stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        logf.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL (a crash), then reap."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Polls until the client port and every shard's direct port answer ``Hello``."""
        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            for port in [self.client_port] + [self.client_port + 1 + s for s in range(SHARDS)]:
                with RawConn(f"127.0.0.1:{port}", self.certs) as c:
                    c.hello()
            return True

        wait_until(up, timeout, f"{self.name} on {self.addr}", every=0.05)


class Pair:
    """A leader and its follower (2 shards each)."""

    def __init__(self, workdir: Path, certs: Path, leader_extra: Tuple[str, ...] = (),
                 follower_extra: Tuple[str, ...] = ()) -> None:
        # client ports P (+1+s direct), repl R+s; leader at base, follower at base + 10
        base = free_base([o for o in range(0, 4)] + [o for o in range(10, 14)] + [20, 21, 30, 31])
        self.certs = certs
        self.follower = Node("follower", workdir, certs, "follower", base + 10, base + 30,
                             f"127.0.0.1:{base}", follower_extra)
        self.leader = Node("leader", workdir, certs, "leader", base, base + 20, f"127.0.0.1:{base + 30}",
                           leader_extra)

    def start(self) -> "Pair":
        self.follower.start()
        self.leader.start()
        self.follower.wait_ready()
        self.leader.wait_ready()
        return self

    @property
    def addrs(self) -> str:
        """Leader first."""
        return f"{self.leader.addr},{self.follower.addr}"

    def stop(self) -> None:
        for n in (self.leader, self.follower):
            n.kill()

    def cli(self, *args: str, addr: Optional[str] = None, input: Optional[bytes] = None,
            check: bool = True) -> subprocess.CompletedProcess:
        """Runs a ``corelog`` client command (append/read/tail) against this pair."""
        cmd = [str(BIN), args[0], "--addr", addr or self.addrs, "--ca", str(self.certs / "ca.pem"),
               "--cert", str(self.certs / "client.pem"), "--key", str(self.certs / "client.key"), *args[1:]]
        r = subprocess.run(cmd, input=input, capture_output=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"{cmd} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
        return r

    def settings(self, **kw: object) -> Dict[str, object]:
        d: Dict[str, object] = {"certs": str(self.certs)}
        d.update(kw)
        return d


@pytest.fixture(scope="session")
def corelog_bin() -> Path:
    if not BIN.is_file():
        pytest.fail(f"corelog binary not found at {BIN} (build it, or set CORELOG_BIN)")
    return BIN


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory, corelog_bin: Path) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run([str(corelog_bin), "certs", "--out", str(d / "certs")], check=True, capture_output=True)
    return d / "certs"


@pytest.fixture(scope="session")
def pair(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Pair]:
    """The shared pair most tests use (they never stop it)."""
    p = Pair(tmp_path_factory.mktemp("pair"), certs)
    try:
        yield p.start()
    finally:
        p.stop()


@pytest.fixture
def make_pair(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Callable[..., Pair]]:
    """Dedicated pairs for tests that stop, pause or promote nodes."""

    def new(leader_extra: Tuple[str, ...] = (), follower_extra: Tuple[str, ...] = ()) -> Pair:
        return Pair(tmp_path_factory.mktemp("own"), certs, leader_extra, follower_extra)

    yield from _started_each(new)


Cluster = TypeVar("Cluster", "Pair", "CoordPair")


def _started_each(new: Callable[..., Cluster]) -> Iterator[Callable[..., Cluster]]:
    """A fixture's factory: each call starts what ``new`` builds; every one is stopped
    when the test ends, whatever it left running."""
    made: List[Cluster] = []

    def make(*args: Any, **kwargs: Any) -> Cluster:
        c = new(*args, **kwargs)
        made.append(c)
        return c.start()

    try:
        yield make
    finally:
        for c in made:
            c.stop()


class Etcd:
    """A single-member etcd on loopback (as server/tests/common/etcd.rs starts it)."""

    def __init__(self, workdir: Path) -> None:
        import shutil

        if shutil.which("etcd") is None:
            pytest.skip("etcd not installed: apt-get install etcd-server")
        base = free_base([0, 1])
        self.port = base
        self.log = workdir / "etcd.log"
        url = f"http://127.0.0.1:{base}"
        peer = f"http://127.0.0.1:{base + 1}"
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                ["etcd", "--name", "t", "--data-dir", str(workdir / "etcd"), "--listen-client-urls", url,
                 "--advertise-client-urls", url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"t={peer}", "--heartbeat-interval", "50", "--election-timeout", "250"],
                stdout=subprocess.DEVNULL, stderr=logf, stdin=subprocess.DEVNULL)
        self.endpoint = url

        def answers() -> bool:
            assert self.proc.poll() is None, f"etcd exited:\n{self.log.read_text(errors='replace')[-3000:]}"
            with socket.create_connection(("127.0.0.1", base), timeout=1) as s:
                body = b'{"key":"aGVhbHRo"}'
                s.sendall(b"POST /v3/kv/range HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
                return s.recv(64).startswith(b"HTTP/1.1 200")

        wait_until(answers, 20, "etcd to answer")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _low_base(offsets: List[int]) -> int:
    """Like :func:`free_base`, below the ephemeral port range: coordinator-mode nodes
    re-bind their ports on every role change, and a port in that range may meanwhile be
    the local end of a client connection."""
    try:
        lo = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        lo = 32768
    rng = random.Random()
    for _ in range(2000):
        b = rng.randrange(10000, lo - 100)
        ports = [b + o for o in offsets]
        if not any(p in _taken for p in ports) and all(_port_free(p) for p in ports):
            _taken.update(ports)
            return b
    raise RuntimeError("no free port range below the ephemeral ports")


class CoordNode(Node):
    """A coordinator-mode node (``--coordinator``; server/tests/common/coord.rs's flags)."""

    def __init__(self, name: str, peer_name: str, workdir: Path, certs: Path, base: int, peer_base: int,
                 etcd: str, cluster: str, ident: str) -> None:
        super().__init__(name, workdir, certs, "coordinated", base, base + 10, f"127.0.0.1:{peer_base}")
        self.metrics_port = base + 20
        self.peer_name = peer_name
        self.peer_repl = f"127.0.0.1:{peer_base + 10}"
        self.etcd = etcd
        self.cluster = cluster
        self.ident = ident

    def args(self, role: str) -> List[str]:
        return [str(BIN), "serve", "--data-dir", str(self.data), "--listen", self.addr,
                "--repl-listen", f"127.0.0.1:{self.repl_port}", "--coordinator", self.etcd,
                "--cluster", self.cluster, "--node-id", self.name, "--peer-id", self.peer_name,
                "--peer-repl", self.peer_repl, "--peer-client", self.peer,
                "--min-insync", "1", "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
                "--shard-count", str(SHARDS), "--segment-bytes", str(4 << 20),
                "--cert", str(self.certs / f"{self.ident}.pem"), "--key", str(self.certs / f"{self.ident}.key"),
                "--client-ca", str(self.certs / "ca.pem")] + list(self.extra)

    def health(self) -> str:
        """The ``role=... epoch=... insync=... degraded=...`` line of /health; '' when down."""
        try:
            with socket.create_connection(("127.0.0.1", self.metrics_port), timeout=0.3) as s:
                s.settimeout(2)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                out = b""
                while True:
                    d = s.recv(4096)
                    if not d:
                        break
                    out += d
        except OSError:
            return ""
        lines = [ln.strip() for ln in out.decode(errors="replace").splitlines() if "role=" in ln]
        return lines[-1] if lines else ""


class CoordPair:
    """etcd and two coordinator-mode nodes ``a`` and ``b`` (2 shards each)."""

    def __init__(self, workdir: Path, certs: Path) -> None:
        self.etcd = Etcd(workdir)
        self.certs = certs
        ba, bb = _low_base(list(range(0, 24))), _low_base(list(range(0, 24)))
        cluster = f"py{os.getpid()}_{random.randrange(1 << 30)}"
        self.nodes = [CoordNode("a", "b", workdir, certs, ba, bb, self.etcd.endpoint, cluster, "server"),
                      CoordNode("b", "a", workdir, certs, bb, ba, self.etcd.endpoint, cluster, "follower")]

    def start(self) -> "CoordPair":
        for n in self.nodes:
            n.start()
        self.wait_pair()
        return self

    @property
    def addrs(self) -> str:
        return ",".join(n.addr for n in self.nodes)

    def leader(self) -> int:
        """Index of the node that leads with both in sync (waits, bounded)."""
        return self.wait_pair()

    def wait_pair(self, timeout: float = 60) -> int:
        def pair() -> Optional[int]:
            h = [n.health() for n in self.nodes]
            for i in (0, 1):
                if ("role=leader" in h[i] and "insync=2" in h[i] and "degraded=0" in h[i]
                        and "role=follower" in h[1 - i]):
                    return i + 1
            return None

        return int(wait_until(pair, timeout, "one leader (insync=2) and one follower", every=0.05)) - 1

    def stop(self) -> None:
        for n in self.nodes:
            n.kill()
        self.etcd.stop()


class Trimmed:
    """A dedicated pair whose shard 0 was filled past a few 4 MiB segments and then
    trimmed on both nodes (docs/operations.md §13), for the retention tests (read only:
    they must not append to shard 0 or trim it again).

    ``stream`` (on shard 0) has ``early`` events written before the filler (deleted by
    the trim) and ``late`` events written after it (kept): ``stream_first`` is the first
    version still held. ``first[node.addr]``: what ``trim`` returned on that node."""

    FILL = 3000
    PAYLOAD = 4096

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.early = 5
        self.late = 3
        self.stream = ""
        self.fill_offsets: List[int] = []
        self.late_offsets: List[int] = []
        self.before = 0
        self.first: Dict[str, int] = {}

    @property
    def stream_first(self) -> int:
        return self.early

    def build(self) -> "Trimmed":
        while True:
            self.stream = uniq("retained-")
            if codec.stream_shard(self.stream, SHARDS) == 0:
                break

        async def go() -> None:
            cfg = corelog.ClientConfig(certs=str(self.pair.certs))
            async with corelog.aio.Client(self.pair.leader.addr, cfg) as c:
                for i in range(self.early):
                    assert (await c.append_to(self.stream, b"early %d" % i, i - 1 if i else "none")).version == i
                direct = await c.for_shard(0)  # shard 0's direct port: every filler on shard 0
                payloads = [bytes([48 + i % 10]) * self.PAYLOAD for i in range(self.FILL)]
                for k in range(0, self.FILL, 500):
                    got = await direct.append_many(payloads[k:k + 500])
                    assert {p.shard for p in got} == {0}
                    self.fill_offsets += [p.offset for p in got]
                for i in range(self.late):
                    v = self.early + i
                    a = await c.append_to(self.stream, b"late %d" % v, v - 1)
                    assert a.version == v and a.shard == 0
                    self.late_offsets.append(a.offset)
            self.before = self.late_offsets[0]
            for node in (self.pair.leader, self.pair.follower):
                async with corelog.aio.Client(node.addr, cfg) as c:
                    self.first[node.addr] = await c.trim(0, self.before)

        asyncio.run(asyncio.wait_for(go(), 180))
        return self


@pytest.fixture
def make_coord(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Callable[[], CoordPair]]:
    """Coordinator-mode pairs (etcd + two nodes) for tests that kill and fail over."""
    yield from _started_each(lambda: CoordPair(tmp_path_factory.mktemp("coord"), certs))


@pytest.fixture(scope="session")
def trimmed(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Trimmed]:
    """A pair of its own, shard 0 trimmed on both nodes (see :class:`Trimmed`)."""
    p = Pair(tmp_path_factory.mktemp("trimmed"), certs)
    try:
        p.start()
        yield Trimmed(p).build()
    finally:
        p.stop()


def uniq(prefix: str) -> str:
    return f"{prefix}{os.getpid()}-{time.monotonic_ns()}-{random.randrange(1 << 30)}"


# ----------------------------------------------------------------------------- raw protocol


class RawConn:
    """A blocking mTLS socket speaking raw frames (to provoke the server's errors)."""

    def __init__(self, addr: str, certs: Path, timeout: float = 10.0) -> None:
        host, port = codec.host_port(addr)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_verify_locations(str(certs / "ca.pem"))
        ctx.load_cert_chain(str(certs / "client.pem"), str(certs / "client.key"))
        raw = socket.create_connection((host, port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        self.dec = codec.FrameDecoder()
        self.eof = False

    def __enter__(self) -> "RawConn":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes) -> "RawConn":
        self.sock.sendall(data)
        return self

    def frame(self) -> Optional[codec.Frame]:
        """The next frame, ``None`` at EOF."""
        while True:
            f = self.dec.next_frame()
            if f is not None:
                return f
            try:
                data = self.sock.recv(1 << 16)
            except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
                data = b""
            if not data:
                self.eof = True
                return None
            self.dec.feed(data)

    def response(self) -> codec.Response:
        f = self.frame()
        assert f is not None, "connection closed where an answer was due"
        return codec.parse_response(f)

    def hello(self, version: int = codec.CLIENT_VERSION) -> codec.HelloOk:
        self.send(codec.Hello(version).encode(0))
        r = self.response()
        assert isinstance(r, codec.HelloOk), r
        return r

    def closed_after(self, timeout: float = 10.0) -> bool:
        """True if the server closes the connection (EOF) with nothing more sent."""
        self.sock.settimeout(timeout)
        return self.frame() is None


def error_of(r: codec.Response) -> Tuple[int, str]:
    assert isinstance(r, (codec.ErrorResponse, codec.WrongVersion, codec.OutOfRangeResponse)), r
    if isinstance(r, codec.WrongVersion):
        return codec.ErrorCode.WRONG_EXPECTED_VERSION, r.message
    if isinstance(r, codec.OutOfRangeResponse):
        return codec.ErrorCode.OUT_OF_RANGE, r.message
    return r.code, r.message


async def requests_of(r: asyncio.StreamReader) -> AsyncIterator[Tuple[codec.Frame, codec.Request]]:
    """What a fake node reads: each frame with its request, until the peer closes."""
    dec = codec.FrameDecoder()
    while True:
        data = await r.read(65536)
        if not data:
            return
        dec.feed(data)
        for f in dec:
            yield f, codec.parse_request(f)


def frame(op: int, req_id: int, body: bytes) -> bytes:
    return struct.pack("<IBQ", 9 + len(body), op, req_id) + body


def run_py(*args: str, timeout: float = 120, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, timeout=timeout, cwd=cwd)
