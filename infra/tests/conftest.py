"""Shared helpers of the infra test suite (pytest, run by infra/tests/run.sh)."""
import os
import re
import shutil
from pathlib import Path

import hcl2
import pytest

INFRA = Path(__file__).resolve().parent.parent
AWS = INFRA / "aws"
BOOTSTRAP = INFRA / "bootstrap"


def one(v):
    """python-hcl2 wraps attribute values in lists (version dependent): unwrap one level."""
    if isinstance(v, list) and len(v) == 1:
        return v[0]
    return v


def load_dir(d: Path) -> dict:
    """Merge every *.tf file of a directory into {block type: [blocks]}."""
    merged: dict = {}
    for f in sorted(d.glob("*.tf")):
        with f.open() as fh:
            doc = hcl2.load(fh)
        for k, blocks in doc.items():
            merged.setdefault(k, []).extend(blocks)
    return merged


def resources(doc: dict, rtype: str) -> dict:
    """{name: body} of every resource of one type."""
    out = {}
    for block in doc.get("resource", []):
        for t, named in block.items():
            if t == rtype:
                out.update(named)
    return out


def named_blocks(doc: dict, kind: str) -> dict:
    out = {}
    for block in doc.get(kind, []):
        out.update(block)
    return out


def locals_of(doc: dict) -> dict:
    out = {}
    for block in doc.get("locals", []):
        out.update(block)
    return out


def ref(expr) -> str:
    """'${var.x}' -> 'var.x'."""
    s = str(one(expr))
    m = re.fullmatch(r"\$\{(.*)\}", s)
    return m.group(1) if m else s


@pytest.fixture(scope="session")
def root() -> dict:
    return load_dir(AWS)


@pytest.fixture(scope="session")
def module_dirs() -> list:
    return [AWS] + sorted(p for p in (AWS / "modules").iterdir() if p.is_dir())


def skip(reason: str):
    """A test that cannot run here: skipped with the reason, or failed where
    CORELOG_NO_SKIP=1 (set by .ci/run), so that a green CI proves every test ran."""
    if os.environ.get("CORELOG_NO_SKIP") == "1":
        pytest.fail(f"cannot run here ({reason}), and CORELOG_NO_SKIP=1 forbids skipping")
    pytest.skip(reason)


def need(tool: str):
    if shutil.which(tool) is None:
        skip(f"{tool} is not installed (infra/tests/run.sh installs it)")
