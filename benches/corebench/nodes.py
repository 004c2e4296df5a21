"""Local nodes of `corelog serve` for a benchmark run: a pair, a pair of two processes per
node (one per shard), or one standalone node, with their costs read from /proc.

Ports: leader client 24400, replication 24500, metrics 24600 (+ s for process s); follower
25400, 25500, 25600 (+ s). Node logs go to <data dir>.{l,f}<s>.log. The same layout as
benches/lib.sh's cl_start, which the shell benches still use.
"""
import os
import signal
import sys
import subprocess
import time
import urllib.request

LEADER_CLIENT, LEADER_REPL, LEADER_METRICS = 24400, 24500, 24600
FOLLOWER_CLIENT, FOLLOWER_REPL, FOLLOWER_METRICS = 25400, 25500, 25600
HEALTH_WAIT_S = 30.0
MODES = {"pair": 1, "pair2": 2, "solo": 0}


def server_tls(certs, who, insecure=False):
    """The TLS flags of `corelog serve` for `who` (server|follower, from `corelog certs`)."""
    if insecure:
        return ["--insecure"]
    return ["--cert", f"{certs}/{who}.pem", "--key", f"{certs}/{who}.key", "--client-ca", f"{certs}/ca.pem"]


def client_tls(certs, insecure=False):
    """The TLS flags of corelog-loadgen."""
    if insecure:
        return ["--insecure"]
    return ["--ca", f"{certs}/ca.pem", "--cert", f"{certs}/client.pem", "--key", f"{certs}/client.key"]


def health_once(port):
    """True when 127.0.0.1:port/health answers 200 now."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def ticks(pid):
    """utime + stime of a process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may hold spaces: count from the closing parenthesis.
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Nodes:
    """The processes of one run. `start` returns once every node answers /health."""

    def __init__(self, bin_dir, data, certs, mode, leader_extra=(), insecure=False, shards=None):
        assert mode in MODES, f"mode {mode}?"
        self.bin, self.data, self.certs, self.mode = bin_dir, data, certs, mode
        self.leader_extra, self.insecure = list(leader_extra), insecure
        # Logical shards per node (None: the server's default, one per CPU); each process
        # then runs them on as many executors as the default layout has shards.
        self.shards = shards
        self.leaders, self.followers = [], []
        self.logs = {}

    def shard_args(self, s, procs):
        """Process s's shard flags: with two processes each owns every other shard on one
        executor; with one it owns all, on one executor per CPU."""
        if self.shards is None:
            return ["--shard-count", "2", "--shards", str(s)] if procs == 2 else []
        if procs == 2:
            assert self.shards >= 2, "two processes need two shards at least"
            mine = ",".join(str(k) for k in range(s, self.shards, 2))
            return ["--shard-count", str(self.shards), "--shards", mine, "--executors", "1"]
        cpus = min(len(os.sched_getaffinity(0)), self.shards)
        return ["--shard-count", str(self.shards), "--executors", str(cpus)]

    def _spawn(self, args, log):
        with open(log, "w") as out:
            p = subprocess.Popen([f"{self.bin}/corelog", "serve", *args], stdout=out, stderr=subprocess.STDOUT)
        self.logs[p.pid] = log
        return p

    def start(self):
        procs = MODES[self.mode]
        d = self.data
        for s in range(procs):
            shard = self.shard_args(s, procs)
            self.followers.append(self._spawn(
                ["--role", "follower", "--data-dir", f"{d}/f", "--listen", f"127.0.0.1:{FOLLOWER_CLIENT}",
                 "--repl-listen", f"127.0.0.1:{FOLLOWER_REPL}", "--metrics-listen", f"127.0.0.1:{FOLLOWER_METRICS + s}",
                 "--leader-addr", f"127.0.0.1:{LEADER_CLIENT}", *shard,
                 *server_tls(self.certs, "follower", self.insecure)], f"{d}.f{s}.log"))
            self.leaders.append(self._spawn(
                ["--role", "leader", "--data-dir", f"{d}/l", "--listen", f"127.0.0.1:{LEADER_CLIENT}",
                 "--repl-listen", f"127.0.0.1:{LEADER_REPL}", "--metrics-listen", f"127.0.0.1:{LEADER_METRICS + s}",
                 "--follower-addr", f"127.0.0.1:{FOLLOWER_REPL}", *shard,
                 *server_tls(self.certs, "server", self.insecure), *self.leader_extra], f"{d}.l{s}.log"))
        if procs == 0:
            self.leaders.append(self._spawn(
                ["--role", "standalone", "--data-dir", f"{d}/l", "--listen", f"127.0.0.1:{LEADER_CLIENT}",
                 "--metrics-listen", f"127.0.0.1:{LEADER_METRICS}", *server_tls(self.certs, "server", self.insecure)],
                f"{d}.l0.log"))
        ports = [LEADER_METRICS + s for s in range(max(procs, 1))] + [FOLLOWER_METRICS + s for s in range(procs)]
        try:
            self._wait(ports)
        except Exception:
            self.stop()
            raise
        return self

    def _wait(self, ports, limit_s=HEALTH_WAIT_S):
        """Until every metrics port answers /health; a node that exits meanwhile (or while
        another answers on its ports) fails the start at once, with what it said."""
        deadline = time.monotonic() + limit_s
        waiting = list(ports)
        while True:
            dead = [p for p in self.all() if p.poll() is not None]
            if dead:
                raise RuntimeError("a node exited at start: " + "; ".join(self._tail(p) for p in dead))
            waiting = [port for port in waiting if not health_once(port)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"no health on {waiting} within {limit_s:.0f} s")
            time.sleep(0.05)

    def _tail(self, proc, lines=3):
        """What a node that exited at start said last."""
        with open(self.logs[proc.pid], errors="replace") as f:
            said = f.read().splitlines()[-lines:]
        return f"{' '.join(proc.args[2:4])} exited {proc.returncode}: " + " | ".join(said)

    def all(self):
        return self.leaders + self.followers

    def server_ticks(self):
        return sum(ticks(p.pid) for p in self.all())

    def leader_rss_kib(self):
        return sum(rss_kib(p.pid) for p in self.leaders)

    def stop(self):
        """kill -9 (the benches measure a running node, not its shutdown) and reap."""
        for p in self.all():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.all():
            p.wait()
        self.leaders, self.followers = [], []

    def __enter__(self):
        return self.start()

    def __exit__(self, *_):
        self.stop()


