#!/usr/bin/env bash
# The Python package's tests: builds `nablac` (python/) into a virtual environment and runs
# pytest over python/tests. From the repository root on a fresh machine:
#
#     bash scripts/python-tests.sh
#
# Creates $NABLAC_PY_VENV (default target/py-venv, ignored by git) with maturin, numpy, pytest,
# pandas and jax[cpu] (for nablac.from_jax's tests) from PyPI, builds the extension with
# `maturin develop` in the dev profile (it reuses the workspace's dev artifacts in target/, so
# after `cargo build --workspace` only the extension crate and pyo3 compile), installs it into the environment and runs pytest. Idempotent:
# a second run reinstalls nothing it has and rebuilds only what changed. Quiet on success (pytest's
# summary line); on a failure it prints the failing step's output and exits non-zero.
# The CLI comparison test runs the binary at $NABLAC_BIN (default target/debug/nablac, built
# here if missing, as `cargo build -p nablac-cli`).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${NABLAC_PY_VENV:-target/py-venv}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

step() { # step WHAT CMD...: runs CMD quietly; on failure prints its output and stops.
  local what=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "python-tests: $what failed" >&2
    exit 1
  fi
}

if [ ! -x "$venv/bin/python" ]; then
  step "creating the virtual environment $venv" python3 -m venv "$venv"
fi
py=$venv/bin/python
if [ ! -x "$venv/bin/maturin" ] || ! "$py" -c "import numpy, pytest, pandas, jax" 2>/dev/null; then
  step "pip install" "$py" -m pip install -q --disable-pip-version-check "maturin>=1.7,<2" numpy pytest pandas "jax[cpu]"
fi

# The default (LLVM) CPU back end needs LLVM 14 and libPolly, as the binary does
# (scripts/quickstart.sh installs them); without them the package gets Cranelift only.
features=()
if ! { [ -x /usr/lib/llvm-14/bin/llvm-config ] && [ -e /usr/lib/llvm-14/lib/libPolly.a ]; }; then
  echo "python-tests: LLVM 14 not found: building with the Cranelift CPU back end only" >&2
  features=(--no-default-features)
fi
step "maturin develop" env VIRTUAL_ENV="$root/$venv" PATH="$root/$venv/bin:$PATH" \
  "$venv/bin/maturin" develop --manifest-path python/Cargo.toml "${features[@]}"

nablac_bin=${NABLAC_BIN:-target/debug/nablac}
if [ ! -x "$nablac_bin" ] && [ -z "${NABLAC_BIN:-}" ]; then
  step "cargo build -p nablac-cli" cargo build -q -p nablac-cli "${features[@]}"
fi

cd python
NABLAC_BIN="$root/$nablac_bin" "$root/$py" -m pytest -q -p no:cacheprovider tests >"$log" 2>&1 \
  || { cat "$log" >&2; echo "python-tests: pytest failed" >&2; exit 1; }
tail -n 1 "$log"
