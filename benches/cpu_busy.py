#!/usr/bin/env python3
"""Per-CPU busy time, for runs whose processes are pinned to disjoint CPU sets.

  cpu_busy.py sample OUT              every 0.5 s until killed: a header line, then one
                                      line per sample, "unix_time busy0 idle0 steal0
                                      busy1 ..." (jiffies; older files: no header and no
                                      steal column)
  cpu_busy.py summarize SAMPLES LOG WARMUP_S DURATION_S NAME=CPULIST...
                                      for each load step in LOG (a `corelog-loadgen sweep`
                                      log: "[k/n] N conns ... all start at UNIX T"), each
                                      group's mean busy fraction over the measured window
                                      [T + warmup, T + warmup + duration]

Busy = the window's wall time less the CPU's idle and iowait time (/proc/stat): those are
measured at idle entry and exit, while the busy fields are sampled at each tick and miss
short bursts of work between idle periods. Steal (time the hypervisor ran something else
while this vCPU had work) is inside busy; each group's steal share is printed beside it.
"""
import os
import re
import sys
import time

from pin import cpus  # benches/pin.py: "0-4,7" → {0, 1, 2, 3, 4, 7}

HZ = os.sysconf("SC_CLK_TCK")


HEADER = "# per CPU: busy idle steal (jiffies)"


def read():
    """(busy, idle, steal) jiffies per CPU: idle = idle + iowait, busy = the other fields
    (steal among them)."""
    out = []
    for line in open("/proc/stat"):
        m = re.match(r"cpu(\d+) (.*)", line)
        if m:
            v = [int(x) for x in m.group(2).split()]
            idle = v[3] + v[4]
            out.append((sum(v[:8]) - idle, idle, v[7]))
    return out


def sample(path):
    with open(path, "w", buffering=1) as f:
        f.write(HEADER + "\n")
        while True:
            f.write(f"{time.time():.3f} " + " ".join(f"{b} {i} {s}" for b, i, s in read()) + "\n")
            time.sleep(0.5)


def summarize(samples, log, warmup, duration, groups):
    rows = []
    width = 2  # older files: busy idle
    for line in open(samples):
        if line.startswith("#"):
            width = 3 if line.strip() == HEADER else width
            continue
        f = line.split()
        if len(f) < 3:
            continue
        vals = [int(x) for x in f[1:]]
        per = [tuple(vals[i : i + width]) for i in range(0, len(vals), width)]
        rows.append((float(f[0]), [p + (0,) * (3 - width) for p in per]))
    groups = [(g.split("=")[0], sorted(cpus(g.split("=")[1]))) for g in groups]
    for line in open(log):
        m = re.search(r"\[(\d+)/(\d+)\] (\d+) conns, run \S+: .*all start at UNIX ([0-9.]+)", line)
        if not m:
            continue
        t0 = float(m.group(4)) + warmup
        inside = [r for r in rows if t0 <= r[0] <= t0 + duration]
        if len(inside) < 2:
            print(f"{m.group(3)} conns: no samples in the window")
            continue
        (ta, a), (tb, b) = inside[0], inside[-1]
        parts = []
        # Busy = wall time less idle: the idle fields are measured (NOHZ idle entry and
        # exit), the busy ones sampled at each tick, which misses short bursts of work
        # between idle periods (a CPU woken 2,000 times a second reads a few % busy).
        wall = (tb - ta) * HZ
        busy = [max(0.0, wall - (b[c][1] - a[c][1])) / wall for c in range(len(a))]
        steal = [(b[c][2] - a[c][2]) / wall for c in range(len(a))]
        for name, cs in groups:
            share = f"{100 * sum(busy[c] for c in cs) / len(cs):.0f} %"
            if width == 3:
                share += f" (steal {100 * sum(steal[c] for c in cs) / len(cs):.0f} %)"
            parts.append(f"{name} (CPUs {','.join(map(str, cs))}) {share}")
        per = " ".join(f"{100 * x:.0f}" for x in busy)
        print(f"{m.group(3)} conns, {tb - ta:.1f} s of the window: " + ", ".join(parts) + f"; per CPU % {per}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "sample":
        sample(sys.argv[2])
    elif len(sys.argv) >= 7 and sys.argv[1] == "summarize":
        summarize(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), sys.argv[6:])
    else:
        sys.exit(__doc__)
