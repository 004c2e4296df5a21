"""A/B of two revisions on this machine, in one sitting (`benches/ab.sh` runs this).

Builds OLD and NEW (git worktrees under target/ab/, one shared target dir so dependencies
build once), then runs them alternately (abba.order) R rounds, and prints every figure as
NEW/OLD per round with the median and the spread, plus the absolute figures. Each run is
a fresh pair (leader + follower, mTLS on loopback; or one standalone node) and a fresh
data dir.

Figures:
  closed1k   closed loop, 1,000 connections: acked/s, p50, p99
  one_repl   one connection, replicated pair: p50 (µs)
  one_solo   one connection, standalone node: p50 (µs)
  open2k     open loop 2,000 appends/s over 100 connections: server CPU µs per acked
             append (leader + follower utime + stime from /proc over the run)
  idle       idle pair for the same time: server CPU % of one core
  closed36k  (only with BIG=1) closed loop, 36,000 connections over 4 load generators,
             each node as 2 processes (one per shard: the open-file limit)
  mem36k     (only with BIG=1) leader memory per client connection: RSS (both leader
             processes) at 36,000 connections (4 load generators, open loop 500/s each)
             less RSS before they connected, over 36,000 (bytes)
The disk's floor is measured first, in the same sitting (floor.passes); the one-connection
p50s are also printed as a multiple of the overwrite floor and of the floor pinned to CPU 0
(the load generator pins its executor to CPU 0, and a connection lands on the shard of the
CPU that handled its SYN; benches/floor_by_cpu.sh measures every CPU). With open2k, the CPU
floor of a replicated append at that load is measured before the rounds
(benches/pair_floor.sh: a leader and follower without corelog, 3 rounds) and open2k's CPU
per append is printed over it; with one_repl, the same pair's one-connection p50 (PAIRS=1
CONNS=1 RATE=0) and one_repl's p50 over it.

Usage: benches/ab.sh OLD_REV NEW_REV [SECONDS=10] [ROUNDS=3]
  env BIG=1 adds closed36k and mem36k; FIGS="closed1k one_repl" picks figures;
  LOADGEN=new (or old) drives both sides with NEW's (OLD's) load generator (default: each
  side its own tree's: a load generator speaks its own tree's newest protocol, which an
  older server may refuse); OLD_LEADER_EXTRA / NEW_LEADER_EXTRA (and CL_LEADER_EXTRA, both
  sides): more flags for that side's leader, e.g. NEW_LEADER_EXTRA="--authz policy.toml";
  CL_INSECURE=1: plaintext on every port; OLD_SHARDS / NEW_SHARDS (CL_SHARDS, both sides):
  logical shards per node, run on the same executors as the default layout (two per node:
  one process with `--executors` = CPUs, or under pair2 two processes of one executor
  each; both revisions must know `--executors`), e.g. `OLD_SHARDS=2 NEW_SHARDS=16
  benches/ab.sh HEAD HEAD`.
"""
import glob
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

from corebench import abba, floor, nodes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURES = ("closed1k", "one_repl", "one_solo", "open2k", "idle", "closed36k", "mem36k")
HZ = os.sysconf("SC_CLK_TCK")


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def resolve(rev):
    """The short commit a revision names, once: a commit made while this runs must not
    change what OLD and NEW name."""
    try:
        return git("rev-parse", "--short", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        sys.exit(f"ab.sh: no such revision: {rev}")


def build(sha, ab):
    """The bin dir of `sha`'s corelog and corelog-loadgen, built once per commit."""
    out = f"{ab}/{sha}"
    if not os.access(f"{out}/bin/corelog", os.X_OK):
        src = f"{out}/src"
        shutil.rmtree(src, ignore_errors=True)
        git("worktree", "prune")
        git("worktree", "add", "-f", "--detach", src, sha)
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "corelog-server", "-p", "corelog-loadgen"],
                       cwd=src, check=True, env={**os.environ, "CARGO_TARGET_DIR": f"{ab}/target"})
        os.makedirs(f"{out}/bin", exist_ok=True)
        for b in ("corelog", "corelog-loadgen"):
            shutil.copy2(f"{ab}/target/release/{b}", f"{out}/bin/")
        git("worktree", "remove", "--force", src)
    return f"{out}/bin"


def pair_floor(env, pick):
    """Runs benches/pair_floor.sh (3 rounds) with `env`; prints its rounds and returns the
    first number of its last line starting with `pick` (FLOOR or P50)."""
    out = subprocess.run(["bash", "benches/pair_floor.sh", "3"], cwd=ROOT, check=True, capture_output=True, text=True,
                         env={**os.environ, "MODES": "uring", "BIN": f"{ROOT}/target/release", **env}).stdout
    value = None
    for line in out.splitlines():
        if line.startswith(pick + " "):
            value = float(line.split()[1])
        elif not line.startswith(("FLOOR", "P50")):
            print(line)
    return value


