#!/usr/bin/env bash
# Runs on the GPU machine after device-check.sh has unpacked .gpu (or after unpacking it
# yourself): fused ladders against single launches, through `nablac run --target cuda`, f32, the
# 252-step Asian, PATHS paths per market. For each ladder it runs the same markets with the
# kernel fused M at a time (--markets M, M = every count from 1 to the ladder's length) and
# with the rule's choice (no --markets), REPS times each, in one run so the times are side by
# side; the time is `timings.device` (the launches, submission to completion, shift runs
# included) and the median is kept. Each fused run's outputs are compared, bit for bit, with
# the one-market kernel's (--markets 1: one launch per market). Writes $OUT/ladder.txt and
# $OUT/ladder-*.json (the last rep of each).
#   - price: a 7-market spot ladder, --mode price
#   - greeks: a 4-market spot ladder, the default mode (value + 5 Greeks)
set -uo pipefail
out=${OUT:-/tmp/nablac-gpu}
mkdir -p "$out"
n=${NABLAC:-.gpu/bin/nablac}
paths=${PATHS:-16777216}
reps=${REPS:-3}
w=$(mktemp -d)
$n record asian --steps 252 -o "$w/asian.bin"
device_s() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timings"]["device"])' "$1"; }
median() { python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
same_bits() { python3 -c 'import json,sys
a, b = (json.load(open(p))["markets"] for p in sys.argv[1:3])
print("bits==single" if [m["outputs"] for m in a] == [m["outputs"] for m in b] else "BITS DIFFER")' "$1" "$2"; }
run() { # name, ladder, count, markets ("" = the rule), mode options...
  local name=$1 ladder=$2 m=$3; shift 3
  local f="$out/ladder-$name-m${m:-rule}.json" ts=()
  for _ in $(seq "$reps"); do
    $n run "$w/asian.bin" --target cuda --precision f32 --paths "$paths" --seed 42 \
      --ladder "$ladder" ${m:+--markets "$m"} --json "$@" >"$f" || { echo "$name M=${m:-rule}: failed"; return; }
    ts+=("$(device_s "$f")")
  done
  local fused
  fused=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["fused_markets"])' "$f")
  local t
  t=$(median "${ts[@]}")
  echo "$name ladder $ladder M=${m:-rule($fused)} device ${t} s (reps: ${ts[*]}) $(same_bits "$f" "$out/ladder-$name-m1.json")"
}
{
  echo "== nablac run --target cuda --precision f32, 252-step Asian, $paths paths per market, median of $reps; $(date -u)"
  for m in 1 2 3 4 5 6 7 ""; do run price spot=80:120:7 "$m" --mode price; done
  for m in 1 2 3 4 ""; do run greeks spot=90:110:4 "$m"; done
} | tee "$out/ladder.txt"
# Speed-ups of the fused kernels against one launch per market, from the lines above.
python3 - "$out/ladder.txt" <<'EOF' | tee -a "$out/ladder.txt"
import re, sys
t = {}
for l in open(sys.argv[1]):
    m = re.match(r"(\w+) ladder \S+ M=(\S+) device (\S+) s", l)
    if m:
        t[(m[1], m[2])] = float(m[3])
for name in ("price", "greeks"):
    one = t.get((name, "1"))
    for (k, mm), v in sorted(t.items()):
        if k == name and one and v > 0:
            print(f"{name} M={mm}: {one / v:.2f}x faster than one launch per market")
EOF
