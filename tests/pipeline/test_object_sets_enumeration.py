"""An object-set config end to end (Evaluator) with soft widths on the DY file, against
exact enumeration of every event's pass/fail configurations (issue 8), 1e-10.

The reference reads the file with uproot, computes every object's own pass probability
from the sigmoid formula, enumerates (the oracle of tests/reference) all configurations of the independent own-cut bits
of each event (at most 12 here: 2^12 rows), builds each configuration's hard-cut state
(members, counts, the decision with the trainable count's blended integer step at a
fractional threshold, ranked members, entries; masses and deltaR with ``vector``) and
weights it by its probability. Every state of every observable kind (event sum, indexed
object, 4-vector pair mass, cross-collection deltaR, per-object field with co-moments,
branch) must agree; the count threshold's derivative must match central differences.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import uproot
import vector

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from tests.conftest import SHARED_DATA, central_difference, numba_refusal
from tests.reference import members, ranked

DY = str(SHARED_DATA / "nano_dy.root")
PARAMS = {"lep_pt": 18.0, "jet_pt": 30.0, "n_lep": 1.3}  # n_lep between integers
W = {"lep": 3.0, "eta": 0.1, "iso": 0.05, "jet": 5.0, "met": 5.0, "n": 0.6}


def config() -> dict:
    return {
        "datasets": {"dy": {"files": [DY], "weight": "genWeight"}},
        "executor": {"type": "iterative", "chunksize": 100_000},
        "parameters": {"lep_pt": {"init": 20.0, "bounds": [5.0, 50.0]},
                       "jet_pt": {"init": 25.0, "bounds": [15.0, 60.0]},
                       "n_lep": {"init": 1, "bounds": [0, 3], "integer": True}},
        "objects": {
            "muons": {"collection": "Muon", "max_objects": 4, "cuts": [
                {"var": "pt", "op": ">", "param": "lep_pt", "width": W["lep"]},
                {"var": "abs_eta", "op": "<", "value": 2.4, "width": W["eta"]}]},
            "tight": {"from": "muons", "cuts": [
                {"var": "pfRelIso04_all", "op": "<", "value": 0.15, "width": W["iso"]}]},
            "electrons": {"collection": "Electron", "cuts": [
                {"var": "pt", "op": ">", "param": "lep_pt", "width": W["lep"]}]},
            "jets": {"collection": "Jet", "cuts": [
                {"var": "pt", "op": ">", "param": "jet_pt", "width": W["jet"]}]},
        },
        "selection": [
            {"count": ["muons", "electrons"], "op": ">=", "param": "n_lep", "width": W["n"]},
            {"count": "tight", "op": "<=", "value": 1},
            {"var": "MET.pt", "op": ">", "value": 10.0, "width": W["met"]},
        ],
        "observables": [
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
            {"name": "lead", "x": "jets[0].pt", "stats": ["mean", "std"]},
            {"name": "mjj", "x": "mass(jets[0] + jets[1])", "stats": ["mean", "std"]},
            {"name": "drme", "x": "deltaR(muons[0], electrons[0])", "stats": ["mean", "std"]},
            {"name": "jpt", "x": "jets.pt", "y": "jets.eta", "stats": ["mean", "corr"]},
            {"name": "met", "x": "MET.pt", "stats": ["mean", "std"]},
        ],
    }


def sig(z):
    return 1.0 / (1.0 + np.exp(-z))


def integer_step(frac, width):
    lo, hi = sig(-0.5 / width), sig(0.5 / width)
    return (sig((frac - 0.5) / width) - lo) / (hi - lo)


def p4(c, e):
    return vector.array({k: c[k][e] for k in ("pt", "eta", "phi", "mass")})


@functools.cache  # both tests of this module read it (the caller never writes to it)
def reference():
    """Expected power sums ``{name: [S0, S1, S2]}`` (``jpt``: also Sy, Syy, Sxy) and the
    per-event pass probabilities and event weights."""
    fields = {c: ["pt", "eta", "phi", "mass"] + (["pfRelIso04_all"] if c == "Muon" else [])
              for c in ("Muon", "Electron", "Jet")}
    # the branches the enumeration reads, not the file's ~1500
    t = uproot.open(DY)["Events"]
    a = t.arrays([f"{c}_{k}" for c, ks in fields.items() for k in ks] + ["MET_pt", "genWeight"],
                 library="ak")
    f64 = {}
    for c in ("Muon", "Electron", "Jet"):
        f64[c] = {k: [np.asarray(x, dtype=np.float64) for x in a[f"{c}_{k}"].tolist()]
                  for k in fields[c]}
    met = np.asarray(a["MET_pt"], dtype=np.float64)
    gw = np.asarray(a["genWeight"], dtype=np.float64)
    ev = gw * sig((met - 10.0) / W["met"])
    mu, el, jet = f64["Muon"], f64["Electron"], f64["Jet"]
    sums = {k: np.zeros(3) for k in ("ht", "lead", "mjj", "drme", "met")}
    cross = np.zeros(6)  # jpt: S0, Sx, Sy, Sxx, Syy, Sxy
    P = np.zeros(len(met))
    n = PARAMS["n_lep"]
    s = integer_step(n - np.floor(n), W["n"])
    for e in range(len(met)):
        q_mu = sig((mu["pt"][e] - PARAMS["lep_pt"]) / W["lep"]) * sig(
            (2.4 - np.abs(mu["eta"][e])) / W["eta"])
        q_tight = sig((0.15 - mu["pfRelIso04_all"][e]) / W["iso"])
        q_el = sig((el["pt"][e] - PARAMS["lep_pt"]) / W["lep"])
        q_jet = sig((jet["pt"][e] - PARAMS["jet_pt"]) / W["jet"])
        member, prob = members(
            {"muons": q_mu, "tight": q_tight, "electrons": q_el, "jets": q_jet},
            {"tight": "muons"},
        )
        m_mu, m_tight, m_el, m_jet = (member[k] for k in ("muons", "tight", "electrons", "jets"))
        k_lep = m_mu.sum(axis=1) + m_el.sum(axis=1)
        lo = np.floor(n)
        decision = ((1 - s) * (k_lep >= lo) + s * (k_lep >= lo + 1)) * (m_tight.sum(axis=1) <= 1)
        wp = prob * decision
        P[e] = wp.sum()
        pt_j = jet["pt"][e]
        ht = m_jet @ pt_j
        sums["ht"] += ev[e] * np.array([wp @ ht**r for r in range(3)])
        j0, j1 = ranked(m_jet, pt_j, 0), ranked(m_jet, pt_j, 1)
        ok = j0 >= 0
        x = np.where(ok, pt_j[np.maximum(j0, 0)], 0.0)
        sums["lead"] += ev[e] * np.array([(wp * ok) @ x**r for r in range(3)])
        if len(pt_j) >= 2:
            v = p4(jet, e)
            mjj = (v[:, None] + v[None, :]).mass  # [a, b]: a + b, left to right
            ok = j1 >= 0
            x = np.where(ok, mjj[np.maximum(j0, 0), np.maximum(j1, 0)], 0.0)
            sums["mjj"] += ev[e] * np.array([(wp * ok) @ x**r for r in range(3)])
        if len(mu["pt"][e]) and len(el["pt"][e]):
            a0, b0 = ranked(m_mu, mu["pt"][e], 0), ranked(m_el, el["pt"][e], 0)
            dr = p4(mu, e)[:, None].deltaR(p4(el, e)[None, :])
            ok = (a0 >= 0) & (b0 >= 0)
            x = np.where(ok, dr[np.maximum(a0, 0), np.maximum(b0, 0)], 0.0)
            sums["drme"] += ev[e] * np.array([(wp * ok) @ x**r for r in range(3)])
        wj = ev[e] * (wp @ m_jet)  # per jet: weight of its entry
        eta_j = jet["eta"][e]
        cross += [wj.sum(), wj @ pt_j, wj @ eta_j, wj @ pt_j**2, wj @ eta_j**2,
                  wj @ (pt_j * eta_j)]
        sums["met"] += ev[e] * P[e] * met[e] ** np.arange(3)
    sums["jpt"] = cross[[0, 1, 3]]
    return sums, cross, P, ev


def _mean_m2(s):
    return s[0], s[1] / s[0], s[2] - s[1] ** 2 / s[0]


def test_soft_pipeline_against_enumeration() -> None:
    """Every observable kind on the JAX backend (the reference; the numba backend's
    subset: :func:`test_every_backend_against_enumeration`)."""
    sums, cross, P, ev = reference()
    with Evaluator(config_from_dict(config()), backend="jax") as evaluator:
        state = evaluator.run(PARAMS, order=1)["dy"]
        value = state.derived.value
        np.testing.assert_allclose(float(value["selected_sumw"]), ev @ P, rtol=1e-10)
        np.testing.assert_allclose(float(value["selected_sumw2"]), (ev * P) @ (ev * P),
                                   rtol=1e-10)
        for name, s in sums.items():
            m = value["observables"][name]["moments"]
            sumw, mean, m2 = _mean_m2(s)
            assert s[0] != 0, name  # every observable is filled
            np.testing.assert_allclose(float(m.sumw), sumw, rtol=1e-10, err_msg=name)
            np.testing.assert_allclose(float(m.center + m.dmean), mean, rtol=1e-10, err_msg=name)
            np.testing.assert_allclose(float(m.m2), m2, rtol=1e-10, err_msg=name)
        c = value["observables"]["jpt"]["comoments"]
        s0, sx, sy, sxx, syy, sxy = cross
        np.testing.assert_allclose(float(c.sumw), s0, rtol=1e-10)
        np.testing.assert_allclose(float(c.cxx), sxx - sx * sx / s0, rtol=1e-10)
        np.testing.assert_allclose(float(c.cyy), syy - sy * sy / s0, rtol=1e-10)
        np.testing.assert_allclose(float(c.cxy), sxy - sx * sy / s0, rtol=1e-10)
        assert 0.05 < P.max() and P.min() < 0.95  # soft, not a hard selection in disguise
        # The count threshold is trainable: its derivative against central differences.
        names = state.derived.names
        jac = np.asarray(state.taylor()[1]["selected_sumw"])
        i = list(names).index("n_lep")

        def sumw(x):
            params = dict(PARAMS, n_lep=float(x[0]))
            return float(evaluator.run(params, order=0)["dy"].derived.value["selected_sumw"])

        fd = central_difference(sumw, [PARAMS["n_lep"]], 1e-5)
        np.testing.assert_allclose(jac[i], fd[0], rtol=1e-6)
        assert abs(jac[i]) > 1e-3 * abs(ev @ P)


# the JAX backend against the same oracle in the default run: the test above (its plan
# runs on JAX: explicitly, backend="jax")
@pytest.mark.slow_on("jax")
def test_every_backend_against_enumeration(backend) -> None:
    """The same selection with the observables the numba backend serves (event sum,
    per-object field with co-moments, branch), on every backend (fixture ``backend``):
    each agrees with enumeration to 1e-10, values and the count threshold's derivative
    (central differences)."""

    sums, cross, P, ev = reference()
    cfg = config()
    cfg["observables"] = [o for o in cfg["observables"] if o["name"] in ("ht", "jpt", "met")]
    with Evaluator(config_from_dict(cfg), backend=backend) as evaluator:
        assert numba_refusal(evaluator.plan, 1) is None
        state = evaluator.run(PARAMS, order=1)["dy"]
        value = state.derived.value
        np.testing.assert_allclose(float(value["selected_sumw"]), ev @ P, rtol=1e-10)
        for name in ("ht", "jpt", "met"):
            entry = value["observables"][name]
            m = entry["moments"]
            sumw, mean, m2 = _mean_m2(sums[name])
            np.testing.assert_allclose(float(m.sumw), sumw, rtol=1e-10, err_msg=name)
            np.testing.assert_allclose(float(m.center + m.dmean), mean, rtol=1e-10, err_msg=name)
            np.testing.assert_allclose(float(m.m2), m2, rtol=1e-10, err_msg=name)
        c = value["observables"]["jpt"]["comoments"]
        s0, sx, sy, sxx, syy, sxy = cross
        np.testing.assert_allclose(float(c.cxy), sxy - sx * sy / s0, rtol=1e-10)
        jac = np.asarray(state.taylor()[1]["selected_sumw"])
        i = list(state.derived.names).index("n_lep")

        def sumw_at(x):
            params = dict(PARAMS, n_lep=float(x[0]))
            return float(evaluator.run(params, order=0)["dy"].derived.value["selected_sumw"])

        fd = central_difference(sumw_at, [PARAMS["n_lep"]], 1e-5)
        np.testing.assert_allclose(jac[i], fd[0], rtol=1e-6)
