"""Recording a tape from Python: ``with nablac.record() as t:``.

Every operation on a recorded value appends one node to the tape, in call order (the Rust
recorder's contract, ``nablac::record``); a Python number mixed in first becomes one ``const``
node (left operand before right). Nothing is folded or reordered, so the same Python code always
records the same tape.
"""

import math
import numbers
import os
import sys

from . import _nablac
from ._errors import BranchError, RecordError, UnsupportedError

_HERE = os.path.dirname(os.path.abspath(__file__))
_NUMPY = os.sep + "numpy" + os.sep

#: Where np.where's selection clamps: the largest magnitude it passes through (f32's range).
_BIG = 3.0e38


def _caller():
    """``file:line`` of the user's code that made the current call (outside nablac and numpy)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not (os.path.abspath(name).startswith(_HERE) or _NUMPY in name):
            return "%s:%d" % (name, f.f_lineno)
        f = f.f_back
    return "<unknown>"


def _is_number(x):
    return isinstance(x, numbers.Real) and not isinstance(x, Value)


class Recording:
    """A tape being recorded (``nablac.record()``); after the ``with`` block, the tape.

    Inside the block: :meth:`input`, :meth:`normal`, :meth:`uniform`, :meth:`constant` make
    recorded values, and :meth:`output` names one an output. After it, the recording is the
    finished tape: :func:`nablac.run` and :func:`nablac.compile` take it, and ``.tape`` is the
    :class:`nablac.Tape`.
    """

    def __init__(self):
        self._rec = _nablac.Recorder()
        self._normals = 0
        self._uniforms = 0
        self._outputs = 0
        self._tape = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None:
            self._rec = None
            return False
        self.finish()
        return False

    # -- making values -------------------------------------------------------------------

    def _live(self):
        if self._rec is None:
            raise RecordError(
                "%s: this recording is finished: record inside its `with` block" % _caller()
            )
        return self._rec

    def _const(self, x):
        x = float(x)
        if not math.isfinite(x):
            raise RecordError(
                "%s: the constant %r is not finite: tape values must be finite" % (_caller(), x)
            )
        return self._live().constant(x)

    def _id(self, x):
        """The node of ``x``: a value of this recording, or a Python number made a constant."""
        if isinstance(x, Value):
            if x._r is not self:
                raise RecordError("%s: a value of another recording" % _caller())
            self._live()
            return x._id
        if _is_number(x):
            return self._const(x)
        raise UnsupportedError(
            "%s: %s is neither a recorded value nor a number" % (_caller(), type(x).__name__)
        )

    def _call(self, f, *args):
        try:
            return f(*args)
        except RecordError as e:
            raise type(e)("%s: %s" % (_caller(), e)) from None

    def input(self, name, value):
        """A new input ``name`` recorded at ``value`` (its default market); it gets a Greek."""
        if not _is_number(value):
            raise RecordError(
                "%s: input %s's value must be a number, not %s"
                % (_caller(), name, type(value).__name__)
            )
        rec = self._live()
        return Value(self, self._call(rec.input, str(name), float(value)))

    def constant(self, x):
        """A ``const`` node of value ``x`` (no Greek)."""
        return Value(self, self._const(x))

    def normal(self, index=None):
        """The path's next standard normal draw (draw k is the k-th call), or draw ``index``."""
        k = self._normals if index is None else int(index)
        self._normals = max(self._normals, k + 1)
        return Value(self, self._call(self._live().normal, k))

    def uniform(self, index=None):
        """The path's next uniform draw in (0, 1) (its own sequence, apart from the normals)."""
        k = self._uniforms if index is None else int(index)
        self._uniforms = max(self._uniforms, k + 1)
        return Value(self, self._call(self._live().uniform, k))

    def normals(self, n):
        """The next ``n`` normal draws, as a list."""
        return [self.normal() for _ in range(int(n))]

    def output(self, name, x):
        """Names ``x`` (a recorded value, or a number) an output: its path average is a result."""
        node = self._id(x)
        self._call(self._live().output, str(name), node)
        self._outputs += 1

    def __len__(self):
        """Nodes recorded so far (or the finished tape's)."""
        return len(self._tape) if self._tape is not None else len(self._live())

    # -- the finished tape ---------------------------------------------------------------

    def finish(self):
        """Ends the recording; returns the :class:`nablac.Tape` (``with`` calls it)."""
        if self._tape is not None:
            return self._tape
        rec = self._live()
        if self._outputs == 0:
            raise RecordError(
                "the tape has no output: call t.output(name, value) at least once"
            )
        self._tape = self._call(rec.finish)
        self._rec = None
        return self._tape

    @property
    def tape(self):
        """The finished :class:`nablac.Tape`."""
        if self._tape is None:
            raise RecordError("the recording is still open: use its tape after the `with` block")
        return self._tape

    def save(self, path, binary=None):
        """``self.tape.save(path)``."""
        self.tape.save(path, binary)

    @property
    def text(self):
        return self.tape.text

    @property
    def inputs(self):
        return self.tape.inputs

    @property
    def outputs(self):
        return self.tape.outputs

    @property
    def hash(self):
        return self.tape.hash

    def __repr__(self):
        if self._tape is not None:
            return repr(self._tape)
        return "<nablac.Recording: open, %d nodes>" % len(self._live())


