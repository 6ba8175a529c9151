#!/usr/bin/env bash
# From a fresh clone to a priced Asian option with its Greeks, on the CPU (no GPU needed).
# Builds nablac, records the 252-step Asian call, compiles it for every target into out/,
# shows its checkpoint plan and runs 1,000,000 paths on the embedded CPU target.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "error: cargo not found: install Rust (rustup.rs) first" >&2; exit 1; }
# The binary's LLVM CPU back end builds against LLVM 14 and libPolly (.cargo/config.toml points
# llvm-sys at /usr/lib/llvm-14). Missing, they are installed through apt where we are root or have
# sudo (as the test command does); where we cannot, the binary is built without LLVM (the
# Cranelift CPU back end only: the same results, scalar code) and we say so.
have_llvm() { [ -x /usr/lib/llvm-14/bin/llvm-config ] && [ -e /usr/lib/llvm-14/lib/libPolly.a ]; }
features=()
if ! have_llvm; then
  sudo=() why="not root and no password-less sudo"
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo=(sudo); fi
  if [ "$(id -u)" = 0 ] || [ ${#sudo[@]} -gt 0 ]; then
    why="no apt-get"
    if command -v apt-get >/dev/null; then
      echo "quickstart: installing LLVM 14 (llvm-14-dev libpolly-14-dev) through apt" >&2
      export DEBIAN_FRONTEND=noninteractive
      "${sudo[@]}" apt-get install -y -qq --no-install-recommends llvm-14-dev libpolly-14-dev \
        || { "${sudo[@]}" apt-get update -qq \
             && "${sudo[@]}" apt-get install -y -qq --no-install-recommends llvm-14-dev libpolly-14-dev; } \
        || why="apt-get could not install llvm-14-dev libpolly-14-dev"
    fi
  fi
  if ! have_llvm; then
    echo "quickstart: LLVM 14 with libPolly is not installed and cannot be installed here" \
      "($why): building nablac without it, with the Cranelift CPU back end" \
      "only (scalar code, the same results). For the vectorised LLVM back end:" \
      "apt-get install llvm-14-dev libpolly-14-dev, then run this again." >&2
    features=(--no-default-features)
  fi
fi
cargo build --release --locked -p nablac-cli "${features[@]}"
nablac=${CARGO_TARGET_DIR:-target}/release/nablac  # where cargo put it
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
