"""Soft bins and trainable edges on the numba histograms (issue 50, item 1).

The numba fill of :mod:`analysis.pipeline.backends.numba._histfills` against the JAX kernel
(:mod:`analysis.pipeline.backends.jax.histkernel`, the reference of
:mod:`analysis.stats.softbins`), 1e-10, values and Jacobians: soft bins on per-object
fields (``abs`` too), leading objects and a per-event branch, their channel templates
with shift and weight variations, trainable edges on a leading object and a branch (more
trainable parameters than one block of lanes: :mod:`analysis.pipeline.backends.numba.blocks`),
moved edges at hard bins; the edges' tangents against central differences of numba's
own values. Soft bins and trainable edges of an event sum run on numba too
(tests/pipeline/backends/numba/test_numba_esum_soft.py compares them).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from analysis.pipeline.backend import chunk_state
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.conftest import central_difference, numba_refusal
from tests.pipeline.backends.numba.test_fasthist import CONFIG, assert_trees_close, columns
from tests.pipeline.backends.numba.test_fastkernel import make_plan

pytestmark = NANOAOD_WARNINGS
RTOL = 1e-10
#: soft bins' widths (of the order of the bins) and which histograms train their edges
WIDTHS = {"lead": 15.0, "sub": 10.0, "blead": 12.0, "bpt": 8.0, "mupt": 3.0, "met": 20.0,
          "aeta": 0.2}
TRAINED = ("lead", "met")


def soft_setup(*, widths: dict = WIDTHS, trained: tuple = TRAINED):
    cfg = copy.deepcopy(CONFIG)
    for h in cfg["histograms"]:
        h["width"] = widths.get(h["name"], 0.0)
        h["trainable_edges"] = h["name"] in trained
    plan, theta, w = make_plan(cfg)
    theta[plan.param_names.index("min_jets")] = 3.4
    names = list(plan.param_names)
    # the trainable edges moved off the configured ones (still increasing)
    for name, d in (("lead.edges[1]", 7.0), ("lead.edges[2]", -9.0), ("met.edges[1]", 12.0)):
        if name in names:
            theta[names.index(name)] += d
    return plan, theta, w


def both(plan, cols, theta, widths, order: int = 1):
    assert numba_refusal(plan, order, theta) is None
    fast = chunk_state(cols, plan, theta, widths, order=order, backend="numba").derived
    ref = chunk_state(cols, plan, theta, widths, order=order, backend="jax").derived
    return fast, ref


def test_soft_bins_and_trainable_edges_equal_the_jax_kernel() -> None:
    plan, theta, widths = soft_setup()
    trained = [n for n in plan.trainable_names if ".edges[" in n]
    assert len(trained) == 5 and len(plan.trainable) > 7  # two blocks of lanes
    fast, ref = both(plan, columns(300, plan, seed=4), theta, widths)
    assert_trees_close(ref.value, fast.value, "value", RTOL)
    assert_trees_close(ref.jac, fast.jac, "jacobian", RTOL)
    names = list(fast.names)
    lead = np.asarray(fast.jac["histograms"]["lead"].sumw_flow)
    met = np.asarray(fast.jac["templates"]["b1"].sumw_flow)
    cols = [names.index(n) for n in trained if n.startswith("lead")]
    assert np.all(np.abs(lead[:, cols]).max(axis=0) > 0)  # each edge moves its two bins
    assert np.abs(met).max() > 0
    # soft bins fill every bin of a histogram of many entries
    assert np.all(np.asarray(fast.value["histograms"]["bpt"].sumw_flow) > 0)


def test_values_only_and_hard_bins_at_moved_edges_equal_the_jax_kernel() -> None:
    plan, theta, widths = soft_setup()
    cols = columns(300, plan, seed=4)
    fast, ref = both(plan, cols, theta, widths, order=0)
    assert_trees_close(ref.value, fast.value, "value", RTOL)
    # width 0 (annealed to the hard bins): hard fills at the trained edges, no tangent
    # from the edges
    hard = np.zeros_like(widths)
    fast, ref = both(plan, cols, theta, hard)
    assert_trees_close(ref.value, fast.value, "hard value", 1e-12)
    assert_trees_close(ref.jac, fast.jac, "hard jacobian", 1e-12)
    i = list(fast.names).index("lead.edges[1]")
    assert not np.any(np.asarray(fast.jac["histograms"]["lead"].sumw_flow)[:, i])


def test_edge_tangents_equal_central_differences() -> None:
    plan, theta, widths = soft_setup(widths={"lead": 15.0, "met": 20.0})
    cols = columns(200, plan, seed=2)
    names = list(plan.param_names)
    keys = ["lead.edges[1]", "lead.edges[3]", "met.edges[2]"]
    fast = chunk_state(cols, plan, theta, widths, order=1, backend="numba").derived
    tnames = list(fast.names)

    def bins(x):
        th = theta.copy()
        for k, v in zip(keys, x, strict=True):
            th[names.index(k)] = v
        st = chunk_state(cols, plan, th, widths, order=0, backend="numba").derived.value
        return np.concatenate([np.asarray(st["histograms"][h].sumw_flow)
                               for h in ("lead", "met")])

    fd = np.asarray(central_difference(bins, [theta[names.index(k)] for k in keys], 1e-3))
    jac = np.concatenate([np.asarray(fast.jac["histograms"][h].sumw_flow)
                          for h in ("lead", "met")])[:, [tnames.index(k) for k in keys]]
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8 * np.abs(jac).max())
    assert np.all(np.abs(jac).max(axis=0) > 0)


@pytest.mark.parametrize("what", ["width", "edges"])
def test_event_sums_with_soft_bins_or_trainable_edges_run_on_numba(what) -> None:
    cfg = copy.deepcopy(CONFIG)
    cfg["histograms"].append({"name": "ht", "x": "sum(jets.pt)", "edges": [0.0, 100.0, 300.0],
                              **({"width": 10.0} if what == "width"
                                 else {"trainable_edges": True})})
    plan, _, _ = make_plan(cfg)
    assert numba_refusal(plan, 1) is None
