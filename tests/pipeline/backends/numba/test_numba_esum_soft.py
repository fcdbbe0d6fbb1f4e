"""Soft bins and trainable edges of event sums on the numba kernel (issue 50: "both backends:
soft bins run on numba where the histogram runs today").

- The compiled kernel (:func:`analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins` at ``width > 0``)
  on tests/pipeline/backends/numba/test_numba_esum.py's events (0 to 8 uncertain jets, a
  sum over ``jets`` and over the nested ``bjets``, certain objects in and out of the set)
  against the enumeration oracle with each configuration's sum spread by the issue's
  formula in numpy (:func:`tests.reference.soft_bins`), 1e-10; against the JAX reference
  (:func:`analysis.select.subsets.sum_bins` with ``width``), 1e-12; its tangents in a
  cut probability and in the edges against central differences of the oracle (1e-8);
  a width far below the distance of every sum to an edge is the hard kernel's bins.
- Whole plans (event sums of a set and a nested set, ``count``, soft bins with trainable
  edges, channel templates with shift and weight variations) against the JAX kernel,
  values and Jacobians (the edges' columns included), 1e-10; every width 0 is the hard
  histogram (1e-12, no tangent from the edges); d(bin)/d(edge) and d(bin)/d(cut) against
  central differences of numba's own values.
"""

from __future__ import annotations

import copy

import jax
import numpy as np
import pytest

from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.numba.kernels import _numba_esum
from analysis.select.lanes.policy import compiled
from analysis.select.subsets import sum_bins
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.conftest import central_difference, numba_refusal
from tests.pipeline.backends.numba.test_fasthist import assert_trees_close, columns
from tests.pipeline.backends.numba.test_fastkernel import make_plan
from tests.pipeline.backends.numba.test_numba_esum import (
    esum_config,
    few_uncertain,
    kernel_bins,
    kernel_inputs,
)
from tests.select.test_subsets_uncertain import EDGES, MODEL, THRESH, _moved, inputs, oracle

pytestmark = NANOAOD_WARNINGS
#: the soft bins' width of the kernel tests (of the order of a jet's pT: every subset's
#: sum reaches a few bins)
WIDTH = 40.0


def soft_bins_of(ev: dict, tangents: list[tuple[int, int]], name: str = "jets",
                 width: float = WIDTH, edges=EDGES, trained: tuple[int, ...] = ()):
    """``(bins (E, nb, lanes), uncertain (E,))`` of the soft kernel: lanes 1.. the
    tangents d/d ``ev["jets"][e, j]`` of ``tangents``, then d/d ``edges[j]`` for each
    ``j`` of ``trained``."""
    n_ev = len(ev["jets"])
    edges = np.asarray(edges, np.float64)
    nl = 1 + len(tangents) + len(trained)
    elane = np.zeros(len(edges), np.int64)
    for i, j in enumerate(trained):
        elane[j] = 1 + len(tangents) + i
    out = np.full((n_ev, len(edges) + 1, 8), 7.0)
    unc = np.zeros(n_ev, np.int64)
    args = (*kernel_inputs(ev, tangents, name), edges, width, elane, nl, n_ev, out, unc)
    # the pipeline's build (as kernel_bins): the one in numba's cache
    compiled(_numba_esum.event_sum_bins, args)(*args, 0, 1)
    return out[..., :nl], unc


#: per summed set: edges and width about its sums (HT of 3-12 jets; one b-jet's pT), and
#: the edges whose tangents are checked
BINS = {"jets": (EDGES, WIDTH, (2, 3)),
        "bjets": ((20.0, 40.0, 60.0, 80.0, 100.0), 12.0, (0, 2))}


