"""The object-set form at width 0 against an independent awkward + vector hard-cut
analysis on the real NanoAOD files (1e-12), one observable of every kind; gradients
against central finite differences; chunk invariance on the iterative and futures executors."""

from __future__ import annotations

from typing import Any

import awkward as ak
import jax
import numpy as np
import pytest
import uproot
import vector

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.stats import _core
from tests.conftest import SHARED_DATA, central_difference
from tests.reference import flatten

vector.register_awkward()

CUTS = {"jet_pt_min": 25.0, "btag_min": 0.5, "lep_pt_min": 20.0}


def agc(
    path: str, *, chunksize: int = 100_000, widths: bool = True, btag: str = "btagDeepFlavB",
    weight: str | None = "genWeight",
) -> dict[str, Any]:
    w = (lambda x: x) if widths else (lambda x: 0.0)
    return {
        "datasets": {"tt": {"files": [path], "weight": weight}},
        "executor": {"type": "iterative", "chunksize": chunksize},
        "parameters": {
            "jet_pt_min": {"init": CUTS["jet_pt_min"], "bounds": [15.0, 60.0]},
            "btag_min": {"init": CUTS["btag_min"], "bounds": [0.1, 0.95]},
            "lep_pt_min": {"init": CUTS["lep_pt_min"], "bounds": [10.0, 60.0]},
        },
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                {"var": "pt", "op": ">", "param": "jet_pt_min", "width": w(5.0)},
                {"var": "abs_eta", "op": "<", "value": 2.4, "width": w(0.1)}]},
            "bjets": {"from": "jets", "cuts": [
                {"var": btag, "op": ">", "param": "btag_min", "width": w(0.05)}]},
            "muons": {"collection": "Muon", "cuts": [
                {"var": "pt", "op": ">", "param": "lep_pt_min", "width": w(2.0)}]},
            "electrons": {"collection": "Electron", "cuts": [
                {"var": "pt", "op": ">", "param": "lep_pt_min", "width": w(2.0)}]},
        },
        "selection": [
            {"count": "jets", "op": ">=", "value": 3},
            {"count": "bjets", "op": ">=", "value": 1},
            {"count": ["muons", "electrons"], "op": "<=", "value": 1},
            {"var": "MET.pt", "op": ">", "value": 20.0, "width": w(5.0)},
        ],
        "observables": [
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
            {"name": "m3j", "x": "mass(jets[0] + jets[1] + jets[2])", "stats": ["mean", "std"]},
            {"name": "lead", "x": "jets[0].pt", "stats": ["mean", "var"]},
            {"name": "jpt", "x": "jets.pt", "y": "jets.eta", "stats": ["mean", "corr"]},
            {"name": "drbb", "x": "deltaR(jets[0], bjets[0])", "stats": ["mean"]},
            {"name": "met", "x": "MET.pt", "stats": ["mean"]},
        ],
    }


