"""The numba kernel (``analysis.pipeline.backends.numba.fastkernel``) against the JAX kernel and finite differences.

- Values and Jacobians equal the JAX kernel's (``analysis.pipeline.backends.jax.passes.evaluate_chunk``, the
  reference, itself checked against exact enumeration in
  ``tests/pipeline/test_object_sets_enumeration.py``) to 1e-12, relative to each leaf's
  (Jacobian row's) largest entry, over a matrix of plan features: every cut op,
  ``abs_``, fixed and parameter thresholds, widths 0 (ties at the threshold) and > 0,
  count conditions of every op with parameter and fixed thresholds, non-integer N,
  events above the count cap, empty events and an empty chunk, a branch cut, derived
  sets, joint counts over several sets and collections, object-level, event-sum and
  branch observables of one and two variables, negative weights; the demo and ttbar
  configs.
- Its pieces against their one definition: the soft cut against
  :func:`analysis.select.objects.soft_pass` (value and derivative), the reduced pass
  table against the full one.
- Its Jacobian equals central finite differences of its own values.
- It is what ``kernel.chunk_state`` runs (``engine="jax"`` forces the reference), and
  its results do not depend on the number of threads.

States hold a constant centre (no gradient) and a differentiable offset; the two
kernels add their sums in different orders, so their centres differ by rounding and
the states are compared through ``mean = center + dmean``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import yaml

from analysis import runtime
from analysis.config.loader import config_from_dict
from analysis.pipeline.backend import chunk_state, run_once
from analysis.pipeline.backends.jax.passes import evaluate_chunk
from analysis.pipeline.backends.numba import _fasttables, fastkernel
from analysis.pipeline.backends.numba.kernels import _numba_dp
from analysis.pipeline.layout import ChunkColumns, pad_columns
from analysis.pipeline.plan import Plan, build_plan, initial_widths
from analysis.pipeline.request import Request
from analysis.select import chainwalk
from analysis.select.lanes import cuts
from analysis.select.objects import soft_pass
from analysis.stats import CoMoments, Moments
from tests.chunked_helpers import NANOAOD_WARNINGS, read_columns
from tests.conftest import central_difference, numba_refusal

REPO = Path(__file__).resolve().parents[4]
RTOL = 1e-12
FD_RTOL = 1e-6

pytestmark = NANOAOD_WARNINGS

DATASETS = {"sig": {"files": ["unused.root"], "weight": "genWeight"}}


def leaves(tree: dict) -> dict[str, np.ndarray]:
    """``{path: array}`` of a state pytree, each ``center``/``dmean`` pair as its sum."""
    out = {k: np.asarray(tree[k]) for k in ("selected_sumw", "selected_sumw2")}
    for name, entry in tree["observables"].items():
        for kind, state in entry.items():
            f = state._asdict()
            for c, d in (("center", "dmean"), ("center_x", "dmean_x"), ("center_y", "dmean_y")):
                if c in f:
                    f["mean" + c[6:]] = np.asarray(f.pop(c)) + np.asarray(f.pop(d))
            for k, v in f.items():
                out[f"{name}/{kind}/{k}"] = np.asarray(v)
    return out


def assert_close(ref: dict, got: dict, rtol: float, what: str) -> None:
    a, b = leaves(ref), leaves(got)
    assert a.keys() == b.keys(), what
    for k in a:
        x, y = a[k], b[k]
        assert x.shape == y.shape, f"{what} {k}: shape {x.shape} vs {y.shape}"
        assert np.array_equal(np.isnan(x), np.isnan(y)), f"{what} {k}: {x} vs {y}"
        x, y = np.nan_to_num(x), np.nan_to_num(y)
        scale = np.max(np.abs(x), initial=0.0)
        err = np.max(np.abs(x - y), initial=0.0)
        assert err <= rtol * scale or err == 0.0, f"{what} {k}: {x} vs {y} ({err / scale:.1e})"


def compare(plan: Plan, cols: ChunkColumns, theta, widths) -> tuple[dict, dict]:
    """Fast vs JAX kernel on one chunk; returns the fast ``(value, jac)``."""
    arrays, shapes = pad_columns(cols, plan)
    v0, j0, _ = evaluate_chunk(theta, widths, arrays, plan, shapes, order=1)
    v1, j1 = fastkernel.evaluate_columns(cols, plan, theta, widths, order=1)
    assert jax.tree_util.tree_structure(v0) == jax.tree_util.tree_structure(v1)
    assert jax.tree_util.tree_structure(j0) == jax.tree_util.tree_structure(j1)
    assert_close(v0, v1, RTOL, "value")
    assert_close(j0, j1, RTOL, "jacobian")
    return v1, j1


def synthetic(
    n: int, *, seed: int = 0, mean_jets: float = 4.0, ties: bool = False, big: int = 0
) -> ChunkColumns:
    """``n`` events of Poisson jets (pt, eta, btag, mass), MET, negative weights included;
    the first events have 0, 1 and ``big`` jets; ``ties`` rounds values onto a grid so that
    some equal the thresholds exactly."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(mean_jets, n)
    counts[: min(n, 3)] = [0, 1, big][: min(n, 3)]
    t = int(counts.sum())
    pt = 15 + rng.exponential(40, t)
    eta = rng.normal(0, 1.5, t)
    btag = rng.uniform(0, 1, t)
    mass = rng.exponential(10, t)
    met = rng.normal(0, 60, n)
    if ties:
        pt, eta, btag, met = np.round(pt), np.round(eta, 1), np.round(btag, 1), np.round(met)
    n_mu = rng.poisson(1.0, n).astype(np.int64)
    mu_pt = 5 + rng.exponential(20, int(n_mu.sum()))
    return ChunkColumns(
        n, rng.normal(0.8, 1.0, n), {"MET.pt": met},
        {"Jet": (counts.astype(np.int64),
                 {"pt": pt, "eta": eta, "btagDeepFlavB": btag, "mass": mass}),
         "Muon": (n_mu, {"pt": mu_pt})},
    )


