"""The disk's floor, measured in the same sitting as the figures it bounds: fio, 4 KiB
O_DIRECT writes at queue depth 1 into a 64 MiB file, each followed by an fdatasync."""
import json
import os
import shutil
import subprocess
import sys


def fio(directory, secs, cpu=None, extra=("--ioengine=psync", "--fdatasync=1")):
    """Runs fio into `directory`/fio; returns (write_p50_us, sync_p50_us, iops). The sync is
    0 where fio makes no separate sync call; a mean stands where fio gave no percentile."""
    args = ["fio", "--name=floor", f"--filename={directory}/fio", "--rw=write", "--bs=4k", "--size=64m",
            "--direct=1", "--iodepth=1", f"--runtime={secs}", "--time_based", "--output-format=json", *extra]
    if cpu is not None:
        args.append(f"--cpus_allowed={cpu}")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return parse(json.loads(out))


def parse(report):
    job = report["jobs"][0]
    lat = job["write"].get("clat_ns") or job["write"]["lat_ns"]
    write = lat.get("percentile", {}).get("50.000000", lat["mean"]) / 1000
    sync = job.get("sync", {}).get("lat_ns", {})
    sync_us = sync.get("percentile", {}).get("50.000000", sync.get("mean", 0)) / 1000
    return write, sync_us, job["write"]["iops"]


def ensure_fio():
    """fio, installed with apt where this process may (root on Debian); None if absent."""
    if not shutil.which("fio") and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-q", "fio"], capture_output=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return shutil.which("fio")


def passes(directory, secs=5):
    """Three passes on the same file: into fresh (fallocated, unwritten) blocks; overwriting
    written ones (the lower, stricter floor: corelog writes into blocks it zeroed ahead);
    that overwrite pinned to CPU 0, where the one-connection runs are served. Prints each;
    returns {"overwrite": µs, "cpu0": µs} (write + fdatasync p50), or {} without fio."""
    if not ensure_fio():
        print("disk floor: fio not installed (apt-get install fio) — no floor this run")
        return {}
    floors = {}
    for name, what, cpu in (("fresh", "fresh file", None), ("overwrite", "overwrite", None),
                            ("cpu0", "overwrite pinned to CPU 0", 0)):
        w, s, iops = fio(directory, secs, cpu)
        print(f"disk floor, {what} (fio 4 KiB O_DIRECT write + fdatasync, QD1): {iops:.0f} IOPS, "
              f"write p50 {w:.0f} µs, fdatasync p50 {s:.0f} µs, together ≈ {w + s:.0f} µs")
        floors[name] = round(w + s, 1)
    return floors


def main(argv):
    """`CPU DIR SECS [FIO ARGS...]` (CPU "" = unpinned): prints "write_p50_us sync_p50_us
    iops" (benches/lib.sh's cl_fio)."""
    if len(argv) < 3:
        sys.exit("usage: python3 -m corebench.floor CPU DIR SECS [FIO ARGS...]")
    cpu, directory, secs = argv[0] or None, argv[1], argv[2]
    w, s, iops = fio(directory, secs, cpu, tuple(argv[3:]) or ("--ioengine=psync", "--fdatasync=1"))
    print(f"{w:.1f} {s:.1f} {iops:.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
