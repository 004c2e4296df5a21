"""The package's example against `corelog quickstart --dir D`'s nodes (issue 13's
acceptance): quickstart writes certs and data to D and stops; the example starts the
pair again from D (quickstart's ports and certificates), appends, reads back, tails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import BIN, PKG, free_base, run_py


def test_example_against_quickstart_dir(tmp_path: Path) -> None:
    n = max(os.cpu_count() or 1, len(os.sched_getaffinity(0)))  # quickstart: one shard per CPU
    offsets = [o for base in (0, 100) for o in range(base, base + 2 + n)]
    offsets += [o for base in (200, 300) for o in range(base, base + n)] + [400, 401]
    port = free_base(offsets)
    d = tmp_path / "qs"
    r = subprocess.run([str(BIN), "quickstart", "--dir", str(d), "--port", str(port), "--seconds", "1",
                        "--connections", "2"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stdout.decode()[-2000:] + r.stderr.decode()[-2000:]
    assert (d / "certs" / "client.pem").is_file()
    r = run_py(str(PKG / "examples" / "quickstart.py"), "--dir", str(d), "--port", str(port), "--start",
               "--corelog", str(BIN), timeout=120)
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    assert "read     " in out and "Hello World" in out
    assert out.count("tailed   ") >= 4 and "appended while tailing" in out
    assert "stale expectation refused, stream is at version 1" in out and out.rstrip().endswith("ok")