def make_plan(cfg: dict) -> tuple[Plan, np.ndarray, np.ndarray]:
    cfg = copy.deepcopy(cfg)
    cfg.setdefault("datasets", DATASETS)
    config = config_from_dict(cfg)
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], dtype=np.float64)
    return plan, theta, np.array(initial_widths(config), dtype=np.float64)


def features(*, width: float = 1.0, inverted: bool = False, n_min: float = 2.3):
    """:func:`make_plan` of :func:`features_config`, the count threshold ``n_min`` set
    after validation (a config needs an integer init; the optimiser moves it anyway)."""
    plan, theta, widths = make_plan(features_config(width=width, inverted=inverted))
    theta[plan.param_names.index("n_min")] = n_min
    return plan, theta, widths


def features_config(*, width: float, inverted: bool) -> dict:
    """Object cuts with every op (two on parameters, two fixed; ``inverted`` flips each
    op), count cuts with every op (parameter and fixed thresholds, one not trainable)
    and a MET cut; object- and event-level observables of one and two variables."""
    w = width
    ops = ("<", ">", "<=", ">=") if inverted else (">", "<", ">=", "<=")
    return {
        "parameters": {
            "pt_min": {"init": 30.0, "bounds": [15.0, 200.0]},
            "eta_max": {"init": 1.0, "bounds": [0.5, 4.7]},
            "n_min": {"init": 2, "bounds": [0, 4]},
            "n_gt": {"init": 0, "bounds": [0, 3], "trainable": False},
            "n_max": {"init": 5, "bounds": [2, 6]},
            "met_min": {"init": 10.0, "bounds": [0.0, 100.0]},
        },
        "selection": {
            "objects": {
                "collection": "Jet",
                "cuts": [
                    {"var": "pt", "op": ops[0], "param": "pt_min", "width": 5.0 * w},
                    {"var": "abs_eta", "op": ops[1], "param": "eta_max", "width": 0.2 * w},
                    {"var": "btagDeepFlavB", "op": ops[2], "value": 0.5, "width": 0.05 * w},
                    {"var": "mass", "op": ops[3], "value": 10.0, "width": 2.0 * w},
                ],
            },
            "events": [
                {"count": "Jet", "op": ">=", "param": "n_min", "width": w},
                {"count": "Jet", "op": ">", "param": "n_gt", "width": w},
                {"count": "Jet", "op": "<", "value": 7},
                {"count": "Jet", "op": "<=", "param": "n_max", "width": w},
                {"var": "MET.pt", "op": ">", "param": "met_min", "width": 3.0 * w},
            ],
        },
        "observables": [
            {"name": "pt", "x": "Jet.pt", "stats": ["mean", "std", "skew", "kurtosis"]},
            {"name": "pt_eta", "x": "Jet.pt", "y": "abs(Jet.eta)", "stats": ["covar", "corr"]},
            {"name": "ht", "x": "sum(Jet.pt)", "stats": ["mean", "var", "skew"]},
            {"name": "nj", "x": "count(Jet)", "stats": ["mean", "var"]},
            {"name": "met", "x": "abs(MET.pt)", "stats": ["mean", "kurtosis"]},
        ],
    }


