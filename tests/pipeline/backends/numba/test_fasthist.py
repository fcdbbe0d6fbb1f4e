"""Soft histogram templates and variations on the numba kernel (analysis.pipeline.backends.numba.fasthist).

- Against the JAX kernel (the reference, :mod:`analysis.pipeline.backends.jax.histkernel`), 1e-12:
  every histogram and template (per-object fields, ``abs``, leading and sub-leading
  objects, branches; channel regions; shift and weight variations) and its Jacobian, at
  soft and hard widths, with values on the thresholds, a fractional count threshold, and
  observables beside them; tiny and empty chunks; order 0.
- Against exact enumeration of the DY file's pass/fail configurations
  (tests/pipeline/test_histograms.py's oracle), 1e-10, run by the Evaluator.
- Thread count does not change a bit; plans the walk cannot serve go to the JAX kernel
  with the reason.
"""

from __future__ import annotations

import copy
from collections import Counter

import jax
import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.numba import fasthist
from analysis.pipeline.backends.numba.backend import NumbaBackend
from analysis.pipeline.request import Request
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.conftest import numba_refusal
from tests.pipeline.backends.numba.test_fastkernel import assert_close, make_plan, synthetic

pytestmark = NANOAOD_WARNINGS
RTOL = 1e-12
EDGES = [20.0, 60.0, 100.0, 160.0, 400.0]

CONFIG = {
    "datasets": {"sig": {"files": ["unused.root"], "weight": "genWeight", "role": "signal"},
                 "bkg": {"files": ["unused.root"], "weight": "genWeight", "role": "background"}},
    "parameters": {"jet_pt_min": {"init": 30.0, "bounds": [15.0, 80.0]},
                   "btag_min": {"init": 0.3, "bounds": [0.05, 0.95]},
                   "min_jets": {"init": 3, "bounds": [1, 6], "integer": True}},
    "objects": {
        "jets": {"collection": "Jet", "cuts": [
            {"var": "pt", "op": ">", "param": "jet_pt_min", "width": 5.0},
            {"var": "abs_eta", "op": "<", "value": 2.4, "width": 0.1}]},
        "bjets": {"from": "jets", "cuts": [
            {"var": "btagDeepFlavB", "op": ">", "param": "btag_min", "width": 0.05}]},
        "muons": {"collection": "Muon", "cuts": [{"var": "pt", "op": ">", "value": 10.0,
                                                  "width": 2.0}]},
    },
    "selection": [{"count": "jets", "op": ">=", "param": "min_jets", "width": 0.3},
                  {"var": "MET.pt", "op": ">", "value": -50.0, "width": 10.0}],
    "histograms": [{"name": "lead", "x": "jets[0].pt", "edges": EDGES},
                   {"name": "sub", "x": "jets[1].pt", "edges": EDGES},
                   {"name": "blead", "x": "bjets[0].pt", "edges": EDGES},
                   {"name": "bpt", "x": "bjets.pt", "edges": [20.0, 50.0, 90.0, 150.0, 400.0]},
                   {"name": "mupt", "x": "muons.pt", "edges": [0.0, 10.0, 20.0, 40.0]},
                   {"name": "met", "x": "MET.pt", "edges": [-50.0, 0.0, 50.0, 100.0]},
                   {"name": "aeta", "x": "abs(jets.eta)", "edges": [0.0, 1.0, 2.0, 3.0]}],
    "systematics": [
        {"name": "jes", "type": "shift", "field": "Jet.pt", "up": 1.03, "down": 0.97},
        {"name": "met", "type": "shift", "field": "MET.pt", "up": 1.1, "down": 0.9},
        {"name": "isr", "type": "weight", "up": "PSWeight[0]", "down": "PSWeight[2] * 2"},
        {"name": "bkg", "type": "lnN", "datasets": ["bkg"], "kappa": 1.2}],
    "likelihood": {"channels": {
        "b1": {"histogram": "lead", "selection": [{"count": "bjets", "op": "==", "value": 1}]},
        "b2": {"histogram": "bpt", "selection": [
            {"count": "bjets", "op": ">=", "value": 2},
            {"var": "MET.pt", "op": "<", "value": 80.0, "width": 5.0}]},
        "mu": {"histogram": "sub", "selection": [{"count": "muons", "op": "<=", "value": 1}]},
        "all": {"histogram": "blead"}}},
    "objective": {"terms": [{"type": "discovery_significance"}]},
}


