"""A chunk's kernels run while the iterative executor reads the next chunk
(:mod:`analysis.data.overlap`): the merged states are those of the sequential pass bit
for bit (4 chunks per dataset, merged in chunk order), one chunk computes at a time, on
the chunk thread, and a chunk whose kernels raise is the same fault (the same one-line
error) as without the overlap."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import jax
import numpy as np
import pytest

import processors.diff_processor as dp
from analysis.data.overlap import AHEAD
from analysis.driver.runner import Evaluator
from analysis.errors import InputError
from tests import opt_helpers as H


@contextmanager
def _sequential(monkeypatch):
    """Passes without the overlap (the processor's reading options drop it)."""
    real = dp.DiffProcessor.reading

    def reading(self, **options):
        options.pop("overlap", None)
        return real(self, **options)

    with monkeypatch.context() as m:
        m.setattr(dp.DiffProcessor, "reading", reading)
        yield


def _leaves(states) -> dict:
    out = {}
    for name, s in states.items():
        for part in ("value", "jac"):
            for path, leaf in jax.tree_util.tree_leaves_with_path(getattr(s.derived, part)):
                out[name, part, jax.tree_util.keystr(path)] = np.asarray(leaf)
        out[name, "events"] = np.asarray([s.events, s.sumw, s.chunks])
    return out


def test_overlapped_pass_is_the_sequential_pass_bit_for_bit(small_data, monkeypatch) -> None:
    cfg = H.make_config(small_data, executor={"type": "iterative"})
    running, most, threads = [0], [0], set()
    read, done, held = [0], [0], [0]  # chunks read, computed; most read and not computed
    lock = threading.Lock()
    real, real_read = dp.DiffProcessor.evaluate, dp.extract_columns

    def evaluate(self, dataset, cols):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threads.add(threading.current_thread().name)
        try:
            time.sleep(0.05)  # slower than reading: a reader not held back would run ahead
            return real(self, dataset, cols)
        finally:
            with lock:
                running[0] -= 1
                done[0] += 1

    def extract_columns(*args, **kwargs):
        with lock:
            read[0] += 1
            held[0] = max(held[0], read[0] - done[0])
        return real_read(*args, **kwargs)

    monkeypatch.setattr(dp.DiffProcessor, "evaluate", evaluate)
    monkeypatch.setattr(dp, "extract_columns", extract_columns)
    with Evaluator(cfg, cache=False) as ev:
        assert len(ev.chunks) == 8  # 4 per dataset: the merge order shows in the bits
        with _sequential(monkeypatch):
            want = ev.run(order=1)
        assert threads == {threading.current_thread().name}
        threads.clear()
        read[0] = done[0] = held[0] = 0
        got = ev.run(order=1)
    assert most[0] == 1  # one chunk computes at a time
    # one chunk computing, one waiting, one being read: no more columns held (fewer when
    # reading is slower than the 50 ms compute, as on a loaded machine: the bound is the point)
    assert AHEAD + 1 == 3
    assert 1 <= held[0] <= AHEAD + 1
    assert threads and not threads & {threading.current_thread().name}  # on the chunk thread
    a, b = _leaves(want), _leaves(got)
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key


def test_a_chunk_whose_kernels_raise_is_the_same_fault(small_data, monkeypatch) -> None:
    cfg = H.make_config(small_data, executor={"type": "iterative"})
    calls = [0]
    real = dp.DiffProcessor.evaluate

    def evaluate(self, dataset, cols):
        calls[0] += 1
        if dataset == "dy" and calls[0] % 8 == 6:  # the second chunk of dy
            raise InputError("histogram 'x': too many uncertain objects")
        return real(self, dataset, cols)

    monkeypatch.setattr(dp.DiffProcessor, "evaluate", evaluate)
    messages = []
    with Evaluator(cfg, cache=False) as ev:
        for overlap in (False, True):
            calls[0] = 0
            with pytest.raises(InputError) as err:
                if overlap:
                    ev.run(order=1)
                else:
                    with _sequential(monkeypatch):
                        ev.run(order=1)
            messages.append(str(err.value))
    assert "too many uncertain objects" in messages[0]
    assert messages[1] == messages[0]


def test_cached_chunks_compute_on_the_chunk_thread(small_data, monkeypatch) -> None:
    """The column cache's chunks (evaluated by the driver) run on the chunk thread too, as
    the chunks read (one set of the kernels' per-thread scratch), with the same states."""
    cfg = H.make_config(small_data, executor={"type": "iterative"})
    threads = []
    real = dp.DiffProcessor.evaluate

    def evaluate(self, dataset, cols):
        threads.append(threading.current_thread().name)
        return real(self, dataset, cols)

    monkeypatch.setattr(dp.DiffProcessor, "evaluate", evaluate)
    with Evaluator(cfg) as ev:
        first = ev.run(order=1)
        threads.clear()
        again = ev.run(order=1)  # every chunk from the cache
    assert len(threads) == 8 and all(t.startswith("chunk-kernels") for t in threads)
    a, b = _leaves(first), _leaves(again)
    for key in a:
        assert np.array_equal(a[key], b[key]), key
