#!/usr/bin/env bash
# Runs on the GPU machine after device-check.sh has unpacked .gpu: the 252-step Asian's price,
# default reverse (checkpointed) and forward kernels as nablac emits them for CUDA, each timed by
# cuda_host.py (CUDA events, median of REPS launches of PATHS paths) in one run, so the three
# throughputs are side by side. Writes $OUT/modes.txt.
set -uo pipefail
out=${OUT:-/tmp/nablac-gpu}
mkdir -p "$out"
g=.gpu
n=$g/bin/nablac
paths=${PATHS:-16777216}
reps=${REPS:-5}
w=$(mktemp -d)
[ -f "$g/k/asian252.bin" ] || { mkdir -p "$g/k"; $n record asian --steps 252 -o "$g/k/asian252.bin" >/dev/null; }
$n "$g/k/asian252.bin" --target cuda --mode price -o "$w/price.cu" >/dev/null
$n "$g/k/asian252.bin" --target cuda -o "$w/reverse.cu" >/dev/null
$n "$g/k/asian252.bin" --target cuda --mode forward -o "$w/forward.cu" >/dev/null
{
  echo "== asian252 f32 on cuda, $paths paths, median of $reps (cuda_host.py, CUDA events); $(date -u)"
  for k in price reverse forward; do
    echo "-- $k ($(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['entry_point'])" "$w/$k.cu.json"))"
    python3 scripts/gpu/cuda_host.py "$w/$k.cu" --paths "$paths" --reps "$reps" 2>&1
  done
} | tee "$out/modes.txt"
