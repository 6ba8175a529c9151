"""Compiling and running: thin wrappers over the extension (the compile policy is the library's
driver, the run the runtime's, exactly as `nablac compile` and `nablac run` use them)."""

import math
import numbers
import warnings

from . import _nablac
from ._errors import NonFiniteWarning, OptionError, RunError
from ._record import Recording


def _tape_or_kernel(x, what):
    if isinstance(x, Recording):
        return x.tape
    if isinstance(x, (_nablac.Tape, _nablac.Kernel)):
        return x
    raise OptionError(
        "%s takes a Tape, a finished recording or a Kernel, not %s" % (what, type(x).__name__)
    )


def _whole(name, x, lo, hi):
    """A count or seed: an int, or a float that names a whole number (1e6), in lo ..= hi."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise OptionError("%s=%r: expected a whole number" % (name, x))
    if isinstance(x, numbers.Integral):
        n = int(x)
    else:
        f = float(x)
        if not (math.isfinite(f) and f.is_integer()):
            raise OptionError("%s=%r: expected a whole number" % (name, x))
        n = int(f)
    if not lo <= n <= hi:
        raise OptionError("%s must be between %s, not %d" % (name, _range_text(lo, hi), n))
    return n


def _range_text(lo, hi):
    top = {2**63 - 1: "2^63 - 1", 2**64 - 1: "2^64 - 1"}.get(hi, str(hi))
    return "%d and %s" % (lo, top)


def _market(market):
    if market is None:
        return None
    if not hasattr(market, "items"):
        raise OptionError("market=%r: expected a dict {input name: value}" % (market,))
    out = []
    for name, value in market.items():
        if not isinstance(name, str):
            raise OptionError("market: input names are strings, not %r" % (name,))
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            if hasattr(value, "__len__"):
                raise OptionError(
                    "market %s=%r: a ladder of market values from an array is not in this "
                    "version; give one number per input (or run `nablac run --ladder`)"
                    % (name, value)
                )
            raise OptionError("market %s=%r: expected a number" % (name, value))
        out.append((name, float(value)))
    return out


def compile(tape, target="cpu", mode=None, precision=None, **options):
    """Compiles ``tape`` into a :class:`nablac.Kernel` for ``target``.

    ``target``: ``"cpu"`` (default), ``"cuda"``, ``"opencl"``, ``"vulkan"``. ``mode``: ``None``
    or ``"auto"`` (the cost model's choice), ``"reverse"``, ``"forward"``, ``"price"``.
    ``precision``: ``None`` (f64 on the CPU, f32 on GPUs), ``"f32"``, ``"f64"``. Other keywords
    are the compile options of ``nablac compile`` (``segments=8``, ``checkpoint="registers"``,
    ``greek_stderr=False``, ...); one that this target or mode would not use is refused, never
    ignored. The GIL is released while compiling.
    """
    t = _tape_or_kernel(tape, "compile")
    if isinstance(t, _nablac.Kernel):
        raise OptionError("compile takes a tape; this is a kernel compiled already")
    return _nablac.compile(t, target, mode, precision, options)


class OutputResult:
    """One output's results: value, stderr, greeks, greek_stderr, non_finite."""

    __slots__ = ("name", "value", "stderr", "greeks", "greek_stderr", "non_finite")

    def __init__(self, d):
        self.name = d["name"]
        self.value = d["value"]
        self.stderr = d["stderr"]
        self.greeks = dict(d["greeks"])
        self.greek_stderr = None if d["greek_stderr"] is None else dict(d["greek_stderr"])
        self.non_finite = d["non_finite"]

    def to_dict(self):
        return {
            "value": self.value,
            "stderr": self.stderr,
            "non_finite": self.non_finite,
            "greeks": dict(self.greeks),
            "greek_stderr": None if self.greek_stderr is None else dict(self.greek_stderr),
        }

    def __repr__(self):
        return "<%s = %r +- %r, greeks %r>" % (self.name, self.value, self.stderr, self.greeks)


class Result:
    """A run's results (:func:`nablac.run`).

    With one output, ``.value``, ``.stderr`` and ``.non_finite`` are numbers and ``.greeks``,
    ``.greek_stderr`` dicts ``{input: number}``; with several, each is a dict by output name
    (``result["put"]`` is one output's :class:`OutputResult`). ``.timings`` is in seconds
    (``compile``, ``load`` (compile and JIT included), ``run``; on a GPU also ``device``,
    ``assembly``, ``transfer``, ``allocation``). ``.to_dict()`` has ``nablac run --json``'s fields,
    ``.to_pandas()`` is a table.
    """

    def __init__(self, d):
        self._d = d
        self.outputs = {o["name"]: OutputResult(o) for o in d["outputs"]}
        for k in ("target", "device", "precision", "mode", "paths", "seed", "tape_hash",
                  "kernel_hash", "cache_hit"):
            setattr(self, k, d[k])
        self.market = dict(d["market"])
        self.timings = dict(d["timings"])

    def __getitem__(self, name):
        return self.outputs[name]

    def _field(self, f):
        if len(self.outputs) == 1:
            return getattr(next(iter(self.outputs.values())), f)
        return {n: getattr(o, f) for n, o in self.outputs.items()}

    @property
    def value(self):
        return self._field("value")

    @property
    def stderr(self):
        return self._field("stderr")

    @property
    def greeks(self):
        return self._field("greeks")

    @property
    def greek_stderr(self):
        return self._field("greek_stderr")

    @property
    def non_finite(self):
        return self._field("non_finite")

    def to_dict(self):
        """The run as ``nablac run --json`` prints it (NaN stays NaN here)."""
        d = {k: self._d[k] for k in ("target", "device", "precision", "mode", "paths", "seed")}
        d["market"] = dict(self.market)
        for k in ("tape_hash", "kernel_hash", "cache_hit"):
            d[k] = self._d[k]
        d["outputs"] = {n: o.to_dict() for n, o in self.outputs.items()}
        d["timings"] = dict(self.timings)
        return d

    def to_pandas(self):
        """A ``pandas.DataFrame``: one row per output and quantity (``value``, then ``d/dINPUT``
        for each Greek), columns ``estimate`` and ``stderr``. Needs pandas."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Result.to_pandas needs pandas: pip install pandas") from None
        rows, index = [], []
        for n, o in self.outputs.items():
            index.append((n, "value"))
            rows.append((o.value, o.stderr))
            for i, g in o.greeks.items():
                index.append((n, "d/d" + i))
                se = o.greek_stderr.get(i) if o.greek_stderr is not None else None
                rows.append((g, float("nan") if se is None else se))
        return pd.DataFrame(
            rows,
            index=pd.MultiIndex.from_tuples(index, names=["output", "quantity"]),
            columns=["estimate", "stderr"],
        )

    def __repr__(self):
        lines = [
            "<nablac.Result: %s %s %s, %d paths, seed %d"
            % (self.target, self.precision, self.mode, self.paths, self.seed)
        ]
        for o in self.outputs.values():
            lines.append("  %s = %r +- %r" % (o.name, o.value, o.stderr))
            for i, g in o.greeks.items():
                se = o.greek_stderr.get(i) if o.greek_stderr else None
                lines.append(
                    "    d/d%s = %r%s" % (i, g, "" if se is None else " +- %r" % se)
                )
        return "\n".join(lines) + ">"


def run(tape, paths=1_000_000, seed=42, target=None, mode=None, precision=None, market=None,
        threads=None, strict=False, **options):
    """Prices ``tape`` (a Tape, a finished recording, or a Kernel) and returns a :class:`Result`.

    As ``nablac run``: a tape is compiled first (``target`` default ``"cpu"``; ``mode``,
    ``precision`` and the other keywords as in :func:`compile`); a kernel runs as compiled.
    ``paths`` (1 ..= 2^63 - 1) and ``seed`` (0 ..= 2^64 - 1) fix the result to the bit;
    ``market={"spot": 105}`` runs at other input values; ``threads`` (cpu) never changes a
    result. Paths with a non-finite value or Greek are left out of that output's sums and
    counted in ``non_finite``: a :class:`nablac.NonFiniteWarning`, or with ``strict=True`` a
    :class:`nablac.RunError`. The GIL is released while compiling and running.
    """
    t = _tape_or_kernel(tape, "run")
    paths = _whole("paths", paths, 1, 2**63 - 1)
    seed = _whole("seed", seed, 0, 2**64 - 1)
    if threads is not None:
        threads = _whole("threads", threads, 1, 4096)
    d = _nablac.run(t, paths, seed, target, mode, precision, _market(market), threads, options)
    r = Result(d)
    bad = [
        "%s: %d of %d paths gave a non-finite value or Greek and are left out of its sums"
        % (o.name, o.non_finite, paths)
        for o in r.outputs.values()
        if o.non_finite > 0
    ]
    if bad and strict:
        raise RunError("strict: " + "; ".join(bad))
    for b in bad:
        warnings.warn(b, NonFiniteWarning, stacklevel=2)
    return r


def product(name, market=None, **options):
    """A built-in product's tape, as ``nablac record NAME`` records it: ``"european"``,
    ``"european-put"``, ``"digital"``, ``"asian"``, ``"asian-put"``, ``"barrier"``, ``"basket"``;
    ``market={"spot": 105}`` changes recorded input values, and ``steps``, ``assets``,
    ``barrier``, ``smoothing``, ``rho`` the product's options (left out: its defaults)."""
    known = ("steps", "assets", "barrier", "smoothing", "rho")
    for k in options:
        if k not in known:
            raise OptionError("unknown product option %s=...: the options are %s"
                              % (k, ", ".join(known)))
    return _nablac.product(name, _market(market), **options)
