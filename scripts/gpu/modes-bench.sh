#!/usr/bin/env bash
# Runs on the GPU machine after device-check.sh has unpacked .gpu: for each benchmark tape, the
# price, default reverse, plain reverse (`--segments 1`), reverse without launch bounds
# (`--min-blocks 0`), forward and auto (no --mode: what `--mode auto` chooses) kernels as nablac
# emits them for CUDA (f32), each timed by cuda_host.py (CUDA events, median of REPS launches of
# PATHS paths) in one run, so the throughputs are side by side. Writes $OUT/modes.txt: one line
# per (tape, kernel) with its ms; these are the measurements the auto-mode cost model is fitted on
# (scripts/fit-cost.py). TAPES (default: every benchmark tape) picks tapes by name; KERNELS picks
# kernels.
#
# The kernels come from .gpu/m when prepare.sh built them there (MODES=1: emitted and compiled to
# sm_90 cubins on the build machine, so no device time goes to NVRTC, which took 560 s for seven
# of them); otherwise they are emitted here and NVRTC compiles each on the device.
#   EMIT_ONLY=DIR modes-bench.sh   only writes the tapes, the kernels and DIR/index.txt (what
#                                  prepare.sh runs, with NABLAC=target/release/nablac)
set -uo pipefail
g=.gpu
n=${NABLAC:-$g/bin/nablac}
paths=${PATHS:-16777216}
reps=${REPS:-5}
all_kernels="price reverse reverse-plain reverse-mb0 forward auto"
kernels=${KERNELS:-$all_kernels}

# emit DIR: the benchmark tapes (their list lives in scripts/fit-cost.py, which fits the cost model
# on this script's output), each tape's kernels DIR/TAPE_KERNEL.cu, and DIR/index.txt, one line
# per tape: `TAPE NODES DIRECTIONS INPUTS`.
emit() {
  local w=$1 t tape dirs nodes
  mkdir -p "$w"
  NABLAC=$n python3 scripts/fit-cost.py --write-tapes "$w" >"$w/tapes.txt" || return 1
  : >"$w/index.txt"
  while read -r t tape; do
    [[ -n ${TAPES:-} && " $TAPES " != *" $t "* ]] && continue
    $n "$tape" --target cuda --mode price -o "$w/${t}_price.cu" >/dev/null
    $n "$tape" --target cuda --mode reverse -o "$w/${t}_reverse.cu" >/dev/null
    $n "$tape" --target cuda --mode reverse --segments 1 -o "$w/${t}_reverse-plain.cu" >/dev/null
    $n "$tape" --target cuda --mode reverse --min-blocks 0 -o "$w/${t}_reverse-mb0.cu" >/dev/null
    $n "$tape" --target cuda --mode forward -o "$w/${t}_forward.cu" >/dev/null
    $n "$tape" --target cuda -o "$w/${t}_auto.cu" >/dev/null
    dirs=$($n explain "$tape" --mode forward --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["directions"], j["inputs"])')
    nodes=$($n inspect "$tape" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"])')
    echo "$t $nodes $dirs" >>"$w/index.txt"
  done <"$w/tapes.txt"
}

if [[ -n ${EMIT_ONLY:-} ]]; then
  emit "$EMIT_ONLY"
  exit
fi

out=${OUT:-/tmp/nablac-gpu}
mkdir -p "$out"
if [[ -f $g/m/index.txt ]]; then
  w=$g/m
  built="kernels and cubins from prepare.sh (.gpu/m)"
else
  w=$(mktemp -d)
  emit "$w"
  built="kernels emitted and compiled (NVRTC) here"
fi
{
  echo "== f32 on cuda, $paths paths, median of $reps (cuda_host.py, CUDA events); $built; $(date -u)"
  while read -r t nodes dirs inputs; do
    [[ -n ${TAPES:-} && " $TAPES " != *" $t "* ]] && continue
    for k in $kernels; do
      [[ -f $w/${t}_$k.cu ]] || { echo "$t $k: not emitted" >&2; continue; }
      ms=$(python3 scripts/gpu/cuda_host.py "$w/${t}_$k.cu" --paths "$paths" --reps "$reps" 2>&1 | sed -n 's/.*| \([0-9.]*\) ms$/\1/p')
      echo "$t nodes=$nodes directions/inputs=$dirs $inputs $k ${ms:-failed} ms"
    done
  done <"$w/index.txt"
} | tee "$out/modes.txt"
