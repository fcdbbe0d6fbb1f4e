"""The numba kernel's thread helpers: every block exactly once, whatever the threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from analysis.pipeline.backends.numba._fastpool import _run_blocks, _run_dynamic, yield_sums


@pytest.mark.parametrize("run", [_run_blocks, _run_dynamic])
@pytest.mark.parametrize("n_blocks, threads", [(1, 2), (7, 2), (10, 3), (5, 1)])
def test_every_block_once(run, n_blocks, threads):
    seen = np.zeros(n_blocks, np.int64)
    names = set()
    lock = threading.Lock()

    def kernel(out, b0, b1):
        with lock:
            names.add(threading.current_thread().name)
        for b in range(b0, b1):
            out[b] += 1

    run(kernel, (seen,), n_blocks, threads)
    assert seen.tolist() == [1] * n_blocks
    assert len(names) <= min(threads, n_blocks)


def test_dynamic_blocks_even_out_uneven_costs():
    """One slow block: the other thread takes every other block meanwhile (contiguous
    ranges would leave half of them behind the slow one); a call takes a share of the
    blocks left (half of them over the threads: 2 of 8 with 2 threads), so the slow
    call holds at most 2."""
    order: list[int] = []
    lock = threading.Lock()
    waited = []

    def kernel(b0, b1):
        if b0 == 0:  # the slow block: its call waits until every other block is done
            t0 = time.monotonic()
            while len(order) < 8 - (b1 - b0) and time.monotonic() - t0 < 5.0:
                time.sleep(0.001)
            waited.append(time.monotonic() - t0)
        with lock:
            order.extend(range(b0, b1))

    _run_dynamic(kernel, (), 8, 2)
    assert sorted(order) == list(range(8))
    assert order.index(0) >= 6 and waited[0] < 4.0  # the others went on meanwhile


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("np1", [1, 3, 8])
def test_yield_sums_are_the_plain_sums_in_block_order(np1, threads):
    """The selected yield's sums (``w = ev_0 pe_0``: sum w, sum w^2 and their tangents by
    the product rule) equal a plain loop over the events, block by block, each block's
    sums added in block order: bit for bit, for any number of threads."""
    rng = np.random.default_rng(3)
    n, block = 1000, 64
    ev, pe = rng.normal(size=(n, 8)), rng.uniform(size=(n, 8))
    ref = np.zeros((2, np1))
    for b0 in range(0, n, block):
        part = np.zeros((2, np1))
        for e in range(b0, min(n, b0 + block)):
            w = ev[e, 0] * pe[e, 0]
            part[0, 0] += w
            part[1, 0] += w * w
            for k in range(1, np1):
                d = ev[e, k] * pe[e, 0] + ev[e, 0] * pe[e, k]
                part[0, k] += d
                part[1, k] += 2.0 * w * d
        ref += part
    got = yield_sums(ev, pe, np1, block, threads)
    np.testing.assert_array_equal(got.view(np.int64), ref.view(np.int64))


@pytest.mark.parametrize("np1", [1, 5])
def test_yield_sums_of_weights_alone_equal_the_lanes(np1):
    """Event weights without tangents, ``(E,)``: the sums of an ``(E, LANES)`` array of
    them with zero tangents, bit for bit (NaN, infinities and signed zeros included)."""
    rng = np.random.default_rng(4)
    n = 700
    w = rng.normal(size=n)
    pe = rng.uniform(size=(n, 8)) - 0.5
    w[[3, 4, 5]] = [-0.0, 0.0, -2.0]
    pe[4, 0], pe[5, :] = np.nan, -0.0
    pe[6, 2] = np.inf
    ev = np.zeros((n, 8))
    ev[:, 0] = w
    ref = yield_sums(ev, pe, np1, 64, 2)
    got = yield_sums(w, pe, np1, 64, 2)
    np.testing.assert_array_equal(got.view(np.int64), ref.view(np.int64))


def test_dynamic_blocks_few_calls():
    """50 blocks on 2 threads: a few calls per thread, not one per block (each call
    returns to Python and takes the GIL, which a thread reading the next chunk may hold:
    analysis.data.overlap), every block once."""
    calls = []
    lock = threading.Lock()

    def kernel(b0, b1):
        with lock:
            calls.append((b0, b1))

    _run_dynamic(kernel, (), 50, 2)
    assert sorted(b for c in calls for b in range(*c)) == list(range(50))
    assert len(calls) <= 20
