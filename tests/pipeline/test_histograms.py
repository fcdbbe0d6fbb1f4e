"""Soft histograms of the YAML pipeline (issue 17) on the DY file, against references.

- width > 0: exact enumeration (the oracle of tests/reference) of every event's
  pass/fail configurations of the selection of tests/pipeline/test_object_sets_enumeration.py
  (two lepton collections, a derived set, a trainable count at a fractional threshold,
  a soft MET cut): each configuration's hard-cut histogram filled with numpy and
  weighted by its probability; ``sumw`` and ``sumw2`` of every kind of ``x`` (event sum,
  count, leading object, per-object field, branch, 4-vector mass) and a channel's own
  selection, 1e-10; the Jacobian against central differences;
- width 0: ``hist`` fills of the hard-cut selection made with awkward + vector, exact;
- a weight variation equals the nominal histogram of the factor-weighted sample and a
  shift variation the nominal histogram of the shifted file.
"""

from __future__ import annotations

import copy

import awkward as ak
import hist
import numpy as np
import pytest
import uproot
import vector

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from tests.conftest import central_difference
from tests.pipeline.test_object_sets_enumeration import DY, PARAMS, W, config, integer_step, sig
from tests.reference import members, ranked, soft_bins

HISTS = [
    {"name": "ht", "x": "sum(jets.pt)", "edges": [0.0, 50.0, 100.0, 200.0, 400.0]},
    {"name": "nj", "x": "count(jets)", "edges": [0.0, 1.0, 2.0, 3.0, 5.0]},
    {"name": "lead", "x": "jets[0].pt", "bins": {"n": 5, "lo": 0.0, "hi": 200.0}},
    {"name": "jpt", "x": "jets.pt", "edges": [0.0, 30.0, 60.0, 120.0]},
    {"name": "met", "x": "MET.pt", "edges": [0.0, 20.0, 40.0, 80.0]},
    {"name": "mjj", "x": "mass(jets[0] + jets[1])", "edges": [0.0, 50.0, 100.0, 300.0]},
]
EDGES = {"ht": HISTS[0]["edges"], "nj": HISTS[1]["edges"], "lead": list(np.linspace(0, 200, 6)),
         "jpt": HISTS[3]["edges"], "met": HISTS[4]["edges"], "mjj": HISTS[5]["edges"]}
# a channel with its own extra condition: at most one jet (exact integer condition)
CHANNEL = {"histogram": "ht", "selection": [{"count": "jets", "op": "<=", "value": 1}]}


def _bin(edges, x):
    return np.searchsorted(np.asarray(edges), x, side="right")  # 0: underflow


def _cfg() -> dict:
    cfg = config()
    cfg["histograms"] = copy.deepcopy(HISTS)  # callers change them (soft bins)
    cfg["datasets"]["dy"]["role"] = "signal"
    cfg["likelihood"] = {"channels": {"sr": {"histogram": "ht"}, "low": CHANNEL}}
    return cfg


