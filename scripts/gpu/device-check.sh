#!/usr/bin/env bash
# Run on the GPU machine (the device tool), from the repo root, with emitted kernels in $1
# (default .gpu/k; scripts/gpu/emit-kernels makes them). Prints ptxas resource reports and runs
# the kernels through cuda_host.py: bit-identity (plain vs checkpointed, run vs run) and times.
set -uo pipefail
k=${1:-.gpu/k}
paths=${PATHS:-1000000}
reps=${REPS:-5}
out=${OUT:-/tmp}
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1
python3 -c 'import cupy; print("cupy", cupy.__version__)'

echo "== ptxas -v at sm_90 (registers, spills) =="
for f in "$k"/asian252_*_f32.cu "$k"/asian252_*_f64.cu; do
  r=$(nvcc -arch=sm_90 -cubin --fmad=false -Xptxas -v -o /tmp/x.cubin "$f" 2>&1 | grep -E "registers|spill" | tr '\n' ' ' | sed 's/ptxas info    ://g')
  printf '%-28s %s\n' "$(basename "$f" .cu)" "$r"
done | tee "$out/ptxas.txt"

echo "== Asian 252 f32, reverse: plain vs checkpointed (bit-identity and time, $paths paths) =="
python3 scripts/gpu/cuda_host.py $k/asian252_plain_f32.cu $k/asian252_reg16_f32.cu $k/asian252_reg2_f32.cu \
  $k/asian252_reg4_f32.cu $k/asian252_reg8_f32.cu $k/asian252_reg32_f32.cu \
  $k/asian252_scr24_f32.cu $k/asian252_scr48_f32.cu $k/asian252_scr100_f32.cu $k/asian252_scr200_f32.cu \
  $k/asian252_scr400_f32.cu $k/asian252_scr800_f32.cu $k/asian252_scr200aos_f32.cu \
  --paths $paths --reps $reps --json "$out/asian252_f32.json"
echo "== Asian 252 f64 =="
python3 scripts/gpu/cuda_host.py $k/asian252_plain_f64.cu $k/asian252_reg16_f64.cu --paths $paths --reps $reps --json "$out/asian252_f64.json"
echo "== Asian 252 price =="
python3 scripts/gpu/cuda_host.py $k/asian252_price_f32.cu --paths $paths --reps $reps
python3 scripts/gpu/cuda_host.py $k/asian252_price_f64.cu --paths $paths --reps $reps
echo "== corpus: plain vs register vs scratch checkpointing, both precisions =="
for c in asian8 barrier basket3 european random; do
  for p in f32 f64; do
    python3 scripts/gpu/cuda_host.py $k/${c}_plain_$p.cu $k/${c}_reg2_$p.cu $k/${c}_scr2_$p.cu --paths 100000 --json "$out/${c}_$p.json" || echo "MISMATCH in $c $p"
  done
done
