"""nablac: record a Monte Carlo payoff in Python, compile it into an adjoint kernel, price it
with every Greek.

    import numpy as np, nablac
    with nablac.record() as t:
        spot, strike, vol = t.input("spot", 100.0), t.input("strike", 100.0), t.input("vol", 0.2)
        st = spot * np.exp(0.03 - 0.5 * (vol * vol) + vol * t.normal())
        t.output("call", np.maximum(st - strike, 0.0) * np.exp(-0.03))
    r = nablac.run(t, paths=1_000_000, seed=42)
    r.value, r.stderr, r.greeks["spot"]

Tapes: :func:`record`, :func:`load`, :func:`parse`, :func:`product` (a built-in product),
:func:`from_jax` (a JAX function), ``Tape.save``. Kernels: :func:`compile`. Results: :func:`run`
(a market value given as an array runs a fused ladder). Draws: :func:`draws`. From inside JAX:
``nablac.jax.price_and_greeks``, ``nablac.jax.price`` (imported with JAX on first use). Errors:
:class:`Error` and its subclasses.
"""

from ._errors import (
    BranchError,
    CompileError,
    Error,
    FileError,
    NonFiniteWarning,
    OptionError,
    RecordError,
    RunError,
    TapeError,
    UnsupportedError,
)
from ._nablac import Kernel, Tape, draws, load, parse
from ._record import Recording, Value, ncdf, record, where
from ._api import OutputResult, Result, compile, product, run
from ._jax import from_jax

from . import _nablac as _ext

#: The compile options :func:`compile` and :func:`run` take as keywords.
OPTIONS = tuple(_ext.OPTIONS)
del _ext

__version__ = "0.1.0"


def __getattr__(name):
    # ``nablac.jax`` (a kernel called from JAX) imports JAX: only when it is first used.
    if name == "jax":
        import importlib

        return importlib.import_module(".jax", __name__)
    raise AttributeError("module 'nablac' has no attribute %r" % name)


__all__ = [
    "BranchError",
    "CompileError",
    "Error",
    "FileError",
    "Kernel",
    "NonFiniteWarning",
    "OPTIONS",
    "OptionError",
    "OutputResult",
    "RecordError",
    "Recording",
    "Result",
    "RunError",
    "Tape",
    "TapeError",
    "UnsupportedError",
    "Value",
    "compile",
    "draws",
    "from_jax",
    "load",
    "ncdf",
    "parse",
    "product",
    "record",
    "run",
    "where",
]
