"""The Python package on the GPU machine (issue 28): run by scripts/gpu/python-check.sh there,
with the wheel built here installed. Prints one line per check and exits non-zero on a failure.

- every GPU target: the European's price and Greeks against Black-Scholes (within 4 s.e.);
- cuda: a fused ladder from an array, each market with the bits of a run at that market alone;
- cuda: the README's basket payoff recorded from Python, priced with its Greeks;
- nablac.jax on cuda: jax.vmap over markets is one ladder run with the runs' bits.
"""
import math
import sys
import time

import numpy as np

import nablac

failed = []


def check(what, ok, detail=""):
    print("%s %s %s" % ("ok  " if ok else "FAIL", what, detail), flush=True)
    if not ok:
        failed.append(what)


def ncdf(x):
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def black_scholes(s, k, v, r, t):
    d1 = (math.log(s / k) + (r + 0.5 * v * v) * t) / (v * math.sqrt(t))
    d2 = d1 - v * math.sqrt(t)
    price = s * ncdf(d1) - k * math.exp(-r * t) * ncdf(d2)
    delta = ncdf(d1)
    vega = s * math.sqrt(t) * math.exp(-0.5 * d1 * d1) / math.sqrt(2.0 * math.pi)
    return price, delta, vega


PATHS = 1 << 22
t = nablac.product("european")
bs = black_scholes(100.0, 100.0, 0.2, 0.03, 1.0)
for target in ("cuda", "opencl", "vulkan"):
    try:
        s0 = time.time()
        r = nablac.run(t, target=target, paths=PATHS, seed=7, mode="reverse")
        wall = time.time() - s0
    except nablac.Error as e:
        check("%s european" % target, False, str(e))
        continue
    se = r.stderr
    gse = r.greek_stderr
    ok = (abs(r.value - bs[0]) <= 4 * se
          and abs(r.greeks["spot"] - bs[1]) <= 4 * gse["spot"]
          and abs(r.greeks["vol"] - bs[2]) <= 4 * gse["vol"])
    check("%s european vs Black-Scholes" % target, ok,
          "(%s, %s; %.2f s wall, load %.3f s): value %.6f +- %.6f (BS %.6f), delta %.6f (BS %.6f), "
          "vega %.5f (BS %.5f)" % (r.device, r.precision, wall, r.timings["load"], r.value, se,
                                    bs[0], r.greeks["spot"], bs[1], r.greeks["vol"], bs[2]))

# A fused ladder on cuda: every market's bits are those of a run at that market alone.
spots = np.linspace(80.0, 120.0, 8)
lad = nablac.run(t, target="cuda", paths=PATHS, seed=7, mode="reverse",
                 market={"spot": spots}, markets=8)
same = True
for k, s in enumerate(spots):
    one = nablac.run(t, target="cuda", paths=PATHS, seed=7, mode="reverse", market={"spot": s})
    same &= lad.value[k] == one.value and all(lad.greeks[i][k] == g for i, g in one.greeks.items())
check("cuda ladder of 8 fused markets == 8 single runs, bit for bit", same and lad.fused_markets == 8,
      "(fused %d, values %s)" % (lad.fused_markets, np.round(lad.value, 4).tolist()))

# The README's payoff, recorded from Python, on cuda.
with nablac.record() as rec:
    sp = [rec.input("spot1", 100.0), rec.input("spot2", 100.0)]
    vols = [rec.input("vol1", 0.2), rec.input("vol2", 0.3)]
    strike, rate, rho = rec.input("strike", 100.0), 0.03, 0.5
    steps, barrier, width = 52, 130.0, 0.01 * 130.0
    dt = 1.0 / steps
    s, alive = sp, 1.0
    for _ in range(steps):
        z1 = rec.normal()
        z2 = rho * z1 + np.sqrt(1 - rho**2) * rec.normal()
        s = [x * np.exp((rate - 0.5 * v * v) * dt + v * np.sqrt(dt) * z)
             for x, v, z in zip(s, vols, (z1, z2))]
        basket = (s[0] + s[1]) / 2
        alive = alive / (1 + np.exp(np.minimum((basket - barrier) / width, 40.0)))
    rec.output("price", alive * np.maximum(basket - strike, 0.0) * np.exp(-rate))
cpu = nablac.run(rec, paths=1_000_000, seed=42)
for target in ("cuda", "opencl", "vulkan"):
    try:
        g = nablac.run(rec, target=target, paths=1_000_000, seed=42)
    except nablac.Error as e:
        check("%s README basket" % target, False, str(e))
        continue
    # f32 on the GPU against f64 on the CPU, the same draws: within 4 s.e. of each other.
    ok = abs(g.value - cpu.value) <= 4 * cpu.stderr
    check("%s README basket (f32) vs cpu (f64)" % target, ok,
          "%s %.6f vs %.6f +- %.6f, d/dspot1 %.6f vs %.6f, load %.3f s run %.3f s"
          % (g.mode, g.value, cpu.value, cpu.stderr, g.greeks["spot1"], cpu.greeks["spot1"],
             g.timings["load"], g.timings["run"]))

# nablac.jax with the cuda target: a vmap over six markets is one ladder run.
try:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import nablac.jax as nj

    f = nj.price_and_greeks(t, inputs=["spot", "vol"], target="cuda", paths=PATHS, seed=7,
                            mode="reverse", markets=6)
    xs = jnp.linspace(80.0, 130.0, 6)
    values, greeks = jax.jit(jax.vmap(f, in_axes=(0, None)))(xs, 0.2)
    same = all(
        float(values[k]) == nablac.run(t, target="cuda", paths=PATHS, seed=7, mode="reverse",
                                       market={"spot": float(x), "vol": 0.2}).value
        for k, x in enumerate(xs)
    )
    check("nablac.jax on cuda: vmap of 6 markets is one fused run", f.runs == [6]
          and f.fused_markets == [6] and same,
          "(jax %s on %s; runs %s)" % (jax.__version__, jax.default_backend(), f.runs))
except ImportError as e:
    check("nablac.jax on cuda", False, "no jax: %s" % e)

print("python-check: %d failed" % len(failed))
sys.exit(1 if failed else 0)
