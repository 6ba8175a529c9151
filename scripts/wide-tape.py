#!/usr/bin/env python3
"""A tape of N inputs and one output, y = sum of x_i * z (one normal draw z): its reverse kernel
has N Greeks, 2N + 3 per-path sums. For the size limits' measurements that grow with the sums
(compile.rs LLVM_MAX_SUMS; the colouring's cost, passes/colouring.rs):

    python3 scripts/wide-tape.py N > wide.ntape
    NABLAC_CACHE_DIR=off nablac run wide.ntape --target cpu --cpu-backend llvm --paths 1000 --json
    (timings.load; with the cache on, a second run links the cached object instead of compiling)

The same shape as colouring.rs's one_output_over_many_inputs_gives_each_its_own_direction.
"""
import sys

n = int(sys.argv[1])
w = sys.stdout.write
w("nablatape 1\n")
for i in range(n):
    w(f"%{i} = input x{i} 1.0\n")
w(f"%{n} = normal 0\n%{n + 1} = mul %0 %{n}\n")
acc, k = n + 1, n + 2
for i in range(1, n):
    w(f"%{k} = mul %{i} %{n}\n%{k + 1} = add %{acc} %{k}\n")
    acc, k = k + 1, k + 2
w(f"output y = %{acc}\n")
