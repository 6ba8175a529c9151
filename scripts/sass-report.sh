#!/usr/bin/env bash
# SASS report of a CUDA kernel, no GPU needed:
#   KERNEL.cu  --NVRTC (compute_SM)-->  PTX  --ptxas -arch=sm_SM -v -o-->  cubin  --nvdisasm-->  SASS
# and prints, per function: ptxas's resource line, the instruction count, local loads (LDL) and
# stores (STL, i.e. spills and local arrays), and the most frequent opcodes.
#
# usage: scripts/sass-report.sh KERNEL.cu|KERNEL.ptx [SM=90] [--fmad=false ...NVRTC options]
#   SASS_DUMP=file   also write the full disassembly there
# Needs: python3, and the tools from `NABLAC_SASS_TOOLS=1 scripts/install-test-deps.sh`
# (found through .tools/env.sh, which this script sources when present).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ -f "$ROOT/.tools/env.sh" ]] && . "$ROOT/.tools/env.sh"

src=${1:?usage: $0 KERNEL.cu|KERNEL.ptx [SM] [NVRTC options...]}
sm=${2:-90}
shift $(($# >= 2 ? 2 : 1))
for v in NABLAC_PTXAS NABLAC_NVDISASM; do
  [[ -n "${!v:-}" && -x "${!v}" ]] || { echo "error: $v not set or not executable; run NABLAC_SASS_TOOLS=1 scripts/install-test-deps.sh" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

case "$src" in
  *.ptx) cp "$src" "$work/k.ptx" ;;
  *)
    [[ -n "${NABLAC_NVRTC:-}" ]] || { echo "error: NABLAC_NVRTC not set; run scripts/install-test-deps.sh" >&2; exit 2; }
    python3 "$ROOT/scripts/nvrtc-ptx.py" "$NABLAC_NVRTC" "$src" "$work/k.ptx" "--gpu-architecture=compute_$sm" "$@"
    ;;
esac

"$NABLAC_PTXAS" -arch="sm_$sm" -v -o "$work/k.cubin" "$work/k.ptx" 2>&1 | sed 's/^/  /' >"$work/ptxas.log"
# nvdisasm 13 warns that ptxas 12 cubins use the old ELF layout, then disassembles them fine.
"$NABLAC_NVDISASM" -c "$work/k.cubin" >"$work/k.sass" 2>"$work/nvdisasm.log" || { cat "$work/nvdisasm.log" >&2; exit 1; }
[[ -n "${SASS_DUMP:-}" ]] && cp "$work/k.sass" "$SASS_DUMP"

echo "== ptxas -arch=sm_$sm -v"
cat "$work/ptxas.log"
echo "== SASS (nvdisasm $("$NABLAC_NVDISASM" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
# nvdisasm -c prints `.text.NAME:` before each function and `/*0010*/  [@P0] OPCODE.MODS ...;` per
# instruction. Opcode = first word after the address and the optional predicate.
awk '
  /^\.text\./ { fn = $1; sub(/^\.text\./, "", fn); sub(/:$/, "", fn); if (!(fn in seen)) { seen[fn] = 1; order[++nf] = fn } next }
  /^[ \t]*\/\*[0-9a-f]+\*\/[ \t]/ {
    line = $0; sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]+/, "", line); sub(/^\{[ \t]*/, "", line)
    n = split(line, w, /[ \t]+/); op = w[1]; if (op ~ /^@/) op = w[2]
    sub(/;$/, "", op); base = op; sub(/\..*/, "", base)
    if (base == "") next
    total[fn]++; count[fn, base]++
    if (base == "LDL") ldl[fn]++
    if (base == "STL") stl[fn]++
  }
  END {
    for (i = 1; i <= nf; i++) {
      f = order[i]
      printf "%s: %d instructions, %d LDL (local loads), %d STL (local stores)\n", f, total[f], ldl[f] + 0, stl[f] + 0
      m = 0
      for (k in count) { split(k, kk, SUBSEP); if (kk[1] == f) { ops[++m] = sprintf("%07d %s", count[k], kk[2]) } }
      # top 12 opcodes by count (simple selection sort; m is small)
      for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (ops[b] > ops[a]) { t = ops[a]; ops[a] = ops[b]; ops[b] = t }
      line = "  top:"
      for (a = 1; a <= m && a <= 12; a++) { split(ops[a], p, " "); line = line sprintf(" %s=%d", p[2], p[1] + 0) }
      print line
      delete ops
    }
  }' "$work/k.sass"
