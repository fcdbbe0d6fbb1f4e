"""The numba kernel's walk for values only (order 0, a plan the fused walk does not
serve): :func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk` compiled
without tangents (``pd_all = dfs = 0.0``); ``value_loop=False``: the same walk in its 8
lanes. The same floats either way, and the JAX kernel's values."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from analysis.pipeline.backends.jax.passes import evaluate_chunk
from analysis.pipeline.backends.numba import fastkernel
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_hist
from analysis.pipeline.layout import pad_columns
from tests.pipeline.backends.numba.test_fastkernel import (
    RTOL,
    assert_close,
    features,
    make_plan,
    sets_config,
    synthetic,
)


@pytest.mark.parametrize("width", [0.0, 1.0])
@pytest.mark.parametrize("which", ["sets", "features"])
def test_value_loop_is_lane_zero(width, which, monkeypatch):
    if which == "sets":  # derived sets, two collections, joint counts, event sums
        plan, theta, widths = make_plan(sets_config(width=width))
    else:  # one set with sum(Jet.pt), count(Jet): the general loop, fixed count thresholds
        plan, theta, widths = features(width=width)
    assert not (fastkernel._tables(plan).one_set and which == "sets")
    cols = synthetic(3 * fastkernel.BLOCK // 2, seed=7, ties=width == 0.0, big=12)
    ran = []  # the walk without tangents ("values"), in its lanes ("lanes")
    compiled = _numba_dp.compiled
    monkeypatch.setattr(_numba_dp, "compiled", lambda k, a: ran.extend(
        [("values" if isinstance(a[4], float) else "lanes")] if k is _numba_hist.walk
        else []) or compiled(k, a))
    v0, j0 = fastkernel.evaluate_columns(cols, plan, theta, widths, order=0)
    assert j0 is None and ran == ["values"]
    ran.clear()
    v1, _ = fastkernel.evaluate_columns(cols, plan, theta, widths, order=0, value_loop=False)
    assert ran == ["lanes"]
    for a, b in zip(jax.tree_util.tree_leaves(v0), jax.tree_util.tree_leaves(v1), strict=True):
        assert np.array_equal(a, b, equal_nan=True)
    arrays, shapes = pad_columns(cols, plan)
    ref, _, _ = evaluate_chunk(theta, widths, arrays, plan, shapes, order=0)
    assert_close(ref, v0, RTOL, "value")
