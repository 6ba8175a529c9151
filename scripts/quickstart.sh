#!/usr/bin/env bash
# From a fresh clone to a priced Asian option with its Greeks, on the CPU (no GPU needed).
# Builds nablac, records the 252-step Asian call, compiles it for every target into out/,
# shows its checkpoint plan and runs 1,000,000 paths on the embedded CPU target.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "error: cargo not found: install Rust (rustup.rs) first" >&2; exit 1; }
# The binary's LLVM CPU back end builds against LLVM 14 (.cargo/config.toml points llvm-sys at it).
if [ ! -x /usr/lib/llvm-14/bin/llvm-config ] || [ ! -e /usr/lib/llvm-14/lib/libPolly.a ]; then
  echo "error: LLVM 14 not found: apt-get install llvm-14-dev libpolly-14-dev (or build without it:" \
    "cargo build --release -p nablac-cli --no-default-features)" >&2
  exit 1
fi
cargo build --release --locked -p nablac-cli
nablac=target/release/nablac
mkdir -p out
$nablac record asian --steps 252 -o out/asian252.bin
$nablac inspect out/asian252.bin
$nablac explain out/asian252.bin --segments 16 --plot out/asian252-liveness.svg
for t in cuda opencl glsl cpu; do
  ext=$t; [ $t = cpu ] && ext=clif; [ $t = opencl ] && ext=cl; [ $t = glsl ] && ext=comp
  [ $t = cuda ] && ext=cu
  $nablac out/asian252.bin --target $t -o out/asian252.$ext
done
$nablac run out/asian252.bin --target cpu --paths 1000000 --seed 42
