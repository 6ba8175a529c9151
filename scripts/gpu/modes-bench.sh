#!/usr/bin/env bash
# Runs on the GPU machine after device-check.sh has unpacked .gpu: for each benchmark tape, the
# price, default reverse and forward kernels as nablac emits them for CUDA (f32), each timed by
# cuda_host.py (CUDA events, median of REPS launches of PATHS paths) in one run, so the three
# throughputs are side by side. Writes $OUT/modes.txt: one line per (tape, mode) with its ms.
# TAPES (default: all below) picks tapes by name.
set -uo pipefail
out=${OUT:-/tmp/nablac-gpu}
mkdir -p "$out"
g=.gpu
n=$g/bin/nablac
paths=${PATHS:-16777216}
reps=${REPS:-5}
w=$(mktemp -d)
declare -A record=(
  [asian252]="asian --steps 252"
  [asian64]="asian --steps 64"
  [barrier252]="barrier --steps 252"
  [basket8]="basket --assets 8 --steps 16"
  [european]="european"
)
tapes=${TAPES:-asian252 asian64 barrier252 basket8 european}
{
  echo "== f32 on cuda, $paths paths, median of $reps (cuda_host.py, CUDA events); $(date -u)"
  for t in $tapes; do
    # shellcheck disable=SC2086
    $n record ${record[$t]} -o "$w/$t.bin" >/dev/null || continue
    $n "$w/$t.bin" --target cuda --mode price -o "$w/${t}_price.cu" >/dev/null
    $n "$w/$t.bin" --target cuda -o "$w/${t}_reverse.cu" >/dev/null
    $n "$w/$t.bin" --target cuda --mode forward -o "$w/${t}_forward.cu" >/dev/null
    dirs=$($n explain "$w/$t.bin" --mode forward --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["directions"], j["inputs"])')
    nodes=$($n inspect "$w/$t.bin" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"])')
    for k in price reverse forward; do
      ms=$(python3 scripts/gpu/cuda_host.py "$w/${t}_$k.cu" --paths "$paths" --reps "$reps" 2>&1 | sed -n 's/.*| \([0-9.]*\) ms$/\1/p')
      echo "$t nodes=$nodes directions/inputs=$dirs $k ${ms:-failed} ms"
    done
  done
} | tee "$out/modes.txt"
