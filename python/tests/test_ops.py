"""Every operator and ufunc: the tape it records is the hand-written tape of the same expression
(TAPE-FORMAT.md's text form), the runs are bit for bit the same, and the value is numpy's
evaluation of the expression over `nablac.draws` (to rounding: numpy's libm is not the kernel's)."""
import math

import numpy as np
import pytest

import nablac

X, Y = 1.3, 0.7
HEAD = """\
%0 = input x 1.3
%1 = input y 0.7
%2 = normal 0
%3 = mul %0 %2
"""

# (name, recorded from (a, y), numpy from (a, y), the tape's nodes after HEAD, output node)
CASES = [
    ("add", lambda a, y: a + y, lambda a, y: a + y, "%4 = add %3 %1", 4),
    ("sub", lambda a, y: a - y, lambda a, y: a - y, "%4 = sub %3 %1", 4),
    ("mul", lambda a, y: a * y, lambda a, y: a * y, "%4 = mul %3 %1", 4),
    ("div", lambda a, y: a / y, lambda a, y: a / y, "%4 = div %3 %1", 4),
    ("neg", lambda a, y: -a, lambda a, y: -a, "%4 = neg %3", 4),
    ("radd const", lambda a, y: 2.5 + a, lambda a, y: 2.5 + a,
     "%4 = const 2.5\n%5 = add %4 %3", 5),
    ("rsub const", lambda a, y: 2.5 - a, lambda a, y: 2.5 - a,
     "%4 = const 2.5\n%5 = sub %4 %3", 5),
    ("div const", lambda a, y: a / 4, lambda a, y: a / 4, "%4 = const 4\n%5 = div %3 %4", 5),
    ("rdiv int", lambda a, y: 1 / (a * a + y), lambda a, y: 1 / (a * a + y),
     "%4 = mul %3 %3\n%5 = add %4 %1\n%6 = const 1\n%7 = div %6 %5", 7),
    ("square", lambda a, y: a ** 2, lambda a, y: a ** 2, "%4 = mul %3 %3", 4),
    ("cube", lambda a, y: a ** 3, lambda a, y: a ** 3, "%4 = mul %3 %3\n%5 = mul %3 %4", 5),
    ("power -2", lambda a, y: (a + 3.0) ** -2, lambda a, y: (a + 3.0) ** -2.0,
     "%4 = const 3\n%5 = add %3 %4\n%6 = mul %5 %5\n%7 = const 1\n%8 = div %7 %6", 8),
    ("pow", lambda a, y: y ** a, lambda a, y: y ** a, "%4 = pow %1 %3", 4),
    ("pow const", lambda a, y: y ** 0.5, lambda a, y: y ** 0.5 + 0 * a,
     "%4 = const 0.5\n%5 = pow %1 %4", 5),
    ("rpow", lambda a, y: 2.0 ** a, lambda a, y: 2.0 ** a, "%4 = const 2\n%5 = pow %4 %3", 5),
    ("lt", lambda a, y: a < y, lambda a, y: (a < y) * 1.0, "%4 = lt %3 %1", 4),
    ("le", lambda a, y: a <= y, lambda a, y: (a <= y) * 1.0, "%4 = le %3 %1", 4),
    ("gt", lambda a, y: a > y, lambda a, y: (a > y) * 1.0, "%4 = gt %3 %1", 4),
    ("ge", lambda a, y: a >= y, lambda a, y: (a >= y) * 1.0, "%4 = ge %3 %1", 4),
    ("rgt const", lambda a, y: 0.5 < a, lambda a, y: (a > 0.5) * 1.0,
     "%4 = const 0.5\n%5 = gt %3 %4", 5),
    ("eq", lambda a, y: a == y, lambda a, y: (a == y) * 1.0,
     "%4 = le %3 %1\n%5 = ge %3 %1\n%6 = mul %4 %5", 6),
    ("and", lambda a, y: (a > y) & (a < 2.0), lambda a, y: ((a > y) & (a < 2.0)) * 1.0,
     "%4 = gt %3 %1\n%5 = const 2\n%6 = lt %3 %5\n%7 = mul %4 %6", 7),
    ("or", lambda a, y: (a > y) | (a < -1.0), lambda a, y: ((a > y) | (a < -1.0)) * 1.0,
     "%4 = gt %3 %1\n%5 = const -1\n%6 = lt %3 %5\n%7 = max %4 %6", 7),
    ("not", lambda a, y: ~(a > y), lambda a, y: (a <= y) * 1.0,
     "%4 = gt %3 %1\n%5 = const 1\n%6 = sub %5 %4", 6),
    ("abs", lambda a, y: abs(a), lambda a, y: np.abs(a), "%4 = abs %3", 4),
    ("np.abs", lambda a, y: np.abs(a), lambda a, y: np.abs(a), "%4 = abs %3", 4),
    ("np.exp", lambda a, y: np.exp(a), lambda a, y: np.exp(a), "%4 = exp %3", 4),
    ("np.log", lambda a, y: np.log(y), lambda a, y: np.log(y) + 0 * a, "%4 = log %1", 4),
    ("np.log abs", lambda a, y: np.log(np.abs(a)), lambda a, y: np.log(np.abs(a)),
     "%4 = abs %3\n%5 = log %4", 5),
    ("np.sqrt", lambda a, y: np.sqrt(np.abs(a)), lambda a, y: np.sqrt(np.abs(a)),
     "%4 = abs %3\n%5 = sqrt %4", 5),
    ("np.tanh", lambda a, y: np.tanh(a), lambda a, y: np.tanh(a), "%4 = tanh %3", 4),
    ("np.maximum", lambda a, y: np.maximum(a, y), np.maximum, "%4 = max %3 %1", 4),
    ("np.minimum", lambda a, y: np.minimum(a, y), np.minimum, "%4 = min %3 %1", 4),
    ("np.maximum const", lambda a, y: np.maximum(a, 0.0), lambda a, y: np.maximum(a, 0.0),
     "%4 = const 0\n%5 = max %3 %4", 5),
    ("np.square", lambda a, y: np.square(a), lambda a, y: a * a, "%4 = mul %3 %3", 4),
    ("np.negative", lambda a, y: np.negative(a), lambda a, y: -a, "%4 = neg %3", 4),
    ("np.multiply", lambda a, y: np.multiply(2.0, a), lambda a, y: 2.0 * a,
     "%4 = const 2\n%5 = mul %4 %3", 5),
    ("np.float64 *", lambda a, y: np.float64(2.0) * a, lambda a, y: 2.0 * a,
     "%4 = const 2\n%5 = mul %4 %3", 5),
    ("ncdf", lambda a, y: nablac.ncdf(a), None, "%4 = ncdf %3", 4),
    ("np.where", lambda a, y: np.where(a > y, a, y * 2.0),
     lambda a, y: np.where(a > y, a, y * 2.0), """\
%4 = gt %3 %1
%5 = const 2
%6 = mul %1 %5
%7 = const 2
%8 = mul %7 %4
%9 = const 1
%10 = sub %8 %9
%11 = const 3e38
%12 = mul %10 %11
%13 = neg %12
%14 = min %3 %12
%15 = min %6 %13
%16 = max %14 %15""", 16),
    ("np.where of a value", lambda a, y: np.where(a, 1.0, 0.0),
     lambda a, y: (a != 0) * 1.0, """\
%4 = abs %3
%5 = const 0
%6 = gt %4 %5
%7 = const 2
%8 = mul %7 %6
%9 = const 1
%10 = sub %8 %9
%11 = const 3e38
%12 = mul %10 %11
%13 = neg %12
%14 = const 1
%15 = min %14 %12
%16 = const 0
%17 = min %16 %13
%18 = max %15 %17""", 18),
    ("np.clip", lambda a, y: np.clip(a, -0.5, y), lambda a, y: np.clip(a, -0.5, y), """\
%4 = const -0.5
%5 = max %3 %4
%6 = min %5 %1""", 6),
]

