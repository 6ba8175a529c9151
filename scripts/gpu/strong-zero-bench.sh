#!/usr/bin/env bash
# Two measurements for issue 26, on the GPU machine (the device tool), from the repo root with
# .sz.tar.xz (made by `scripts/gpu/strong-zero-bench.sh --prepare` here) carried along:
#
#   1. the strong zero's price in CUDA: each kernel in .sz/k/*_strong.cu against its IEEE twin
#      *_plain.cu (scripts/plain-chain-factors.py), prebuilt sm_90 cubins, cuda_host.py on both:
#      the sums must be bit-identical (ordinary paths meet no 0 * inf), median of REPS launches
#      of PATHS paths each;
#   2. Vulkan's first load on a fresh machine: `nablac run` three times in three processes with
#      one fresh NABLAC_CACHE_DIR: cold (glslang and the driver compile), disk-warm (SPIR-V and
#      the driver's VkPipelineCache from disk), and again; load, run and cache_hit of each.
#
# Logs go to $OUT (default /tmp/nablac-sz).
set -uo pipefail
cd "$(dirname "$0")/../.."
g=.sz
if [[ "${1:-}" == --prepare ]]; then
  set -e
  . .tools/env.sh
  rm -rf "$g" && mkdir -p "$g/bin" "$g/deb" "$g/k"
  strip -o "$g/bin/nablac" target/release/nablac
  . scripts/gpu/vulkan-env.sh
  gpu_pack_vulkan "$g"
  n=$g/bin/nablac
  $n record asian --steps 252 -o "$g/k/asian252.bin"
  $n record barrier --steps 252 -o "$g/k/barrier252.bin"
  for k in asian252:reverse asian252:forward barrier252:reverse; do
    t=${k%%:*} m=${k##*:}
    $n "$g/k/$t.bin" --target cuda --mode "$m" -o "$g/k/${t}_${m}_strong.cu" 2>/dev/null
    python3 scripts/plain-chain-factors.py "$g/k/${t}_${m}_strong.cu" "$g/k/${t}_${m}_plain.cu"
  done
  export NABLAC_NVRTC NABLAC_PTXAS
  ls "$g"/k/*.cu | xargs -P 2 -I{} bash scripts/gpu/cubin.sh {} | sort | tee "$g/k/ptxas-summary.txt"
  python3 -c 'import tarfile
with tarfile.open(".sz.tar.xz", "w:xz") as t: t.add(".sz")'
  du -sh .sz.tar.xz
  exit 0
fi

out=${OUT:-/tmp/nablac-sz}
mkdir -p "$out"
[ -d "$g/bin" ] || python3 -c 'import tarfile; tarfile.open(".sz.tar.xz").extractall()'
export PYTHONUNBUFFERED=1
echo "== machine"
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader

echo "== 1. strong zero vs IEEE chain factors (CUDA f32, ${PATHS:=16777216} paths, median of ${REPS:=7})"
for s in "$g"/k/*_strong.cu; do
  p=${s%_strong.cu}_plain.cu
  echo "-- $(basename "${s%_strong.cu}")"
  python3 scripts/gpu/cuda_host.py "$s" "$p" --paths "$PATHS" --reps "$REPS" --seed 7 2>&1 | tee -a "$out/strong-zero.txt"
done

echo "== 2. Vulkan: cold, disk-warm and warm loads in three processes"
. scripts/gpu/vulkan-env.sh
gpu_vulkan_env "$g"
export PATH=$PWD/$g/bin:$PATH
NABLAC_CACHE_DIR=$(mktemp -d)
export NABLAC_CACHE_DIR
for run in cold disk-warm warm; do
  "$g/bin/nablac" run "$g/k/asian252.bin" --target vulkan --paths 1048576 --json >"$out/vulkan-$run.json" 2>"$out/vulkan-$run.err"
  echo "$run rc=$? $(python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
t = j["timings"]
print("device=%s cache_hit=%s load=%.4f s run=%.4f s device_time=%s" % (j["device"], j["cache_hit"], t["load"], t["run"], t.get("device")))' "$out/vulkan-$run.json" 2>&1)" | tee -a "$out/vulkan.txt"
done
ls -la "$NABLAC_CACHE_DIR" | tee -a "$out/vulkan.txt"
