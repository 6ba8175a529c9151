#!/usr/bin/env bash
# Loops against unrolled kernels (issue 27), on the GPU machine (the device tool), from the repo
# root with .lp2.tar.xz (made by `scripts/gpu/loops-bench.sh --prepare` here) and .gpu.tar.xz
# (`BINARIES_ONLY=1 scripts/gpu/prepare.sh`: nablac, glslang, the Vulkan loader) carried along:
#
#   1. CUDA throughput: each tape's price, forward and reverse kernels, unrolled (`--unroll`) against
#      loops (the default), prebuilt sm_90 cubins, cuda_host.py on both in one process: the sums must be
#      bit-identical (`==first True`), median of REPS launches of PATHS paths each;
#   2. a first `nablac run` (value + 5 Greeks, default mode, empty cache, 1M paths) of the
#      252-step Asian on cuda, opencl and vulkan, unrolled and with loops: wall, load and run;
#      the 10,000-step Asian on each target, and the 100,000-step one compiled and run on cuda.
#
# --prepare also writes .lp2/k/summary.txt: source bytes, NVRTC and ptxas seconds, registers
# and spills of every kernel (this machine). Logs go to $OUT (default /tmp/nablac-lp).
# FIRST_ONLY=1, both here (--prepare) and there: part 2 alone, no kernels or cubins prepared, and
# .lp2.tar.xz carries glslang and the Vulkan debs itself (no .gpu.tar.xz needed).
set -uo pipefail
cd "$(dirname "$0")/../.."
g=.lp2
tapes="asian252 barrier252 basket8 buckets52"
if [[ "${1:-}" == --prepare ]]; then
  set -e
  . .tools/env.sh
  cargo build --release --locked -p nablac-cli
  rm -rf "$g" && mkdir -p "$g/k"
  n=target/release/nablac
  $n record asian --steps 252 -o "$g/k/asian252.bin" >/dev/null
  $n record barrier --steps 252 -o "$g/k/barrier252.bin" >/dev/null
  $n record basket --assets 8 --steps 16 -o "$g/k/basket8.bin" >/dev/null
  python3 scripts/bucketed-asian.py --steps 252 --buckets 52 >"$g/k/buckets52.ntape"
  $n record asian --steps 10000 -o "$g/k/asian10k.bin" >/dev/null
  $n record asian --steps 100000 -o "$g/k/asian100k.bin" >/dev/null
  strip -o "$g/nablac" "$n"
  if [[ "${FIRST_ONLY:-0}" == 1 ]]; then
    # Part 2 alone: the tapes, nablac, and what Vulkan needs there (no .gpu.tar.xz).
    . scripts/gpu/vulkan-env.sh
    gpu_pack_vulkan "$g/gpu"
    python3 -c 'import tarfile
with tarfile.open(".lp2.tar.xz", "w:xz") as t: t.add(".lp2")'
    du -sh .lp2.tar.xz
    exit 0
  fi
  tape() { ls "$g/k/$1".bin "$g/k/$1".ntape 2>/dev/null | head -n1; }
  for t in $tapes; do
    for m in price forward reverse; do
      $n "$(tape "$t")" --target cuda --mode "$m" --unroll -o "$g/k/${t}_${m}_unrolled.cu" >/dev/null
      $n "$(tape "$t")" --target cuda --mode "$m" -o "$g/k/${t}_${m}_loops.cu" >/dev/null
    done
  done
  export NABLAC_NVRTC NABLAC_PTXAS
  # One at a time: the compile times are part of the result.
  for cu in "$g"/k/*.cu; do bash scripts/gpu/cubin.sh "$cu"; done | sort | tee "$g/k/summary.txt"
  python3 -c 'import tarfile
with tarfile.open(".lp2.tar.xz", "w:xz") as t: t.add(".lp2")'
  du -sh .lp2.tar.xz
  exit 0
fi

out=${OUT:-/tmp/nablac-lp}
mkdir -p "$out"
[ -d "$g/k" ] || python3 -c 'import tarfile; tarfile.open(".lp2.tar.xz").extractall()'
# FIRST_ONLY=1 (prepared so too): part 2 alone, with the glslang and debs the pack carries.
gpu=.gpu
[[ "${FIRST_ONLY:-0}" == 1 ]] && gpu=$g/gpu
[ -d "$gpu/bin" ] || python3 -c 'import tarfile; tarfile.open(".gpu.tar.xz").extractall()'
export PYTHONUNBUFFERED=1
echo "== machine"
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader

echo "== 1. CUDA f32, unrolled vs loops, ${PATHS:=16777216} paths, median of ${REPS:=11}"
[[ "${FIRST_ONLY:-0}" == 1 ]] && tapes=""
for t in $tapes; do
  for m in price forward reverse; do
    echo "-- $t $m"
    python3 scripts/gpu/cuda_host.py "$g/k/${t}_${m}_unrolled.cu" "$g/k/${t}_${m}_loops.cu" \
      --paths "$PATHS" --reps "$REPS" --seed 7 2>&1 | tee -a "$out/throughput.txt"
  done
done

echo "== 2. first runs, empty cache, 1M paths"
. scripts/gpu/vulkan-env.sh
gpu_vulkan_env "$gpu"
n=$g/nablac
first() { # label, tape, run arguments...
  local label=$1 t=$2 s0 s1; shift 2
  NABLAC_CACHE_DIR=$(mktemp -d)
  export NABLAC_CACHE_DIR
  s0=$(date +%s.%N)
  "$n" run "$t" --json "$@" >"$out/$label.json" 2>"$out/$label.err"
  local rc=$?
  s1=$(date +%s.%N)
  echo "$label rc=$rc wall=$(python3 -c "print(round($s1 - $s0, 3))") s $(python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
t = j["timings"]
o = next(iter(j["outputs"].values()))
print("mode=%s load=%.3f run=%.3f value=%r spot=%r" % (j["mode"], t["load"], t["run"], o["value"], o["greeks"].get("spot")))' "$out/$label.json" 2>&1 | tail -n1)" | tee -a "$out/first-runs.txt"
}
for target in cuda opencl vulkan; do
  first "asian252-$target-unrolled" "$g/k/asian252.bin" --target "$target" --unroll --paths 1000000
  first "asian252-$target-default" "$g/k/asian252.bin" --target "$target" --paths 1000000
  first "asian10k-$target-default" "$g/k/asian10k.bin" --target "$target" --paths 1000000
done
s0=$(date +%s.%N)
"$n" "$g/k/asian100k.bin" --target cuda -o /tmp/asian100k.cu >"$out/asian100k.txt" 2>&1
echo "asian100k compile rc=$? wall=$(python3 -c "print(round($(date +%s.%N) - $s0, 3))") s $(stat -c %s /tmp/asian100k.cu 2>/dev/null) B" | tee -a "$out/first-runs.txt"
first "asian100k-cuda-default" "$g/k/asian100k.bin" --target cuda --paths 1000000
