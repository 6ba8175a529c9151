#!/usr/bin/env bash
# Builds the sm_90 cubin of an emitted CUDA kernel here, with no GPU: NVRTC (compute_90, the
# manifest's compile options) then ptxas, as the runtime would on the device:
#
#   bash scripts/gpu/cubin.sh K.cu    (K.cu.json beside it; NABLAC_NVRTC and NABLAC_PTXAS set,
#                                      as .tools/env.sh sets them)
#
# Writes K.cubin, K.ptxas.txt (ptxas -v) and K.nvrtc.log, and prints one line:
# `K: SIZE B, nvrtc S s, ptxas S s, <registers and spills>`.
set -euo pipefail
cu=$1 base=${1%.cu}
opts=$(python3 -c 'import json, sys; print(" ".join(json.load(open(sys.argv[1]))["compile_options"]))' "$cu.json")
t0=$(date +%s.%N)
# shellcheck disable=SC2086
if ! python3 scripts/nvrtc-ptx.py "$NABLAC_NVRTC" "$cu" "$base.ptx" --gpu-architecture=compute_90 $opts 2>"$base.nvrtc.log"; then
  cat "$base.nvrtc.log" >&2
  exit 1
fi
t1=$(date +%s.%N)
"$NABLAC_PTXAS" -arch=sm_90 -v -o "$base.cubin" "$base.ptx" 2>"$base.ptxas.txt"
t2=$(date +%s.%N)
rm -f "$base.ptx"
printf '%s: %s B, nvrtc %.2f s, ptxas %.2f s, %s\n' "$(basename "$base")" "$(stat -c %s "$cu")" \
  "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" \
  "$(grep -E 'registers|spill' "$base.ptxas.txt" | sed 's/ptxas info *: //' | tr -s ' \n' ' ')"
