#!/usr/bin/env bash
# client/python/tests/run.sh — the Python client's test suite, non-interactive:
#   1. a virtualenv at client/python/.venv (python3 -m venv; installs python3-venv if needed)
#   2. pip install ./client/python (the package, as a user would) and pytest==9.1.1
#   3. pytest client/python/tests against real corelog nodes started from $CORELOG_BIN
#      (default: target/release/corelog of this repository)
# Exit status non-zero on any failure. CORELOG_NO_SKIP=1: a skipped test fails.
# Env: PYTEST_ARGS adds pytest arguments.
set -euo pipefail

PKG="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO="$(cd "$PKG/../.." && pwd)"
VENV="$PKG/.venv"
cd "$REPO"
t0=$SECONDS

export CORELOG_BIN="${CORELOG_BIN:-$REPO/target/release/corelog}"
if [ ! -x "$CORELOG_BIN" ]; then
  echo "no corelog binary at $CORELOG_BIN (cargo build --release, or set CORELOG_BIN)"
  exit 1
fi

echo "--- virtualenv $VENV"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" 2>/dev/null || {
    echo "python3 -m venv failed; installing python3-venv"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
    python3 -m venv "$VENV"
  }
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --quiet)
"${PIP[@]}" install "pytest==9.1.1"
# The package itself (pure Python). Offline, fall back to the venv's own setuptools.
"${PIP[@]}" install --force-reinstall --no-deps ./client/python \
  || "${PIP[@]}" install --force-reinstall --no-deps --no-build-isolation ./client/python
rm -rf "$PKG/build" "$PKG"/src/*.egg-info  # setuptools' in-tree leftovers
"$VENV/bin/python" -c 'import corelog, sys; print("corelog", corelog.__version__, "from", corelog.__file__, "on Python", sys.version.split()[0])'

echo "--- pytest client/python/tests (corelog: $CORELOG_BIN)"
set +e
# Run from the tests directory so that the installed package, not the source tree, is imported.
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of arguments
(cd "$PKG/tests" && "$VENV/bin/python" -m pytest -p no:cacheprovider -rs --durations=5 ${PYTEST_ARGS:-} .)
rc=$?
set -e
echo "client/python/tests/run.sh: pytest exit $rc, wall time $((SECONDS - t0)) s"
exit "$rc"
