#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this).
#
# Installs what the tests need when it is missing (PoCL, lavapipe, glslang, spirv-tools, the
# NVRTC/ptxas wheels: scripts/install-test-deps.sh), then runs every test in the workspace with
# the real compilers required, checks formatting and clippy, rejects pending or unreferenced insta
# snapshots, runs the Python package's tests (scripts/python-tests.sh) and each fuzz target for a
# minute (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

step() { printf '\n==> %s\n' "$*"; }

step "installing test dependencies (skipped where present)"
bash scripts/install-test-deps.sh
# shellcheck disable=SC1091
source .tools/env.sh

# Every compiler check must run for real here: a missing tool fails instead of skipping.
export NABLAC_REQUIRE_TOOLS=1
# Snapshots never change in a test run: a mismatch fails and nothing is written.
export INSTA_UPDATE=no INSTA_FORCE_PASS=0
refs=$(mktemp)
trap 'rm -f "$refs"' EXIT
export INSTA_SNAPSHOT_REFERENCES_FILE=$refs

step "cargo test --workspace (the nablac binary's default features: LLVM back end on)"
cargo test --workspace --locked --no-fail-fast

step "the Python package: built into a fresh virtual environment, its pytest suite (scripts/python-tests.sh)"
bash scripts/python-tests.sh

step "without the llvm feature (the libraries' default): their unit tests and the CPU runtime's; the binary builds"
# (The GPU-backend tests do not depend on the feature; the workspace run above ran them.)
cargo test -p nablac --lib --locked --no-fail-fast
cargo test -p nablac-runtime --lib --test cpu --locked --no-fail-fast
cargo build -p nablac-cli --no-default-features --locked

step "rustfmt and clippy"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p nablac -p nablac-runtime --all-targets --locked -- -D warnings
cargo clippy -p nablac-cli --all-targets --no-default-features --locked -- -D warnings

step "snapshot hygiene: no pending, no unreferenced snapshots"
pending=$(find snapshots compiler tests -name '*.snap.new' -o -name '*.pending-snap' 2>/dev/null || true)
if [ -n "$pending" ]; then
  echo "pending snapshots (review them with 'cargo insta review'):"; echo "$pending"; exit 1
fi
unreferenced=0
while IFS= read -r snap; do
  abs=$(realpath "$snap")
  if ! grep -qxF "$abs" <(xargs -r -d '\n' realpath -m < "$refs" 2>/dev/null); then
    echo "unreferenced snapshot: $snap"; unreferenced=1
  fi
done < <(find snapshots -name '*.snap' 2>/dev/null | sort)
[ "$unreferenced" = 0 ] || { echo "remove unreferenced snapshots (or the test that lost them)"; exit 1; }
echo "snapshots: $(find snapshots -name '*.snap' | wc -l) referenced, none pending"

if [ -x scripts/fuzz.sh ]; then
  # Every target 60 s (issue 14): about 4 minutes of fuzzing after a 3.5-minute instrumented build.
  step "fuzzing: every target for ${NABLAC_FUZZ_SECONDS:-60} s"
  bash scripts/fuzz.sh "${NABLAC_FUZZ_SECONDS:-60}"
fi

step "all checks passed"
