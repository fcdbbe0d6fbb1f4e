"""The numba kernel (``analysis.pipeline.fastkernel``) against the JAX kernel and finite differences.

- Values and Jacobians equal the JAX kernel's (``analysis.pipeline.kernel.evaluate_chunk``, the
  reference) to 1e-12, relative to each leaf's (Jacobian row's) largest entry, over a
  matrix of plan features: every cut op, ``abs_``, fixed and parameter thresholds,
  widths 0 (ties at the threshold) and > 0, count cuts of every op with parameter and
  fixed thresholds, non-integer N, events above the count cap, empty events and an
  empty chunk, event cuts on a branch, a soft sum and a soft count, object- and
  event-level observables of one and two variables, negative weights; the demo and
  ttbar configs.
- Its Jacobian equals central finite differences of its own values.
- It is what ``kernel.chunk_state`` runs (``engine="jax"`` forces the reference), and
  its results do not depend on the number of threads.

States hold a constant centre (no gradient) and a differentiable offset; the two
kernels add their sums in different orders, so their centres differ by rounding and
the states are compared through ``mean = center + dmean``.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import yaml

from analysis.config.loader import config_from_dict
from analysis.pipeline import fastkernel
from analysis.pipeline.kernel import chunk_state, evaluate_chunk
from analysis.pipeline.layout import ChunkColumns, pad_columns
from analysis.pipeline.plan import EventVarCut, Expr, Plan, build_plan, initial_widths
from analysis.stats import CoMoments, Moments
from tests.chunked_helpers import NANOAOD_WARNINGS, read_columns
from tests.conftest import central_difference

REPO = Path(__file__).resolve().parents[2]
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
    return ChunkColumns(
        n,
        rng.normal(0.8, 1.0, n),
        counts.astype(np.int64),
        {"pt": pt, "eta": eta, "btagDeepFlavB": btag, "mass": mass},
        {"MET.pt": met},
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
            {
                "name": "ht",
                "x": "sum(Jet.pt)",
                "y": "count(Jet)",
                "stats": ["mean", "var", "linear_fit"],
            },
            {"name": "met", "x": "abs(MET.pt)", "stats": ["mean", "kurtosis"]},
        ],
    }


@pytest.mark.parametrize("width", [0.0, 1.0])
@pytest.mark.parametrize("inverted, n_min", [(False, 2.3), (True, 0.6)])
def test_feature_matrix(width, inverted, n_min):
    plan, theta, widths = features(width=width, inverted=inverted, n_min=n_min)
    assert plan.count_cap == 9  # events with up to 14 jets are above it
    cols = synthetic(700, seed=int(inverted), ties=width == 0.0, big=14)
    value, jac = compare(plan, cols, theta, widths)
    assert 0 < value["selected_sumw2"]
    if width > 0:  # the derivatives are not all zero
        assert np.all(np.abs(jac["observables"]["pt"]["moments"].sumw) > 0)


def test_event_cuts_on_sum_and_count():
    # The config grammar allows branch cuts only; the kernels compute sums and counts too.
    plan, theta, widths = features()
    ht = Expr("sum(Jet.pt)", "event", "sum", "pt")
    nj = Expr("count(Jet)", "event", "count", None)
    neg = Expr("sum(Jet.eta)", "event", "sum", "eta", absolute=True)
    k = plan.n_widths
    extra = (
        EventVarCut(ht, True, False, 0, None, k),  # sum(pt) > pt_min (the parameter)
        EventVarCut(nj, False, True, None, 5.5, k + 1),  # count <= 5.5, fixed
        EventVarCut(neg, True, False, None, 1.0, k + 2),  # abs(sum(eta)) > 1
    )
    plan = dataclasses.replace(plan, event_cuts=plan.event_cuts + extra, n_widths=k + 3)
    soft = np.concatenate([widths, [20.0, 0.5, 0.4]])
    hard = np.concatenate([widths, [0.0, 0.0, 0.0]])
    compare(plan, synthetic(500, seed=3, big=9), theta, soft)
    compare(plan, synthetic(500, seed=3, ties=True, big=9), theta, hard)


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
    assert not plan.count_cuts
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
        scale = np.max(np.abs(row))
        assert np.max(np.abs(row - fd[k])) <= FD_RTOL * scale + 1e-9, (k, row, fd[k])


def test_chunk_state_routes_and_engine_jax():
    plan, theta, widths = features()
    cols = synthetic(300, seed=9, big=7)
    fast = chunk_state(cols, plan, theta, widths)
    ref = chunk_state(cols, plan, theta, widths, engine="jax")
    v, _ = fastkernel.evaluate_columns(cols, plan, theta, widths)
    # The default engine is the numba kernel: bit for bit its value.
    assert float(fast.derived.value["selected_sumw"]) == float(v["selected_sumw"])
    assert_close(ref.derived.value, fast.derived.value, RTOL, "chunk_state value")
    assert_close(ref.derived.jac, fast.derived.jac, RTOL, "chunk_state jacobian")
    hess = chunk_state(cols, plan, theta, widths, order=2)  # Hessians: the JAX kernel
    assert hess.derived.hess is not None
    with pytest.raises(ValueError, match="engine"):
        chunk_state(cols, plan, theta, widths, engine="numba")


def test_independent_of_thread_count(monkeypatch):
    plan, theta, widths = features()
    cols = synthetic(3 * fastkernel.BLOCK + 5, seed=11, big=9)
    runs: list[Any] = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("DIFFCOFFEA_KERNEL_THREADS", threads)
        runs.append(fastkernel.evaluate_columns(cols, plan, theta, widths))
    for run in runs[1:]:
        for a, b in zip(jax.tree_util.tree_leaves(runs[0]), jax.tree_util.tree_leaves(run)):
            assert np.array_equal(a, b, equal_nan=True)
    assert isinstance(runs[0][0]["observables"]["pt"]["moments"], Moments)
    assert isinstance(runs[0][1]["observables"]["pt_eta"]["comoments"], CoMoments)


def test_no_collection():
    # Events only: a soft MET cut and MET moments, no object collection read.
    plan, theta, widths = make_plan(
        {
            "parameters": {"met_min": {"init": 10.0, "bounds": [0.0, 100.0]}},
            "selection": {
                "events": [{"var": "MET.pt", "op": ">=", "param": "met_min", "width": 4.0}]
            },
            "observables": [{"name": "met", "x": "MET.pt", "stats": ["mean", "skew"]}],
        }
    )
    assert plan.collection is None
    cols = synthetic(300, seed=13)
    cols = ChunkColumns(cols.n_events, cols.weight, None, {}, cols.events)
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
    assert fastkernel._threads() == max(1, numba.config.NUMBA_NUM_THREADS)
    monkeypatch.setenv("DIFFCOFFEA_KERNEL_THREADS", "3")
    assert fastkernel._threads() == 3
    assert fastkernel._threads(1) == 1
