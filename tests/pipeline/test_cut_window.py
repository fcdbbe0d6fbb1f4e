"""The window cut (analysis.select.cuts.window) through the object-set pipeline on the DY
file: a per-object window on the jets' pT (``lo`` a parameter) and a per-event window
on ``MET.pt`` (``hi`` a parameter).

- width > 0 against the enumeration oracle (tests/reference): every pass/fail
  configuration of the jets' window bits and the event's MET bit, each bit passing
  with the two-sigmoid probability written out here in numpy, to 1e-10;
- width 0 against awkward's hard ``lo < x < hi``, to 1e-12;
- the derivatives in both parameters against central differences.
"""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from tests.conftest import SHARED_DATA, central_difference
from tests.reference import members, ranked

DY = str(SHARED_DATA / "nano_dy.root")
PARAMS = {"jet_lo": 24.0, "met_hi": 45.0}
JET_HI, MET_LO = 70.0, 8.0
OBS = ("ht", "lead", "met")


def config(jet_width: float, met_width: float) -> dict:
    return {
        "datasets": {"dy": {"files": [DY], "weight": "genWeight"}},
        "parameters": {"jet_lo": {"init": 25.0, "bounds": [15.0, 40.0]},
                       "met_hi": {"init": 60.0, "bounds": [30.0, 150.0]}},
        "objects": {"jets": {"collection": "Jet", "cuts": [
            {"var": "pt", "op": "window", "lo_param": "jet_lo", "hi": JET_HI,
             "width": jet_width}]}},
        "selection": [
            {"count": "jets", "op": ">=", "value": 1},
            {"var": "MET.pt", "op": "window", "lo": MET_LO, "hi_param": "met_hi",
             "width": met_width},
        ],
        "observables": [
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
            {"name": "lead", "x": "jets[0].pt", "stats": ["mean", "std"]},
            {"name": "met", "x": "MET.pt", "stats": ["mean", "std"]},
        ],
    }  # fmt: skip


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def window(x, lo, hi, width):
    if width == 0:
        return ((x > lo) & (x < hi)).astype(float)
    return sigmoid((x - lo) / width) * sigmoid((hi - x) / width)


def read():
    a = uproot.open(DY)["Events"].arrays(["Jet_pt", "MET_pt", "genWeight"])
    pt = [np.asarray(x, dtype=np.float64) for x in a["Jet_pt"].tolist()]
    return a, pt, np.asarray(a["MET_pt"], np.float64), np.asarray(a["genWeight"], np.float64)


def enumerated(params, jet_width, met_width) -> dict[str, np.ndarray]:
    """``{name: [S0, S1, S2]}`` power sums and ``selected_sumw`` by enumeration."""
    _, pts, met, gw = read()
    out = {k: np.zeros(3) for k in OBS}
    sumw = 0.0
    for e, pt in enumerate(pts):
        member, prob = members({
            "jets": window(pt, params["jet_lo"], JET_HI, jet_width),
            "met": window(met[e : e + 1], MET_LO, params["met_hi"], met_width),
        })
        jets = member["jets"]
        wp = gw[e] * prob * ((jets.sum(axis=1) >= 1) & member["met"][:, 0])
        sumw += wp.sum()
        lead = ranked(jets, pt, 0)
        x = {"ht": jets @ pt, "lead": np.where(lead >= 0, pt[np.maximum(lead, 0)], 0.0),
             "met": np.full(len(wp), met[e])}
        for name in OBS:
            out[name] += [wp @ x[name] ** r for r in range(3)]
    out["selected_sumw"] = np.array([sumw])
    return out


def hard(params) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``(values, weights)`` of each observable with awkward's hard window cuts."""
    a, _, _, _ = read()
    pt = a["Jet_pt"][(a["Jet_pt"] > params["jet_lo"]) & (a["Jet_pt"] < JET_HI)]
    keep = (ak.num(pt) >= 1) & (a["MET_pt"] > MET_LO) & (a["MET_pt"] < params["met_hi"])
    w = np.asarray(a["genWeight"][keep], np.float64)
    srt = ak.sort(pt[keep], ascending=False)
    return {
        "ht": (np.asarray(ak.sum(pt[keep], axis=1), np.float64), w),
        "lead": (np.asarray(srt[:, 0], np.float64), w),
        "met": (np.asarray(a["MET_pt"][keep], np.float64), w),
    }


def power_sums(m) -> np.ndarray:
    """``[S0, S1, S2]`` of a Moments state (S1, S2 about 0)."""
    mean = float(m.center + m.dmean)
    s0 = float(m.sumw)
    return np.array([s0, s0 * mean, float(m.m2) + s0 * mean**2])


@pytest.mark.slow  # two compilations (order 1 and 0) of the set kernel
def test_soft_window_against_enumeration_and_its_gradients():
    ref = enumerated(PARAMS, 5.0, 8.0)
    with Evaluator(config_from_dict(config(5.0, 8.0))) as ev:
        state = ev.run(PARAMS, order=1)["dy"]
        value = state.derived.value
        np.testing.assert_allclose(float(value["selected_sumw"]), ref["selected_sumw"][0],
                                   rtol=1e-10)
        for name in OBS:
            got = power_sums(value["observables"][name]["moments"])
            np.testing.assert_allclose(got, ref[name], rtol=1e-10, err_msg=name)
        names = list(state.derived.names)
        jac = np.asarray(state.taylor()[1]["selected_sumw"])

        def sumw(x):
            params = dict(zip(PARAMS, map(float, x)))
            return float(ev.run(params, order=0)["dy"].derived.value["selected_sumw"])

        fd = central_difference(sumw, list(PARAMS.values()), 1e-4)
        for i, p in enumerate(PARAMS):
            np.testing.assert_allclose(jac[names.index(p)], fd[i], rtol=1e-6)
            assert abs(jac[names.index(p)]) > 1e-4 * abs(ref["selected_sumw"][0]), p


def test_hard_window_against_awkward():
    ref = hard(PARAMS)
    with Evaluator(config_from_dict(config(0.0, 0.0))) as ev:
        value = ev.run(PARAMS, order=0)["dy"].derived.value
    for name, (x, w) in ref.items():
        assert len(x) > 3, name
        want = np.array([w.sum(), w @ x, w @ x**2])
        got = power_sums(value["observables"][name]["moments"])
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)
    np.testing.assert_allclose(float(value["selected_sumw"]), ref["ht"][1].sum(), rtol=1e-12)
