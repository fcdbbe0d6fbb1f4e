"""Width 0: analysis.select.objects + analysis.select.fourvec equal a plain hard-cut awkward + vector
computation on the real NanoAOD files (1e-12).

The reference selects objects with awkward masks, counts them, sorts the selected ones
by pt (``ak.argsort``) and builds the observables with ``vector``'s ``Momentum4D``
behaviour; nothing of it goes through ``analysis``. Compared per event: the decision,
the per-object weights (selected and event passes), HT, and for every indexed
observable the summed candidate weight (1 exactly where the indexed objects exist and
the event passes, else 0) and the weighted value.
"""

from __future__ import annotations

from functools import partial

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import uproot
import vector

import analysis  # noqa: F401  (float64)
from analysis.select.fourvec import P4, add, delta_phi, delta_r, total
from analysis.select.objects import (
    Count,
    CountModel,
    event_pass,
    layout,
    leading,
    object_weights,
    soft_pass,
    take,
)
from tests.conftest import AGC_SETS

vector.register_awkward()

FIELDS = {
    "Jet": ("pt", "eta", "phi", "mass"),  # + the case's b-tag field
    "Muon": ("pt", "eta", "phi", "mass", "pfRelIso04_all"),
    "Electron": ("pt", "eta", "phi", "mass"),
}
SETS = AGC_SETS

# file, thresholds, count conditions (sets, op, n); the 2015 file has no DeepFlav
# b-tag (-3000), so it uses CSVv2.
CASES = {
    "tt2015": (
        "nanoAOD_2015_CMS_Open_Data_ttbar.root",
        {"jet_pt": 15.0, "btag": ("btagCSVV2", 0.5), "lep_pt": 10.0},
        ((("jets",), ">=", 2), (("muons", "electrons"), "<", 2)),
    ),
    "tt_v12": (
        "nano_tt_v12.root",
        {"jet_pt": 25.0, "btag": ("btagDeepFlavB", 0.3), "lep_pt": 20.0},
        ((("jets",), ">=", 3), (("bjets",), ">=", 1), (("muons", "electrons"), "==", 1)),
    ),
    "dy": (
        "nano_dy.root",
        {"jet_pt": 15.0, "btag": ("btagDeepFlavB", 0.3), "lep_pt": 10.0},
        ((("muons",), ">=", 2), (("jets",), "<", 3)),
    ),
}

OBSERVABLES = {
    "lead_pt": ((("jets", 0),), lambda a: a.pt),
    "second_eta": ((("jets", 1),), lambda a: a.eta),
    "mjj": ((("jets", 0), ("jets", 1)), lambda a, b: add(a, b).mass),
    "m3j": ((("jets", 0), ("jets", 1), ("jets", 2)), lambda a, b, c: total(a, b, c).mass),
    "pt3j": ((("jets", 0), ("jets", 1), ("jets", 2)), lambda a, b, c: total(a, b, c).pt),
    "dr_bb": ((("bjets", 0), ("bjets", 1)), delta_r),
    "mlb": ((("muons", 0), ("bjets", 0)), lambda a, b: add(a, b).mass),
    "mll": ((("muons", 0), ("muons", 1)), lambda a, b: add(a, b).mass),
    "dphi_ll": ((("muons", 0), ("muons", 1)), delta_phi),
    "eta_ll": ((("muons", 0), ("muons", 1)), lambda a, b: add(a, b).eta),
}


def reference(ev, cuts, counts):
    """Hard-cut awkward + vector: masks, decision and observables per event."""
    jet, mu, el = ev["Jet"], ev["Muon"], ev["Electron"]
    field, cut = cuts["btag"]
    sel = {"jets": (jet.pt > cuts["jet_pt"]) & (abs(jet.eta) < 2.4)}
    sel["bjets"] = sel["jets"] & (jet[field] > cut)
    sel["muons"] = (mu.pt > cuts["lep_pt"]) & (mu.pfRelIso04_all < 0.15)
    sel["electrons"] = el.pt > cuts["lep_pt"]
    n = {k: ak.sum(v, axis=1) for k, v in sel.items()}
    passed = np.ones(len(jet), dtype=bool)
    for sets, op, value in counts:
        k = ak.to_numpy(sum(n[s] for s in sets))
        passed &= {">=": k >= value, "<": k < value, "==": k == value}[op]
    parent = {"jets": jet, "bjets": jet, "muons": mu, "electrons": el}
    objs = {}
    for name, mask in sel.items():
        o = ak.zip(
            {f: parent[name][f] for f in ("pt", "eta", "phi", "mass")}, with_name="Momentum4D"
        )[mask]
        objs[name] = o[ak.argsort(o.pt, ascending=False)]
    ht = ak.to_numpy(ak.sum(parent["jets"].pt[sel["jets"]], axis=1))
    obs = {}
    for key, (slots, _) in OBSERVABLES.items():
        vs = []
        exists = np.ones(len(jet), dtype=bool)
        for name, r in slots:
            exists &= ak.to_numpy(n[name] > r)
            vs.append(ak.pad_none(objs[name], r + 1)[:, r])
        if key == "lead_pt":
            x = vs[0].pt
        elif key == "second_eta":
            x = vs[0].eta
        elif key in ("mjj", "mlb", "mll"):
            x = (vs[0] + vs[1]).mass
        elif key == "m3j":
            x = (vs[0] + vs[1] + vs[2]).mass
        elif key == "pt3j":
            x = (vs[0] + vs[1] + vs[2]).pt
        elif key == "dr_bb":
            x = vs[0].deltaR(vs[1])
        elif key == "dphi_ll":
            x = vs[0].deltaphi(vs[1])
        else:  # eta_ll
            x = (vs[0] + vs[1]).eta
        w = exists & passed
        obs[key] = (w.astype(float), np.where(w, ak.to_numpy(ak.fill_none(x, 0.0)), 0.0))
    return sel, passed, ht, obs


