"""``nablac.from_jax``: a per-path JAX function, traced with ``jax.make_jaxpr``, replayed on the
Python recorder into a nablac tape. JAX is imported only inside :func:`from_jax`."""

import inspect
import math

from ._errors import RecordError, UnsupportedError
from ._record import Value, _binary, _power, _unary, ncdf, record, where

_SQRT2 = math.sqrt(2.0)


def _num(x):
    return not isinstance(x, (Value, list))


def _ew(f, *args):
    """``f`` elementwise: lists (1-D arrays) zipped, scalars broadcast."""
    n = None
    for a in args:
        if isinstance(a, list):
            if n is not None and len(a) != n:
                raise UnsupportedError("nablac.from_jax: arrays of lengths %d and %d" % (n, len(a)))
            n = len(a)
    if n is None:
        return f(*args)
    return [f(*[a[i] if isinstance(a, list) else a for a in args]) for i in range(n)]


def _bin(op, pyf, indicator=False):
    def f(a, b):
        if _num(a) and _num(b):
            return pyf(a, b)
        return _binary(op, a, b, indicator)
    return lambda a, b, **p: _ew(f, a, b)


def _un(op, pyf):
    def f(a):
        return pyf(a) if _num(a) else _unary(op, a)
    return lambda a, **p: _ew(f, a)


def _pyerf(x):
    return math.erf(x)


def _erf(a):
    return math.erf(a) if _num(a) else 2.0 * ncdf(a * _SQRT2) - 1.0


def _erfc(a):
    return math.erfc(a) if _num(a) else 2.0 * ncdf(-(a * _SQRT2))


def _logistic(a):
    return 1.0 / (1.0 + math.exp(-a)) if _num(a) else 1.0 / (1.0 + _unary("exp", -a))


def _select1(p, *cases):
    if _num(p):
        return cases[int(p)]
    if len(cases) != 2:
        raise UnsupportedError("nablac.from_jax: select_n with a recorded predicate and %d cases"
                               % len(cases))
    return where(p, cases[1], cases[0])


def _pow(a, b):
    if _num(a) and _num(b):
        return float(a) ** b
    return _power(a, b)


def _shape(aval):
    return tuple(getattr(aval, "shape", ()))


def _to_shape(x, shape, what):
    """``x`` (scalar or list) as a value of ``shape`` (``()`` or ``(n,)``)."""
    if len(shape) == 0:
        if isinstance(x, list):
            if len(x) != 1:
                raise UnsupportedError("nablac.from_jax: %s of an array of %d to a scalar"
                                       % (what, len(x)))
            return x[0]
        return x
    if len(shape) == 1 or all(d == 1 for d in shape[1:]):
        n = shape[0]
        if isinstance(x, list):
            if len(x) == n:
                return list(x)
            if len(x) == 1:
                return x * n
            raise UnsupportedError("nablac.from_jax: %s of an array of %d to %d"
                                   % (what, len(x), n))
        return [x] * n
    raise UnsupportedError("nablac.from_jax: %s to the shape %s: only scalars and 1-D arrays"
                           % (what, shape))


def _literal(val):
    import numpy as np

    a = np.asarray(val)
    if a.ndim == 0:
        return a.item()
    if a.ndim == 1:
        return [x.item() for x in a]
    raise UnsupportedError("nablac.from_jax: a constant of shape %s: only scalars and 1-D arrays"
                           % (a.shape,))


def _reduce(f, x, axes=None):
    if not isinstance(x, list):
        return x
    acc = x[0]
    for y in x[1:]:
        acc = f(acc, y)
    return acc


_add = _bin("add", lambda a, b: a + b)
_max = _bin("max", max)
_min = _bin("min", min)