def record():
    """Starts recording a tape: ``with nablac.record() as t: ...``."""
    return Recording()


def _rec_of(*xs):
    for x in xs:
        if isinstance(x, Value):
            return x._r
    return None


def _binary(op, a, b, indicator=False):
    r = _rec_of(a, b)
    ia = r._id(a)
    ib = r._id(b)
    return Value(r, r._live().binary(op, ia, ib), indicator)


def _unary(op, a):
    return Value(a._r, a._r._live().unary(op, a._r._id(a)))


def _power(a, b):
    """``a ** b``: an integral exponent of at most 1024 by multiplications (so a negative base
    works, as in Python); any other the tape's ``pow`` (NaN for a base <= 0)."""
    if isinstance(a, Value) and _is_number(b) and float(b).is_integer() and abs(b) <= 1024:
        n = int(b)
        if n == 0:
            return a._r.constant(1.0)
        result, base, m = None, a, abs(n)
        while m:
            if m & 1:
                result = base if result is None else _binary("mul", result, base)
            m >>= 1
            if m:
                base = _binary("mul", base, base)
        return result if n > 0 else _binary("div", 1.0, result)
    return _binary("pow", a, b)


def _indicator(c):
    """``c`` as a 0/1 indicator: itself if it is one, else ``|c| > 0``."""
    if c._ind:
        return c
    return _binary("gt", _unary("abs", c), 0.0, indicator=True)


def where(cond, a, b):
    """``a`` where ``cond`` holds, else ``b`` (``np.where`` on recorded values).

    ``cond`` is a comparison of recorded values (an indicator, 0 or 1 per path); any other value
    counts as true when it is not 0. The selection is by ``min``/``max`` against a large bound,
    so the value (and a forward-mode Greek) of the side not taken never leaks in, even when it is
    NaN or infinite; a reverse-mode Greek still passes through that side's nodes, so keep it
    finite there (as with JAX's ``where``). Values beyond +-3e38 are clamped.
    """
    if not isinstance(cond, Value):
        return a if cond else b
    c = _indicator(cond)
    s = _binary("sub", _binary("mul", 2.0, c), 1.0)
    up = _binary("mul", s, _BIG)
    down = _unary("neg", up)
    pa = _binary("min", a, up)
    pb = _binary("min", b, down)
    return _binary("max", pa, pb)


def ncdf(x):
    """The standard normal distribution function Phi(x) (the tape's ``ncdf``)."""
    if isinstance(x, Value):
        return _unary("ncdf", x)
    if _is_number(x):
        return 0.5 * math.erfc(-float(x) / math.sqrt(2.0))
    return _elementwise(ncdf, x)


def _elementwise(f, *args):
    import numpy as np

    return np.frompyfunc(f, len(args), 1)(*args)


def _both_indicators(a, b, what):
    for x in (a, b):
        if isinstance(x, Value) and not x._ind:
            raise UnsupportedError(
                "%s: %s takes indicators (comparisons of recorded values), and %r is not one"
                % (_caller(), what, x)
            )


def _logical_and(a, b):
    _both_indicators(a, b, "`&` (logical and)")
    return Value(_rec_of(a, b), _binary("mul", a, b)._id, True)