@pytest.fixture(scope="module", params=[pytest.param(n, marks=pytest.mark.slow) if n == "tt2015" else n
                                        for n in CASES])  # 2015: slow (v12 and DY by default)
def case(request, shared_data):
    name = request.param
    filename, cuts, counts = CASES[name]
    tree = uproot.open(shared_data / filename)["Events"]
    branches = [f"{c}_{f}" for c, fs in FIELDS.items() for f in fs] + [f"n{c}" for c in FIELDS]
    raw = tree.arrays(branches + [f"Jet_{cuts['btag'][0]}"])
    fields = dict(FIELDS, Jet=FIELDS["Jet"] + (cuts["btag"][0],))
    ev = {
        c: ak.zip({f: ak.values_astype(raw[f"{c}_{f}"], np.float64) for f in fs})
        for c, fs in fields.items()
    }
    return name, ev, cuts, counts


def ours(ev, cuts, counts):
    """The same selection through analysis.select.objects at width 0 (one jit-compiled program)."""
    lays, dense = {}, {}
    for c in FIELDS:
        n = ak.to_numpy(ak.num(ev[c])).astype(np.int32)
        lays[c] = layout(np.cumsum(n) - n, n, max(int(n.max()), 1))
        dense[c] = {
            f: lays[c].dense(jnp.asarray(ak.to_numpy(ak.flatten(ev[c][f]))))
            for f in ak.fields(ev[c])
        }
    static = (cuts["jet_pt"], cuts["btag"], cuts["lep_pt"], tuple(counts))
    p, w, ht, obs = _ours(lays, dense, static)
    return lays, p, w, ht, {k: tuple(np.asarray(a) for a in v) for k, v in obs.items()}


@partial(jax.jit, static_argnums=(2,))
def _ours(lays, dense, static):
    jet_pt, (field, value), lep_pt, counts = static
    zero = jnp.asarray(0.0)

    def cut(v, t, greater):
        return soft_pass(v, t, zero, greater=greater, inclusive=False)

    jet, mu, el = dense["Jet"], dense["Muon"], dense["Electron"]
    probs = {
        "jets": cut(jet["pt"], jet_pt, True) * cut(jnp.abs(jet["eta"]), 2.4, False),
        "bjets": cut(jet[field], value, True),
        "muons": cut(mu["pt"], lep_pt, True) * cut(mu["pfRelIso04_all"], 0.15, False),
        "electrons": cut(el["pt"], lep_pt, True),
    }
    model = CountModel(SETS, tuple(Count(tuple(sets), op, max(1, n + 1)) for sets, op, n in counts))
    th = jnp.asarray([float(n) for _, _, n in counts])
    p = event_pass(probs, lays, model, th)
    w = object_weights(probs, lays, model, th)
    ht = jnp.sum(w["jets"] * jet["pt"], axis=1)
    rank = {"jets": jet["pt"], "bjets": jet["pt"], "muons": mu["pt"], "electrons": el["pt"]}
    coll = {s.name: s.collection for s in SETS}
    obs: dict = {}
    cands: dict = {}  # one leading() per distinct slots
    for key, (slots, fn) in OBSERVABLES.items():
        if slots not in cands:
            cands[slots] = leading(probs, lays, model, th, slots, rank)
        index, weight = cands[slots]
        vecs = [
            P4(*(take(dense[coll[name]][f], ix) for f in ("pt", "eta", "phi", "mass")))
            for (name, _), ix in zip(slots, index)
        ]
        x = jnp.where(weight > 0, fn(*vecs), 0.0)
        obs[key] = (jnp.sum(weight, axis=1), jnp.sum(weight * x, axis=1))
    return p, w, ht, obs


def test_hard_cuts_equal_awkward_vector(case):
    name, ev, cuts, counts = case
    sel, passed, ht, obs = reference(ev, cuts, counts)
    lays, p, w, our_ht, our_obs = ours(ev, cuts, counts)
    assert 0 < passed.sum() < len(passed), name  # the selection is not trivial
    np.testing.assert_array_equal(np.asarray(p), passed.astype(float))
    for s in SETS:
        mask = ak.to_numpy(ak.flatten(sel[s.name] & passed))
        flat = np.asarray(lays[s.collection].flat(w[s.name], len(mask)))
        np.testing.assert_array_equal(flat, mask.astype(float))
    np.testing.assert_allclose(np.asarray(our_ht), np.where(passed, ht, 0.0), rtol=1e-12)
    checked = 0
    for key in OBSERVABLES:
        (rw, rx), (gw, gx) = obs[key], our_obs[key]
        np.testing.assert_array_equal(gw, rw, err_msg=key)
        np.testing.assert_allclose(gx, rx, rtol=1e-12, atol=1e-12, err_msg=key)
        checked += int(rw.sum() > 0)
    assert checked >= 3