@pytest.mark.parametrize("width", [0.0, 1.0])
@pytest.mark.parametrize("inverted, n_min", [(False, 2.3), (True, 0.6)])
def test_feature_matrix(width, inverted, n_min):
    plan, theta, widths = features(width=width, inverted=inverted, n_min=n_min)
    assert max(c.cap for c in plan.sets.model.counts) == 7  # events with 14 jets are above
    cols = synthetic(700, seed=int(inverted), ties=width == 0.0, big=14)
    value, jac = compare(plan, cols, theta, widths)
    assert 0 < value["selected_sumw2"]
    if width > 0:  # the derivatives along the cut thresholds are not zero
        d = jac["observables"]["pt"]["moments"].sumw
        names = plan.trainable_names
        assert all(abs(d[names.index(n)]) > 0 for n in ("pt_min", "eta_max", "met_min"))
        if n_min < 1:  # an object entry needs K >= 1: a threshold below 1 cannot move it
            assert d[names.index("n_min")] == 0.0


def sets_config(*, width: float = 1.0) -> dict:
    """Derived sets, two collections, a joint count over both, every observable kind the
    numba kernel serves."""
    w = width
    return {
        "parameters": {
            "pt_min": {"init": 27.0, "bounds": [15.0, 60.0]},
            "eta": {"init": 2.4, "bounds": [1.0, 4.0]},
            "b": {"init": 0.6, "bounds": [0.0, 1.0]},
            "n": {"init": 2, "bounds": [0, 4]},
            "met": {"init": 20.0, "bounds": [0.0, 50.0]},
            "mu": {"init": 10.0, "bounds": [0.0, 50.0]},
        },
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                {"var": "pt", "op": ">", "param": "pt_min", "width": 5.0 * w},
                {"var": "abs_eta", "op": "<", "param": "eta", "width": 0.2 * w}]},
            "bjets": {"from": "jets", "cuts": [
                {"var": "btagDeepFlavB", "op": ">", "param": "b", "width": 0.05 * w}]},
            "muons": {"collection": "Muon", "cuts": [
                {"var": "pt", "op": ">", "param": "mu", "width": 2.0 * w}]},
        },
        "selection": [
            {"count": "jets", "op": ">=", "param": "n", "width": w},
            {"count": ["bjets", "muons"], "op": "<=", "value": 2},
            {"count": "muons", "op": "==", "value": 1},
            {"var": "MET.pt", "op": ">", "param": "met", "width": 3.0 * w},
        ],
        "observables": [
            {"name": "pt", "x": "jets.pt", "y": "abs(jets.eta)",
             "stats": ["mean", "std", "corr", "skew"]},
            {"name": "bpt", "x": "bjets.pt", "stats": ["mean", "kurtosis"]},
            {"name": "mpt", "x": "muons.pt", "stats": ["mean"]},
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
            {"name": "nb", "x": "count(bjets)", "stats": ["mean", "skew"]},
            {"name": "met", "x": "MET.pt", "stats": ["mean", "std"]},
        ],
    }