@pytest.mark.parametrize("name", ["jets", "bjets"])
def test_soft_kernel_against_enumeration_and_the_jax_reference(name: str) -> None:
    _sum_bins = jax.jit(sum_bins, static_argnames=("model", "name", "edges", "n_uncertain"))
    edges, width, trained = BINS[name]
    for counts in ((1, 2, 3, 4), (5, 6, 7, 8)):
        ev = few_uncertain(counts)
        free = [np.flatnonzero((ev["jets"][e] > 0) & (ev["jets"][e] < 1)) for e in range(4)]
        # a cut probability of the first and of the last uncertain jet (the first half and
        # the second half of the pairs), and two edges
        lanes = [(1, int(free[1][0])), (3, int(free[3][-1]))]
        got, unc = soft_bins_of(ev, lanes, name, width, edges, trained)
        assert unc.tolist() == [u - 1 if name == "jets" else u for u in counts]
        lays, probs, pt = inputs(ev)
        ref = np.asarray(_sum_bins(probs, lays, MODEL, THRESH, pt, name, edges,
                                   n_uncertain=12, width=width))
        for e in range(len(counts)):
            want = oracle(ev, e, name, width, edges)
            assert want.sum() > 0.01 and np.count_nonzero(want > 1e-6) >= 3
            np.testing.assert_allclose(got[e, :, 0], want, rtol=1e-10, atol=1e-14,
                                       err_msg=f"{name} {counts} {e}")
            np.testing.assert_allclose(got[e, :, 0], ref[e], rtol=1e-12, atol=1e-15)
        h = 1e-4
        for lane, (e, j) in enumerate(lanes, start=1):
            fd = (oracle(_moved(ev, [(e, j, h)]), e, name, width, edges)
                  - oracle(_moved(ev, [(e, j, -h)]), e, name, width, edges)) / (2 * h)
            assert np.abs(fd).max() > 1e-3
            np.testing.assert_allclose(got[e, :, lane], fd, rtol=1e-8, atol=1e-10,
                                       err_msg=f"{name} {counts} {e}")
            assert np.all(got[np.arange(len(counts)) != e, :, lane] == 0.0)
        h = 1e-3
        for lane, j in enumerate(trained, start=1 + len(lanes)):
            up, down = list(edges), list(edges)
            up[j] += h
            down[j] -= h
            moved = 0.0
            for e in range(len(counts)):
                fd = (oracle(ev, e, name, width, up) - oracle(ev, e, name, width, down)) / (2 * h)
                moved = max(moved, np.abs(fd).max())
                np.testing.assert_allclose(got[e, :, lane], fd, rtol=1e-7, atol=1e-11,
                                           err_msg=f"edge {j} {name} {counts} {e}")
                # an edge moves only the two bins beside it
                assert np.all(np.delete(got[e, :, lane], [j, j + 1]) == 0.0)
            assert moved > 1e-4


def test_a_narrow_width_is_the_hard_kernel() -> None:
    """A width of 1e-5 GeV, every subset's sum at least 0.01 GeV from every (integer)
    edge: each soft-bin probability is exactly 0 or 1 in float64 (``exp(-1000)``), the
    bins are the hard kernel's (1e-14), tangents included."""
    ev = few_uncertain((3, 5, 6, 4))
    # integer pT + 0.01: a sum of at most 24 of them is 0.01 to 0.24 above an integer
    ev["pt"] = np.round(ev["pt"]) + 0.01
    free = [np.flatnonzero((ev["jets"][e] > 0) & (ev["jets"][e] < 1)) for e in range(4)]
    lanes = [(1, int(free[1][0])), (2, int(free[2][-1]))]
    for name in ("jets", "bjets"):
        hard, _ = kernel_bins(ev, lanes, name)
        soft, _ = soft_bins_of(ev, lanes, name, width=1e-5)
        assert np.count_nonzero(hard[..., 0]) >= (6 if name == "jets" else 4)
        np.testing.assert_allclose(soft, hard, rtol=1e-14, atol=1e-300, err_msg=name)


def soft_config() -> dict:
    """:func:`tests.pipeline.backends.numba.test_numba_esum.esum_config` (event sums in
    the selection and in two channels, shift and weight variations) with soft bins on
    every event sum and trainable edges on ``ht`` (its channel ``ht1``) and ``nb``."""
    cfg = esum_config()
    widths = {"ht": 25.0, "nb": 0.3, "bht": 15.0, "seta": 0.4}
    for h in cfg["histograms"]:
        if h["name"] in widths:
            h["width"] = widths[h["name"]]
            h["trainable_edges"] = h["name"] in ("ht", "nb")
    return cfg


