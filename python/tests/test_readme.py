"""The README's Python example (issue 28's acceptance): it runs as written, and the same payoff
written for JAX and imported with nablac.from_jax gives the same bits."""
import contextlib
import io
import pathlib
import re

import pytest

import nablac

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def readme_example():
    text = README.read_text()
    section = text[text.index("## From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def ran():
    code = readme_example()
    assert len(code.splitlines()) <= 25, "the example records and prices in under 25 lines"
    scope = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), scope)
    return scope, out.getvalue()


def test_the_readme_example_runs_as_written(ran):
    scope, printed = ran
    r = scope["r"]
    assert r.paths == 1_000_000 and r.target == "cpu"
    for q in ("value", "d/dspot1", "d/dspot2", "d/dvol1", "d/dvol2", "d/dstrike"):
        assert q in printed, q
    # An up-and-out call below its vanilla: positive, and knocked out often enough to matter.
    assert 0.0 < r.value < 8.0
    assert r.greeks["strike"] < 0.0


def test_the_same_payoff_from_jax_gives_the_same_bits(ran):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    steps, barrier, rate, rho = 52, 130.0, 0.03, 0.5
    width, dt = 0.01 * barrier, 1.0 / steps

    def basket_call(spot1, spot2, vol1, vol2, strike, z):
        s, vols, alive = [spot1, spot2], [vol1, vol2], 1.0
        for k in range(steps):
            z1 = z[2 * k]
            z2 = rho * z1 + jnp.sqrt(1 - rho**2) * z[2 * k + 1]
            s = [x * jnp.exp((rate - 0.5 * v * v) * dt + v * jnp.sqrt(dt) * w)
                 for x, v, w in zip(s, vols, (z1, z2))]
            basket = (s[0] + s[1]) / 2
            alive = alive / (1 + jnp.exp(jnp.minimum((basket - barrier) / width, 40.0)))
        return alive * jnp.maximum(basket - strike, 0.0) * jnp.exp(-rate)

    t = nablac.from_jax(basket_call, 100.0, 100.0, 0.2, 0.3, 100.0, jnp.zeros(2 * steps))
    r = nablac.run(t, paths=1_000_000, seed=42)
    readme = ran[0]["r"]
    assert r.value == readme.value
    assert r.stderr == readme.stderr
    assert r.greeks == readme.greeks