@pytest.mark.parametrize("width", [0.0, 1.0])
def test_several_sets_and_joint_counts(width):
    plan, theta, widths = make_plan(sets_config(width=width))
    assert numba_refusal(plan, 1) is None
    theta[plan.param_names.index("n")] = 2.3
    value, jac = compare(plan, synthetic(900, seed=4, ties=width == 0.0, big=12), theta, widths)
    assert 0 < value["selected_sumw2"]


@pytest.mark.parametrize("n", [0, 1, 3])
def test_tiny_and_empty_chunks(n):
    plan, theta, widths = features()
    value, _ = compare(plan, synthetic(n, seed=1, big=8), theta, widths)
    if n == 0:
        assert float(value["selected_sumw"]) == 0.0


def test_many_blocks_and_no_count_cut():
    # More events than one block; no count cut, an event branch observable only.
    cfg = features_config(width=1.0, inverted=False)
    cfg["selection"]["events"] = cfg["selection"]["events"][4:]
    for name in ("n_min", "n_gt", "n_max"):
        cfg["parameters"].pop(name)
    plan, theta, widths = make_plan(cfg)
    assert not plan.sets.model.counts
    compare(plan, synthetic(2 * fastkernel.BLOCK + 17, seed=5, mean_jets=2.0), theta, widths)


def test_demo_config():
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["datasets"] = DATASETS
    cfg["observables"].append({"name": "pt_eta", "x": "Jet.pt", "y": "Jet.eta", "stats": ["corr"]})
    plan, theta, widths = make_plan(cfg)
    for seed in (0, 1):
        compare(plan, synthetic(3000, seed=seed, mean_jets=6.0, big=25), theta, widths)
    theta[plan.param_names.index("min_jets")] = 3.6  # between integers
    compare(plan, synthetic(3000, seed=2, mean_jets=6.0, big=25), theta, widths)


def test_ttbar_config_real_file(shared_data):
    cfg = yaml.safe_load((REPO / "configs" / "ttbar.yaml").read_text())
    cfg["datasets"] = DATASETS
    plan, theta, widths = make_plan(cfg)
    cols = read_columns(shared_data / "nanoAOD_2015_CMS_Open_Data_ttbar.root", plan)
    compare(plan, cols, theta, widths)
    theta[plan.param_names.index("jet_pt_min")] = 45.0
    compare(plan, cols, theta, widths * 0.5)


def test_jacobian_vs_finite_differences():
    plan, theta, widths = features()
    # Count thresholds between integers: P(K >= n) has a kink in n at each integer.
    theta[plan.param_names.index("n_max")] = 4.6
    cols = synthetic(400, seed=7, big=10)
    _, jac = fastkernel.evaluate_columns(cols, plan, theta, widths)
    idx = list(plan.trainable)

    def f(t):
        th = theta.copy()
        th[idx] = t
        value, _ = fastkernel.evaluate_columns(cols, plan, th, widths, order=0)
        return leaves(value)

    t0 = theta[idx]
    fd = central_difference(f, t0, 1e-5 * np.maximum(np.abs(t0), 1.0), points=5)
    got = leaves(jac)
    for k, row in got.items():
        if np.isnan(fd[k]).all():  # an undefined state (M3 of an order-2 sum): constant NaN
            assert not row.any(), k
            continue
        scale = np.max(np.abs(row))
        assert np.max(np.abs(row - fd[k])) <= FD_RTOL * scale + 1e-9, (k, row, fd[k])


