"""nablac.jax: a nablac kernel inside JAX code (issue 28, point 4): callable under jax.jit, one
ladder run under jax.vmap, jax.grad through nablac's Greeks."""
import subprocess
import sys

import numpy as np
import pytest

import nablac

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import nablac.jax as nj  # noqa: E402

PATHS = 20_000
SEED = 11
RUN = dict(paths=PATHS, seed=SEED, mode="reverse")


@pytest.fixture(scope="module")
def tape():
    return nablac.product("european")


def test_importing_nablac_does_not_import_jax():
    code = "import sys, nablac; assert 'jax' not in sys.modules, 'jax imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_under_jit_it_gives_the_runs_bits(tape):
    f = nj.price_and_greeks(tape, inputs=["spot", "vol"], **RUN)
    value, greeks = jax.jit(f)(105.0, 0.25)
    r = nablac.run(tape, market={"spot": 105.0, "vol": 0.25}, **RUN)
    assert float(value) == r.value
    assert greeks.shape == (2,)
    assert float(greeks[0]) == r.greeks["spot"]
    assert float(greeks[1]) == r.greeks["vol"]
    assert f.runs == [1]


def test_vmap_over_markets_is_one_ladder_run(tape):
    # `markets=6`: one kernel fusing the six markets (at these few paths the cost model would
    # run them one by one, which the run's bits do not show).
    f = nj.price_and_greeks(tape, inputs=["spot", "vol"], markets=6, **RUN)
    spots = jnp.array([80.0, 90.0, 100.0, 110.0, 120.0, 130.0])
    values, greeks = jax.jit(jax.vmap(f, in_axes=(0, None)))(spots, 0.2)
    assert f.runs == [6], "six markets, one nablac run"
    assert f.fused_markets == [6], "one launch of a kernel fusing all six"
    assert values.shape == (6,) and greeks.shape == (6, 2)
    for k, s in enumerate(spots):
        alone = nablac.run(tape, market={"spot": float(s), "vol": 0.2}, **RUN)
        assert float(values[k]) == alone.value
        assert float(greeks[k, 0]) == alone.greeks["spot"]
        assert float(greeks[k, 1]) == alone.greeks["vol"]


def test_grad_of_the_price_is_nablacs_greek(tape):
    p = nj.price(tape, inputs=["spot", "vol"], **RUN)
    r = nablac.run(tape, market={"spot": 100.0, "vol": 0.2}, **RUN)
    assert float(jax.grad(p, argnums=0)(100.0, 0.2)) == r.greeks["spot"]
    assert float(jax.grad(p, argnums=1)(100.0, 0.2)) == r.greeks["vol"]
    # A hedge ratio over a ladder: jax.vmap of jax.grad, still one run for the batch.
    runs = len(p.runs)
    deltas = jax.vmap(jax.grad(p), in_axes=(0, None))(jnp.array([90.0, 110.0]), 0.2)
    assert len(p.runs) == runs + 1
    for k, s in enumerate([90.0, 110.0]):
        assert float(deltas[k]) == nablac.run(tape, market={"spot": s, "vol": 0.2}, **RUN).greeks["spot"]


def test_bad_arguments_raise(tape):
    with pytest.raises(nablac.OptionError, match="no input rho"):
        nj.price_and_greeks(tape, inputs=["rho"])
    with pytest.raises(nablac.OptionError, match="no output"):
        nj.price_and_greeks(tape, output="put")
    with pytest.raises(nablac.OptionError, match="no Greeks"):
        nj.price_and_greeks(tape, mode="price")
    f = nj.price_and_greeks(tape, inputs=["spot"], **RUN)
    with pytest.raises(TypeError, match="takes 1 market values"):
        f(1.0, 2.0)
    with pytest.raises(TypeError, match="a market value is a scalar"):
        f(jnp.ones(3))