PATHS, SEED = 4096, 11


def recorded(f):
    with nablac.record() as t:
        x, y = t.input("x", X), t.input("y", Y)
        a = x * t.normal()
        t.output("out", f(a, y))
    return t


def written(nodes, out):
    version = 2 if any(op in nodes for op in (" lt ", " le ", " gt ", " ge ", " pow ", " tanh ",
                                               " ncdf ")) else 1
    return nablac.parse("nablatape %d\n%s%s\noutput out = %%%d\n" % (version, HEAD, nodes, out))


def bits(r):
    return (r.value, r.stderr, r.greeks, r.greek_stderr, r.non_finite)


@pytest.mark.parametrize("name,f,ref,nodes,out", CASES, ids=[c[0] for c in CASES])
def test_op_records_the_written_tape(name, f, ref, nodes, out, tree):
    t = recorded(f)
    w = written(nodes, out)
    assert t.text == w.text
    assert t.tape == w
    for mode in ("reverse", "forward"):
        assert bits(nablac.run(t, PATHS, SEED, mode=mode)) == bits(nablac.run(w, PATHS, SEED,
                                                                               mode=mode))
    # The value is what numpy computes for the same expression on the same draws.
    if ref is None:
        from math import erfc
        ref = lambda a, y: np.array([0.5 * erfc(-v / math.sqrt(2.0)) for v in a])  # noqa: E731
    z = nablac.draws(SEED, PATHS, 1)[:, 0]
    expected = tree(ref(X * z, Y))
    got = nablac.run(t, PATHS, SEED, mode="price").value
    assert got == pytest.approx(expected, rel=1e-13, abs=1e-15), name


