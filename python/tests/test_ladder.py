"""Ladders from arrays: a market value given as a 1-D array runs a fused ladder, several arrays
a grid; every market's results are the bits of a run at that market alone."""

import numpy as np
import pytest

import nablac

PATHS = 20_000


def single(tape, **market):
    return nablac.run(tape, paths=PATHS, seed=7, mode="reverse", market=market)


def assert_market_bits(r, idx, alone):
    for name, o in r.outputs.items():
        a = alone[name]
        assert o.value[idx] == a.value, (name, idx)
        assert o.stderr[idx] == a.stderr, (name, idx)
        assert o.non_finite[idx] == a.non_finite
        assert set(o.greeks) == set(a.greeks)
        for i, g in o.greeks.items():
            assert g[idx] == a.greeks[i], (name, i, idx)
            assert o.greek_stderr[i][idx] == a.greek_stderr[i], (name, i, idx)


def test_a_ladder_gives_each_markets_bits_of_a_run_alone():
    t = nablac.product("european")
    spots = np.array([80.0, 95.0, 100.0, 111.5, 130.0])
    # At these few paths fusing does not pay for its compile (the cost model runs the markets
    # one by one): `markets` fuses them all into one kernel.
    r = nablac.run(t, paths=PATHS, seed=7, mode="reverse", market={"spot": spots, "vol": 0.25},
                   markets=5)
    assert r.shape == (5,)
    assert r.fused_markets == 5
    assert r.value.shape == (5,) and r.greeks["spot"].shape == (5,)
    np.testing.assert_array_equal(r.markets["spot"], spots)
    assert r.market["vol"] == 0.25
    for k, s in enumerate(spots):
        assert_market_bits(r, k, single(t, spot=s, vol=0.25))
    # A call's value rises with spot: the markets are not one market repeated.
    assert np.all(np.diff(r.value) > 0)


def test_several_arrays_run_their_grid():
    t = nablac.product("european")
    spots, vols = [90.0, 100.0, 110.0], np.array([0.15, 0.3])
    r = nablac.run(t, paths=PATHS, seed=7, mode="reverse", market={"spot": spots, "vol": vols},
                   markets=4)
    assert r.shape == (3, 2) and r.fused_markets == 4
    assert r.value.shape == (3, 2) and r.greeks["vol"].shape == (3, 2)
    for i, s in enumerate(spots):
        for j, v in enumerate(vols):
            assert r.markets["spot"][i, j] == s and r.markets["vol"][i, j] == v
            assert_market_bits(r, (i, j), single(t, spot=s, vol=v))


def test_a_ladder_as_dict_and_table():
    pd = pytest.importorskip("pandas")
    t = nablac.product("european")
    r = nablac.run(t, paths=PATHS, seed=7, mode="reverse", market={"spot": [90.0, 110.0]})
    d = r.to_dict()
    assert d["fused_markets"] == r.fused_markets
    assert [m["market"]["spot"] for m in d["markets"]] == [90.0, 110.0]
    name = next(iter(r.outputs))
    assert d["markets"][1]["outputs"][name]["value"] == r.value[1]
    df = r.to_pandas()
    assert isinstance(df, pd.DataFrame)
    assert list(df.index.get_level_values("spot")) == [90.0, 110.0]
    assert df[(name, "value", "estimate")].tolist() == r.value.tolist()
    assert df[(name, "d/dspot", "stderr")].tolist() == r.greek_stderr["spot"].tolist()
    assert "ladder of 2 markets" in repr(r)


def test_a_kernel_compiled_alone_runs_a_ladder_market_by_market():
    t = nablac.product("european")
    k = nablac.compile(t, mode="reverse")
    r = nablac.run(k, paths=PATHS, seed=7, market={"spot": [90.0, 110.0]})
    assert r.fused_markets == 1
    for k_, s in enumerate([90.0, 110.0]):
        assert_market_bits(r, k_, nablac.run(k, paths=PATHS, seed=7, market={"spot": s}))


def test_a_zero_dimensional_array_is_a_number_not_a_ladder():
    t = nablac.product("european")
    r = nablac.run(t, paths=PATHS, seed=7, mode="reverse", market={"spot": np.array(95.0)})
    assert r.shape is None and r.markets is None
    assert r.value == single(t, spot=95.0).value
