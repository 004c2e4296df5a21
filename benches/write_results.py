#!/usr/bin/env python3
"""Writes docs/results/<date>.md from the outputs of benches/sweep.sh.

Inputs under --work: out/{closed,open}.{json,md,svg}, out/cmp-*.json (corelog side of the
peer comparison), out/peers.tsv (peer side), out/inspect-{leader,follower}.txt.
"""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import subprocess


def fmt_us(us):
    if us is None:
        return "-"
    if us >= 10_000:
        return f"{us / 1000:.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us} µs"


def parse_inspect(path):
    shards = {}
    if not os.path.exists(path):
        return shards
    for line in open(path):
        m = re.match(r"shard (\d+): records (\d+) .* digest (\S+)", line)
        if m:
            shards[int(m.group(1))] = (int(m.group(2)), m.group(3))
    return shards


def nats_ms(v):
    """jsbench prints Go durations: 47.1ms, 1.2s, 950µs."""
    if v in (None, "-"):
        return None
    m = re.match(r"([0-9.]+)(ms|s|µs|us|ns)$", v)
    if not m:
        return None
    x, u = float(m.group(1)), m.group(2)
    return x * {"ms": 1.0, "s": 1000.0, "µs": 0.001, "us": 0.001, "ns": 1e-6}[u]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--flames", default="")
    ap.add_argument("--reps", default="3")
    ap.add_argument("--config", default="")
    ap.add_argument("--rev", default="")
    ap.add_argument("--layout", default="Leader (2 processes), follower (2 processes) and load generators all on this one machine")
    ap.add_argument("--disk", default="ext4 on a virtio disk")
    a = ap.parse_args()
    out = os.path.join(a.work, "out")
    os.makedirs(a.out, exist_ok=True)
    md = []
    rev = a.rev or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    md.append(f"# corelog results {a.date}\n")
    md.append(
        f"Machine: {os.cpu_count()} vCPU, {mem_gib:.0f} GiB RAM, Linux {platform.release()}, data on {a.disk}; "
        f"commit `{rev}`. {a.layout} "
        "over loopback; every connection mTLS (TLS 1.3, ECDSA P-256, userspace rustls — no kTLS here); "
        "each append acknowledged only after fdatasync on leader and follower.\n"
    )
    md.append(f"Re-run: `benches/sweep.sh` (settings: `{a.config}`); `benches/sweep.sh --quick` for a short check.\n")

    acked_all = 0
    for name, title in [("closed", "Closed loop (each connection one append in flight)"),
                        ("open", "Open loop (fixed rate, latency from the intended send time)")]:
        j = os.path.join(out, f"{name}.json")
        if not os.path.exists(j):
            continue
        rep = json.load(open(j))
        acked_all += rep["acked_total"]
        svg = f"{a.date}-{name}.svg"
        shutil.copy(os.path.join(out, f"{name}.svg"), os.path.join(a.out, svg))
        body = open(os.path.join(out, f"{name}.md")).read().replace(f"]({name}.svg)", f"]({svg})")
        md.append(f"## {title}\n")
        md.append(body)

    # The profiled run (not in the tables) wrote to the same logs.
    pj = os.path.join(out, "profile.json")
    if os.path.exists(pj):
        acked_all += json.load(open(pj))["acked_total"]

    # Peer comparison.
    rows = {}
    for j in sorted(glob.glob(os.path.join(out, "cmp-*.json"))):
        rep = json.load(open(j))
        acked_all += rep["acked_total"]
        m = re.match(r"cmp-(\w+)-(\d+)-(\d+)\.json", os.path.basename(j))
        kind, n = m.group(1), int(m.group(2))
        s = rep["steps"][0]
        r = rows.setdefault(("corelog", kind, n), [])
        r.append((s["acked_per_s"], s["p50_us"], s["p99_us"], None, s["errors"] + s["timeouts"]))
    tsv = os.path.join(out, "peers.tsv")
    if os.path.exists(tsv):
        for line in open(tsv):
            f = line.rstrip("\n").split("\t")
            if len(f) < 7:
                continue
            kind, n, _j, tput, avg, p50, p99 = f
            p50_us = None if nats_ms(p50) is None else int(nats_ms(p50) * 1000)
            p99_us = None if nats_ms(p99) is None else int(nats_ms(p99) * 1000)
            avg_ms = None if avg == "-" else float(avg)
            rows.setdefault((kind, kind, int(n)), []).append((float(tput or 0), p50_us, p99_us, avg_ms, 0))
    if rows:
        md.append("## Against the peers (same machine, ABBA order)\n")
        md.append(
            f"Each system ran {a.reps} time(s) per client count, interleaved A B B A …; throughput is the minimum "
            "and latency the maximum over the runs. PostgreSQL 15: primary + synchronous standby, mTLS, one "
            "`INSERT` per transaction (pgbench reports tps and average latency only). NATS JetStream 2.12.1: "
            "3-node R3, file storage, `sync_interval: always`, mTLS, closed-loop publishers.\n"
        )
        md.append("| system | compared with | clients | runs | acked/s (min) | p50 (max) | p99 (max) | avg latency (max) |")
        md.append("|---|---|---:|---:|---:|---:|---:|---:|")
        for (system, kind, n), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0] != "corelog")):
            tput = min(r[0] for r in rs)
            p50 = max((r[1] for r in rs if r[1] is not None), default=None)
            p99 = max((r[2] for r in rs if r[2] is not None), default=None)
            avg = max((r[3] for r in rs if r[3] is not None), default=None)
            label = {"pg": "PostgreSQL sync standby", "nats": "NATS JetStream R3"}.get(system, system)
            md.append(
                f"| {label} | {kind} | {n} | {len(rs)} | {tput:,.0f} | {fmt_us(p50)} | {fmt_us(p99)} | "
                f"{'-' if avg is None else f'{avg:.1f} ms'} |"
            )
        md.append("")

    # Logs after the run.
    lead = parse_inspect(os.path.join(out, "inspect-leader.txt"))
    foll = parse_inspect(os.path.join(out, "inspect-follower.txt"))
    md.append("## Logs after the run (`corelog inspect`, nodes stopped)\n")
    if lead and foll:
        md.append("| shard | leader records | follower records | leader digest | follower digest |")
        md.append("|---:|---:|---:|---|---|")
        for s in sorted(set(lead) | set(foll)):
            lr, ld = lead.get(s, (0, "-"))
            fr, fd = foll.get(s, (0, "-"))
            md.append(f"| {s} | {lr:,} | {fr:,} | `{ld}` | `{fd}` |")
        total_l = sum(r for r, _ in lead.values())
        total_f = sum(r for r, _ in foll.values())
        same = lead == foll
        ok = same and total_l == acked_all
        md.append("")
        md.append(
            f"Acknowledged writes over all runs (the profiled one too): {acked_all:,}; records in the leader's log: {total_l:,}; "
            f"in the follower's log: {total_f:,}; digests {'equal' if same else 'DIFFERENT'} — "
            f"**{'cross-check passed' if ok else 'cross-check FAILED'}**.\n"
        )
    else:
        md.append("(inspect output missing)\n")

    flames = [f for f in a.flames.split() if f]
    if flames:
        md.append("## Flamegraphs\n")
        md.append("`perf record -e cpu-clock --call-graph dwarf` (benches/perf_hook.sh) during the measured window, rendered with inferno:\n")
        for f in flames:
            md.append(f"- {f}: [{a.date}-flame-{f}.svg]({a.date}-flame-{f}.svg)")
        md.append("")
    path = os.path.join(a.out, f"{a.date}.md")
    with open(path, "w") as fh:
        fh.write("\n".join(md) + "\n")
    print(path)


if __name__ == "__main__":
    main()
