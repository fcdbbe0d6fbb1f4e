"""Learned scores in the object-set kernel: at width 0 the selection equals the same
network evaluated with numpy on the hard-cut selection (awkward); gradients in the
network weights and cut thresholds against central finite differences."""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.pipeline.plan import build_plan
from analysis.stats.mlp import mlp, to_arrays
from tests.conftest import SHARED_DATA, central_difference
from tests.stats.test_mlp_score import numpy_mlp as numpy_network

PATH = str(SHARED_DATA / "nano_tt_v12.root")
TAG_STD = {"mean": [60.0, 1.2, 0.3], "std": [40.0, 0.8, 0.3]}
EV_STD = {"mean": [50.0, 0.0], "std": [30.0, 1.8]}


def config(*, width: float = 1.0, chunksize: int = 100_000, hidden=(4, 3)) -> dict[str, Any]:
    return {
        "datasets": {"tt": {"files": [PATH], "weight": "genWeight"}},
        "executor": {"type": "iterative", "chunksize": chunksize},
        "parameters": {
            "jet_pt_min": {"init": 25.0, "bounds": [15.0, 60.0]},
            "tag_min": {"init": 0.1, "bounds": [-5.0, 5.0]},
            "ev_min": {"init": -0.2, "bounds": [-5.0, 5.0]},
        },
        "scores": [
            {"score": "tag", "mlp": {"inputs": ["jets.pt", "abs(jets.eta)", "jets.btagDeepFlavB"],
                                     "hidden": list(hidden), "activation": "tanh"},
             "init": {"seed": 1}, "standardise": TAG_STD},
            {"score": "ev", "mlp": {"inputs": ["MET.pt", "MET.phi"], "hidden": [3]},
             "init": {"seed": 2}, "standardise": EV_STD},
        ],
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                {"var": "pt", "op": ">", "param": "jet_pt_min", "width": 5.0 * width},
                {"var": "score.tag", "op": ">", "param": "tag_min", "width": 0.2 * width}]},
        },
        "selection": [
            {"count": "jets", "op": ">=", "value": 2},
            {"var": "score.ev", "op": ">", "param": "ev_min", "width": 0.2 * width},
        ],
        "observables": [
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
            {"name": "jpt", "x": "jets.pt", "stats": ["mean"]},
            {"name": "evscore", "x": "score.ev", "stats": ["mean"]},  # an event-level score
        ],
    }


def numpy_mlp(arrays: dict[str, np.ndarray], x: np.ndarray, mean, std) -> np.ndarray:
    """The network in numpy (tests/stats' reference) on standardised inputs."""
    return numpy_network(arrays, (x - np.asarray(mean)) / np.asarray(std))


def reference(hidden=(4, 3)) -> dict[str, float]:
    t = uproot.open(PATH)["Events"]
    a = ak.values_astype(t.arrays(["genWeight", "MET_pt", "MET_phi", "Jet_pt", "Jet_eta",
                                   "Jet_btagDeepFlavB"]), np.float64)
    counts = ak.num(a.Jet_pt)
    flat = np.stack([ak.to_numpy(ak.flatten(a.Jet_pt)), np.abs(ak.to_numpy(ak.flatten(a.Jet_eta))),
                     ak.to_numpy(ak.flatten(a.Jet_btagDeepFlavB))], axis=1)
    tag = numpy_mlp(to_arrays(mlp(3, hidden=hidden, seed=1)), flat, **TAG_STD)
    tag = ak.unflatten(tag, counts)
    ev = numpy_mlp(to_arrays(mlp(2, hidden=(3,), seed=2)),
                   np.stack([ak.to_numpy(a.MET_pt), ak.to_numpy(a.MET_phi)], axis=1), **EV_STD)
    keep = (a.Jet_pt > 25.0) & (tag > 0.1)
    pt = a.Jet_pt[keep]
    ok = np.asarray((ak.num(pt) >= 2) & (ev > -0.2))
    w = np.asarray(a.genWeight)[ok]
    ht = np.asarray(ak.sum(pt, axis=1))[ok]
    jpt = ak.to_numpy(ak.flatten(pt[ok]))
    wj = np.repeat(w, np.asarray(ak.num(pt[ok])))
    return {"sumw": w.sum(), "ht": np.sum(w * ht) / w.sum(), "jpt": np.sum(wj * jpt) / wj.sum(),
            "evscore": np.sum(w * ev[ok]) / w.sum(),
            "n": int(ok.sum()), "n_all": len(ok)}


def test_plan_names_the_network_parameters() -> None:
    cfg = config_from_dict(config())
    plan = build_plan(cfg)
    tag, ev = plan.scores
    assert plan.param_names[tag.start] == "score.tag.layers.0.weight[0,0]"
    # 3 -> 4 -> 3 -> 1 plus the standardisation of 3 inputs
    assert tag.n_weights == 3 * 4 + 4 + 4 * 3 + 3 + 3 + 1
    assert plan.param_names[tag.stop - 1] == "score.tag.std[2]"
    assert plan.param_names[ev.start] == "score.ev.layers.0.weight[0,0]"
    trainable = set(plan.trainable_names)
    assert "score.tag.layers.1.bias[2]" in trainable and "score.tag.mean[0]" not in trainable
    assert ("Jet", ("pt", "eta", "btagDeepFlavB")) in plan.sets.fields or any(
        c == "Jet" and "score.tag" not in f for c, f in plan.sets.fields)
    assert "score.ev" not in plan.event_keys and "MET.pt" in plan.event_keys


@pytest.mark.slow
def test_width0_equals_numpy_network_on_hard_cuts() -> None:
    ref = reference()
    assert 10 < ref["n"] < ref["n_all"]  # the cuts on the scores keep some, drop some
    state = Evaluator(config_from_dict(config(width=0.0))).run(order=0)["tt"]
    np.testing.assert_allclose(float(state.derived.value["selected_sumw"]), ref["sumw"],
                               rtol=1e-12)
    obs = state.observables
    for key in ("ht", "jpt", "evscore"):
        m = obs[key]["moments"]
        np.testing.assert_allclose(float(m.center + m.dmean), ref[key], rtol=1e-12)


def _flat(state) -> np.ndarray:
    v = state.derived.value
    m = v["observables"]["ht"]["moments"]
    return np.array([float(v["selected_sumw"]), float(m.sumw), float(m.m2)])


@pytest.mark.slow
def test_gradient_matches_central_differences() -> None:
    cfg = config_from_dict(config(hidden=(2,)))
    ev = Evaluator(cfg)
    plan = ev.plan
    names = [plan.param_names[i] for i in plan.trainable]
    pick = ["tag_min", "ev_min", "score.tag.layers.0.weight[1,2]", "score.tag.layers.1.bias[0]",
            "score.ev.layers.1.weight[0,2]"]
    state = ev.run(order=1)["tt"]
    jac = state.taylor()[1]
    m = jac["observables"]["ht"]["moments"]
    full = np.stack([np.asarray(jac["selected_sumw"]), np.asarray(m.sumw), np.asarray(m.m2)])
    got = full[:, [names.index(n) for n in pick]]
    init = cfg.initial_params()
    x0 = np.array([init[n] for n in pick])

    def f(x):
        return _flat(ev.run(dict(zip(pick, map(float, x))), order=0)["tt"])

    fd = central_difference(f, x0, 1e-5)
    assert np.all(np.isfinite(full))
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-7 * np.abs(fd).max())
    assert np.all(np.abs(got).max(axis=0) > 0)