def test_chunk_state_routes_and_engine_jax():
    plan, theta, widths = features()
    cols = synthetic(300, seed=9, big=7)
    fast = chunk_state(cols, plan, theta, widths)
    ref = chunk_state(cols, plan, theta, widths, backend="jax")
    v, _ = fastkernel.evaluate_columns(cols, plan, theta, widths)
    # The default engine is the numba kernel: bit for bit its value.
    assert float(fast.derived.value["selected_sumw"]) == float(v["selected_sumw"])
    assert_close(ref.derived.value, fast.derived.value, RTOL, "chunk_state value")
    assert_close(ref.derived.jac, fast.derived.jac, RTOL, "chunk_state jacobian")
    with pytest.raises(ValueError, match="backend must be one of auto, numba, jax"):
        chunk_state(cols, plan, theta, widths, backend="cuda")
    with pytest.raises(ValueError, match="order 2"):
        chunk_state(cols, plan, theta, widths, order=2, backend="numba")


# Slow: the order-2 program of this plan compiles for ~10-17 s CPU cold. The default run
# routes order 2 through the same chooser (``Backend()``, auto) to the JAX kernel and
# checks the Hessians against finite differences in
# tests/optimize/test_objectives.py::test_hessian_matches_finite_differences_of_gradient.
@pytest.mark.slow
def test_chunk_state_order_2_runs_the_jax_kernel():
    plan, theta, widths = features()
    hess = chunk_state(synthetic(300, seed=9, big=7), plan, theta, widths, order=2)
    assert hess.derived.hess is not None


def test_independent_of_thread_count(monkeypatch):
    plan, theta, widths = features()
    cols = synthetic(3 * fastkernel.BLOCK + 5, seed=11, big=9)
    runs: list[Any] = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("DIFFCOFFEA_KERNEL_THREADS", threads)
        runtime.reset()  # read the environment again
        runs.append(fastkernel.evaluate_columns(cols, plan, theta, widths))
    for run in runs[1:]:
        for a, b in zip(jax.tree_util.tree_leaves(runs[0]), jax.tree_util.tree_leaves(run)):
            assert np.array_equal(a, b, equal_nan=True)
    assert isinstance(runs[0][0]["observables"]["pt"]["moments"], Moments)
    assert isinstance(runs[0][1]["observables"]["pt_eta"]["comoments"], CoMoments)


def test_no_collection():
    # Events only: a soft MET cut and MET moments, no object collection read.
    plan, theta, widths = make_plan({
        "parameters": {"met_min": {"init": 10.0, "bounds": [0.0, 100.0]}},
        "selection": {"events": [{"var": "MET.pt", "op": ">=", "param": "met_min", "width": 4.0}]},
        "observables": [{"name": "met", "x": "MET.pt", "stats": ["mean", "skew"]}],
    })
    assert plan.sets.fields == ()
    cols = synthetic(300, seed=13)
    cols = ChunkColumns(cols.n_events, cols.weight, cols.events)
    compare(plan, cols, theta, widths)


def test_no_trainable_parameter_and_order_0():
    cfg = features_config(width=1.0, inverted=False)
    for p in cfg["parameters"].values():
        p["trainable"] = False
    plan, theta, widths = make_plan(cfg)
    assert plan.trainable == ()
    cols = synthetic(200, seed=17, big=8)
    _, jac = compare(plan, cols, theta, widths)
    assert jac["selected_sumw"].shape == (0,)
    value, none = fastkernel.evaluate_columns(cols, plan, theta, widths, order=0)
    assert none is None
    arrays, shapes = pad_columns(cols, plan)
    ref, _, _ = evaluate_chunk(theta, widths, arrays, plan, shapes, order=0)
    assert_close(ref, value, RTOL, "order 0")


def test_thread_count_follows_numba_then_the_environment_then_the_argument(monkeypatch):
    import numba

    monkeypatch.delenv("DIFFCOFFEA_KERNEL_THREADS", raising=False)
    runtime.reset()  # read the environment again
    assert fastkernel._threads() == max(1, numba.config.NUMBA_NUM_THREADS)
    monkeypatch.setenv("DIFFCOFFEA_KERNEL_THREADS", "3")
    runtime.reset()
    assert fastkernel._threads() == 3
    assert fastkernel._threads(1) == 1


