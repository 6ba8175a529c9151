#!/usr/bin/env bash
# Runs on the GPU machine after device-check.sh has unpacked .gpu: for each benchmark tape, the
# price, default reverse, plain reverse (`--segments 1`), forward and auto (no --mode: what
# `--mode auto` chooses) kernels as nablac emits them for CUDA (f32), each timed by cuda_host.py (CUDA events, median of REPS launches of PATHS paths)
# in one run, so the throughputs are side by side. Writes $OUT/modes.txt: one line per
# (tape, kernel) with its ms; these are the measurements the auto-mode cost model is fitted on
# (scripts/fit-cost.py). TAPES (default: every benchmark tape) picks tapes by name; KERNELS picks kernels.
set -uo pipefail
out=${OUT:-/tmp/nablac-gpu}
mkdir -p "$out"
g=.gpu
n=$g/bin/nablac
paths=${PATHS:-16777216}
reps=${REPS:-5}
w=$(mktemp -d)
# The benchmark tapes (their list lives in scripts/fit-cost.py, which fits the cost model on
# this script's output).
NABLAC=$n python3 scripts/fit-cost.py --write-tapes "$w" >"$w/tapes.txt"
tapes=${TAPES:-$(cut -d' ' -f1 "$w/tapes.txt" | tr '\n' ' ')}
kernels=${KERNELS:-price reverse reverse-plain forward auto}
{
  echo "== f32 on cuda, $paths paths, median of $reps (cuda_host.py, CUDA events); $(date -u)"
  for t in $tapes; do
    tape=$(awk -v t="$t" '$1 == t {print $2}' "$w/tapes.txt")
    [[ -n $tape ]] || { echo "$t: no such benchmark tape" >&2; continue; }
    $n "$tape" --target cuda --mode price -o "$w/${t}_price.cu" >/dev/null
    $n "$tape" --target cuda --mode reverse -o "$w/${t}_reverse.cu" >/dev/null
    $n "$tape" --target cuda --mode reverse --segments 1 -o "$w/${t}_reverse-plain.cu" >/dev/null
    $n "$tape" --target cuda --mode forward -o "$w/${t}_forward.cu" >/dev/null
    $n "$tape" --target cuda -o "$w/${t}_auto.cu" >/dev/null
    dirs=$($n explain "$tape" --mode forward --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["directions"], j["inputs"])')
    nodes=$($n inspect "$tape" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"])')
    for k in $kernels; do
      ms=$(python3 scripts/gpu/cuda_host.py "$w/${t}_$k.cu" --paths "$paths" --reps "$reps" 2>&1 | sed -n 's/.*| \([0-9.]*\) ms$/\1/p')
      echo "$t nodes=$nodes directions/inputs=$dirs $k ${ms:-failed} ms"
    done
  done
} | tee "$out/modes.txt"