def _logical_or(a, b):
    _both_indicators(a, b, "`|` (logical or)")
    return Value(_rec_of(a, b), _binary("max", a, b)._id, True)


def _logical_not(a):
    _both_indicators(a, a, "`~` (logical not)")
    return Value(a._r, _binary("sub", 1.0, a)._id, True)


def _equal(a, b):
    return Value(
        _rec_of(a, b),
        _binary("mul", _binary("le", a, b, True), _binary("ge", a, b, True))._id,
        True,
    )


def _not_equal(a, b):
    return Value(_rec_of(a, b), _binary("sub", 1.0, _equal(a, b))._id, True)


def _sign(a):
    return _binary("sub", _binary("gt", a, 0.0, True), _binary("lt", a, 0.0, True))


_LN2 = math.log(2.0)
_LN10 = math.log(10.0)

#: numpy ufuncs with a recording, by name.
_UFUNCS = {
    "add": lambda a, b: _binary("add", a, b),
    "subtract": lambda a, b: _binary("sub", a, b),
    "multiply": lambda a, b: _binary("mul", a, b),
    "true_divide": lambda a, b: _binary("div", a, b),
    "divide": lambda a, b: _binary("div", a, b),
    "power": _power,
    "float_power": _power,
    "maximum": lambda a, b: _binary("max", a, b),
    "minimum": lambda a, b: _binary("min", a, b),
    "less": lambda a, b: _binary("lt", a, b, True),
    "less_equal": lambda a, b: _binary("le", a, b, True),
    "greater": lambda a, b: _binary("gt", a, b, True),
    "greater_equal": lambda a, b: _binary("ge", a, b, True),
    "equal": _equal,
    "not_equal": _not_equal,
    "logical_and": _logical_and,
    "logical_or": _logical_or,
    "logical_not": _logical_not,
    "negative": lambda a: _unary("neg", a),
    "positive": lambda a: a,
    "exp": lambda a: _unary("exp", a),
    "log": lambda a: _unary("log", a),
    "log2": lambda a: _binary("div", _unary("log", a), _LN2),
    "log10": lambda a: _binary("div", _unary("log", a), _LN10),
    "exp2": lambda a: _binary("pow", 2.0, a),
    "sqrt": lambda a: _unary("sqrt", a),
    "absolute": lambda a: _unary("abs", a),
    "fabs": lambda a: _unary("abs", a),
    "tanh": lambda a: _unary("tanh", a),
    "square": lambda a: _binary("mul", a, a),
    "reciprocal": lambda a: _binary("div", 1.0, a),
    "sign": _sign,
    # scipy.special.ndtr is the normal distribution function.
    "ndtr": ncdf,
}


def _unsupported_ufunc(name):
    return UnsupportedError(
        "%s: np.%s has no tape operation; recorded values support %s, np.where, np.clip and "
        "nablac.ncdf" % (_caller(), name, ", ".join("np." + n for n in sorted(_UFUNCS)))
    )


