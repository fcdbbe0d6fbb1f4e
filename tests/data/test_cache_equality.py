"""Column cache: passes over cached columns equal passes that read the files, to 1e-12,
on all three executors, over several steps with changing parameters; histogram and
grid passes too; a spilled cache (budget 0) gives the same results."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.data.cache import COLUMNS_KEY, ColumnCache
from analysis.driver.runner import Evaluator
from tests.cache_helpers import STEPS, OpenCounter, assert_same, small_config
from tests.chunked_helpers import NANOAOD_WARNINGS

pytestmark = NANOAOD_WARNINGS


def _uncached(ev: Evaluator, call):
    """``call()`` with the evaluator's cache detached (every chunk read from its file)."""
    cache, ev.cache = ev.cache, None
    try:
        return call()
    finally:
        ev.cache = cache


def _steps_equal(ev: Evaluator) -> None:
    first = ev.run(STEPS[0])  # reads and fills the cache
    assert len(ev.cache) == len(ev.chunks) == 8
    assert_same(first, _uncached(ev, lambda: ev.run(STEPS[0])), plan=ev.plan)
    for params in STEPS[1:]:
        got = ev.run(params)
        want = _uncached(ev, lambda p=params: ev.run(p))
        assert_same(got, want, plan=ev.plan)


@pytest.mark.parametrize(
    "executor",
    [
        "iterative",
        pytest.param("futures", marks=pytest.mark.slow),  # ~20 s: a process pool per pass
        pytest.param("dask", marks=pytest.mark.slow),
    ],
)
def test_cached_steps_equal_uncached(executor, tmp_path):
    with Evaluator(small_config(tmp_path), executor=executor, workers=2) as ev:
        _steps_equal(ev)


@pytest.mark.slow  # ~40 s cold; cached == uncached steps run by default
def test_cached_order2_histogram_and_grid_equal_uncached(tmp_path, monkeypatch):
    with Evaluator(small_config(tmp_path)) as ev:
        ev.run(STEPS[0])
        opens = OpenCounter(monkeypatch)
        got = ev.run(STEPS[1], order=2)
        hist = ev.run_histograms(0, 10, 0.0, 200.0, STEPS[2])
        thetas = np.array([[25.0, 2.0, 2.0], [45.0, 1.5, 3.0]])
        grid = ev.run_grid(thetas)
        assert opens.calls == 0
        assert_same(got, _uncached(ev, lambda: ev.run(STEPS[1], order=2)))
        assert_same(hist, _uncached(ev, lambda: ev.run_histograms(0, 10, 0.0, 200.0, STEPS[2])))
        assert_same(grid, _uncached(ev, lambda: ev.run_grid(thetas)))
        assert opens.calls > 0  # the reference passes did read the files


def test_spilled_cache_equals_memory_cache(tmp_path, monkeypatch):
    config = small_config(tmp_path)
    spill = ColumnCache(budget=0, spill_dir=str(tmp_path / "spill"))
    with Evaluator(config, cache=spill) as ev, Evaluator(config) as mem:
        shipped = []
        call = ev._call

        def recording(items, proc):
            out = call(items, proc)
            shipped.append(COLUMNS_KEY in out)
            return out

        monkeypatch.setattr(ev, "_call", recording)
        for params in STEPS:
            assert_same(ev.run(params), mem.run(params), rtol=0.0)
        assert spill.spilled == len(spill) == 8 and mem.cache.spilled == 0
        # iterative: the chunks went straight to the cache (to disk) while the pass ran,
        # none came back with the output; only the first pass ran coffea
        assert shipped == [False]
        assert spill.reads == 8 * (len(STEPS) - 1)  # every cached pass read the .npz files
        assert len(list((tmp_path / "spill").rglob("*.npz"))) == 8
    spill.close()
    assert not list((tmp_path / "spill").rglob("*.npz"))