_SIMPLE = {
    "add": _add,
    "add_any": _add,
    "sub": _bin("sub", lambda a, b: a - b),
    "mul": _bin("mul", lambda a, b: a * b),
    "div": _bin("div", lambda a, b: a // b if isinstance(a, int) and isinstance(b, int) else a / b),
    "max": _max,
    "min": _min,
    "lt": _bin("lt", lambda a, b: a < b, True),
    "le": _bin("le", lambda a, b: a <= b, True),
    "gt": _bin("gt", lambda a, b: a > b, True),
    "ge": _bin("ge", lambda a, b: a >= b, True),
    "pow": lambda a, b, **p: _ew(_pow, a, b),
    "integer_pow": lambda a, y, **p: _ew(lambda x: _pow(x, int(y)), a),
    "square": lambda a, **p: _ew(lambda x: _pow(x, 2), a),
    "neg": _un("neg", lambda a: -a),
    "exp": _un("exp", math.exp),
    "log": _un("log", math.log),
    "sqrt": _un("sqrt", math.sqrt),
    "rsqrt": lambda a, **p: _ew(lambda x: 1.0 / math.sqrt(x) if _num(x)
                                else 1.0 / _unary("sqrt", x), a),
    "abs": _un("abs", abs),
    "tanh": _un("tanh", math.tanh),
    "logistic": lambda a, **p: _ew(_logistic, a),
    "erf": lambda a, **p: _ew(_erf, a),
    "erfc": lambda a, **p: _ew(_erfc, a),
    "select_n": lambda p, *cases, **kw: _ew(_select1, p, *cases),
    "convert_element_type": lambda a, **p: a,
    "copy": lambda a, **p: a,
    "copy_p": lambda a, **p: a,
    "stop_gradient": lambda a, **p: a,
    "reduce_sum": lambda a, **p: _reduce(lambda x, y: _add(x, y), a),
    "reduce_max": lambda a, **p: _reduce(lambda x, y: _max(x, y), a),
    "reduce_min": lambda a, **p: _reduce(lambda x, y: _min(x, y), a),
}

_CALLS = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
          "custom_vjp_call_jaxpr", "remat", "checkpoint", "custom_lin")


def _inner(params):
    for k in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if k in params:
            j = params[k]
            if hasattr(j, "jaxpr"):  # a ClosedJaxpr
                return j.jaxpr, list(j.consts)
            return j, []
    return None, None


def _supported():
    return sorted(set(_SIMPLE) | set(_CALLS) | {
        "broadcast_in_dim", "reshape", "squeeze", "expand_dims", "slice", "dynamic_slice",
        "gather", "concatenate", "scan"})


