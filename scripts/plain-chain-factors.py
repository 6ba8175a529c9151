#!/usr/bin/env python3
"""A CUDA kernel with its chain factors made plain IEEE operations, to price the strong zero.

    plain-chain-factors.py KERNEL.cu OUT.cu

nablac's derivative products are `chain_mul`, `chain_div` and `chain_fma` (compiler/src/ops.rs,
`Expr::Chain`: 0 when a factor is 0). OUT.cu redefines the three as `x * y`, `x / y` and
`fma(x, y, z)`, which is the kernel without the strong zero; KERNEL.cu.json is copied to
OUT.cu.json. On ordinary paths both give the same bits (scripts/gpu/cuda_host.py checks it when
given both), so the two time the guard alone. BENCHMARKS.md, 2026-12-07, uses it.
"""
import re
import shutil
import sys

src, out = sys.argv[1], sys.argv[2]
text = open(src).read()
plain = {
    "chain_mul": "return x * y;",
    "chain_div": "return x / y;",
    "chain_fma": "return {fma}(x, y, z);",
}
count = 0
for name, body in plain.items():
    pattern = re.compile(r"^(.*\b(float|double) %s\([^)]*\)) \{.*\}$" % name, re.M)
    m = pattern.search(text)
    if not m:
        sys.exit(f"{src}: no definition of {name}")
    fma = "fmaf" if m.group(2) == "float" else "fma"
    text = text[: m.start()] + m.group(1) + " { " + body.format(fma=fma) + " }" + text[m.end():]
    count += 1
open(out, "w").write(text)
shutil.copy(src + ".json", out + ".json")
print(f"wrote {out}: {count} chain factors made plain")
