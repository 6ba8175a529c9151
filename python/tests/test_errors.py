"""Branches on recorded values raise, and every bad input raises a nablac.Error (never a crash)."""
import numpy as np
import pytest

import nablac


def european():
    with nablac.record() as t:
        spot, strike = t.input("spot", 100.0), t.input("strike", 100.0)
        st = spot * np.exp(0.2 * t.normal())
        t.output("price", np.maximum(st - strike, 0.0))
    return t


def test_if_on_a_recorded_value_raises_naming_the_line():
    with pytest.raises(nablac.BranchError) as e:
        with nablac.record() as t:
            x = t.input("x", 1.0)
            k = 0.5
            if x > k:  # the line the error names
                t.output("y", x)
    line = next(i for i, l in enumerate(open(__file__), 1) if "the line the error names" in l)
    msg = str(e.value)
    assert msg.startswith("%s:%d:" % (__file__, line)), msg
    assert "np.where" in msg
    assert isinstance(e.value, nablac.Error)


@pytest.mark.parametrize("use", [
    lambda x: x and 1.0,
    lambda x: not x,
    lambda x: bool(x < 1.0),
    lambda x: 1.0 if x else 0.0,
    lambda x: float(x),
    lambda x: int(x),
    lambda x: [1.0, 2.0][x],
])
def test_python_control_flow_and_freezing_raise(use):
    with nablac.record() as t:
        x = t.input("x", 1.0)
        with pytest.raises(nablac.RecordError):
            use(x)
        t.output("y", x)


def test_recording_mistakes():
    with nablac.record() as t:
        x = t.input("x", 1.0)
        with pytest.raises(nablac.RecordError, match="not valid"):
            t.input("bad name", 1.0)
        with pytest.raises(nablac.RecordError, match="used twice"):
            t.input("x", 2.0)
        with pytest.raises(nablac.RecordError, match="finite"):
            t.input("y", float("nan"))
        with pytest.raises(nablac.RecordError, match="not finite"):
            x * float("inf")
        with pytest.raises(nablac.UnsupportedError, match="np.sin"):
            np.sin(x)
        with pytest.raises(nablac.UnsupportedError):
            np.add.reduce(x)
        t.output("y", x)
        with pytest.raises(nablac.RecordError, match="used twice"):
            t.output("y", x)
    with pytest.raises(nablac.RecordError, match="finished"):
        x + 1.0
    with nablac.record() as u:
        with pytest.raises(nablac.RecordError, match="another recording"):
            u.input("z", 1.0) + x
        u.output("z", 1.0)
    with pytest.raises(nablac.RecordError, match="no output"):
        with nablac.record() as v:
            v.input("x", 1.0)
    with pytest.raises(nablac.RecordError, match="still open"):
        with nablac.record() as w:
            w.output("x", w.input("x", 1.0))
            nablac.run(w)


def test_bad_tapes_and_files(tmp_path):
    with pytest.raises(nablac.TapeError, match="line 2:6: unknown op `bogus`"):
        nablac.parse("nablatape 1\n%0 = bogus 3\noutput y = %0\n")
    with pytest.raises(nablac.TapeError):
        nablac.parse("nablatape 1\n%0 = add %1 %2\noutput y = %0\n")
    with pytest.raises(nablac.TapeError):
        nablac.parse(b"NTAP\x01\x00garbage")
    with pytest.raises(nablac.TapeError):
        nablac.parse("")
    with pytest.raises(nablac.FileError):
        nablac.load(str(tmp_path / "missing.ntape"))
    with pytest.raises(OSError):
        nablac.load(str(tmp_path / "missing.ntape"))
    with pytest.raises(nablac.FileError):
        european().save(str(tmp_path / "no" / "such" / "dir.ntape"))
    with pytest.raises(nablac.OptionError):
        nablac.parse(42)
    with pytest.raises(nablac.OptionError, match="unknown product"):
        nablac.product("swaption")
    with pytest.raises(nablac.OptionError, match="steps"):
        nablac.product("asian", steps=0)


