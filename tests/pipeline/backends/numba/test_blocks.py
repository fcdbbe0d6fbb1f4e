"""More trainable parameters than the numba lanes hold: forward mode in blocks of tangents
(:mod:`analysis.pipeline.backends.numba.blocks`).

- 12 trainable parameters over four object sets of three collections (derived sets, a
  joint count, a count on a parameter, an event cut, leading objects, event sums):
  the numba backend serves it (no refusal, the JAX kernel never runs under ``auto``),
  in two sweeps of the lane kernels, with its own values' central finite differences
  and (slow: the JAX kernel takes minutes to build) the JAX backend's states and
  Jacobians (1e-12), on empty, one-event and 800-event chunks.
- 9 trainable parameters with histograms, channel regions, shift and weight
  variations (the histogram walk): the JAX backend's templates and Jacobians.
- The blocks: as few as the lanes allow, sizes as equal as possible, in order.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.jax import passes as jax_passes
from analysis.pipeline.backends.numba import blocks, fasthist, fastkernel
from analysis.pipeline.layout import ChunkColumns
from analysis.select.lanes.arith import LANES
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.conftest import central_difference, numba_refusal
from tests.pipeline.backends.numba import test_fasthist
from tests.pipeline.backends.numba.test_fastkernel import assert_close, leaves, make_plan

pytestmark = NANOAOD_WARNINGS
RTOL = 1e-12
FD_RTOL = 1e-6


def _counted(monkeypatch, module, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def columns(n: int, *, seed: int = 0) -> ChunkColumns:
    """``n`` events of Poisson jets, muons and electrons, MET, negative weights included;
    the first events have no objects."""
    rng = np.random.default_rng(seed)

    def objects(mean: float, fields: dict) -> tuple:
        counts = rng.poisson(mean, n).astype(np.int64)
        counts[: min(n, 2)] = 0
        t = int(counts.sum())
        return counts, {k: make(t) for k, make in fields.items()}

    return ChunkColumns(n, rng.normal(0.8, 1.0, n), {"MET.pt": rng.normal(20, 40, n)}, {
        "Jet": objects(5.0, {"pt": lambda t: 15 + rng.exponential(40, t),
                             "eta": lambda t: rng.normal(0, 2.0, t),
                             "btagDeepFlavB": lambda t: rng.uniform(0, 1, t),
                             "mass": lambda t: rng.exponential(10, t)}),
        "Muon": objects(1.2, {"pt": lambda t: 5 + rng.exponential(20, t),
                              "eta": lambda t: rng.normal(0, 1.5, t)}),
        "Electron": objects(0.8, {"pt": lambda t: 5 + rng.exponential(20, t)}),
    })


def twelve_config() -> dict:
    """Four object sets (jets, b-jets and forward jets derived from Jet, muons) and
    electrons, 12 trainable parameters: every set's cuts, two count thresholds and a
    MET cut."""
    p = {
        "jet_pt": (27.0, 15.0, 60.0), "jet_eta": (2.4, 1.0, 4.0), "jet_mass": (30.0, 5.0, 80.0),
        "b": (0.6, 0.0, 1.0), "fwd_pt": (35.0, 15.0, 60.0), "fwd_eta": (2.5, 1.5, 4.0),
        "mu_pt": (10.0, 0.0, 50.0), "mu_eta": (2.1, 1.0, 2.5), "el_pt": (12.0, 0.0, 50.0),
        "n_jets": (2, 0, 5), "n_b": (1, 0, 3), "met": (20.0, 0.0, 50.0),
    }
    return {
        "parameters": {k: {"init": i, "bounds": [lo, hi]} for k, (i, lo, hi) in p.items()},
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                {"var": "pt", "op": ">", "param": "jet_pt", "width": 5.0},
                {"var": "abs_eta", "op": "<", "param": "jet_eta", "width": 0.2},
                {"var": "mass", "op": "<", "param": "jet_mass", "width": 3.0}]},
            "bjets": {"from": "jets", "cuts": [
                {"var": "btagDeepFlavB", "op": ">", "param": "b", "width": 0.05}]},
            "fwd": {"collection": "Jet", "cuts": [
                {"var": "pt", "op": ">", "param": "fwd_pt", "width": 5.0},
                {"var": "abs_eta", "op": ">", "param": "fwd_eta", "width": 0.2}]},
            "muons": {"collection": "Muon", "cuts": [
                {"var": "pt", "op": ">", "param": "mu_pt", "width": 2.0},
                {"var": "abs_eta", "op": "<", "param": "mu_eta", "width": 0.1}]},
            "electrons": {"collection": "Electron", "cuts": [
                {"var": "pt", "op": ">", "param": "el_pt", "width": 2.0}]},
        },
        "selection": [
            {"count": "jets", "op": ">=", "param": "n_jets", "width": 0.5},
            {"count": "bjets", "op": ">=", "param": "n_b", "width": 0.5},
            {"count": ["muons", "electrons"], "op": "<=", "value": 2},
            {"count": "fwd", "op": "<=", "value": 3},
            {"var": "MET.pt", "op": ">", "param": "met", "width": 3.0},
        ],
        "observables": [
            {"name": "pt", "x": "jets.pt", "y": "abs(jets.eta)", "stats": ["mean", "std", "corr"]},
            {"name": "bpt", "x": "bjets.pt", "stats": ["mean", "skew"]},
            {"name": "fpt", "x": "fwd.pt", "stats": ["mean"]},
            {"name": "mpt", "x": "muons.pt", "stats": ["mean", "std"]},
            {"name": "lead", "x": "jets[0].pt", "stats": ["mean", "std"]},
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
            {"name": "nb", "x": "count(bjets)", "stats": ["mean"]},
            {"name": "met", "x": "MET.pt", "stats": ["mean", "std"]},
        ],
    }


def twelve():
    plan, theta, widths = make_plan(twelve_config())
    theta[plan.param_names.index("n_jets")] = 2.4  # between integers: both sides move
    theta[plan.param_names.index("n_b")] = 0.7
    return plan, theta, widths


def test_blocks_are_as_few_and_as_even_as_the_lanes_allow():
    most = LANES - 1
    assert blocks.split(tuple(range(7)), most) == [tuple(range(7))]
    assert blocks.split(tuple(range(12)), most) == [tuple(range(6)), tuple(range(6, 12))]
    assert [len(b) for b in blocks.split(tuple(range(15)), most)] == [5, 5, 5]
    assert blocks.split((4, 0, 9), 1) == [(4,), (0,), (9,)]  # in order, whatever it is
    plan, _, _ = twelve()
    assert blocks.plans(plan, 0, most) == (plan,)  # values: one sweep
    sweeps = blocks.plans(plan, 1, most)
    assert [p.trainable for p in sweeps] == blocks.split(plan.trainable, most)


def test_twelve_parameters_over_four_sets_run_on_numba_in_two_sweeps(monkeypatch):
    """``auto`` serves 12 parameters on numba: two sweeps of six tangents, no JAX kernel;
    its Jacobian equals central finite differences of its own values."""
    plan, theta, widths = twelve()
    assert len(plan.trainable) == 12 and len(plan.sets.sets) == 5
    assert numba_refusal(plan, 1) is None
    cols = columns(300, seed=5)
    sweeps = _counted(monkeypatch, fastkernel, "evaluate_columns")
    jax_runs = _counted(monkeypatch, jax_passes, "evaluate_chunk")
    state = chunk_state(cols, plan, theta, widths)  # auto
    assert (sweeps[0], jax_runs[0]) == (2, 0)
    assert state.derived.names == plan.trainable_names
    d = state.derived.jac["selected_sumw"]
    assert d.shape == (12,) and np.all(d != 0)  # every parameter moves the yield
    idx = list(plan.trainable)

    def f(t):
        th = theta.copy()
        th[idx] = t
        return leaves(chunk_state(cols, plan, th, widths, order=0, backend="numba").derived.value)

    t0 = theta[idx]
    fd = central_difference(f, t0, 1e-5 * np.maximum(np.abs(t0), 1.0), points=5)
    assert jax_runs[0] == 0
    got = leaves(state.derived.jac)
    for k, row in got.items():
        if np.isnan(fd[k]).all():  # an undefined state: constant NaN, zero derivative
            assert not row.any(), k
            continue
        scale = np.max(np.abs(row))
        assert np.max(np.abs(row - fd[k])) <= FD_RTOL * scale + 1e-9, (k, row, fd[k])


@pytest.mark.slow  # the JAX reference's 12-tangent kernel over five sets: minutes
@pytest.mark.parametrize("n", [0, 1, 800])
def test_twelve_parameters_over_four_sets_equal_the_jax_backend(n):
    plan, theta, widths = twelve()
    cols = columns(n, seed=3)
    fast = chunk_state(cols, plan, theta, widths, backend="numba")
    ref = chunk_state(cols, plan, theta, widths, backend="jax")
    assert fast.derived.names == ref.derived.names == plan.trainable_names
    assert_close(ref.derived.value, fast.derived.value, RTOL, "value")
    assert_close(ref.derived.jac, fast.derived.jac, RTOL, "jacobian")


def test_nine_parameters_with_histograms_and_variations_as_jax(monkeypatch):
    cfg = copy.deepcopy(test_fasthist.CONFIG)
    params = cfg["parameters"]
    for name, init, lo, hi in (("eta_max", 2.4, 1.0, 4.0), ("mu_pt", 10.0, 0.0, 30.0),
                               ("met_min", -50.0, -80.0, 0.0), ("b2_met", 80.0, 40.0, 150.0),
                               ("jet_pt2", 20.0, 10.0, 40.0), ("mu_n", 1, 0, 3)):
        params[name] = {"init": init, "bounds": [lo, hi]}
    jets, mu = cfg["objects"]["jets"]["cuts"], cfg["objects"]["muons"]["cuts"]
    jets[1] = {"var": "abs_eta", "op": "<", "param": "eta_max", "width": 0.1}
    jets.append({"var": "pt", "op": ">", "param": "jet_pt2", "width": 3.0})
    mu[0] = {"var": "pt", "op": ">", "param": "mu_pt", "width": 2.0}
    cfg["selection"][1] = {"var": "MET.pt", "op": ">", "param": "met_min", "width": 10.0}
    channels = cfg["likelihood"]["channels"]
    channels["b2"]["selection"][1] = {"var": "MET.pt", "op": "<", "param": "b2_met", "width": 5.0}
    channels["mu"]["selection"][0] = {"count": "muons", "op": "<=", "param": "mu_n", "width": 0.5}
    plan, theta, widths = make_plan(cfg)
    theta[plan.param_names.index("min_jets")] = 3.4
    theta[plan.param_names.index("mu_n")] = 1.3
    assert len(plan.trainable) == 9
    cols = test_fasthist.columns(300, plan, seed=2)
    sweeps = _counted(monkeypatch, fasthist, "evaluate_columns")
    state = test_fasthist.compare(plan, cols, theta, widths)
    assert sweeps[0] == 2
    jac = state.derived.jac["templates"]
    assert np.asarray(jac["b2:jes:up"].sumw).shape[-1] == 9
    for name in plan.trainable_names:  # each block's columns are its own parameters'
        k = plan.trainable_names.index(name)
        assert any(np.abs(np.asarray(h.sumw)[..., k]).max() > 0 for h in jac.values()), name
