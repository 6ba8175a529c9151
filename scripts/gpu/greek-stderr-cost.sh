#!/usr/bin/env bash
# Runs on the GPU machine with .gpu.tar.xz (scripts/gpu/prepare.sh) carried: what the Greeks'
# sums of squares (--greek-stderr, issue 12 point 2) cost on the 252-step Asian, CUDA f32, 16M
# paths, reverse and forward: `nablac run --json` timings.device, one warm-up each, then 5 runs
# of each setting interleaved, medians compared. Writes $OUT/gs.txt.
set -u
python3 -c 'import tarfile; tarfile.open(".gpu.tar.xz").extractall()'
n=.gpu/bin/nablac
$n record asian --steps 252 -o /tmp/a.bin >/dev/null 2>&1
echo "== greek-stderr cost, asian252 cuda f32 16M paths, timings.device, 5 reps each, interleaved; $(date -u)"
for mode in reverse forward; do
  for gs in true false; do $n run /tmp/a.bin --target cuda --mode $mode --greek-stderr $gs --paths 16777216 --json >/dev/null; done
  for rep in 1 2 3 4 5; do
    for gs in true false; do
      t=$($n run /tmp/a.bin --target cuda --mode $mode --greek-stderr $gs --paths 16777216 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["timings"]["device"])')
      echo "$mode greek_stderr=$gs $t"
    done
  done
done | tee $OUT/gs.txt
python3 - $OUT/gs.txt <<'PY'
import sys, statistics, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    p = l.split()
    if len(p) == 3: d[(p[0], p[1])].append(float(p[2]))
for mode in ("reverse", "forward"):
    a = statistics.median(d[(mode, "greek_stderr=true")]); b = statistics.median(d[(mode, "greek_stderr=false")])
    print(f"{mode}: with squares {a*1e3:.3f} ms, without {b*1e3:.3f} ms, cost {100*(a/b-1):+.2f}%")
PY
