"""The numba kernel's thread helpers: every block exactly once, whatever the threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from analysis.pipeline.backends.numba._fastpool import _run_blocks, _run_dynamic


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
    ranges would leave half of them behind the slow one)."""
    order = []
    release = threading.Event()

    def kernel(b0, b1):
        if b0 == 0:
            release.wait(5.0)  # the first block waits until the others are done
        order.append(b0)
        if len(order) == 7:
            release.set()

    _run_dynamic(kernel, (), 8, 2)
    assert sorted(order) == list(range(8)) and order[-1] == 0