def test_bad_compile_requests_name_options_as_keywords():
    t = european()
    with pytest.raises(nablac.CompileError) as e:
        nablac.compile(t, target="cuda", checkpoint="off", segments=8)
    assert str(e.value) == ("segments=8 contradicts checkpoint='off' (the plain kernel has one "
                            "segment)")
    with pytest.raises(nablac.CompileError, match="segments=8 is not for the cpu target"):
        nablac.compile(t, segments=8)
    with pytest.raises(nablac.CompileError, match="greek_stderr does nothing with mode='price'"):
        nablac.run(t, mode="price", greek_stderr=False)
    with pytest.raises(nablac.OptionError, match="unknown compile option bogus"):
        nablac.compile(t, bogus=1)
    with pytest.raises(nablac.OptionError, match="target='gpu'"):
        nablac.compile(t, target="gpu")
    with pytest.raises(nablac.OptionError, match="mode='fast'"):
        nablac.compile(t, mode="fast")
    with pytest.raises(nablac.OptionError, match="precision"):
        nablac.compile(t, precision="f16")
    with pytest.raises(nablac.OptionError, match="segments=-1"):
        nablac.compile(t, target="cuda", segments=-1)
    with pytest.raises(nablac.OptionError, match="annotate"):
        nablac.compile(t, target="cuda", annotate=1)
    with pytest.raises(nablac.CompileError,
                       match="loops with mode='reverse' is for the GPU targets: the cpu "
                             "target's reverse kernel is unrolled"):
        nablac.compile(t, mode="reverse", loops=True)
    with pytest.raises(nablac.CompileError,
                       match="loops with mode='reverse' does nothing with segments"):
        nablac.compile(t, target="cuda", mode="reverse", loops=True, segments=4)
    k = nablac.compile(t, mode="reverse")
    with pytest.raises(nablac.CompileError, match="segments applies when compiling a tape"):
        nablac.run(k, segments=4)
    with pytest.raises(nablac.OptionError):
        nablac.compile(k)


def test_bad_run_arguments():
    t = european()
    with pytest.raises(nablac.OptionError, match="paths must be between 1 and 2\\^63 - 1, not 0"):
        nablac.run(t, paths=0)
    with pytest.raises(nablac.OptionError):
        nablac.run(t, paths=2.5)
    with pytest.raises(nablac.OptionError, match="seed"):
        nablac.run(t, seed=-1)
    with pytest.raises(nablac.OptionError, match="seed"):
        nablac.run(t, seed=2**64)
    with pytest.raises(nablac.OptionError, match="threads"):
        nablac.run(t, threads=0)
    with pytest.raises(nablac.OptionError, match="threads is for the cpu target"):
        nablac.run(t, target="cuda", threads=2)
    with pytest.raises(nablac.OptionError, match="the tape has no input rho"):
        nablac.run(t, market={"rho": 0.5})
    with pytest.raises(nablac.OptionError, match="1-D array .* not one of shape \\(2, 1\\)"):
        nablac.run(t, market={"spot": np.array([[90.0], [100.0]])})
    with pytest.raises(nablac.OptionError, match="at least one number"):
        nablac.run(t, market={"spot": []})
    with pytest.raises(nablac.OptionError, match="non-finite"):
        nablac.run(t, market={"spot": [90.0, np.nan]})
    with pytest.raises(nablac.OptionError, match="the tape has no input rho"):
        nablac.run(t, market={"rho": [0.1, 0.2]})
    with pytest.raises(nablac.OptionError, match="at most 100000"):
        nablac.run(t, market={"spot": np.ones(1000), "strike": np.ones(1000)})
    with pytest.raises(nablac.OptionError):
        nablac.run(t, market={"spot": "high"})
    with pytest.raises(nablac.OptionError):
        nablac.run("european.ntape")
    k = nablac.compile(t)
    with pytest.raises(nablac.OptionError, match="the kernel is for cpu"):
        nablac.run(k, target="cuda")
    assert nablac.run(t, paths=1e4).paths == 10_000


def test_a_missing_gpu_is_an_error_not_a_crash():
    # This machine may or may not have a GPU driver: either a result or a RunError.
    t = european()
    for target in ("cuda", "opencl", "vulkan"):
        try:
            r = nablac.run(t, paths=2048, target=target)
        except nablac.RunError as e:
            assert "backend" in str(e) or "kernel" in str(e), str(e)
        else:
            assert r.target == ("glsl" if target == "vulkan" else target)


def test_non_finite_paths_warn_or_fail_when_strict():
    with nablac.record() as t:
        x = t.input("x", 1.0)
        t.output("root", np.sqrt(x * t.normal()))
    with pytest.warns(nablac.NonFiniteWarning, match="root"):
        r = nablac.run(t, paths=4096, seed=1)
    assert 1000 < r.non_finite < 3000
    with pytest.raises(nablac.RunError, match="strict"):
        nablac.run(t, paths=4096, seed=1, strict=True)


def test_draws_arguments():
    with pytest.raises(nablac.OptionError):
        nablac.draws(1, 10, 2, kind="cauchy")
    with pytest.raises(nablac.OptionError):
        nablac.draws(1, 10, 2, precision="f16")
    with pytest.raises(nablac.OptionError, match="more than one array"):
        nablac.draws(1, 2**40, 1000)
    with pytest.raises((OverflowError, TypeError)):
        nablac.draws(-1, 10, 2)