def test_where_never_leaks_the_side_not_taken():
    # sqrt of a negative number is NaN; np.where must not let it into the value.
    with nablac.record() as t:
        x = t.input("x", 1.0)
        a = x * t.normal()
        t.output("out", np.where(a > 0.0, np.sqrt(a), 0.0))
    for mode in ("price", "forward"):
        r = nablac.run(t, 4096, 3, mode=mode)
        assert r.non_finite == 0, mode
        z = nablac.draws(3, 4096, 1)[:, 0]
        assert r.value == pytest.approx(np.mean(np.sqrt(np.maximum(z, 0.0))), rel=1e-12)


def test_integer_powers_of_a_negative_base_are_finite():
    with nablac.record() as t:
        x = t.input("x", -2.0)
        t.output("out", x ** 3 + x ** 2.0)
    r = nablac.run(t, 1024, 0)
    assert r.value == -8.0 + 4.0
    assert r.greeks["x"] == 3 * 4.0 - 4.0


def test_draws_are_the_kernels_draws(tree):
    with nablac.record() as t:
        zs = t.normals(3)
        u = t.uniform()
        t.output("z0", zs[0])
        t.output("z2", zs[2])
        t.output("u", u)
    d = nablac.draws(99, 5000, 3)
    assert d.shape == (5000, 3) and d.dtype == np.float64
    u = nablac.draws(99, 5000, 1, kind="uniform")
    # The Cranelift CPU kernel takes them with the host's libm: the same bits.
    r = nablac.run(t, 5000, 99, mode="price", cpu_backend="cranelift")
    assert r.value["z0"] == tree(d[:, 0])
    assert r.value["z2"] == tree(d[:, 2])
    assert r.value["u"] == tree(u[:, 0])
    one = nablac.run(t, 1, 99, cpu_backend="cranelift")
    assert one.value["z2"] == d[0, 2]
    # The LLVM CPU kernel's vector log and cos are within a few ulp of libm's (compiler/src/llvm/
    # math.rs), so its draws are too.
    r = nablac.run(t, 5000, 99, mode="price")
    for k, col in (("z0", d[:, 0]), ("z2", d[:, 2]), ("u", u[:, 0])):
        assert r.value[k] == pytest.approx(tree(col), rel=1e-12, abs=1e-15)
    # f32 draws are the GPU kernels' default: different bits, the same distribution.
    f = nablac.draws(99, 5000, 3, precision="f32")
    assert not np.array_equal(f, d) and abs(f.mean()) < 0.05
