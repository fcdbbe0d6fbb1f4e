"""The kernels' cached machine code loads without numba's registries
(:class:`analysis._compat.numba.FastLoadCache`, issue 35): a new
process that finds a kernel in numba's disk cache runs it without importing
``numba.np``'s implementations or ``scipy.linalg`` (0.35-0.4 s of its first step), with
the same results as the process that compiled it; a load that fails is numba's own."""

from __future__ import annotations

import numpy as np

from analysis._compat.numba import FastLoadCache
from analysis.pipeline.backends.numba.kernels import _numba_sums
from tests.conftest import numba_child

CHILD = """
import json, sys
import numpy as np
from analysis.pipeline.backends.numba.kernels._numba_sums import block_sums
rng = np.random.default_rng(7)
ev, pe = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
out = np.zeros((5, 2, 3))
block_sums(ev, pe, 3, 10, out, 0, 5)
print(json.dumps({"out": out.tolist(), "hits": sum(block_sums.stats.cache_hits.values()),
                  "registries": "numba.np.arraymath" in sys.modules,
                  "scipy_linalg": "scipy.linalg" in sys.modules}))
"""


def _reference() -> np.ndarray:
    """numpy's sums of the child's inputs, block by block (``[sum w, sum w^2]`` and
    their tangents: the module docstring of ``_numba_sums``)."""
    rng = np.random.default_rng(7)
    ev, pe = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    w = ev[:, 0] * pe[:, 0]
    d = ev[:, 1:] * pe[:, :1] + ev[:, :1] * pe[:, 1:]
    out = np.zeros((5, 2, 3))
    for b in range(5):
        s = slice(10 * b, 10 * b + 10)
        out[b, 0] = [w[s].sum(), *d[s].sum(axis=0)]
        out[b, 1] = [(w[s] ** 2).sum(), *(2 * w[s, None] * d[s]).sum(axis=0)]
    return out


def test_a_new_process_loads_a_kernel_without_numbas_registries(tmp_path):
    first = numba_child(CHILD, tmp_path)  # compiles (numba's registries: it compiles) and saves
    assert first["hits"] == 0 and first["registries"]
    second = numba_child(CHILD, tmp_path)  # finds it in the cache
    assert second["hits"] == 1
    assert not second["registries"] and not second["scipy_linalg"]
    assert second["out"] == first["out"]  # the same machine code: the same bits
    np.testing.assert_allclose(np.array(second["out"]), _reference(), rtol=1e-12)


def test_the_kernels_caches_are_the_light_ones():
    assert type(_numba_sums.block_sums._cache) is FastLoadCache


def test_a_failing_light_load_is_numbas_own(monkeypatch):
    """Any error of the load without the registries: numba's own load (registries
    first) answers, as if the light one had not been tried."""
    cache = _numba_sums.block_sums._cache
    calls = []
    real = type(cache)._load_overload

    def load(self, sig, target_context):
        calls.append(sig)
        if len(calls) == 1:
            raise RuntimeError("a numba whose internals differ")
        return real(self, sig, target_context)

    monkeypatch.setattr(FastLoadCache, "_load_overload", load)
    refreshed = []
    from numba.core.registry import cpu_target

    ctx = cpu_target.target_context
    real_refresh = type(ctx).refresh
    inside: list = []

    def refresh(self):  # outermost calls only: numba's first refresh in a process nests
        if not inside:
            refreshed.append(1)
        inside.append(1)
        try:
            return real_refresh(self)
        finally:
            inside.pop()

    monkeypatch.setattr(type(ctx), "refresh", refresh)
    sig = next(iter(_numba_sums.block_sums.overloads), None)
    if sig is None:  # compiled or loaded once in this process first
        rng = np.random.default_rng(1)
        _numba_sums.block_sums(rng.normal(size=(4, 2)), rng.normal(size=(4, 2)), 2, 2,
                               np.zeros((2, 2, 2)), 0, 2)
        sig = next(iter(_numba_sums.block_sums.overloads))
        calls.clear()
        refreshed.clear()
    got = cache.load_overload(sig, ctx)
    assert len(calls) == 2 and refreshed == [1]  # the light load, then numba's own
    assert got is None or got.signature.args == sig
