#!/usr/bin/env python3
"""Summarise a run-sweep.sh results directory: one line per step over all load generators.

Layout read: DIR/loadgen-<i>/step-<connections>.json (corelog-loadgen --json reports).
Throughput-like fields (names with per_s / per_sec / throughput) are SUMMED over the load
generators; latency percentiles (names with p50/p90/p95/p99/p999/max) take the WORST load
generator, an upper bound of the merged percentile: the exact merge needs the histograms
(corelog-loadgen keeps them serialised for that). Field names are taken from the reports, so
the table follows whatever the load generator writes. Standard library only.
"""
import json
import re
import sys
from pathlib import Path

THROUGHPUT = re.compile(r"(per_s|per_sec|throughput)", re.I)
LATENCY = re.compile(r"(^|[_.])(p50|p90|p95|p99|p999|p99_9|max)([_.]|$)", re.I)
COUNTS = re.compile(r"(connections|errors?)$", re.I)


def step_record(doc):
    """The record of a one-step sweep: the last element of a list of steps, or the object."""
    if isinstance(doc, list):
        return step_record(doc[-1]) if doc else {}
    if isinstance(doc, dict):
        for key in ("steps", "results", "sweep"):
            if isinstance(doc.get(key), list) and doc[key]:
                return step_record(doc[key][-1])
        return doc
    return {}


def flatten(obj, prefix=""):
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix[:-1]] = float(obj)
    return out


def main(root: Path) -> int:
    steps = {}
    for f in sorted(root.glob("loadgen-*/step-*.json")):
        m = re.match(r"step-(\d+)\.json$", f.name)
        if not m:
            continue
        try:
            rec = flatten(step_record(json.loads(f.read_text())))
        except (OSError, ValueError) as e:
            print(f"# unreadable {f}: {e}", file=sys.stderr)
            continue
        steps.setdefault(int(m.group(1)), []).append(rec)
    if not steps:
        print(f"no reports under {root}")
        return 1
    for total in sorted(steps):
        recs = steps[total]
        merged = {}
        for rec in recs:
            for k, v in rec.items():
                leaf = k.split(".")[-1]
                if THROUGHPUT.search(leaf) or COUNTS.search(leaf):
                    merged[k] = merged.get(k, 0.0) + v
                elif LATENCY.search(leaf):
                    merged[k] = max(merged.get(k, v), v)
        fields = " ".join(f"{k}={v:,.0f}" if v >= 100 else f"{k}={v:g}" for k, v in sorted(merged.items()))
        print(f"step {total:>6} connections, {len(recs)} load generator(s): {fields}")
    print("(throughput and counts summed; latencies = worst load generator, an upper bound)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: summarize-sweep.py RESULTS_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