def reference(widths=None):
    """``{name: (sumw_flow, sumw2_flow)}`` by enumeration (module docstring); ``widths``:
    ``{name: W}`` of the histograms with soft bins (:func:`soft_bins`; ``low`` takes
    ``ht``'s)."""
    widths = dict(widths or {})
    if "ht" in widths:
        widths["low"] = widths["ht"]
    a = uproot.open(DY)["Events"].arrays(library="ak")
    f = {c: {k: [np.asarray(x, dtype=np.float64) for x in a[f"{c}_{k}"].tolist()]
             for k in ["pt", "eta", "phi", "mass"] + (["pfRelIso04_all"] if c == "Muon" else [])}
         for c in ("Muon", "Electron", "Jet")}
    met = np.asarray(a["MET_pt"], dtype=np.float64)
    gw = np.asarray(a["genWeight"], dtype=np.float64)
    ev = gw * sig((met - 10.0) / W["met"])  # weight x the soft MET cut
    out = {k: (np.zeros(len(e) + 1), np.zeros(len(e) + 1)) for k, e in EDGES.items()}
    out["low"] = (np.zeros(len(EDGES["ht"]) + 1), np.zeros(len(EDGES["ht"]) + 1))
    n = PARAMS["n_lep"]
    s = integer_step(n - np.floor(n), W["n"])
    mu, el, jet = f["Muon"], f["Electron"], f["Jet"]

    def fill(name, e, x, wp):  # x: (configs,) or (configs, objects); wp: matching
        edges = EDGES[name] if name != "low" else EDGES["ht"]
        if widths.get(name):
            q = soft_bins(edges, x, widths[name]).reshape(-1, len(edges) + 1)
            wq = np.broadcast_to(wp, np.shape(x)).reshape(-1)[:, None] * q
            out[name][0][:] += ev[e] * wq.sum(0)
            out[name][1][:] += ev[e] * gw[e] * wq.sum(0)
            return
        b = _bin(edges, x)
        np.add.at(out[name][0], b, ev[e] * wp)
        np.add.at(out[name][1], b, ev[e] * gw[e] * wp)

    for e in range(len(met)):
        q = {"muons": sig((mu["pt"][e] - PARAMS["lep_pt"]) / W["lep"])
             * sig((2.4 - np.abs(mu["eta"][e])) / W["eta"]),
             "tight": sig((0.15 - mu["pfRelIso04_all"][e]) / W["iso"]),
             "electrons": sig((el["pt"][e] - PARAMS["lep_pt"]) / W["lep"]),
             "jets": sig((jet["pt"][e] - PARAMS["jet_pt"]) / W["jet"])}
        member, prob = members(q, {"tight": "muons"})
        k_lep = member["muons"].sum(1) + member["electrons"].sum(1)
        lo = np.floor(n)
        decision = ((1 - s) * (k_lep >= lo) + s * (k_lep >= lo + 1)) * (
            member["tight"].sum(1) <= 1)
        wp = prob * decision
        m_jet, pt = member["jets"], jet["pt"][e]
        ht = m_jet @ pt
        fill("ht", e, ht, wp)
        fill("nj", e, m_jet.sum(1).astype(float), wp)
        fill("low", e, ht, wp * (m_jet.sum(1) <= 1))
        fill("met", e, np.full(len(wp), met[e]), wp)
        j0, j1 = ranked(m_jet, pt, 0), ranked(m_jet, pt, 1)
        fill("lead", e, pt[np.maximum(j0, 0)] if len(pt) else np.zeros(len(wp)), wp * (j0 >= 0))
        if len(pt) >= 2:
            v = vector.array({k: jet[k][e] for k in ("pt", "eta", "phi", "mass")})
            mjj = (v[:, None] + v[None, :]).mass
            ok = j1 >= 0
            fill("mjj", e, mjj[np.maximum(j0, 0), np.maximum(j1, 0)], wp * ok)
        if len(pt):
            fill("jpt", e, np.broadcast_to(pt, m_jet.shape), wp[:, None] * m_jet)
    return out


@pytest.mark.slow  # enumeration of the 40 events and one compilation, ~30-60 s
def test_soft_histograms_against_enumeration() -> None:
    ref = reference()
    with Evaluator(config_from_dict(_cfg())) as evaluator:
        state = evaluator.run(PARAMS, order=1)["dy"]
        value = state.derived.value
        got = dict(value["histograms"])
        got["low"] = value["templates"]["low"]
        np.testing.assert_allclose(np.asarray(value["templates"]["sr"].sumw_flow),
                                   np.asarray(got["ht"].sumw_flow), rtol=1e-12)
        for name, (sumw, sumw2) in ref.items():
            h = got[name]
            assert sumw.sum() != 0, name
            np.testing.assert_allclose(np.asarray(h.sumw_flow), sumw, rtol=1e-10, atol=1e-9,
                                       err_msg=name)
            np.testing.assert_allclose(np.asarray(h.sumw2_flow), sumw2, rtol=1e-10, atol=1e-6,
                                       err_msg=name)
        # Jacobian of the event-sum histogram against central differences of the pass
        jac = np.asarray(state.derived.jac["histograms"]["ht"].sumw)
        names = list(state.derived.names)
        for p in ("jet_pt", "n_lep"):
            i = names.index(p)

            def ht(x, p=p):
                params = dict(PARAMS, **{p: float(x[0])})
                run = evaluator.run(params, order=0)["dy"].derived.value
                return np.asarray(run["histograms"]["ht"].sumw)

            fd = central_difference(ht, [PARAMS[p]], 1e-5)
            np.testing.assert_allclose(jac[:, i], np.asarray(fd).reshape(-1), rtol=1e-5,
                                       atol=1e-4 * np.abs(jac[:, i]).max(), err_msg=p)
            assert np.abs(jac[:, i]).max() > 0, p


