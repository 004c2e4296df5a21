"""Tests that boot Debian's kernel under qemu through infra/vm/run-in-vm.sh: the harness itself
(exit codes, arguments, env, loopback), the RAID0 bootstrap against emulated NVMe drives, and the
kTLS path the server's tests rely on. Skipped, with the reason, where no VM can be run."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import INFRA, skip

HARNESS = INFRA / "vm" / "run-in-vm.sh"
GUESTS = INFRA / "tests" / "vm"
SKIP_CODE = 77


def run_vm(args, timeout=400):
    env = dict(os.environ)
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(HARNESS), *args], capture_output=True, text=True, timeout=timeout, env=env)
    elapsed = time.monotonic() - t0
    print(r.stdout[-6000:])
    print(r.stderr[-3000:])
    print(f"VM call took {elapsed:.1f}s, exit {r.returncode}")
    if r.returncode == SKIP_CODE:
        reason = [l for l in r.stderr.splitlines() if l.startswith("SKIP")]
        skip(reason[-1] if reason else "run-in-vm.sh cannot run a VM here")
    return r


@pytest.mark.parametrize("code", [0, 7])
def test_exit_code_propagates(code):
    r = run_vm(["-e", "SMOKE_VALUE=it's ok", "-t", "120", str(GUESTS / "smoke-guest.sh"), str(code), "two words"])
    assert "smoke ok" in r.stdout
    assert r.returncode == code


def test_missing_marker_is_a_failure():
    r = run_vm(["-q", "-t", "120", str(GUESTS / "no-marker-guest.sh")])
    assert r.returncode == 125
    assert "reported no exit code" in r.stderr


def test_usage_errors():
    r = subprocess.run(["bash", str(HARNESS), "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2
    r = subprocess.run(["bash", str(HARNESS), "/nonexistent/script.sh"], capture_output=True, text=True)
    assert r.returncode == 2


def test_raid0_bootstrap_in_vm(tmp_path):
    """infra/bootstrap/raid.sh for real: 3 NVMe drives -> md0 raid0 + xfs; reboot; 1 drive; none."""
    disks = []
    for i in range(3):
        p = tmp_path / f"nvme{i}.img"
        with p.open("wb") as f:
            f.truncate(128 << 20)
        disks += ["-n", str(p)]
    single = tmp_path / "single.img"
    with single.open("wb") as f:
        f.truncate(64 << 20)
    tools = []
    for t in ("bash", "mdadm", "blkid", "mkfs.xfs", "mkfs.ext4"):
        if shutil.which(t) is None:
            skip(f"{t} not installed on the host (infra/vm/setup.sh installs it)")
        tools += ["-f", t]
    t0 = time.monotonic()
    r = run_vm(["-m", "raid0,xfs,ext4", *tools,
                "-f", f"{INFRA / 'bootstrap' / 'raid.sh'}:/opt/corelog/raid.sh",
                *disks, "-d", str(single), "-t", "300",
                str(GUESTS / "raid-guest.sh")])
    print(f"RAID VM test: {time.monotonic() - t0:.1f}s")
    assert "ALL RAID CHECKS PASSED" in r.stdout
    assert r.returncode == 0


def test_ktls_in_vm(tmp_path):
    """A dynamic ELF (libs copied by the harness) sets up kTLS on loopback with only `-m tls`."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        skip("no C compiler to build the kTLS probe")
    probe = tmp_path / "ktls_probe"
    subprocess.run([cc, "-O2", "-o", str(probe), str(GUESTS / "ktls_probe.c")], check=True)
    r = run_vm(["-m", "tls", "-f", f"{probe}:/usr/local/bin/ktls_probe", "-t", "120",
                str(GUESTS / "ktls-guest.sh")])
    assert "kTLS OK" in r.stdout
    assert r.returncode == 0


def test_hard_timeout():
    r = run_vm(["-q", "-t", "15", str(GUESTS / "hang-guest.sh")], timeout=60)
    assert r.returncode == 124
    assert "timed out" in r.stderr


def test_scratch_disk_and_out_dir(tmp_path):
    out = tmp_path / "out"
    r = run_vm(["-q", "-s", "64", "-o", str(out), "-t", "120", str(GUESTS / "scratch-guest.sh")])
    assert r.returncode == 0
    assert (out / "hello.txt").read_text() == "hello\n"
    assert (out / "sub" / "nested.txt").read_text() == "nested\n"
