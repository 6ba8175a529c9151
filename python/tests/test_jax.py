"""nablac.from_jax: a per-path JAX function (scalars and a 1-D array of normals, lax.scan over
them) imported as a tape (issue 28, point 4)."""
import pytest

import nablac

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

STEPS = 12
PATHS = 2000
SEED = 7


def asian(spot, strike, vol, rate, maturity, z):
    """The built-in arithmetic Asian call, written for JAX with lax.scan over the normals."""
    dt = maturity / STEPS
    drift = (rate - 0.5 * vol * vol) * dt
    sd = vol * jnp.sqrt(dt)

    def step(carry, zk):
        s, acc = carry
        s = s * jnp.exp(drift + sd * zk)
        return (s, acc + s), None

    (_, acc), _ = lax.scan(step, (spot, 0.0), z)
    return jnp.maximum(acc / STEPS - strike, 0.0) * jnp.exp(-rate * maturity)


ARGS = (100.0, 100.0, 0.2, 0.03, 1.0, jnp.zeros(STEPS))


def run(tape):
    return nablac.run(tape, paths=PATHS, seed=SEED, target="cpu", cpu_backend="cranelift")


def close(a, b):
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def test_the_asian_from_jax_prices_as_jax_does_on_nablacs_draws():
    r = run(nablac.from_jax(asian, *ARGS))
    z = jnp.asarray(nablac.draws(SEED, PATHS, STEPS))
    ref = float(jnp.mean(jax.vmap(lambda zz: asian(*ARGS[:5], zz))(z)))
    assert close(r.value, ref), (r.value, ref)


def test_the_asian_from_jax_gives_the_built_in_asians_results():
    # The draws are recorded up front rather than one a step, so the tapes differ in node
    # order; the results agree to 1e-12 (on this machine they are equal).
    r = run(nablac.from_jax(asian, *ARGS))
    b = run(nablac.product("asian", steps=STEPS))
    assert close(r.value, b.value)
    assert sorted(r.greeks) == sorted(b.greeks) == ["maturity", "rate", "spot", "strike", "vol"]
    for name, g in b.greeks.items():
        assert close(r.greeks[name], g), (name, r.greeks[name], g)


def test_where_and_maximum_record_a_digital_and_a_call():
    def digital(spot, strike, z):
        s = spot * jnp.exp(0.2 * z[0])
        return jnp.where(s > strike, 1.0, 0.0) + jnp.maximum(s - strike, 0.0)

    t = nablac.from_jax(digital, 100.0, 105.0, jnp.zeros(1))
    r = run(t)
    z = jnp.asarray(nablac.draws(SEED, PATHS, 1))
    ref = float(jnp.mean(jax.vmap(lambda zz: digital(100.0, 105.0, zz))(z)))
    assert close(r.value, ref), (r.value, ref)


def test_an_unsupported_primitive_is_named():
    with pytest.raises(nablac.Error, match="sin"):
        nablac.from_jax(lambda x, z: jnp.sin(x) + z[0], 1.0, jnp.zeros(1))
