#!/usr/bin/env python3
"""The auto-mode cost model's weights (compiler/src/cost.rs), fitted on measured kernel times.

  fit-cost.py --write-tapes DIR             write the benchmark tapes (one place for the list)
  fit-cost.py --measure-cpu OUT.txt         time this machine's cpu kernels (one thread, f64)
  fit-cost.py --fit cuda MODES.txt          fit the GPU model on modes-bench.sh's lines
  fit-cost.py --fit cpu CPU.txt             fit the CPU model (files may be concatenated:
                                            each `==` line names its path count)

A measurement line is `TAPE ... KERNEL MS ms` (the format of scripts/gpu/modes-bench.sh). The
work of each kernel comes from `nablac explain TAPE --mode auto --target T --json`, whose
estimates list every candidate's counts; the fit is a non-negative least squares of time per
path on those counts, in relative error (each kernel weighs the same, short or long), and it
prints the weights as the Rust constant to paste, then each kernel's measured and estimated
time and whether the choice between forward and reverse agrees with the measurement.
Needs only python3 and a release nablac (NABLAC, default target/release/nablac).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

NABLAC = os.environ.get("NABLAC", "target/release/nablac")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The benchmark tapes: `nablac record` arguments, or a generator script.
TAPES = {
    "asian252": ["asian", "--steps", "252"],
    "asian64": ["asian", "--steps", "64"],
    "barrier252": ["barrier", "--steps", "252"],
    "basket8": ["basket", "--assets", "8", "--steps", "16"],
    "european": ["european"],
    "buckets": "scripts/bucketed-asian.py --steps 252 --buckets 12",
    "buckets24": "scripts/bucketed-asian.py --steps 252 --buckets 24",
    "buckets36": "scripts/bucketed-asian.py --steps 252 --buckets 36",
    "buckets52": "scripts/bucketed-asian.py --steps 252 --buckets 52",
    # User-style tapes (issue 26, point 7): the model must hold on them too.
    "barrier-basket": "scripts/user-tapes.py barrier-basket",
    "autocallable": "scripts/user-tapes.py autocallable",
}
# Candidates whose measured times are within this fraction of each other are a tie: either
# choice costs at most that much, so the fit does not bend to order them.
TIE = 0.05
# Every estimate must be within this fraction of its measured time (issue 26, point 7).
WITHIN = 0.30
FEATURES = ["paths", "draws", "ops", "heavy", "tangent_ops", "tangent_multiplies", "adjoint_ops", "leaves", "pressure", "spill_traffic"]


# The CostModel field that prices each feature.
FIELDS = ["path", "draw", "op", "heavy", "tangent_op", "tangent_multiply", "adjoint_op", "leaf", "pressure", "spill_access"]


def feature(work, f):
    if f == "paths":
        return 1  # the per-path cost of the kernel's loop, whatever the tape
    if f == "pressure":
        return work["register_live"] * (work["draws"] + work["ops"]) / 256
    return work[f]


def write_tapes(d, names=None):
    os.makedirs(d, exist_ok=True)
    paths = {}
    for name, how in TAPES.items():
        if names and name not in names:
            continue
        if isinstance(how, str):
            path = os.path.join(d, name + ".ntape")
            with open(path, "w") as f:
                subprocess.run([sys.executable] + [os.path.join(ROOT, how.split()[0])] + how.split()[1:],
                               stdout=f, check=True)
        else:
            path = os.path.join(d, name + ".bin")
            subprocess.run([NABLAC, "record", *how, "-o", path], check=True, stdout=subprocess.DEVNULL)
        paths[name] = path
    return paths


def estimates(tape, target):
    out = subprocess.run([NABLAC, "explain", tape, "--mode", "auto", "--target", target, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return {e["kernel"]: e for e in json.loads(out)["estimates"]}


def cpu_seconds(args):
    """User + system CPU seconds of one child run (robust to other work on the machine)."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure_cpu(out, paths_per_run):
    """Per kernel, `nablac run --threads 1 --json`'s timings.run (the run alone: compiling and
    the JIT are `load`), best of 3, at `paths_per_run` paths. Run it on a quiet machine."""
    d = tempfile.mkdtemp()
    with open(out, "w") as f:
        f.write(f"== f64 on cpu (the default CPU back end), one thread, {paths_per_run} paths: "
                f"timings.run of `nablac run --threads 1 --json`, best of 3\n")
        for name, tape in write_tapes(d).items():
            for kernel in ["price", "reverse", "forward"]:
                args = [NABLAC, "run", tape, "--target", "cpu", "--mode", kernel, "--threads", "1",
                        "--paths", str(paths_per_run), "--json"]
                best = min(json.loads(subprocess.run(args, check=True, capture_output=True,
                                                     text=True).stdout)["timings"]["run"]
                           for _ in range(3))
                line = f"{name} paths={paths_per_run} {kernel} {best * 1e3:.3f} ms"
                print(line, flush=True)
                f.write(line + "\n")


