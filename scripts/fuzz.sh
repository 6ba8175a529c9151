#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (check.sh: 60). Exits non-zero on a crash
# (panic, failed assertion, sanitizer report, timeout or OOM), with the crashing input left under
# fuzz/artifacts/<target>/; prints each target's executions and coverage at the end.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default 60 per target, every target)
#
# Targets (fuzz/fuzz_targets/, each says what it asserts):
#   read_binary, read_text  any bytes to the tape readers: no panic; accepted tapes round-trip
#   tape_pipeline           bytes -> a valid random tape of every op -> verify, plan (invariants),
#                           every printer, plain = checkpointed schedule bits, the CPU kernel = the
#                           reference on 3 paths
#   loaders                 any manifest JSON + kernel bytes to Backend::Cpu's loader: no panic
#
# Corpora: fuzz/corpus/<target>/ is the committed seed corpus (read only here); what a run finds
# goes to $NABLAC_FUZZ_TARGET_DIR/corpus/<target>/ and is reused by the next run on this machine.
#
# Environment:
#   FUZZ_SANITIZER  address (default) or none. `none` builds faster; panics (the thing we hunt)
#                   are caught either way.
#   NABLAC_FUZZ_TARGET_DIR  default target/fuzz in the checkout (instrumented builds, kept apart).
#
# Only the stable toolchain exists here. cargo-fuzz passes nightly-only flags (-Zsanitizer=...,
# -Cpasses=sancov-module and friends); RUSTC_BOOTSTRAP=1 makes stable rustc accept them. The ASan
# runtime (librustc-stable_rt.asan.a) ships with the stable x86_64-unknown-linux-gnu std, and
# libfuzzer-sys builds libFuzzer from its C++ source with the system c++. This works with
# rustc 1.95.0 and cargo-fuzz 0.13.2. The first build compiles every dependency of nablac and
# nablac-runtime (Cranelift included) instrumented: about 3.5 minutes on 2 cores; later builds
# only recompile nablac.
set -euo pipefail

SECONDS_PER_TARGET="${1:-60}"
shift || true
SANITIZER="${FUZZ_SANITIZER:-address}"
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${NABLAC_FUZZ_TARGET_DIR:-$PWD/target/fuzz}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz (once; a minute)" >&2
    cargo install cargo-fuzz --locked
fi

if [ "$#" -gt 0 ]; then
    TARGETS=("$@")
else
    TARGETS=(read_binary read_text tape_pipeline loaders)
fi

# The longest input per target: a seed of loaders is a manifest and a CLIF kernel (~12 KB).
max_len() {
    case "$1" in
        loaders) echo 32768 ;;
        *) echo 4096 ;;
    esac
}

start=$(date +%s)
for t in "${TARGETS[@]}"; do
    echo "fuzz: building $t (sanitizer: $SANITIZER)" >&2
    cargo fuzz build --sanitizer "$SANITIZER" "$t"
done
echo "fuzz: built in $(( $(date +%s) - start )) s" >&2

status=0
summary=()
for t in "${TARGETS[@]}"; do
    work="$CARGO_TARGET_DIR/corpus/$t"
    mkdir -p "$work" "fuzz/corpus/$t"
    log="$CARGO_TARGET_DIR/fuzz-$t.log"
    echo "fuzz: running $t for ${SECONDS_PER_TARGET}s (log: $log)" >&2
    set +e
    cargo fuzz run --sanitizer "$SANITIZER" "$t" "$work" "fuzz/corpus/$t" -- \
        -max_total_time="$SECONDS_PER_TARGET" -max_len="$(max_len "$t")" -timeout=20 \
        -rss_limit_mb=3072 >"$log" 2>&1
    rc=$?
    set -e
    if [ "$rc" != 0 ]; then
        echo "fuzz: $t FAILED (status $rc); crashing input in fuzz/artifacts/$t/" >&2
        tail -60 "$log" >&2
        status=1
    fi
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
    summary+=("$t: ${done_line:-no DONE line}")
done
echo "fuzz: summary (executions, coverage, corpus):" >&2
printf '  %s\n' "${summary[@]}" >&2
exit "$status"
