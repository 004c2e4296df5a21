#!/usr/bin/env bash
# infra/tests/run.sh — the infra test suite, runnable non-interactively on a fresh Debian 12 machine
# (root, or sudo): installs its own tools, then runs
#   1. terraform fmt -check -recursive infra
#   2. shellcheck on every shell script under infra/
#   3. checkov on infra/aws (Terraform; offline: --skip-download) — any failed check fails
#   4. pytest infra/tests (Terraform shape, bootstrap, VM tests: RAID0 in qemu, harness, kTLS)
# Exit status: non-zero if any step fails. VM tests skip (with the reason) only where qemu or the
# Debian kernel cannot be installed.
# Env: INFRA_SKIP_INSTALL=1 skips apt/pip (tools already there); PYTEST_ARGS adds pytest arguments.
set -euo pipefail

INFRA="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO="$(cd "$INFRA/.." && pwd)"
VENV="$INFRA/.venv"
cd "$REPO"

t_start=$SECONDS
failures=()
step() { echo; echo "=== $* ==="; }
timed() { echo "--- took $((SECONDS - $1))s"; }

# ---------------------------------------------------------------- tools
if [ "${INFRA_SKIP_INSTALL:-0}" != 1 ]; then
  step "install: apt tools (qemu, Debian kernel, busybox, mdadm, xfsprogs, shellcheck)"
  t=$SECONDS
  bash "$INFRA/vm/setup.sh" || echo "WARNING: infra/vm/setup.sh failed; VM tests will skip if they cannot run"
  timed $t

  step "install: Python tools into infra/.venv (checkov, python-hcl2, pytest)"
  t=$SECONDS
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" 2>/dev/null || {
      echo "python3 -m venv failed; installing python3-venv"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
      python3 -m venv "$VENV"
    }
  fi
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$INFRA/tests/requirements.txt"
  timed $t
fi
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "no $VENV (run without INFRA_SKIP_INSTALL=1 once)"; exit 1; }

# ---------------------------------------------------------------- 1. terraform fmt
step "terraform fmt -check -recursive infra"
if [ -n "${TF_CLI_CONFIG_FILE:-}" ] && [ ! -e "$TF_CLI_CONFIG_FILE" ]; then unset TF_CLI_CONFIG_FILE; fi
if command -v terraform >/dev/null; then
  if terraform fmt -check -recursive -diff infra; then echo "fmt: ok"; else failures+=("terraform fmt"); fi
else
  echo "terraform is not installed"; failures+=("terraform fmt (terraform missing)")
fi

# ---------------------------------------------------------------- 2. shellcheck
step "shellcheck"
mapfile -t scripts < <(find infra -name '*.sh' -not -path 'infra/.venv/*' -not -path '*/.terraform/*' | sort)
if command -v shellcheck >/dev/null; then
  if shellcheck -x "${scripts[@]}"; then echo "shellcheck: ${#scripts[@]} scripts ok"; else failures+=("shellcheck"); fi
else
  echo "shellcheck is not installed"; failures+=("shellcheck (missing)")
fi

# ---------------------------------------------------------------- 3. checkov
step "checkov (terraform, offline)"
t=$SECONDS
if "$VENV/bin/checkov" -d infra/aws --framework terraform --skip-download --compact --quiet; then
  echo "checkov: no failed check"
else
  failures+=("checkov")
fi
timed $t

# ---------------------------------------------------------------- 4. pytest
step "pytest infra/tests"
t=$SECONDS
set +e
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of arguments
"$PY" -m pytest infra/tests -rs -v --durations=5 -p no:cacheprovider ${PYTEST_ARGS:-}
rc=$?
set -e
[ "$rc" -eq 0 ] || failures+=("pytest (exit $rc)")
timed $t

# ---------------------------------------------------------------- result
echo
echo "infra/tests/run.sh: wall time $((SECONDS - t_start))s"
if [ "${#failures[@]}" -gt 0 ]; then
  echo "FAILED: ${failures[*]}"
  exit 1
fi
echo "infra suite: all checks passed"