def test_the_rules_name_the_reason():
    plan, theta, _ = make_plan(sets_config())
    assert "this pass: no numba rule for derivatives of order 2 (rules for: 0, 1)" == (
        numba_refusal(plan, 2))
    cfg = sets_config()
    cfg["observables"].append({"name": "lead", "x": "jets[0].pt", "stats": ["mean"]})
    assert numba_refusal(make_plan(cfg)[0], 1) is None  # one indexed set: served
    cfg["observables"][-1]["x"] = "mass(jets[0] + muons[0])"
    assert numba_refusal(make_plan(cfg)[0], 1) is None  # two sets of two collections
    cfg["observables"][-1]["x"] = "mass(jets[0] + bjets[0])"
    assert numba_refusal(make_plan(cfg)[0], 1) is None  # two sets of one collection
    cfg["observables"][-1]["x"] = "pt(jets[0] + bjets[0] + muons[0])"
    assert "'pt(jets[0] + bjets[0] + muons[0])' indexes 3 sets" in numba_refusal(
        make_plan(cfg)[0], 1)
    # a cut kind the loops do not know (a window lo < x < hi) is refused, never computed
    # as a threshold cut
    import dataclasses
    from types import SimpleNamespace

    window = SimpleNamespace(op="in", more=((None, 5.0),))
    spec = dataclasses.replace(plan.sets.sets[0], cuts=(window,))
    other = dataclasses.replace(plan, sets=dataclasses.replace(
        plan.sets, sets=(spec,) + plan.sets.sets[1:]))
    assert "a in cut: no numba rule for cut kind 'in'" in numba_refusal(other, 1)
    theta[plan.param_names.index("n")] = 9.0  # beyond the cap set by the bounds
    assert "beyond its cap" in numba_refusal(plan, 1, theta)


@pytest.mark.parametrize("width", [0.0, 0.7])
@pytest.mark.parametrize("greater, inclusive", [(True, False), (True, True), (False, False),
                                                (False, True)])
def test_soft_cut_is_the_one_definition(width, greater, inclusive):
    # the probabilities (numpy, on the host) and the loops' slope from them (numba)
    v = np.array([-2.0, -0.3, 0.0, 0.5, 1.0, 1.5, 40.0, -1e4, 1e4])
    t = 0.5
    s, ds = _numba_dp.soft_array(v, t, width, greater, inclusive)
    ref = soft_pass(v, t, width, greater=greater, inclusive=inclusive)
    np.testing.assert_allclose(s, ref, rtol=1e-15, atol=0)
    grad = jax.vmap(jax.grad(lambda x, th: soft_pass(x, th, width, greater=greater,
                                                     inclusive=inclusive), argnums=1),
                    in_axes=(0, None))(v, t)
    np.testing.assert_allclose(ds, grad, rtol=1e-14, atol=1e-300)
    iw = cuts.inverse_width(width)
    loops = [cuts.soft_slope(x, iw, greater) for x in s]
    np.testing.assert_allclose(loops, grad, rtol=1e-14, atol=1e-300)
    nan = np.array([np.nan])
    np.testing.assert_array_equal(_numba_dp.soft_array(nan, t, width, greater, inclusive)[0],
                                  soft_pass(nan, t, width, greater=greater, inclusive=inclusive))


def test_reduced_pass_table_keeps_every_sum():
    plan, theta, widths = make_plan(sets_config())
    model = plan.sets.model
    f, slope = _fasttables._pass_fn(model, np.array([2.3, 2.0, 1.0]).tobytes(),
                                     np.array([1.0, 0, 0]).tobytes())
    f, slope = np.asarray(f), np.asarray(slope)
    caps, f2, df2 = _fasttables._reduced(model, f, slope)
    assert tuple(caps + 1) != model.shape  # something was merged
    full = np.indices(model.shape).reshape(len(model.shape), -1).T
    small = np.ravel_multi_index(tuple(np.minimum(full, caps).T), tuple(caps + 1))
    np.testing.assert_array_equal(f2[small], f)
    np.testing.assert_array_equal(df2[small], slope)