@pytest.mark.slow  # the JAX kernel's compilation at order 1 and 0, ~3-4 min at load 4
def test_plans_with_soft_event_sums_against_the_jax_kernel() -> None:
    plan, theta, widths = make_plan(soft_config())
    names = list(plan.param_names)
    trained = [n for n in plan.trainable_names if ".edges[" in n]
    assert trained == ["ht.edges[1]", "ht.edges[2]", "ht.edges[3]", "nb.edges[1]"]
    theta[names.index("ht.edges[2]")] += 12.0  # off the configured edge
    cols = columns(96, plan, seed=5)
    assert numba_refusal(plan, 1, theta) is None
    fast = chunk_state(cols, plan, theta, widths, order=1, backend="numba").derived
    ref = chunk_state(cols, plan, theta, widths, order=1, backend="jax").derived
    assert_trees_close(ref.value, fast.value, "value", 1e-10)
    assert_trees_close(ref.jac, fast.jac, "jacobian", 1e-10)
    tn = list(fast.names)
    assert {"ht1", "ht1:jes:up", "ht1:isr:down", "all:met:up"} <= set(fast.value["templates"])
    for key in ("ht1", "ht1:jes:up", "ht1:isr:down"):
        jac = np.asarray(fast.jac["templates"][key].sumw_flow)
        assert np.all(np.abs(jac[:, [tn.index(n) for n in trained[:3]]]).max(axis=0) > 0), key
    # every width 0 (the hard-cut evaluation): the hard histograms, no tangent from edges
    hard = np.zeros_like(widths)
    fast0 = chunk_state(cols, plan, theta, hard, order=1, backend="numba").derived
    ref0 = chunk_state(cols, plan, theta, hard, order=1, backend="jax").derived
    assert_trees_close(ref0.value, fast0.value, "hard value", 1e-12)
    assert_trees_close(ref0.jac, fast0.jac, "hard jacobian", 1e-12)
    assert not np.any(np.asarray(fast0.jac["histograms"]["ht"].sumw_flow)[:, tn.index(
        "ht.edges[1]")])
    # d(bin)/d(edge), d(bin)/d(cut): central differences of numba's own values
    keys = ["ht.edges[1]", "ht.edges[3]", "nb.edges[1]", "jet_pt_min"]

    def bins(x):
        th = theta.copy()
        for k, v in zip(keys, x, strict=True):
            th[names.index(k)] = v
        st = chunk_state(cols, plan, th, widths, order=0, backend="numba").derived.value
        return np.concatenate([np.asarray(st["histograms"]["ht"].sumw_flow),
                               np.asarray(st["histograms"]["nb"].sumw_flow),
                               np.asarray(st["templates"]["ht1"].sumw_flow)])

    fd = np.asarray(central_difference(bins, [theta[names.index(k)] for k in keys], 1e-3))
    jac = np.concatenate([np.asarray(fast.jac["histograms"]["ht"].sumw_flow),
                          np.asarray(fast.jac["histograms"]["nb"].sumw_flow),
                          np.asarray(fast.jac["templates"]["ht1"].sumw_flow)])
    jac = jac[:, [tn.index(k) for k in keys]]
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-7 * np.abs(jac).max())
    assert np.all(np.abs(jac).max(axis=0) > 0)


def test_two_histograms_of_one_sum_with_other_bins_fill_their_own() -> None:
    """Two histograms of ``sum(jets.pt)`` in one region, hard and soft with other edges:
    each its own per-event bins (their fills are keyed by region, x and bins), order 0
    against the JAX kernel (1e-10)."""
    cfg = copy.deepcopy(esum_config())
    cfg["histograms"] = [h for h in cfg["histograms"] if h["name"] == "ht"] + [
        {"name": "ht2", "x": "sum(jets.pt)", "edges": [50.0, 200.0, 500.0], "width": 30.0}]
    cfg["likelihood"]["channels"] = {"all": {"histogram": "ht2"}}
    cfg["systematics"] = []
    plan, theta, widths = make_plan(cfg)
    cols = columns(64, plan, seed=3)
    assert numba_refusal(plan, 0, theta) is None
    fast = chunk_state(cols, plan, theta, widths, order=0, backend="numba").derived
    ref = chunk_state(cols, plan, theta, widths, order=0, backend="jax").derived
    assert_trees_close(ref.value, fast.value, "value", 1e-10)
    assert len(np.asarray(fast.value["histograms"]["ht2"].sumw_flow)) == 4
