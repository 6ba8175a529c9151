#!/usr/bin/env python3
"""A long dependency chain as a text tape, for the size limits' measurements (compile.rs
LLVM_MAX_NODES, runtime/src/cpu.rs SINGLE_PASS_INSTS, budget.rs STATEMENT_BUDGET):

    python3 scripts/chain-tape.py NODES [OUTPUTS] > chain.ntape

x * c + c, * c, + c, ... over NODES nodes (one input x, one constant c = 1.0000001), its last
node the output y; OUTPUTS more outputs z0, z1, ... at the nodes before it (default 0). The same
shape as cli/tests/cli.rs's chain_tape. Timed with `/usr/bin/time nablac run chain.ntape
--paths 100` (BENCHMARKS.md, 2026-12-04 afternoon, size limits).
"""
import sys

n = int(sys.argv[1])
outputs = int(sys.argv[2]) if len(sys.argv) > 2 else 0
w = sys.stdout.write
w("nablatape 1\n%0 = input x 1.0\n%1 = const 1.0000001\n%2 = mul %0 %1\n")
for i in range(3, n):
    w(f"%{i} = {'mul' if i % 2 == 0 else 'add'} %{i - 1} %1\n")
w(f"output y = %{n - 1}\n")
for k in range(outputs):
    w(f"output z{k} = %{n - 2 - k}\n")
