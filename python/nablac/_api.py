"""Compiling and running: thin wrappers over the extension (the compile policy is the library's
driver, the run the runtime's, exactly as `nablac compile` and `nablac run` use them)."""

import math
import numbers
import warnings

from . import _nablac
from ._nablac import MAX_RUN_MARKETS
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
    """``market`` as (fixed, laddered): ``[(name, number)]`` and ``[(name, 1-D float array)]``
    (a value given as an array, a list or a tuple ladders that input)."""
    if market is None:
        return None, []
    if not hasattr(market, "items"):
        raise OptionError("market=%r: expected a dict {input name: value}" % (market,))
    fixed, laddered = [], []
    for name, value in market.items():
        if not isinstance(name, str):
            raise OptionError("market: input names are strings, not %r" % (name,))
        if isinstance(value, bool):
            raise OptionError("market %s=%r: expected a number" % (name, value))
        if isinstance(value, numbers.Real) or getattr(value, "ndim", None) == 0:
            # A number, or a 0-d array of one (jnp.float64(105.0), np.array(105.0)).
            try:
                fixed.append((name, float(value)))
            except (TypeError, ValueError):
                raise OptionError("market %s=%r: expected a number" % (name, value)) from None
        elif hasattr(value, "__len__") or hasattr(value, "__array__"):
            laddered.append((name, _ladder_values(name, value)))
        else:
            raise OptionError(
                "market %s=%r: expected a number, or a 1-D array of numbers (a ladder)"
                % (name, value)
            )
    return fixed, laddered


def _ladder_values(name, value):
    import numpy as np

    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise OptionError(
            "market %s=%r: a ladder is a 1-D array of numbers" % (name, value)
        ) from None
    if a.ndim != 1 or a.size == 0:
        raise OptionError(
            "market %s: a ladder is a 1-D array of at least one number, not one of shape %s"
            % (name, a.shape)
        )
    if not np.all(np.isfinite(a)):
        raise OptionError("market %s: the ladder holds a non-finite value" % name)
    return a