def read(path):
    rows, paths = [], 16777216
    for line in open(path):
        m = re.search(r"(\d+) paths", line)
        if line.startswith("==") and m:
            paths = int(m.group(1))
        m = re.match(r"(\S+) .*?(\S+) ([0-9.]+) ms$", line.strip())
        if m and not line.startswith("=="):
            rows.append((m.group(1), m.group(2), float(m.group(3)), paths))
    return rows


def solve(a, b):
    """Least squares by the normal equations (the systems here are 5 x 5)."""
    n = len(a[0])
    m = [[sum(r[i] * r[j] for r in a) for j in range(n)] + [sum(r[i] * y for r, y in zip(a, b))] for i in range(n)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        if abs(m[c][c]) < 1e-300:
            return None
        for r in range(n):
            if r != c:
                k = m[r][c] / m[c][c]
                m[r] = [x - k * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def nnls(a, b):
    """Active set: drop the most negative weight and solve again until none is negative."""
    active = list(range(len(a[0])))
    while active:
        w = solve([[r[i] for i in active] for r in a], b)
        if w is None:
            active.pop()
            continue
        worst = min(range(len(w)), key=lambda i: w[i])
        if w[worst] >= 0:
            full = [0.0] * len(a[0])
            for i, x in zip(active, w):
                full[i] = x
            return full
        active.pop(worst)
    return [0.0] * len(a[0])


def fit(target, path):
    rows = read(path)
    d = tempfile.mkdtemp()
    tapes = write_tapes(d, {r[0] for r in rows})
    est = {name: estimates(tape, target) for name, tape in tapes.items()}
    a, b, keep = [], [], []
    for tape, kernel, ms, paths in rows:
        e = est.get(tape, {}).get(kernel)
        if e is None:
            continue
        ns = ms * 1e6 / paths
        a.append([feature(e["work"], f) / ns for f in FEATURES])
        b.append(1.0)
        keep.append((tape, kernel, ns, e))
    # The choice rests on differences: one more row per pair of candidates of a tape, the
    # difference of their counts against the difference of their times (in relative terms).
    # A near-tie is scaled by TIE of the faster time, not by its own tiny difference: divided
    # by a 7 ns gap, one such row outweighed all the others and zeroed the tangent weights
    # (the 2026-12-07 refit that missed the 52-bucket forward kernel by 42%).
    cands = {}
    for tape, kernel, ns, e in keep:
        if kernel != "price":
            cands.setdefault(tape, []).append((ns, [feature(e["work"], f) for f in FEATURES]))
    for rows_t in cands.values():
        for i in range(len(rows_t)):
            for j in range(i + 1, len(rows_t)):
                (ti, fi), (tj, fj) = rows_t[i], rows_t[j]
                scale = max(abs(ti - tj), TIE * min(ti, tj))
                if scale > 0:
                    a.append([(x - y) / scale for x, y in zip(fi, fj)])
                    b.append((ti - tj) / scale)
    w = nnls(a, b)
    print("weights (ns per path per unit), the fields of compiler/src/cost.rs's CostModel:")
    for f, x in zip(FIELDS, w):
        print(f"    {f}: {x:.4e},")
    print(f"{'tape':<15} {'kernel':<14} {'measured':>9} {'estimated':>9}  ns/path")
    by_tape, bad = {}, 0
    for tape, kernel, ns, e in keep:
        guess = sum(x * feature(e["work"], f) for f, x in zip(FEATURES, w))
        off = guess / ns - 1
        far = abs(off) > WITHIN
        bad += far
        print(f"{tape:<15} {kernel:<14} {ns:9.3f} {guess:9.3f}  {off:+6.1%}{'  <-- OFF' if far else ''}")
        by_tape.setdefault(tape, {}).setdefault(kernel, []).append((ns, guess))
    worst = max(abs(g / ns - 1) for k in by_tape.values() for v in k.values() for ns, g in v)
    print(f"largest error {worst:.1%} (limit {WITHIN:.0%})")
    for tape, k in by_tape.items():
        # A kernel measured more than once (files concatenated): the mean of its times.
        cands = {n: (sum(x[0] for x in v) / len(v), v[0][1]) for n, v in k.items() if n != "price"}
        if len(cands) < 2:
            continue
        measured = min(cands, key=lambda n: cands[n][0])
        chosen = min(cands, key=lambda n: cands[n][1])
        loss = cands[chosen][0] / cands[measured][0] - 1
        note = "" if chosen == measured else f"  (a tie: costs {loss:.1%})" if loss <= TIE else "  <-- MISMATCH"
        bad += chosen != measured and loss > TIE
        print(f"{tape}: fastest measured {measured}, model chooses {chosen}{note}")
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write-tapes", metavar="DIR")
    p.add_argument("--measure-cpu", metavar="OUT")
    p.add_argument("--paths", type=int, default=20000)
    p.add_argument("--fit", nargs=2, metavar=("TARGET", "FILE"))
    a = p.parse_args()
    if a.write_tapes:
        for name, path in write_tapes(a.write_tapes).items():
            print(name, path)
    if a.measure_cpu:
        measure_cpu(a.measure_cpu, a.paths)
    if a.fit:
        sys.exit(1 if fit(*a.fit) else 0)


if __name__ == "__main__":
    main()