#: the events of the tests of :func:`setup`'s soft plan: one JAX compilation of that
#: plan's kernel serves them all (the jit is keyed by the plan and the padded shapes,
#: which the events' multiplicities set)
SOFT_EVENTS = {"n": 300, "seed": 8}


def columns(n: int, plan, *, seed: int = 1, ties: bool = False):
    cols = synthetic(n, seed=seed, ties=ties)
    rng = np.random.default_rng(seed + 7)
    for k in plan.event_keys:
        cols.events.setdefault(k, rng.uniform(0.5, 1.5, n))
    return cols


def setup(*, hard: bool = False, observables: bool = False, n_jets: float = 3.4):
    cfg = copy.deepcopy(CONFIG)
    if hard:
        for s in cfg["objects"].values():
            for c in s["cuts"]:
                c["width"] = 0.0
        cfg["selection"][1]["width"] = 0.0
    if observables:
        cfg["observables"] = [{"name": "jpt", "x": "jets.pt", "stats": ["mean", "std"]},
                              {"name": "nb", "x": "count(bjets)", "stats": ["mean"]}]
    plan, theta, widths = make_plan(cfg)
    theta[plan.param_names.index("min_jets")] = n_jets
    return plan, theta, widths


def assert_trees_close(ref, got, what: str, rtol: float = RTOL) -> None:
    """Histogram leaves at ``rtol`` (default :data:`RTOL`); moments as test_fastkernel
    compares them (the centre and its offset summed: the split is the kernel's own)."""
    assert_close(ref, got, rtol, what)
    ref = {k: ref[k] for k in ("histograms", "templates")}
    got = {k: got[k] for k in ("histograms", "templates")}
    assert jax.tree_util.tree_structure(ref) == jax.tree_util.tree_structure(got), what
    for (path, x), (_, y) in zip(jax.tree_util.tree_leaves_with_path(ref),
                                 jax.tree_util.tree_leaves_with_path(got), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        key = f"{what} {jax.tree_util.keystr(path)}"
        assert x.shape == y.shape, key
        assert np.array_equal(np.isnan(x), np.isnan(y)), key
        scale = np.max(np.abs(x), initial=0.0)
        err = np.max(np.abs(x - y), initial=0.0)
        assert err <= rtol * scale or err == 0.0, f"{key}: {x} vs {y} ({err / scale:.1e})"


def compare(plan, cols, theta, widths, *, order: int = 1):
    assert numba_refusal(plan, order, theta) is None
    fast = chunk_state(cols, plan, theta, widths, order=order, backend="numba")
    ref = chunk_state(cols, plan, theta, widths, order=order, backend="jax")
    assert_trees_close(ref.derived.value, fast.derived.value, "value")
    if order:
        assert_trees_close(ref.derived.jac, fast.derived.jac, "jacobian")
    return fast


@pytest.mark.parametrize("hard, ties, n_jets", [(False, False, 3.4), (False, True, 3.0),
                                                (True, True, 3.0), (True, False, 2.0)])
def test_templates_and_variations_equal_the_jax_kernel(hard, ties, n_jets):
    plan, theta, widths = setup(hard=hard, n_jets=n_jets)
    state = compare(plan, columns(**SOFT_EVENTS, plan=plan, ties=ties), theta, widths)
    value, jac = state.derived.value, state.derived.jac
    keys = set(value["templates"])
    assert {"b1", "b2:jes:up", "b1:isr:down", "mu:met:up", "all:jes:down"} <= keys
    for group in ("histograms", "templates"):
        for k, h in value[group].items():
            assert np.asarray(h.sumw_flow).sum() != 0, k  # every one is filled
    if not hard:
        assert np.abs(np.asarray(jac["templates"]["b1:jes:up"].sumw)).max() > 0
    # a shift moves the template, a weight variation rescales it
    assert not np.allclose(value["templates"]["b1:jes:up"].sumw, value["templates"]["b1"].sumw)


def walk_sizes(monkeypatch) -> list[int]:
    """The number of variants of every :func:`fasthist._walk` call from now on."""
    sizes: list[int] = []
    walk = fasthist._walk

    def counted(variants, *a, **k):
        sizes.append(len(variants))
        return walk(variants, *a, **k)

    monkeypatch.setattr(fasthist, "_walk", counted)
    return sizes


@pytest.mark.parametrize(
    "extra_param", [False, pytest.param(True, marks=pytest.mark.slow)]
)
def test_shift_sides_share_a_walk_when_the_lanes_allow(extra_param, monkeypatch):
    """3 tangents: the two sides of a shift walk together (lanes 0-3 and 4-7); 4
    tangents: one walk each. Both equal the JAX kernel."""
    cfg = copy.deepcopy(CONFIG)
    if extra_param:
        cfg["parameters"]["eta_max"] = {"init": 2.4, "bounds": [1.0, 3.0]}
        cut = cfg["objects"]["jets"]["cuts"][1]
        del cut["value"]
        cut["param"] = "eta_max"
    plan, theta, widths = make_plan(cfg)
    assert len(plan.trainable) == (4 if extra_param else 3)
    sizes = walk_sizes(monkeypatch)
    walks = []
    orig = fasthist._numba_hist.walk

    def recorded(*args):
        if args[-2] == 0:  # a walk's first block range (the threads run several)
            walks.append(args[5])  # h: the second variant's value lane, 0 for one variant
        return orig(*args)

    # one comparison with the JAX kernel records both (each JAX shape compiles anew)
    monkeypatch.setattr(fasthist._numba_hist, "walk", recorded)
    monkeypatch.setattr(fasthist._numba_dp, "compiled", lambda kernel, args: kernel)
    compare(plan, columns(**SOFT_EVENTS, plan=plan), theta, widths)
    # the nominal walk, then one per shift (two sides each), or per side (a pair asked
    # for, then each side alone)
    assert sizes == ([1, 2, 1, 1, 2, 1, 1] if extra_param else [1, 2, 2]), sizes
    expect = [0, 0, 0, 0, 0] if extra_param else [0, 4, 4]
    assert walks == expect, walks


def two_shifts_and_observables():
    """``(plan, theta, widths, columns)``: :data:`CONFIG` with a second shift of Jet.pt
    (``jer``: four sides of one column, MET's shift a pair) and observables of every kind
    beside the histograms and templates, on 200 events. Two tests read it: one JAX
    compilation of the plan's kernel at order 1 serves both."""
    cfg = copy.deepcopy(CONFIG)
    cfg["systematics"].insert(1, {"name": "jer", "type": "shift", "field": "Jet.pt",
                                  "up": 1.01, "down": 0.99})
    cfg["observables"] = [
        {"name": "jpt", "x": "jets.pt", "stats": ["mean", "std"]},
        {"name": "nb", "x": "count(bjets)", "stats": ["mean"]},
        {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
        {"name": "lead", "x": "jets[1].pt", "stats": ["mean"]},
        {"name": "met", "x": "MET.pt", "stats": ["mean"]}]
    plan, theta, widths = make_plan(cfg)
    return plan, theta, widths, columns(200, plan, seed=4)


def test_two_shifts_of_one_column_walk_as_two_pairs(monkeypatch):
    """Two shifts of Jet.pt (four sides, 3 tangents; observables beside): one walk of
    two pairs in pages (lane vectors ``(2, 8)``), MET's shift a pair; the JAX kernel's
    states, and each side's the bits of its walk as a pair."""
    plan, theta, widths, cols = two_shifts_and_observables()
    sizes = walk_sizes(monkeypatch)
    walks = []
    orig = fasthist._numba_hist.walk

    def recorded(*args):
        if args[-2] == 0 < args[-1]:  # a walk's first blocks (not its compilation's none)
            walks.append((args[5], args[4].ndim))  # h, the pattern tangents' layout
        return orig(*args)

    monkeypatch.setattr(fasthist._numba_hist, "walk", recorded)
    paged = compare(plan, cols, theta, widths)
    assert sizes == [1, 4, 2], sizes
    assert walks == [(0, 3), (4, 4), (4, 3)], walks
    walk = fasthist._walk

    def in_pairs(variants, *a, sides=None, **k):
        if len(variants) == 4:
            return [w for part in (slice(0, 2), slice(2, 4))
                    for w in walk(variants[part], *a, sides=sides[part], **k)]
        return walk(variants, *a, sides=sides, **k)

    monkeypatch.setattr(fasthist, "_walk", in_pairs)
    pairs = chunk_state(cols, plan, theta, widths, backend="numba")
    assert walks[3:] == [(0, 3), (4, 3), (4, 3), (4, 3)], walks
    for a, b in zip(jax.tree_util.tree_leaves((paged.derived.value, paged.derived.jac)),
                    jax.tree_util.tree_leaves((pairs.derived.value, pairs.derived.jac)),
                    strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


@pytest.mark.slow
def test_shift_sides_walk_apart_when_their_orders_differ(monkeypatch):
    """Two jets one float apart in pt (the smaller first) tie once scaled by 0.97: that
    side's order (ties in the original order) differs from the other's, so the two
    sides walk apart, each in its own order; still the JAX kernel's result."""
    plan, theta, widths = setup()
    cols = columns(**SOFT_EVENTS, plan=plan)
    counts, flat = cols.collections["Jet"]
    pt = flat["pt"].copy()
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    for e in np.flatnonzero(counts >= 2)[:40]:
        a = pt[starts[e]]
        pt[starts[e] + 1] = np.nextafter(a, np.inf)
    assert any(np.float64(0.97) * pt[starts[e]] == np.float64(0.97) * pt[starts[e] + 1]
               for e in np.flatnonzero(counts >= 2)[:40])
    cols.collections["Jet"] = (counts, {**flat, "pt": pt})
    sizes = walk_sizes(monkeypatch)
    compare(plan, cols, theta, widths)
    assert sizes[:4] == [1, 2, 1, 1], sizes  # jes: asked as a pair, walked apart


def test_a_chunk_evaluated_again_after_its_arrays_were_replaced(monkeypatch):
    """Whether a shift keeps the walk order is found at each pass
    (:func:`analysis.pipeline.backends.numba._histtables._order`); replacing the ranking
    field with one whose near-ties a 0.97 side breaks finds it again (the sides of that
    shift walk apart), and a replaced weight branch is read: the JAX kernel's result on
    the new arrays."""
    plan, theta, widths = setup()
    cols = columns(**SOFT_EVENTS, plan=plan)
    sizes = walk_sizes(monkeypatch)
    compare(plan, cols, theta, widths)
    assert sizes[:2] == [1, 2], sizes  # the order holds: jes walks as a pair
    counts, flat = cols.collections["Jet"]
    pt = flat["pt"].copy()
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    for e in np.flatnonzero(counts >= 2)[:40]:
        pt[starts[e] + 1] = np.nextafter(pt[starts[e]], np.inf)
    cols.collections["Jet"] = (counts, {**flat, "pt": pt})
    key = next(k for k in cols.events if k.startswith("PSWeight"))
    cols.events[key] = cols.events[key][::-1].copy()
    sizes.clear()
    compare(plan, cols, theta, widths)
    assert sizes[:4] == [1, 2, 1, 1], sizes  # jes: asked as a pair, walked apart


@pytest.mark.slow
def test_observables_beside_histograms_and_order_0():
    plan, theta, widths = setup(observables=True)
    cols = columns(300, plan, seed=4)
    compare(plan, cols, theta, widths)
    state = compare(plan, cols, theta, widths, order=0)
    assert state.derived.jac is None or not jax.tree_util.tree_leaves(state.derived.jac)


def test_one_walk_of_the_selection_per_shift_side():
    """Observables of every kind beside histograms and templates: each shift side's
    selection (and channel regions) walked once per chunk, the sides of Jet.pt's two
    shifts in pages and MET's as a pair, counted by the backend's ``trace`` (the
    observables read the nominal walk; they used to walk region 0 again), and the states
    equal the JAX kernel's."""
    plan, theta, widths, cols = two_shifts_and_observables()
    assert len({s.key for s in plan.shifts}) == 2 < len(plan.shifts) // 2  # two of a column
    trace: Counter = Counter()
    numba = NumbaBackend(trace=trace)
    for order in (0, 1):
        trace.clear()
        state = numba.run(numba.prepare(plan, Request(theta, widths, order=order)), cols)
        sides = {None} | {(s.key, s.factor) for s in plan.shifts}
        assert {side for side, _ in trace} == sides, trace
        assert set(trace.values()) == {1}, trace  # region 0 of the nominal side: once
        assert trace[None, 0] == 1
        ref = chunk_state(cols, plan, theta, widths, order=order, backend="jax")
        assert_trees_close(ref.derived.value, state.derived.value, "value")
        if order:
            assert_trees_close(ref.derived.jac, state.derived.jac, "jacobian")


@pytest.mark.parametrize("n", [0, 1, 3])
def test_tiny_and_empty_chunks(n):
    plan, theta, widths = setup()
    compare(plan, columns(n, plan, seed=2), theta, widths)


def test_independent_of_thread_count():
    plan, theta, widths = setup()
    cols = columns(3 * 4096 // 2 + 5, plan, seed=3)
    one = chunk_state(cols, plan, theta, widths, backend="numba", threads=1)
    three = chunk_state(cols, plan, theta, widths, backend="numba", threads=3)
    for a, b in zip(jax.tree_util.tree_leaves((one.derived.value, one.derived.jac)),
                    jax.tree_util.tree_leaves((three.derived.value, three.derived.jac)),
                    strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_the_rules_name_what_goes_to_the_jax_kernel():
    plan, theta, _ = setup()
    assert numba_refusal(plan, 1, theta) is None
    assert "derivatives of order 2" in numba_refusal(plan, 2, theta)
    for x in ("sum(jets.pt)", "count(bjets)", "sum(jets.eta)"):  # event sums: served
        cfg = copy.deepcopy(CONFIG)
        cfg["histograms"].append({"name": "extra", "x": x, "edges": EDGES})
        try:
            p, t, _ = make_plan(cfg)
        except Exception:
            continue
        assert numba_refusal(p, 1, t) is None, x
    for x, words in [("pt(jets[0] + bjets[0] + muons[0])", "indexes 3 sets"),
                     ("jets[0].pt + muons[0].pt", "")]:
        cfg = copy.deepcopy(CONFIG)
        cfg["histograms"].append({"name": "extra", "x": x, "edges": EDGES})
        try:
            p, t, _ = make_plan(cfg)
        except Exception:  # an expression the config refuses is not this test's business
            continue
        why = numba_refusal(p, 1, t)
        assert why is not None and "extra" in why and words in why, (x, why)
    cfg = copy.deepcopy(CONFIG)
    cfg["objects"]["bjets"]["rank_by"] = "btagDeepFlavB"  # jets[0] and bjets[0]: two orders
    p, t, _ = make_plan(cfg)
    assert "two ranking fields" in numba_refusal(p, 1, t)


# --- against enumeration, through the Evaluator ------------------------------------------


def test_numba_histograms_against_enumeration() -> None:
    from tests.pipeline.test_histograms import EDGES as REF_EDGES
    from tests.pipeline.test_histograms import HISTS, reference
    from tests.pipeline.test_object_sets_enumeration import PARAMS, config

    cfg = config()
    cfg["observables"] = [o for o in cfg["observables"] if o["name"] in ("jpt", "met")]
    cfg["histograms"] = [h for h in HISTS if h["name"] in ("lead", "jpt", "met")]
    cfg["datasets"]["dy"]["role"] = "signal"
    cfg["likelihood"] = {"channels": {"sr": {"histogram": "lead"}}}
    ref = reference()
    with Evaluator(config_from_dict(cfg)) as evaluator:
        assert numba_refusal(evaluator.plan, 1) is None
        value = evaluator.run(PARAMS, order=1)["dy"].derived.value
    for name in ("lead", "jpt", "met"):
        h = value["histograms"][name]
        sumw, sumw2 = ref[name]
        assert len(sumw) == len(REF_EDGES[name]) + 1 and sumw.sum() != 0, name
        np.testing.assert_allclose(np.asarray(h.sumw_flow), sumw, rtol=1e-10, atol=1e-9,
                                   err_msg=name)
        np.testing.assert_allclose(np.asarray(h.sumw2_flow), sumw2, rtol=1e-10, atol=1e-6,
                                   err_msg=name)