class Value:
    """A recorded value: a node of the tape being recorded.

    Supports ``+ - * / **``, unary ``-``, ``abs()``, comparisons (``< <= > >= == !=``, giving 0/1
    indicator nodes), ``& | ~`` on indicators, numpy's ufuncs (``np.exp``, ``np.log``,
    ``np.sqrt``, ``np.abs``, ``np.tanh``, ``np.maximum``, ``np.minimum``, ...), ``np.where`` and
    ``np.clip``; Python numbers mix in as constants. ``bool()`` (``if``, ``while``, ``and``,
    ``or``) raises :class:`nablac.BranchError`: use ``np.where``.
    """

    __slots__ = ("_r", "_id", "_ind")
    __array_priority__ = 1000

    def __init__(self, recording, node, indicator=False):
        self._r = recording
        self._id = node
        self._ind = indicator

    @property
    def node(self):
        """The node's index in the tape (``%N`` in the text form)."""
        return self._id

    def __repr__(self):
        return "<nablac.Value %%%d%s>" % (self._id, " (indicator)" if self._ind else "")

    def __bool__(self):
        raise BranchError(
            "%s: a recorded value used as a Python bool (`if`, `while`, `and`, `or`, `not`, "
            "bool()): the branch would be taken once, while recording, and frozen for every path. "
            "Record both sides and choose per path with np.where(cond, a, b) (a comparison of "
            "recorded values is a 0/1 indicator; `&`, `|`, `~` combine them). np.maximum and "
            "np.minimum over a numpy object array compare this way too: apply them to the "
            "recorded values themselves." % _caller()
        )

    def __float__(self):
        raise UnsupportedError(
            "%s: float() of a recorded value: it has a value per path, not one; keep it recorded"
            % _caller()
        )

    __int__ = __float__
    __index__ = __float__
    __hash__ = object.__hash__

    def _op(op, flip=False, indicator=False):  # noqa: N805 (a class-body helper)
        def f(self, other):
            if not (isinstance(other, Value) or _is_number(other)):
                return NotImplemented
            if flip:
                return _binary(op, other, self, indicator)
            return _binary(op, self, other, indicator)

        return f

    __add__ = _op("add")
    __radd__ = _op("add", True)
    __sub__ = _op("sub")
    __rsub__ = _op("sub", True)
    __mul__ = _op("mul")
    __rmul__ = _op("mul", True)
    __truediv__ = _op("div")
    __rtruediv__ = _op("div", True)
    __lt__ = _op("lt", indicator=True)
    __le__ = _op("le", indicator=True)
    __gt__ = _op("gt", indicator=True)
    __ge__ = _op("ge", indicator=True)
    del _op

    def __pow__(self, other):
        if not (isinstance(other, Value) or _is_number(other)):
            return NotImplemented
        return _power(self, other)

    def __rpow__(self, other):
        if not _is_number(other):
            return NotImplemented
        return _binary("pow", other, self)

    def __eq__(self, other):
        if not (isinstance(other, Value) or _is_number(other)):
            return NotImplemented
        return _equal(self, other)

    def __ne__(self, other):
        if not (isinstance(other, Value) or _is_number(other)):
            return NotImplemented
        return _not_equal(self, other)

    def __and__(self, other):
        return _logical_and(self, other)

    __rand__ = __and__

    def __or__(self, other):
        return _logical_or(self, other)

    __ror__ = __or__

    def __invert__(self):
        return _logical_not(self)

    def __neg__(self):
        return _unary("neg", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _unary("abs", self)

    # numpy's object-array loops call these by the ufunc's name.
    def exp(self):
        return _unary("exp", self)

    def log(self):
        return _unary("log", self)

    def sqrt(self):
        return _unary("sqrt", self)

    def tanh(self):
        return _unary("tanh", self)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = getattr(ufunc, "__name__", str(ufunc))
        if method != "__call__" or kwargs:
            raise UnsupportedError(
                "%s: np.%s.%s%s on a recorded value: only plain calls are recorded"
                % (_caller(), name, method, " with %s" % ", ".join(kwargs) if kwargs else "")
            )
        f = _UFUNCS.get(name)
        if f is None:
            raise _unsupported_ufunc(name)
        if all(isinstance(x, Value) or _is_number(x) for x in inputs):
            return f(*inputs)
        return _elementwise(lambda *xs: ufunc(*xs), *inputs)

    def __array_function__(self, func, types, args, kwargs):
        name = getattr(func, "__name__", "")
        if name == "where" and len(args) + len(kwargs) == 3:
            return _elementwise_where(*args, **kwargs)
        if name == "clip":
            return _clip(*args, **kwargs)
        impl = getattr(func, "_implementation", None)
        if impl is None:
            raise UnsupportedError(
                "%s: np.%s on a recorded value is not supported" % (_caller(), name)
            )
        return impl(*args, **kwargs)


def _elementwise_where(condition, x, y):
    if all(isinstance(v, Value) or _is_number(v) for v in (condition, x, y)):
        return where(condition, x, y)
    return _elementwise(where, condition, x, y)


def _clip(a, a_min, a_max, **kwargs):
    if kwargs:
        raise UnsupportedError("%s: np.clip with %s" % (_caller(), ", ".join(kwargs)))
    import numpy as np

    lo = a if a_min is None else np.maximum(a, a_min)
    return lo if a_max is None else np.minimum(lo, a_max)
