"""``mt(muons[0], MET)`` (analysis.select.functions.mt) through the object-set pipeline,
with ``deltaPhi(muons[0], MET)`` (a per-event object as a function argument), on the
DY and ttbar NanoAOD files.

- width 0 against awkward + ``vector``: the leading selected muon (by pT) and the MET
  as 2D vectors, ``mT^2 = (|a| + |b|)^2 - |a + b|^2`` (a formula independent of the
  code's ``2 pT1 pT2 (1 - cos dphi)``), to 1e-9;
- width > 0 against the enumeration oracle (tests/reference): every pass/fail
  configuration of the muons' cut bits, the leading member of each, to 1e-10.
"""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot
import vector

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from tests.conftest import SHARED_DATA
from tests.reference import members, ranked

FILES = {"dy": SHARED_DATA / "nano_dy.root", "tt": SHARED_DATA / "nano_tt_v12.root"}
PT_MIN = 12.0


def config(path, width: float) -> dict:
    return {
        "datasets": {"d": {"files": [str(path)], "weight": "genWeight"}},
        "objects": {"muons": {"collection": "Muon", "cuts": [
            {"var": "pt", "op": ">", "value": PT_MIN, "width": width},
            {"var": "abs_eta", "op": "<", "value": 2.4, "width": width / 20}]}},
        "selection": [{"count": "muons", "op": ">=", "value": 1}],
        "observables": [
            {"name": "mt", "x": "mt(muons[0], MET)", "stats": ["mean", "std"]},
            {"name": "dphi", "x": "deltaPhi(muons[0], MET)", "stats": ["mean", "std"]},
        ],
    }  # fmt: skip


def read(path):
    a = uproot.open(path)["Events"].arrays(
        ["Muon_pt", "Muon_eta", "Muon_phi", "MET_pt", "MET_phi", "genWeight"])
    f64 = {k: ak.values_astype(a[k], np.float64) for k in a.fields}
    return f64


def power_sums(m) -> np.ndarray:
    mean = float(m.center + m.dmean)
    s0 = float(m.sumw)
    return np.array([s0, s0 * mean, float(m.m2) + s0 * mean**2])


def run(path, width):
    with Evaluator(config_from_dict(config(path, width))) as ev:
        value = ev.run({}, order=0)["d"].derived.value
    return {k: power_sums(value["observables"][k]["moments"]) for k in ("mt", "dphi")}


@pytest.mark.parametrize("name", ["dy", pytest.param("tt", marks=pytest.mark.slow)])
def test_width0_equals_awkward_and_vector(name):
    a = read(FILES[name])
    keep = (a["Muon_pt"] > PT_MIN) & (abs(a["Muon_eta"]) < 2.4)
    pt, phi = a["Muon_pt"][keep], a["Muon_phi"][keep]
    lead = ak.argsort(pt, ascending=False, stable=True)[:, :1]
    has = ak.num(pt) >= 1
    mu = vector.zip({"rho": ak.flatten(pt[lead][has]), "phi": ak.flatten(phi[lead][has])})
    met = vector.zip({"rho": a["MET_pt"][has], "phi": a["MET_phi"][has]})
    mt = np.sqrt(np.maximum(np.asarray((mu.rho + met.rho) ** 2 - (mu + met).rho ** 2), 0.0))
    dphi = np.asarray(mu.deltaphi(met))
    w = np.asarray(a["genWeight"][has])
    assert len(w) > 5
    got = run(FILES[name], 0.0)
    for key, x in (("mt", mt), ("dphi", dphi)):
        want = np.array([w.sum(), w @ x, w @ x**2])
        np.testing.assert_allclose(got[key], want, rtol=1e-9, err_msg=key)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


@pytest.mark.slow  # one compilation per file
@pytest.mark.parametrize("name", ["dy", "tt"])
def test_soft_against_enumeration(name):
    width = 4.0
    a = read(FILES[name])
    want = {k: np.zeros(3) for k in ("mt", "dphi")}
    for e in range(len(a["genWeight"])):
        pt, eta, phi = (np.asarray(a[f"Muon_{k}"][e]) for k in ("pt", "eta", "phi"))
        q = sigmoid((pt - PT_MIN) / width) * sigmoid((2.4 - np.abs(eta)) / (width / 20))
        member, prob = members({"muons": q})
        lead = ranked(member["muons"], pt, 0)
        wp = float(a["genWeight"][e]) * prob * (lead >= 0)
        d = phi[np.maximum(lead, 0)] - float(a["MET_phi"][e]) if len(pt) else np.zeros(len(wp))
        p1 = pt[np.maximum(lead, 0)] if len(pt) else np.zeros(len(wp))
        x = {"mt": np.sqrt(np.maximum(2 * p1 * float(a["MET_pt"][e]) * (1 - np.cos(d)), 0.0)),
             "dphi": (d + np.pi) % (2 * np.pi) - np.pi}
        for k in want:
            want[k] += [wp @ x[k] ** r for r in range(3)]
    got = run(FILES[name], width)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, err_msg=k)