def _hard_cfg() -> dict:
    cfg = _cfg()
    for s in cfg["objects"].values():
        for c in s["cuts"]:
            c["width"] = 0.0
    for e in cfg["selection"]:
        if "width" in e:
            e["width"] = 0.0 if "var" in e else e["width"]
    return cfg


@pytest.mark.slow  # one compilation, ~20 s
@pytest.mark.parametrize("soft_bins", [False, True])
def test_hard_histograms_equal_hist_fills(soft_bins) -> None:
    """Width 0 (and an integer count threshold): the histograms are ``hist`` fills of the
    awkward + vector hard-cut selection, exactly (sums of the same weights); with soft
    bins configured (issue 50) and their widths 0 too (the hard evaluation), the same."""
    params = dict(PARAMS, n_lep=1.0)
    vector.register_awkward()  # Momentum4D records add as 4-vectors
    a = uproot.open(DY)["Events"].arrays(library="ak")
    mu_ok = (a.Muon_pt > params["lep_pt"]) & (abs(a.Muon_eta) < 2.4)
    tight = mu_ok & (a.Muon_pfRelIso04_all < 0.15)
    el_ok = a.Electron_pt > params["lep_pt"]
    jets = ak.zip({k: a[f"Jet_{k}"] for k in ("pt", "eta", "phi", "mass")}, with_name="Momentum4D")
    jets = jets[a.Jet_pt > params["jet_pt"]]
    jets = jets[ak.argsort(jets.pt, ascending=False)]
    passed = ((ak.sum(mu_ok, 1) + ak.sum(el_ok, 1) >= 1) & (ak.sum(tight, 1) <= 1)
              & (a.MET_pt > 10.0))
    w = a.genWeight[passed]
    j = jets[passed]

    def filled(name, x, weight):
        h = hist.Hist(hist.axis.Variable(EDGES[name]), storage=hist.storage.Weight())
        h.fill(ak.to_numpy(x), weight=ak.to_numpy(weight))
        return h

    two = ak.num(j) >= 2
    expect = {
        "ht": filled("ht", ak.sum(j.pt, 1), w),
        "nj": filled("nj", ak.num(j), w),
        "met": filled("met", a.MET_pt[passed], w),
        "jpt": filled("jpt", ak.flatten(j.pt), ak.flatten(ak.broadcast_arrays(w, j.pt)[0])),
        "lead": filled("lead", ak.firsts(j.pt)[ak.num(j) >= 1], w[ak.num(j) >= 1]),
        "mjj": filled("mjj", (j[two][:, 0] + j[two][:, 1]).mass, w[two]),
    }
    cfg = _hard_cfg()
    if soft_bins:
        for h in cfg["histograms"]:
            h["width"] = 7.0
    with Evaluator(config_from_dict(cfg)) as evaluator:
        assert (evaluator.plan.hists[0].width_index is not None) == soft_bins
        widths = np.zeros(evaluator.plan.n_widths)
        value = evaluator.run(params, widths=widths, order=0)["dy"].derived.value
        for name, h in expect.items():
            got = value["histograms"][name]
            view = h.view(flow=True)
            assert view.value.sum() != 0, name
            np.testing.assert_allclose(np.asarray(got.sumw_flow), view.value, rtol=1e-12,
                                       atol=1e-9, err_msg=name)
            np.testing.assert_allclose(np.asarray(got.sumw2_flow), view.variance, rtol=1e-12,
                                       err_msg=name)