def one_set_config(*, width: float, inverted: bool, field_observables: bool = True) -> dict:
    """:func:`features_config` without the event sums: one collection, one set, every cut
    op, every count op and a branch cut, the plan the fused loop serves."""
    cfg = features_config(width=width, inverted=inverted)
    keep = ("pt", "pt_eta", "met") if field_observables else ("met",)
    cfg["observables"] = [o for o in cfg["observables"] if o["name"] in keep]
    return cfg


@pytest.mark.parametrize("field_observables", [True, False])
@pytest.mark.parametrize("n", [0, 1, 3 * fastkernel.BLOCK // 2])
@pytest.mark.parametrize("width", [0.0, 1.0])
@pytest.mark.parametrize("inverted, n_min", [(False, 2.3), (True, 0.6)])
def test_fused_one_set_loop(width, inverted, n_min, n, field_observables, monkeypatch):
    # The one-set walk (analysis.select.chainwalk.cut_walk) against the JAX kernel (1e-12) and
    # against the general walk of _numba_hist (the same operations in the same order:
    # bit for bit), with and without per-object weights.
    plan, theta, widths = make_plan(one_set_config(
        width=width, inverted=inverted, field_observables=field_observables))
    theta[plan.param_names.index("n_min")] = n_min
    assert fastkernel._tables(plan).one_set
    cols = synthetic(n, seed=3 + int(inverted), ties=width == 0.0, big=14)
    ran = []
    compiled = fastkernel._numba_dp.compiled
    monkeypatch.setattr(fastkernel._numba_dp, "compiled",
                        lambda kernel, args: ran.append(kernel) or compiled(kernel, args))
    fused = compare(plan, cols, theta, widths)
    assert ran.count(chainwalk.cut_walk) == (1 if n else 0)
    general = fastkernel.evaluate_columns(cols, plan, theta, widths, fused=False)
    assert ran.count(chainwalk.cut_walk) == (1 if n else 0)  # not again
    for a, b in zip(jax.tree_util.tree_leaves(fused), jax.tree_util.tree_leaves(general),
                    strict=True):
        assert np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("width", [0.0, 1.0])
def test_fused_value_loop_is_lane_zero(width, monkeypatch):
    # Values only (order 0) run the one-lane loop: the same floats as the value lane of
    # the loop with tangents (order 1), and the JAX kernel's values at 1e-12.
    plan, theta, widths = make_plan(one_set_config(width=width, inverted=False))
    cols = synthetic(3 * fastkernel.BLOCK // 2, seed=5, ties=width == 0.0, big=14)
    one = chainwalk.cut_walk
    ran = []  # the fused loop compiled with tangents (df an array) or without (0.0)
    compiled = fastkernel._numba_dp.compiled
    monkeypatch.setattr(fastkernel._numba_dp, "compiled", lambda kernel, args: ran.extend(
        [not isinstance(args[6], float)] if kernel is one else []) or compiled(kernel, args))
    v0, j0 = fastkernel.evaluate_columns(cols, plan, theta, widths, order=0)
    assert j0 is None and ran == [False]
    v1, _ = fastkernel.evaluate_columns(cols, plan, theta, widths, order=1)
    assert ran == [False, True]

    for a, b in zip(jax.tree_util.tree_leaves(v0), jax.tree_util.tree_leaves(v1), strict=True):
        assert np.array_equal(a, b, equal_nan=True)
    arrays, shapes = pad_columns(cols, plan)
    ref, _, _ = evaluate_chunk(theta, widths, arrays, plan, shapes, order=0)
    assert_close(ref, v0, RTOL, "value")


def test_fused_loop_not_for_several_sets_or_event_sums(monkeypatch):
    ran = []
    monkeypatch.setattr(fastkernel._numba_dp, "compiled", lambda k, a: ran.append(k) or k)
    plan, theta, widths = make_plan(sets_config())
    assert not fastkernel._tables(plan).one_set
    fastkernel.evaluate_columns(synthetic(50, seed=1), plan, theta, widths)
    plan, theta, widths = features()  # one set, but sum(Jet.pt), count(Jet): the sum loops
    assert fastkernel._tables(plan).one_set
    fastkernel.evaluate_columns(synthetic(50, seed=1), plan, theta, widths)
    assert chainwalk.cut_walk not in ran


@pytest.mark.parametrize("one_set", [False, True])
def test_observable_entries_equal_the_jax_kernels(one_set):
    # Histogram entries (x, soft weight) of every observable kind the numba kernel serves
    # (a field, |field|, a branch, |branch|, sum, count) against the JAX kernel's, 1e-12,
    # in the general loops and in the fused one-set loop.
    from analysis.pipeline.backends.jax import passes as kernel

    cfg = (one_set_config if one_set else features_config)(width=1.0, inverted=False)
    cfg["observables"] += [{"name": "aeta", "x": "abs(Jet.eta)", "stats": ["mean"]},
                           {"name": "rawmet", "x": "MET.pt", "stats": ["mean"]}]
    plan, theta, widths = make_plan(cfg)
    cols = synthetic(500, seed=21, big=11)
    for index, obs in enumerate(plan.observables):
        request = Request(theta, widths, order=0, entries=index)
        assert numba_refusal(plan, 0, theta, entries=index) is None
        x, w = run_once(cols, plan, request, backend="numba")
        arrays, shapes = pad_columns(cols, plan)
        xr, wr = (np.asarray(a) for a in kernel._entries(
            theta, widths, arrays, plan, shapes, index))
        keep = wr != 0
        xr, wr = xr[keep], wr[keep]
        assert x.shape == xr.shape and len(x) > 0, obs.name
        np.testing.assert_allclose(x, xr, rtol=1e-12, atol=0, err_msg=obs.name)
        np.testing.assert_allclose(w, wr, rtol=1e-12, atol=1e-300, err_msg=obs.name)


def _soft_values_numpy(v, t, width, greater, inclusive, absolute):
    """The soft cut's probabilities as numpy's ufuncs one after the other (the sequence
    that the compiled loops around ``exp`` replace)."""
    out = np.abs(v) if absolute else v.copy()
    out = np.subtract(out, t) if greater else np.subtract(t, out)
    if not width > 0.0:
        return (np.greater_equal(out, 0.0) if inclusive else np.greater(out, 0.0)).astype(float)
    with np.errstate(over="ignore"):
        e = np.exp(np.divide(out, -width))
    return np.divide(1.0, np.add(e, 1.0))


@pytest.mark.parametrize("width", [0.0, -1.0, np.nan, 1e-300, 0.2, 5.0])
@pytest.mark.parametrize("t", [0.0, -3.0, 20.5])
def test_soft_values_equal_numpy_bit_for_bit(width, t):
    # the compiled loops around numpy's exp (soft_argument, soft_finish) give numpy's
    # floats to the bit, signed zeros, infinities and NaN included, into slices too
    rng = np.random.default_rng(7)
    v = np.concatenate([rng.normal(0.0, 40.0, 5000), rng.normal(t, 1e-3, 500),
                        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308, -1e308, t, -t]])
    for greater in (True, False):
        for inclusive in (True, False):
            for absolute in (True, False):
                ref = _soft_values_numpy(v, t, width, greater, inclusive, absolute)
                got = _numba_dp.soft_values(v, t, width, greater, inclusive, absolute)
                np.testing.assert_array_equal(got.view(np.int64), ref.view(np.int64))
                out = np.full((2, v.size), 7.0)
                _numba_dp.soft_values(v[100:], t, width, greater, inclusive, absolute,
                                      out[1, 100:])
                np.testing.assert_array_equal(out[1, 100:].view(np.int64),
                                              ref[100:].view(np.int64))
                assert np.all(out[0] == 7.0) and np.all(out[1, :100] == 7.0)
