"""Compiling and running release the GIL: Python keeps running beside them, and two runs in two
threads give the bits of two runs one after the other."""
import threading
import time

import numpy as np

import nablac


def asian(steps):
    return nablac.product("asian", steps=steps)


def longest_pause_while(work):
    """Runs ``work`` in a thread; returns (its result, the longest gap between two iterations of a
    Python loop on this thread while it ran, how long it ran)."""
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", work()))
    started = time.perf_counter()
    th.start()
    last, gap = time.perf_counter(), 0.0
    while th.is_alive():
        now = time.perf_counter()
        gap = max(gap, now - last)
        last = now
        sum(range(100))
    th.join()
    return out.get("r"), gap, time.perf_counter() - started


def test_run_releases_the_gil():
    t = asian(252)
    nablac.run(t, paths=1024, seed=1, threads=1)  # the kernel's compile out of the way
    r, gap, took = longest_pause_while(lambda: nablac.run(t, paths=400_000, seed=1, threads=1))
    assert r is not None and took > 0.2, took
    # Holding the GIL, the loop would stall for the whole run.
    assert gap < took / 4, (gap, took)


def test_compile_releases_the_gil():
    t = asian(4000)
    k, gap, took = longest_pause_while(lambda: nablac.compile(t, mode="reverse"))
    assert k is not None and took > 0.1, took
    assert gap < took / 2, (gap, took)


def test_two_threads_run_concurrently_with_the_same_bits():
    t = asian(52)
    seeds = [3, 4]
    serial = [nablac.run(t, paths=200_000, seed=s, threads=1) for s in seeds]
    results = [None, None]

    def go(i):
        results[i] = nablac.run(t, paths=200_000, seed=seeds[i], threads=1)

    ths = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    for a, b in zip(results, serial):
        assert (a.value, a.greeks, a.greek_stderr) == (b.value, b.greeks, b.greek_stderr)
    assert np.isfinite([r.value for r in results]).all()