def reference(path: str, btag: str, weight: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{observable: (values, weights)}`` and the selected sum of weights, by hand."""
    t = uproot.open(path)["Events"]
    arr = t.arrays(["genWeight", "MET_pt", "Jet_pt", "Jet_eta", "Jet_phi", "Jet_mass",
                    f"Jet_{btag}", "Muon_pt", "Electron_pt"])
    arr = ak.values_astype(arr, np.float64)  # the engine reads float64
    jets = ak.zip({"pt": arr.Jet_pt, "eta": arr.Jet_eta, "phi": arr.Jet_phi,
                   "mass": arr.Jet_mass, "btag": arr[f"Jet_{btag}"]},
                  with_name="Momentum4D")
    jets = jets[(jets.pt > CUTS["jet_pt_min"]) & (abs(jets.eta) < 2.4)]
    # rank by pT, descending, ties in file order (as the engine)
    jets = jets[ak.argsort(jets.pt, ascending=False, stable=True)]
    bjets = jets[jets.btag > CUTS["btag_min"]]
    nlep = ak.sum(arr.Muon_pt > CUTS["lep_pt_min"], axis=1) + ak.sum(
        arr.Electron_pt > CUTS["lep_pt_min"], axis=1)
    ok = (ak.num(jets) >= 3) & (ak.num(bjets) >= 1) & (nlep <= 1) & (arr.MET_pt > 20.0)
    w = np.asarray(arr.genWeight) if weight else np.ones(len(arr))
    j, b, wk = jets[ok], bjets[ok], w[np.asarray(ok)]
    out = {
        "sumw": (None, wk),
        "ht": (np.asarray(ak.sum(j.pt, axis=1)), wk),
        "m3j": (np.asarray((j[:, 0] + j[:, 1] + j[:, 2]).mass), wk),
        "lead": (np.asarray(j[:, 0].pt), wk),
        "jpt": (np.asarray(ak.flatten(j.pt)), np.repeat(wk, np.asarray(ak.num(j)))),
        "jeta": (np.asarray(ak.flatten(j.eta)), None),
        "drbb": (np.asarray(j[:, 0].deltaR(b[:, 0])), wk),
        "met": (np.asarray(arr.MET_pt[ok]), wk),
    }
    return out


def moments(x, w):
    mu = np.sum(w * x) / np.sum(w)
    return np.sum(w), mu, np.sum(w * (x - mu) ** 2)


def assert_state(m, x, w, rtol=1e-12):
    sumw, mu, m2 = moments(x, w)
    np.testing.assert_allclose(float(m.sumw), sumw, rtol=rtol)
    np.testing.assert_allclose(float(m.center + m.dmean), mu, rtol=rtol)
    np.testing.assert_allclose(float(m.m2), m2, rtol=1e-10)


@pytest.mark.parametrize(
    "name,btag",
    # The 2015 file's btagDeepFlavB is a placeholder (-3000): its b-tag is btagCSVV2;
    # its genWeight is +-2.26e5, and the selected events' weights cancel exactly.
    [("nano_tt_v12.root", "btagDeepFlavB"),
     pytest.param("nanoAOD_2015_CMS_Open_Data_ttbar.root", "btagCSVV2", marks=pytest.mark.slow)],
)
def test_width0_matches_awkward_vector_hard_cuts(name, btag) -> None:
    path = str(SHARED_DATA / name)
    weighted = name == "nano_tt_v12.root"
    ref = reference(path, btag, weighted)
    cfg = agc(path, widths=False, btag=btag, weight="genWeight" if weighted else None)
    # the JAX backend (deltaR of two sets has no numba rule); the numba backend at width
    # 0 against awkward: tests/likelihood/test_yaml_pipeline.py (hard templates)
    ev = Evaluator(config_from_dict(cfg), backend="jax")
    state = ev.run(order=1)["tt"]
    value = state.derived.value
    np.testing.assert_allclose(float(value["selected_sumw"]), ref["sumw"][1].sum(), rtol=1e-12)
    obs = state.observables
    for key in ("ht", "m3j", "lead", "jpt", "drbb", "met"):
        assert_state(obs[key]["moments"], *ref[key])
    c = obs["jpt"]["comoments"]
    x, w = ref["jpt"]
    y = ref["jeta"][0]
    mx, my = np.sum(w * x) / w.sum(), np.sum(w * y) / w.sum()
    np.testing.assert_allclose(float(c.cxy), np.sum(w * (x - mx) * (y - my)), rtol=1e-10)
    assert len(ref["m3j"][0]) >= 5  # the selection keeps enough events to mean something
    # width 0: every derivative is exactly 0, never NaN
    _, jac, _ = state.taylor()
    leaves = jax.tree_util.tree_leaves(jac)
    assert all(np.all(np.asarray(v) == 0) for v in leaves)


def test_moments_from_expectations_equal_weighted_entries() -> None:
    rng = np.random.default_rng(3)
    # each entry takes value x1 with prob p1 or x2 with prob p2 (else absent)
    x = rng.normal(300.0, 40.0, size=(50, 2))
    p = rng.uniform(0, 0.5, size=(50, 2))
    w = rng.uniform(0.5, 2.0, size=50)
    a = np.stack([np.sum(p * x**r, axis=1) for r in range(5)], axis=1)
    got = _core.moments_from_expectations(a, w)
    want = _core.moments(x.reshape(-1), (w[:, None] * p).reshape(-1))
    for g, e in zip(got, want):
        np.testing.assert_allclose(float(g), float(e), rtol=1e-11, atol=1e-9)
    got2 = _core.moments_from_expectations(a[:, :3], w)
    np.testing.assert_allclose(float(got2.m2), float(want.m2), rtol=1e-11)
    assert np.isnan(float(got2.m3)) and np.isnan(float(got2.m4))


def _leaves(tree) -> np.ndarray:
    """``selected_sumw`` and each observable's ``sumw``, mean and ``M2`` (rows: leaves)."""
    flat = dict(flatten(tree))
    rows = [flat["selected_sumw"]]
    for name in ("ht", "m3j", "lead", "jpt", "drbb", "met"):
        m = f"observables/{name}/moments"
        rows += [flat[f"{m}/sumw"], np.asarray(flat[f"{m}/center"]) + flat[f"{m}/dmean"],
                 flat[f"{m}/m2"]]
    return np.stack([np.asarray(r, dtype=np.float64).reshape(-1) for r in rows])


def _flat(state) -> np.ndarray:
    return _leaves(state.derived.value)[:, 0]


def _flat_jac(state) -> np.ndarray:
    return _leaves(state.taylor()[1])


@pytest.mark.slow
def test_gradients_match_central_differences() -> None:
    path = str(SHARED_DATA / "nano_tt_v12.root")
    ev = Evaluator(config_from_dict(agc(path)))
    names = ["jet_pt_min", "btag_min", "lep_pt_min"]
    x0 = np.array([CUTS[n] for n in names])
    jac = _flat_jac(ev.run(order=1)["tt"])

    def f(x):
        return _flat(ev.run(dict(zip(names, map(float, x))), order=0)["tt"])

    fd = central_difference(f, x0, [1e-3, 1e-5, 1e-3])
    assert np.all(np.isfinite(jac))
    np.testing.assert_allclose(jac, fd, rtol=2e-5, atol=1e-6 * np.abs(fd).max())
    assert np.abs(jac).max() > 0


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["iterative", "futures"])
def test_chunk_invariance(executor: str) -> None:
    path = str(SHARED_DATA / "nano_tt_v12.root")
    whole = Evaluator(config_from_dict(agc(path))).run(order=1)["tt"]
    cfg = config_from_dict(agc(path, chunksize=50))
    with Evaluator(cfg, executor=executor, workers=2) as ev:
        split = ev.run(order=1)["tt"]
    assert split.chunks == 4 and whole.chunks == 1
    np.testing.assert_allclose(_flat(split), _flat(whole), rtol=1e-10)
    np.testing.assert_allclose(_flat_jac(split), _flat_jac(whole), rtol=1e-9,
                               atol=1e-12 * np.abs(_flat_jac(whole)).max())


@pytest.mark.slow
def test_histogram_entries_and_grid_scan_at_width0() -> None:
    """Histograms (optimisation plots) and hard grid scans use the same kernel: at
    width 0 the histogram of m3j holds the reference values with their weights, and a
    grid point at the initial values equals the gradient pass."""
    path = str(SHARED_DATA / "nano_tt_v12.root")
    ref = reference(path, "btagDeepFlavB", True)
    ev = Evaluator(config_from_dict(agc(path, widths=False)))
    names = [o.name for o in ev.plan.observables]
    h = ev.run_histograms(names.index("m3j"), 50, 0.0, 2000.0)["tt"]
    x, w = ref["m3j"]
    want, _ = np.histogram(x, bins=50, range=(0.0, 2000.0), weights=w)
    np.testing.assert_allclose(h.values(), want, rtol=1e-12, atol=1e-9)
    theta = np.array([[CUTS[n] for n in ev.plan.param_names]])
    grid = ev.run_grid(theta)["tt"]
    m = grid.observables["m3j"]["moments"]
    sumw, mu, _ = moments(x, w)
    np.testing.assert_allclose(np.asarray(m.sumw).reshape(-1)[0], sumw, rtol=1e-12)
