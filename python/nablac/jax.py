"""``nablac.jax``: a nablac kernel called from inside JAX code.

:func:`price_and_greeks` turns a tape (or a compiled kernel) into a JAX function of market
values that returns the Monte Carlo price and its Greeks; :func:`price` is the price alone, a
function ``jax.grad`` differentiates through nablac's Greeks. Both run under ``jax.jit``, and
``jax.vmap`` over market values runs one nablac ladder (one fused kernel pricing several markets
per launch on the same draws) instead of one run per market.

How: ``jax.pure_callback`` with ``vmap_method="broadcast_all"``. A batched call reaches the host
once, with every argument broadcast to the batch's shape, and becomes one run of a ladder over
those markets (`nablac.run` with arrays). An XLA FFI target would avoid the host round trip,
but it would have to be built against the jaxlib in use and would still call the same runtime
on the host for the CPU target; the callback costs microseconds against a run's milliseconds.

Importing this module imports JAX; ``import nablac`` alone does not.
"""

import numpy as np

import jax
import jax.numpy as jnp

from . import _api, _nablac
from ._errors import OptionError

__all__ = ["price", "price_and_greeks"]


def _names(t):
    if isinstance(t, _nablac.Kernel):
        m = t.manifest
        return list(m["inputs"]), list(m["outputs"]), t.mode
    return list(t.inputs), list(t.outputs), None


def price_and_greeks(tape, inputs=None, output=None, paths=100_000, seed=42, target=None,
                     mode=None, precision=None, **options):
    """A JAX function ``f(*values) -> (price, greeks)`` of ``tape`` (a Tape, a finished
    recording or a Kernel).

    ``inputs``: the tape inputs ``f`` takes, in order (default: every input, in the tape's
    order); the others keep their recorded values. ``output``: the output priced (default: the
    first). ``price`` is a scalar, ``greeks`` the array of d price / d input over ``inputs``, in
    JAX's default float type (enable ``jax_enable_x64`` for the f64 results bit for bit).
    ``paths``, ``seed``, ``target``, ``mode`` (not ``"price"``: there would be no Greeks),
    ``precision`` and the other keywords are :func:`nablac.run`'s; a tape is compiled for each
    call (the CPU kernels are cached). Under ``jax.vmap`` the batch of markets is one ladder
    run; ``f.runs`` lists the number of markets each nablac run priced, ``f.fused_markets``
    how many of them each launch of its kernel priced.
    """
    t = _api._tape_or_kernel(tape, "price_and_greeks")
    all_inputs, outputs, kernel_mode = _names(t)
    names = list(all_inputs) if inputs is None else list(inputs)
    for n in names:
        if n not in all_inputs:
            raise OptionError(
                "price_and_greeks: the tape has no input %s (inputs: %s)"
                % (n, ", ".join(all_inputs))
            )
    if len(set(names)) != len(names):
        raise OptionError("price_and_greeks: inputs=%r names an input twice" % (names,))
    if not names:
        raise OptionError("price_and_greeks: no inputs to take")
    out = outputs[0] if output is None else output
    if out not in outputs:
        raise OptionError(
            "price_and_greeks: the tape has no output %s (outputs: %s)" % (out, ", ".join(outputs))
        )
    if (mode or kernel_mode) == "price":
        raise OptionError(
            "price_and_greeks: a price kernel has no Greeks (mode reverse, forward or auto)"
        )
    paths = _api._whole("paths", paths, 1, 2**63 - 1)
    seed = _api._whole("seed", seed, 0, 2**64 - 1)
    runs, fused = [], []

    def host(*values):
        shape = np.broadcast_shapes(*(np.shape(v) for v in values))
        cols = [np.broadcast_to(np.asarray(v, dtype=np.float64), shape).reshape(-1) for v in values]
        n = cols[0].size
        if shape == ():
            fixed, ladder = [(name, float(c[0])) for name, c in zip(names, cols)], None
        else:
            fixed, ladder = None, (names, np.stack(cols, axis=1).tolist())
        r = _api._run(t, paths, seed, target, mode, precision, fixed, None, False, options,
                      ladder, None if ladder is None else (n,), stacklevel=4)
        runs.append(n)
        fused.append(r.fused_markets)
        o = r.outputs[out]
        value = np.asarray(o.value, dtype=np.float64).reshape(shape)
        greeks = np.stack(
            [np.asarray(o.greeks[name], dtype=np.float64).reshape(shape) for name in names],
            axis=-1,
        )
        dtype = np.dtype(values[0].dtype)
        return value.astype(dtype), greeks.astype(dtype)

    def f(*values):
        if len(values) != len(names):
            raise TypeError(
                "this function takes %d market values (%s), not %d"
                % (len(names), ", ".join(names), len(values))
            )
        dtype = jnp.result_type(float)
        args = [jnp.asarray(v, dtype=dtype) for v in values]
        for name, a in zip(names, args):
            if a.ndim != 0:
                raise TypeError(
                    "%s: a market value is a scalar (jax.vmap over an array of them runs a "
                    "ladder), not an array of shape %s" % (name, a.shape)
                )
        shapes = (jax.ShapeDtypeStruct((), dtype), jax.ShapeDtypeStruct((len(names),), dtype))
        return jax.pure_callback(host, shapes, *args, vmap_method="broadcast_all")

    f.runs = runs
    f.fused_markets = fused
    f.inputs = tuple(names)
    f.__doc__ = "nablac's price of %s and its Greeks d/d(%s)" % (out, ", ".join(names))
    return f


def price(tape, inputs=None, output=None, **run_options):
    """A JAX function ``p(*values) -> price`` of ``tape``, as :func:`price_and_greeks` (same
    arguments), whose derivatives are nablac's Greeks: ``jax.grad(p, argnums=k)`` gives d price
    / d ``inputs[k]`` from the same run (no finite differences, no second run)."""
    pg = price_and_greeks(tape, inputs, output, **run_options)

    @jax.custom_jvp
    def p(*values):
        return pg(*values)[0]

    @p.defjvp
    def _jvp(primals, tangents):
        value, greeks = pg(*primals)
        dot = sum(greeks[..., k] * jnp.asarray(d, greeks.dtype) for k, d in enumerate(tangents))
        return value, dot

    p.runs = pg.runs
    p.fused_markets = pg.fused_markets
    p.inputs = pg.inputs
    return p