def gone(pid):
    """True once a process has exited (a zombie that no one reaped counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def main(argv):
    """`start BIN DATA CERTS MODE`: starts the nodes, waits until they answer, prints
    `leaders: PID...` and `followers: PID...`, and leaves them running (benches/lib.sh's
    cl_start; CL_LEADER_EXTRA, CL_SHARDS and CL_INSECURE=1 as in ab.py). `stop PID...`: kill -9 and
    wait (bounded) until each has exited."""
    if len(argv) == 5 and argv[0] == "start":
        extra = os.environ.get("CL_LEADER_EXTRA", "").split()
        shards = int(os.environ["CL_SHARDS"]) if os.environ.get("CL_SHARDS") else None
        n = Nodes(*argv[1:5], leader_extra=extra, insecure=os.environ.get("CL_INSECURE", "0") == "1", shards=shards)
        try:
            n.start()
        except RuntimeError as e:
            sys.exit(f"cl_start: {e}")
        print("leaders:", *(p.pid for p in n.leaders))
        print("followers:", *(p.pid for p in n.followers))
        return
    if argv and argv[0] == "stop":
        pids = [int(p) for p in argv[1:]]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while not all(gone(p) for p in pids):
            if time.monotonic() > deadline:
                sys.exit(f"cl_stop: still running after kill -9: {[p for p in pids if not gone(p)]}")
            time.sleep(0.02)
        return
    sys.exit("usage: python3 -m corebench.nodes start BIN DATA CERTS pair|pair2|solo | stop PID...")


if __name__ == "__main__":
    main(sys.argv[1:])
