#!/usr/bin/env python3
"""`pin.py CPULIST PROGRAM ARGS...`: exec PROGRAM with its CPU affinity set to CPULIST
("0-4,7"), as `taskset -c` does — for machines without util-linux's taskset. The pid
stays the program's (exec, no fork)."""
import os
import sys


def cpus(spec):
    out = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    os.sched_setaffinity(0, cpus(sys.argv[1]))
    os.execvp(sys.argv[2], sys.argv[2:])