def _grid(laddered):
    """The markets of a grid over the laddered inputs: rows (first input slowest), and the
    grid's shape."""
    import numpy as np

    shape = tuple(len(a) for _, a in laddered)
    n = 1
    for k in shape:
        n *= k
    if n > MAX_RUN_MARKETS:
        raise OptionError(
            "market: the ladder asks for %s markets; at most %d run in one call"
            % (" x ".join(str(k) for k in shape), MAX_RUN_MARKETS)
        )
    axes = np.meshgrid(*[a for _, a in laddered], indexing="ij")
    rows = np.stack([g.reshape(-1) for g in axes], axis=1)
    return rows.tolist(), shape


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

    @classmethod
    def _over(cls, per_market, shape):
        """One output over a ladder's markets: each field a numpy array of the grid's
        ``shape`` (a Greek's, by input)."""
        import numpy as np

        o = cls.__new__(cls)
        first = per_market[0]
        o.name = first["name"]

        def grid(f, dtype=np.float64):
            return np.array([f(d) for d in per_market], dtype=dtype).reshape(shape)

        o.value = grid(lambda d: d["value"])
        o.stderr = grid(lambda d: d["stderr"])
        o.non_finite = grid(lambda d: d["non_finite"], np.int64)
        o.greeks = {i: grid(lambda d, i=i: d["greeks"][i]) for i in first["greeks"]}
        o.greek_stderr = (
            None
            if first["greek_stderr"] is None
            else {i: grid(lambda d, i=i: d["greek_stderr"][i]) for i in first["greek_stderr"]}
        )
        return o

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

    def __init__(self, d, shape=None):
        self._d = d
        ladder = d.get("ladder")
        #: A ladder's grid shape (one axis per laddered input, in the market dict's order);
        #: ``None`` for a run of one market.
        self.shape = None if ladder is None else tuple(shape or (len(ladder["markets"]),))
        if ladder is None:
            self.outputs = {o["name"]: OutputResult(o) for o in d["outputs"]}
        else:
            names = [o["name"] for o in d["outputs"]]
            self.outputs = {
                n: OutputResult._over([m[k] for m in ladder["outputs"]], self.shape)
                for k, n in enumerate(names)
            }
        for k in ("target", "device", "precision", "mode", "paths", "seed", "tape_hash",
                  "kernel_hash", "cache_hit"):
            setattr(self, k, d[k])
        self.market = dict(d["market"])
        #: Markets per launch of the kernel (1 unless it fuses a ladder's).
        self.fused_markets = d["fused_markets"]
        if ladder is not None:
            import numpy as np

            rows = np.array(ladder["markets"], dtype=np.float64)
            inputs = list(self.market)
            #: Each input's value in every market, as arrays of the grid's shape.
            self.markets = {
                n: rows[:, inputs.index(n)].reshape(self.shape) for n in ladder["inputs"]
            }
            for n, a in self.markets.items():
                self.market[n] = a
        else:
            self.markets = None
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
        """The run as ``nablac run --json`` prints it (NaN stays NaN here); a ladder as
        ``nablac run --ladder --json`` does (``fused_markets``, one entry of ``markets`` per
        market with its input values and outputs)."""
        d = {k: self._d[k] for k in ("target", "device", "precision", "mode", "paths", "seed")}
        ladder = self._d.get("ladder")
        if ladder is not None:
            d["fused_markets"] = self.fused_markets
            for k in ("tape_hash", "kernel_hash", "cache_hit"):
                d[k] = self._d[k]
            inputs = list(self._d["market"])
            d["markets"] = [
                {
                    "market": dict(zip(inputs, m)),
                    "outputs": {o["name"]: OutputResult(o).to_dict() for o in outs},
                }
                for m, outs in zip(ladder["markets"], ladder["outputs"])
            ]
            d["timings"] = dict(self.timings)
            return d
        d["market"] = dict(self.market)
        for k in ("tape_hash", "kernel_hash", "cache_hit"):
            d[k] = self._d[k]
        d["outputs"] = {n: o.to_dict() for n, o in self.outputs.items()}
        d["timings"] = dict(self.timings)
        return d

    def to_pandas(self):
        """A ``pandas.DataFrame``: one row per output and quantity (``value``, then ``d/dINPUT``
        for each Greek), columns ``estimate`` and ``stderr``; for a ladder, one row per market
        (indexed by the laddered inputs' values) and a column per output, quantity and
        ``estimate``/``stderr``. Needs pandas."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Result.to_pandas needs pandas: pip install pandas") from None
        if self.shape is not None:
            return self._ladder_pandas(pd)
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

    def _ladder_pandas(self, pd):
        ladder = self._d["ladder"]
        index = pd.MultiIndex.from_arrays(
            [self.markets[n].reshape(-1) for n in ladder["inputs"]], names=ladder["inputs"]
        )
        cols, data = [], []
        for n, o in self.outputs.items():
            cols += [(n, "value", "estimate"), (n, "value", "stderr")]
            data += [o.value.reshape(-1), o.stderr.reshape(-1)]
            for i, g in o.greeks.items():
                cols.append((n, "d/d" + i, "estimate"))
                data.append(g.reshape(-1))
                if o.greek_stderr is not None and i in o.greek_stderr:
                    cols.append((n, "d/d" + i, "stderr"))
                    data.append(o.greek_stderr[i].reshape(-1))
        return pd.DataFrame(
            dict(zip(cols, data)),
            index=index,
            columns=pd.MultiIndex.from_tuples(cols, names=["output", "quantity", ""]),
        )

    def __repr__(self):
        if self.shape is not None:
            return "<nablac.Result: %s %s %s ladder of %s markets (%d per launch), %d paths each, seed %d>" % (
                self.target, self.precision, self.mode, " x ".join(map(str, self.shape)),
                self.fused_markets, self.paths, self.seed)
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
    ``market={"spot": 105}`` runs at other input values; a value given as a 1-D array
    (``market={"spot": np.linspace(80, 120, 9)}``) runs a ladder, several arrays the grid of
    their values, one fused kernel pricing several markets per launch on the same draws (each
    market's bits are those of a run at that market alone), and the result's fields are numpy
    arrays of the grid's shape (``Result.shape``, ``Result.markets``); ``threads`` (cpu) never changes a
    result. Paths with a non-finite value or Greek are left out of that output's sums and
    counted in ``non_finite``: a :class:`nablac.NonFiniteWarning`, or with ``strict=True`` a
    :class:`nablac.RunError`. The GIL is released while compiling and running.
    """
    t = _tape_or_kernel(tape, "run")
    paths = _whole("paths", paths, 1, 2**63 - 1)
    seed = _whole("seed", seed, 0, 2**64 - 1)
    if threads is not None:
        threads = _whole("threads", threads, 1, 4096)
    fixed, laddered = _market(market)
    ladder, shape = None, None
    if laddered:
        rows, shape = _grid(laddered)
        ladder = ([n for n, _ in laddered], rows)
    return _run(t, paths, seed, target, mode, precision, fixed, threads, strict, options,
                ladder, shape)


def _run(t, paths, seed, target, mode, precision, fixed, threads, strict, options, ladder,
         shape, stacklevel=3):
    """The extension's run, its result, and its non-finite warnings (or ``strict`` error)."""
    d = _nablac.run(t, paths, seed, target, mode, precision, fixed, threads, options, ladder)
    r = Result(d, shape)
    import numpy as np

    bad = []
    for o in r.outputs.values():
        # Over a ladder: the count and the paths of all its markets.
        n, markets = int(np.sum(o.non_finite)), np.size(o.non_finite)
        if n > 0:
            where = "" if r.shape is None else " (over the ladder's markets)"
            bad.append(
                "%s: %d of %d paths%s gave a non-finite value or Greek and are left out of "
                "its sums" % (o.name, n, paths * markets, where)
            )
    if bad and strict:
        raise RunError("strict: " + "; ".join(bad))
    for b in bad:
        warnings.warn(b, NonFiniteWarning, stacklevel=stacklevel)
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
    fixed, laddered = _market(market)
    if laddered:
        raise OptionError(
            "product: market %s is an array; a product is recorded at one market (run it "
            "with market={%r: [...]} for a ladder)" % (laddered[0][0], laddered[0][0])
        )
    return _nablac.product(name, fixed, **options)
