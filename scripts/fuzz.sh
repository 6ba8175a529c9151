#!/usr/bin/env bash
# Fuzz smoke test of the tape readers: builds the cargo-fuzz targets in fuzz/ and runs each for a
# few seconds. Exits non-zero on a crash (panic, failed assertion, sanitizer report, timeout or OOM),
# with the crashing input left under fuzz/artifacts/<target>/.
#
#   scripts/fuzz-smoke.sh [SECONDS]     (default 20 per target)
#
# Environment:
#   FUZZ_SANITIZER  address (default) or none. `none` builds faster; the readers have no unsafe
#                   code, so panics (the thing we hunt) are caught either way.
#   NABLAC_FUZZ_TARGET_DIR  default target/fuzz in the checkout (instrumented builds, kept apart).
#
# Only the stable toolchain exists here. cargo-fuzz passes nightly-only flags (-Zsanitizer=...,
# -Cpasses=sancov-module and friends); RUSTC_BOOTSTRAP=1 makes stable rustc accept them. The ASan
# runtime (librustc-stable_rt.asan.a) ships with the stable x86_64-unknown-linux-gnu std, and
# libfuzzer-sys builds libFuzzer from its C++ source with the system c++. This works with
# rustc 1.95.0 and cargo-fuzz 0.13.2. The first build compiles every dependency of nablac
# (Cranelift included) instrumented, which takes a long while on a small machine; later builds
# only recompile nablac.
set -euo pipefail

SECONDS_PER_TARGET="${1:-20}"
SANITIZER="${FUZZ_SANITIZER:-address}"
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${NABLAC_FUZZ_TARGET_DIR:-$PWD/target/fuzz}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz (once; a few minutes)" >&2
    cargo install cargo-fuzz --locked
fi

TARGETS=(read_binary read_text)

for t in "${TARGETS[@]}"; do
    echo "fuzz-smoke: building $t (sanitizer: $SANITIZER)" >&2
    cargo fuzz build --sanitizer "$SANITIZER" "$t"
done

# Seed corpora: the spec's example in both forms, so the fuzzer starts from valid tapes.
for t in "${TARGETS[@]}"; do
    mkdir -p "fuzz/corpus/$t"
done
if compgen -G "tests/in/*.ntape" >/dev/null; then
    cp -n tests/in/*.ntape fuzz/corpus/read_text/ 2>/dev/null || true
fi
cat > fuzz/corpus/read_text/example.ntape <<'EOF'
nablatape 1
%0 = input spot 100.0
%1 = input strike 95.0
%2 = const 0.5
%3 = normal 0
%4 = mul %0 %3
%5 = sub %4 %1
%6 = max %5 %2
output payoff = %6
EOF
# The same tape in binary form, from TAPE-FORMAT.md's layout (CRC 0xb6e3655a).
HEX='4e544150010000000200000001000000010000000700000001000000000000000400'\
'73706f7400000000000059400600737472696b650000000000c057400600000006'\
'007061796f6666000000000000e03f00000000000000000000000000000000010000'\
'0000000000010000000000000000000000020000000000000000000000120000000000'\
'0000030000001100000004000000010000001400000005000000020000005a65e3b6'
# shellcheck disable=SC2059
printf "$(printf '%s' "$HEX" | sed 's/../\\x&/g')" > fuzz/corpus/read_binary/example.bin

status=0
for t in "${TARGETS[@]}"; do
    echo "fuzz-smoke: running $t for ${SECONDS_PER_TARGET}s" >&2
    if ! cargo fuzz run --sanitizer "$SANITIZER" "$t" -- \
        -max_total_time="$SECONDS_PER_TARGET" -max_len=4096 -timeout=5 -rss_limit_mb=2048; then
        echo "fuzz-smoke: $t FAILED; crashing input in fuzz/artifacts/$t/" >&2
        status=1
    fi
done
exit "$status"
