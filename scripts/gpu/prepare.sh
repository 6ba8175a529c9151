#!/usr/bin/env bash
# Prepares .gpu/ here for scripts/gpu/device-check.sh on the GPU machine, which has no Rust
# toolchain, no glslang, no Vulkan loader and no network:
#   .gpu/bin/    release nablac, the runtime test binary (compiler/tests/runtime.rs), glslangValidator
#   .gpu/deb/    the Vulkan loader (libvulkan1) and glvnd, which the NVIDIA ICD needs, to unpack there
#   .gpu/k/      CUDA benchmark kernels (the 252-step Asian; barrier252, asian64, asian504 for
#                segment counts and --min-blocks), emitted by nablac, each with its
#                manifest, its sm_90 cubin (NVRTC + ptxas here, so no device time goes to
#                compiling) and ptxas's resource report
#   .gpu/m/      with MODES=1: scripts/gpu/modes-bench.sh's kernels (the benchmark tapes by mode),
#                with their cubins, which modes-bench.sh then times without compiling
# Needs scripts/install-test-deps.sh to have run (NVRTC and ptxas). Then, with the device tool:
#   run  bash scripts/gpu/device-check.sh   carrying .gpu.tar.xz
# (.gpu packed: cubins shrink ninefold under xz, and a carry holds 64 MiB; device-check.sh unpacks it).
set -euo pipefail
cd "$(dirname "$0")/../.."
. .tools/env.sh
g=.gpu
# The pack holds bin, deb, k, and m only when MODES=1 made it this time (else a stale m would be
# timed in place of the kernels modes-bench.sh emits on the device).
pack() { python3 -c 'import os, sys, tarfile
parts = ["bin", "deb", "k"] + (["m"] if sys.argv[3] == "1" else [])
with tarfile.open(sys.argv[1], "w:xz") as t:
    for p in parts:
        if os.path.exists(os.path.join(sys.argv[2], p)):
            t.add(os.path.join(sys.argv[2], p))' .gpu.tar.xz "$g" "${MODES:-0}"; }
# BINARIES_ONLY=1 refreshes .gpu/bin and leaves the kernels alone. Kernels are re-emitted every
# time; a cubin is rebuilt only when its source or manifest changed (their cubins take minutes).
rm -rf "$g/bin" "$g/deb"
mkdir -p "$g/bin" "$g/deb" "$g/k"

cargo build --release --locked -p nablac-cli
strip -o "$g/bin/nablac" target/release/nablac
tests=$(cargo test --release --locked -p nablac --test runtime --no-run --message-format=json 2>/dev/null |
  python3 -c 'import sys, json
for l in sys.stdin:
    j = json.loads(l)
    if j.get("executable") and j.get("target", {}).get("name") == "runtime":
        print(j["executable"])')
strip -o "$g/bin/runtime-tests" "$tests"
# glslang, the Vulkan loader, and glvnd, which the NVIDIA ICD (libGLX_nvidia) needs to load.
. scripts/gpu/vulkan-env.sh
gpu_pack_vulkan "$g"
[[ "${BINARIES_ONLY:-0}" == 1 ]] && { pack; exit 0; }

n=$g/bin/nablac
emit() { # tape (recorded as .gpu/k/TAPE.bin), variant, compile options: .gpu/k/TAPE_VARIANT.cu
  local t=$1 v=$2; shift 2
  $n "$g/k/$t.bin" --target cuda -o "$g/k/${t}_$v.cu" "$@" 2>/dev/null
}
$n record asian --steps 252 -o "$g/k/asian252.bin"
emit asian252 price_f32 --mode price
emit asian252 plain_f32 --segments 1
for s in 2 4 8 16 32; do emit asian252 "reg${s}_f32" --checkpoint registers --segments "$s" --min-blocks 0; done
for l in 100 200 400; do emit asian252 "scr${l}_f32" --checkpoint scratch --seg-len "$l"; done
emit asian252 scr200aos_f32 --checkpoint scratch --seg-len 200 --scratch-layout aos
emit asian252 price_f64 --mode price --precision f64
emit asian252 plain_f64 --segments 1 --precision f64
emit asian252 reg16_f64 --checkpoint registers --segments 16 --precision f64
# The 16-segment kernel again, asking for B resident blocks of 128 threads per SM
# (--min-blocks B: __launch_bounds__(128, B), at most 65536 / (128 B) registers, 128 / 102 / 85
# for B = 4 / 5 / 6; -maxrregcount does nothing where launch bounds are given).
for b in 4 5 6; do emit asian252 "reg16mb${b}_f32" --checkpoint registers --segments 16 --min-blocks "$b"; done
emit asian252 plainmb4_f32 --segments 1 --min-blocks 4
emit asian252 default_f32  # what nablac chooses with no options
# The segment count and --min-blocks on other tapes (what chose today's defaults); device-check.sh
# times each tape's kernels against its plain one. asian64 (408 nodes) is under the node
# threshold, so nablac does not checkpoint it by default.
more() { # tape, record arguments...
  local t=$1; shift
  $n record "$@" -o "$g/k/$t.bin" >/dev/null
  emit "$t" plain_f32 --segments 1
  emit "$t" plainmb4_f32 --segments 1 --min-blocks 4
  emit "$t" default_f32
  for s in 16 32; do
    emit "$t" "reg${s}_f32" --checkpoint registers --segments "$s" --min-blocks 0
    emit "$t" "reg${s}mb4_f32" --checkpoint registers --segments "$s" --min-blocks 4
  done
  echo "$t" >>"$g/k/more.txt"
}
rm -f "$g/k/more.txt"
more barrier252 barrier --steps 252
more asian64 asian --steps 64
more asian504 asian --steps 504

# sm_90 cubins, two at a time (NVRTC and ptxas are single-threaded), each rebuilt only when
# its source and manifest differ from what built the cubin there (kept in BASE.sha).
cubin() {
  local cu=$1 base=${1%.cu}
  local sha opts
  sha=$(cat "$cu" "$cu.json" | sha256sum)
  if ! [[ -f "$base.cubin" && "$(cat "$base.sha" 2>/dev/null)" == "$sha" ]]; then
    rm -f "$base.cubin" "$base.sha"
    # The same source and manifest built next door (modes-bench's auto kernel is one of the
    # others): copy its cubin.
    local twin
    twin=$(grep -lxF "$sha" "$(dirname "$cu")"/*.sha 2>/dev/null | head -1)
    if [[ -n $twin && -f ${twin%.sha}.cubin ]]; then
      cp "${twin%.sha}.cubin" "$base.cubin"
      cp "${twin%.sha}.ptxas.txt" "$base.ptxas.txt"
      echo "$sha" >"$base.sha"
    fi
  fi
  if ! [[ -f "$base.cubin" && "$(cat "$base.sha" 2>/dev/null)" == "$sha" ]]; then
    bash scripts/gpu/cubin.sh "$cu" >/dev/null
    echo "$sha" >"$base.sha"
  fi
  echo "$(basename "$base"): $(grep -E 'registers|spill' "$base.ptxas.txt" | sed 's/ptxas info *: //' | tr -s ' \n' ' ')"
}
export -f cubin
export NABLAC_NVRTC NABLAC_PTXAS
ls "$g"/k/*.cu | xargs -P 2 -I{} bash -c 'cubin {}' | sort | tee "$g/k/ptxas-summary.txt"
# MODES=1: modes-bench.sh's kernels too (every benchmark tape by mode), in .gpu/m.
if [[ "${MODES:-0}" == 1 ]]; then
  NABLAC=$n EMIT_ONLY="$g/m" bash scripts/gpu/modes-bench.sh
  # The auto kernels last: each is a copy of one of the others.
  { ls "$g"/m/*.cu | grep -v _auto.cu; ls "$g"/m/*_auto.cu; } |
    xargs -P 2 -I{} bash -c 'cubin {}' | sort | tee "$g/m/ptxas-summary.txt"
fi
pack
du -sh "$g" .gpu.tar.xz
