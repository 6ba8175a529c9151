#!/usr/bin/env bash
# Why GLSL kernels pass exp arguments through opq (Dialect::opaque_exp_argument): for the
# corpus tapes with exps, the plain and 2-segment GLSL kernels as nablac emits them, then the
# same with every exp(opq(x, pc.zero)) turned back into exp(x), then that with each divisor
# made opaque instead; each pair run on the Vulkan device (200k paths, seed 7) and its JSON
# compared byte for byte. On the H200 (BENCHMARKS.md, 2026-12-03) only the barrier without the
# wrapper differed, whatever the divisors; on lavapipe every pair is equal.
#
#   vulkan-exp-check.sh [NABLAC]     (default target/release/nablac; device-check.sh passes
#                                     .gpu/bin/nablac and the Vulkan environment)
set -uo pipefail
cd "$(dirname "$0")/../.."
n=${1:-target/release/nablac}
w=$(mktemp -d)
unwrap='s/exp(opq(\([^,]*\), pc\.zero))/exp(\1)/g'
opaque_divisor='s|^\(.*[^/]\) / \(v[0-9]*\);$|\1 / opq(\2, pc.zero);|'
for t in barrier basket3; do
  for s in 1 2; do
    if [ "$s" = 1 ]; then o=(--segments 1); else o=(--checkpoint registers --segments 2); fi
    "$n" "tests/in/$t.ntape" --target glsl -o "$w/${t}_s$s.comp" "${o[@]}" 2>/dev/null || exit 1
    sed "$unwrap" "$w/${t}_s$s.comp" >"$w/${t}_s${s}_bare.comp"
    sed "$opaque_divisor" "$w/${t}_s${s}_bare.comp" >"$w/${t}_s${s}_bare_div.comp"
    for v in bare bare_div; do cp "$w/${t}_s$s.comp.json" "$w/${t}_s${s}_$v.comp.json"; done
  done
  for v in "" _bare _bare_div; do
    for s in 1 2; do
      "$n" run "$w/${t}_s$s$v.comp" --paths 200000 --seed 7 --json >"$w/$t$s$v.json" 2>"$w/err" ||
        { echo "$t s$s$v: $(tail -n 1 "$w/err")"; continue 2; }
    done
    if cmp -s "$w/${t}1$v.json" "$w/${t}2$v.json"; then r="plain == 2 segments"; else r="plain != 2 segments"; fi
    echo "$t ${v:-_as_emitted}: $r"
  done
done
rm -rf "$w"