class Bench:
    def __init__(self, old, new, secs, rounds, figs, work):
        self.secs, self.rounds, self.figs, self.work = secs, rounds, figs, work
        ab = os.path.dirname(work)
        self.bins = {"OLD": build(old, ab), "NEW": build(new, ab)}
        # A load generator that outlives its window by this much has hung: the run fails
        # instead of the A/B waiting forever.
        self.lg_limit = 3 * secs + 300
        self.insecure = os.environ.get("CL_INSECURE", "0") == "1"
        self.certs = f"{work}/certs"
        subprocess.run([f"{self.bins['NEW']}/corelog", "certs", "--out", self.certs], check=True, capture_output=True)
        self.tls = nodes.client_tls(self.certs, self.insecure)

    def loadgen(self, side):
        pick = {"new": "NEW", "old": "OLD"}.get(os.environ.get("LOADGEN", "own"), side)
        return f"{self.bins[pick]}/corelog-loadgen"

    def nodes(self, side, d, mode):
        extra = (os.environ.get("CL_LEADER_EXTRA", "") + " " + os.environ.get(f"{side}_LEADER_EXTRA", "")).split()
        shards = os.environ.get(f"{side}_SHARDS") or os.environ.get("CL_SHARDS")
        return nodes.Nodes(self.bins[side], d, self.certs, mode, extra, self.insecure, int(shards) if shards else None)

    def lg_args(self, conns, extra=()):
        return ["run", "--target", f"127.0.0.1:{nodes.LEADER_CLIENT}", "--connections", str(conns),
                "--duration", f"{self.secs}s", "--quiet", *extra, *self.tls]

    def run(self, side, fig, round_no):
        d = tempfile.mkdtemp(prefix=f"{side}-{fig}-{round_no}.", dir=self.work)
        lg = self.loadgen(side)
        if fig == "idle":
            with self.nodes(side, d, "pair") as n:
                t0, c0 = time.monotonic(), n.server_ticks()
                time.sleep(self.secs)
                t1, c1 = time.monotonic(), n.server_ticks()
            return (round((c1 - c0) / HZ / (t1 - t0) * 100, 2),)
        if fig in ("closed36k", "mem36k"):
            return self.four(side, fig, d, lg)
        conns, mode, extra = {"closed1k": (1000, "pair", ()), "one_repl": (1, "pair", ()),
                              "one_solo": (1, "solo", ()), "open2k": (100, "pair", ("--rate", "2000"))}[fig]
        with self.nodes(side, d, mode) as n:
            c0 = n.server_ticks()
            with open(f"{d}.lg", "w") as err:
                subprocess.run([lg, *self.lg_args(conns, ("--json", f"{d}.json", *extra))], check=True,
                               stdout=subprocess.DEVNULL, stderr=err, timeout=self.lg_limit)
            c1 = n.server_ticks()
        self.drop_data(d)
        r = json.load(open(f"{d}.json"))
        if fig == "closed1k":
            return round(r["acked"] / r["window_s"]), r["p50_us"], r["p99_us"], r["errors"]
        if fig == "open2k":
            # The CPU ticks cover the whole run (connecting, warm-up, window): so does acked_total.
            return round((c1 - c0) / HZ * 1e6 / max(1, r["acked_total"]), 1), r["acked"], r["errors"]
        return r["p50_us"], round(r["acked"] / r["window_s"]), r["errors"]

    def four(self, side, fig, d, lg):
        """closed36k / mem36k: four load generators of 9,000 connections, one per CPU slot,
        against each node as two processes."""
        with self.nodes(side, d, "pair2") as n:
            rss0, rss = n.leader_rss_kib(), 0
            procs = []
            for i in range(4):
                if fig == "closed36k":
                    extra = ("--warmup", "3s", "--start-at", "stdin")
                else:
                    extra = ("--rate", "500")
                args = self.lg_args(9000, ("--json", f"{d}.{i}.json", *extra, "--source-ip-base", str(1 + 8 * i),
                                               "--cores", "1", "--first-cpu", str(i)))
                procs.append(subprocess.Popen([lg, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=open(f"{d}.{i}.lg", "w"), text=True))
            if fig == "closed36k":
                self.gate(procs, d)
            deadline = time.monotonic() + self.lg_limit
            while any(p.poll() is None for p in procs):
                if time.monotonic() > deadline:
                    for p in procs:
                        p.kill()
                    raise RuntimeError(f"a load generator outlived its window by {self.lg_limit} s")
                # The largest RSS seen while the load generators run (all connected by mid-run).
                rss = max(rss, n.leader_rss_kib())
                time.sleep(0.5)
            if any(p.returncode != 0 for p in procs):
                raise RuntimeError(f"a load generator failed: see {d}.*.lg")
        self.drop_data(d)
        rs = [json.load(open(f)) for f in sorted(glob.glob(f"{d}.*.json"))]
        errors = sum(r["errors"] for r in rs)
        if fig == "mem36k":
            conns = sum(r["connected"] for r in rs)
            return round((rss - rss0) * 1024 / max(1, conns)), conns, errors
        return (round(sum(r["acked"] / r["window_s"] for r in rs)), max(r["p50_us"] for r in rs),
                max(r["p99_us"] for r in rs), errors)

    @staticmethod
    def gate(procs, d):
        """One shared start: each load generator connects, says READY on its stdout and
        reads the start time from its stdin, so the four windows (and warm-ups) are the same
        wall-clock interval: no process still handshaking 9,000 TLS connections, or closing
        them, inside another's window."""
        for i, p in enumerate(procs):
            ready, _, _ = select.select([p.stdout], [], [], 300)
            line = p.stdout.readline() if ready else ""
            if not line.startswith("READY"):
                raise RuntimeError(f"load generator {i} never became ready ({line!r}): see {d}.{i}.lg")
        at = f"{time.time() + 0.5:.3f}\n"
        for p in procs:
            p.stdin.write(at)
            p.stdin.close()

    @staticmethod
    def drop_data(d):
        """Data dirs go at once (each node preallocates its segments: a sitting's worth
        kept until the end fills a disk); logs and JSON stay until the end."""
        shutil.rmtree(f"{d}/l", ignore_errors=True)
        shutil.rmtree(f"{d}/f", ignore_errors=True)


def figures():
    figs = os.environ.get("FIGS", "closed1k one_repl one_solo open2k idle").split()
    if os.environ.get("BIG", "0") == "1":
        figs += [f for f in ("closed36k", "mem36k") if f not in figs]
    unknown = [f for f in figs if f not in FIGURES]
    if unknown:
        sys.exit(f"ab.sh: unknown figure(s) {unknown}: pick from {' '.join(FIGURES)}")
    return figs


def main(argv):
    if len(argv) < 2:
        sys.exit("usage: benches/ab.sh OLD_REV NEW_REV [SECONDS] [ROUNDS]")
    old, new = resolve(argv[0]), resolve(argv[1])
    secs = int(argv[2]) if len(argv) > 2 else 10
    rounds = int(argv[3]) if len(argv) > 3 else 3
    if secs < 1 or rounds < 1:
        sys.exit("ab.sh: SECONDS and ROUNDS must be ≥ 1")
    figs = figures()
    ab = f"{ROOT}/target/ab"
    os.makedirs(ab, exist_ok=True)
    work = tempfile.mkdtemp(prefix="run.", dir=ab)
    try:
        print(f"building {old} and {new} (target/ab) ...", flush=True)
        bench = Bench(old, new, secs, rounds, figs, work)
        print(f"OLD {old} NEW {new}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, "
              f"{secs}s per run, {rounds} rounds, figures: {' '.join(figs)}, "
              f"load generator: {os.environ.get('LOADGEN', 'own')}", flush=True)
        fl = floor.passes(work)
        floors = {"disk": fl.get("overwrite"), "disk_cpu0": fl.get("cpu0")}
        if "open2k" in figs or "one_repl" in figs:
            # Built from this checkout (the floor is not a revision's code), run once.
            subprocess.run(["cargo", "build", "--release", "-q", "-p", "corelog-benches", "--bin", "pair_floor"],
                           cwd=ROOT, check=True)
        if "open2k" in figs:
            floors["pair_cpu"] = pair_floor({}, "FLOOR")
        if "one_repl" in figs:
            floors["pair_p50"] = pair_floor({"PAIRS": "1", "CONNS": "1", "RATE": "0"}, "P50")
        sitting = abba.Sitting(rounds)
        for r in range(1, rounds + 1):
            for fig in figs:
                for side in abba.order(r):
                    v = bench.run(side, fig, r)
                    sitting.add(fig, side, r, v)
                    print(f"round {r} {fig} {side}: {' '.join(str(x) for x in v)}", flush=True)
        print("\n=== NEW/OLD ratios (median over rounds, [min, max]); lower is better for latency and CPU ===")
        for fig in figs:
            print("\n".join(sitting.lines(fig, floors)))
    finally:
        # Nodes are children of this process and stopped by their Nodes; a run that failed
        # half-way may leave one: find it by its data dir.
        subprocess.run(["pkill", "-9", "-f", f"--data-dir {work}/"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