def _eval(jaxpr, consts, args):
    env = {}

    def read(v):
        if type(v).__name__ == "Literal":
            return _literal(v.val)
        return env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = _literal(c)
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [read(v) for v in eqn.invars]
        p = eqn.params
        outs_shape = [_shape(v.aval) for v in eqn.outvars]
        if name in _SIMPLE:
            outs = [_SIMPLE[name](*ins, **p)]
        elif name in _CALLS or (name.startswith("custom_") and _inner(p)[0] is not None):
            inner, cs = _inner(p)
            if inner is None:
                raise UnsupportedError("nablac.from_jax: the JAX primitive %r without an inner "
                                       "jaxpr" % name)
            outs = _eval(inner, cs, ins[len(ins) - len(inner.invars):])
        elif name in ("broadcast_in_dim", "reshape", "squeeze", "expand_dims"):
            outs = [_to_shape(ins[0], outs_shape[0], name)]
        elif name == "slice":
            x = ins[0]
            if not isinstance(x, list):
                raise UnsupportedError("nablac.from_jax: slice of a scalar")
            st = (p.get("strides") or (1,))[0]
            outs = [x[p["start_indices"][0]:p["limit_indices"][0]:st]]
        elif name == "dynamic_slice":
            x, starts = ins[0], ins[1:]
            if not isinstance(x, list) or not starts or not _num(starts[0]):
                raise UnsupportedError("nablac.from_jax: dynamic_slice needs a 1-D array and a "
                                       "constant index")
            size = p["slice_sizes"][0]
            s = min(max(int(starts[0]), 0), len(x) - size)
            outs = [x[s:s + size]]
        elif name == "gather":
            x, idx = ins
            if not isinstance(x, list):
                raise UnsupportedError("nablac.from_jax: gather from a scalar")
            flat = idx if isinstance(idx, list) else [idx]
            if not all(_num(i) for i in flat):
                raise UnsupportedError("nablac.from_jax: gather with a recorded (path-dependent) "
                                       "index")
            size = tuple(p["slice_sizes"])[0]
            picked = []
            for i in flat:
                s = min(max(int(i), 0), len(x) - size)
                picked.extend(x[s:s + size])
            outs = [_to_shape(picked, outs_shape[0], name)]
        elif name == "concatenate":
            r = []
            for x in ins:
                r.extend(x if isinstance(x, list) else [x])
            outs = [r]
        elif name == "scan":
            outs = _scan(p, ins)
        else:
            raise UnsupportedError(
                "nablac.from_jax: the JAX primitive %r has no tape operation; supported: %s"
                % (name, ", ".join(_supported())))
        if len(outs) != len(eqn.outvars):
            raise UnsupportedError("nablac.from_jax: %s gave %d results for %d"
                                   % (name, len(outs), len(eqn.outvars)))
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def _scan(p, ins):
    body = p["jaxpr"]
    inner, cs = (body.jaxpr, list(body.consts)) if hasattr(body, "jaxpr") else (body, [])
    nc, ncarry, length = p["num_consts"], p["num_carry"], int(p["length"])
    consts, carry, xs = ins[:nc], ins[nc:nc + ncarry], ins[nc + ncarry:]
    for x in xs:
        if not isinstance(x, list) or len(x) != length:
            raise UnsupportedError("nablac.from_jax: scan over xs that are not 1-D arrays of its "
                                   "length %d" % length)
    order = range(length - 1, -1, -1) if p.get("reverse") else range(length)
    ys = {}
    for i in order:
        r = _eval(inner, cs, list(consts) + list(carry) + [x[i] for x in xs])
        carry = r[:ncarry]
        ys[i] = r[ncarry:]
    nys = len(inner.outvars) - ncarry
    stacked = [[ys[i][k] for i in range(length)] for k in range(nys)]
    return list(carry) + stacked


def from_jax(fn, *example_args):
    """A tape of the per-path JAX function ``fn``, traced at ``example_args``; see the stub."""
    try:
        import jax
    except ImportError as e:
        raise UnsupportedError("nablac.from_jax needs JAX (pip install jax): %s" % e) from None
    import numpy as np

    params = list(inspect.signature(fn).parameters)
    if len(params) < len(example_args):
        raise RecordError("nablac.from_jax: %d example arguments for %d parameters"
                          % (len(example_args), len(params)))
    arrays = [i for i, a in enumerate(example_args) if np.ndim(a) != 0]
    if len(arrays) > 1:
        raise RecordError("nablac.from_jax: one array argument (the normal draws) at most, not %d"
                          % len(arrays))
    for i in arrays:
        if np.ndim(example_args[i]) != 1:
            raise RecordError("nablac.from_jax: the draws argument %s must be 1-D" % params[i])
    closed, shape = jax.make_jaxpr(fn, return_shape=True)(*example_args)
    leaves, _ = jax.tree_util.tree_flatten(shape)
    if isinstance(shape, dict):
        names = [str(k) for k in sorted(shape)]
    elif isinstance(shape, (tuple, list)):
        names = ["price"] + ["out%d" % k for k in range(1, len(leaves))]
    else:
        names = ["price"]
    if len(names) != len(leaves) or any(_shape(l) != () for l in leaves):
        raise UnsupportedError("nablac.from_jax: fn must return a scalar, or a flat tuple or dict "
                               "of scalars")
    with record() as t:
        args = []
        for i, a in enumerate(example_args):
            if i in arrays:
                args.append([t.normal(k) for k in range(len(np.asarray(a)))])
            else:
                args.append(t.input(params[i], float(a)))
        outs = _eval(closed.jaxpr, list(closed.consts), args)
        for n, o in zip(names, outs):
            t.output(n, o)
    return t.tape
