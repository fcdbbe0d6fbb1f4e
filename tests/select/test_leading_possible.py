"""analysis.select.leading with ``possible``: the objects that cannot be in an indexed set
(pass probability exactly 0: a width-0 cut failed) leave its candidate tuples, on every
path of :func:`leading` (one set, two sets on two collections, two sets of one
collection), against the enumeration oracle over the pass/fail bits
(tests.reference.members / ranked); an event with more such objects than ``possible``
says gets NaN, never a silent drop.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import analysis  # noqa: F401  (float64)
from analysis.select.leading import can_be_in
from analysis.select.objects import Count, CountModel, ObjectSet, layout, leading, take
from tests.reference import members, ranked

SETS = (ObjectSet("jets", "Jet"), ObjectSet("bjets", "Jet", parent="jets"),
        ObjectSet("muons", "Muon"))
MODEL = CountModel(SETS, (Count(("jets",), ">=", 3), Count(("muons",), "<", 2)))
TH = jnp.asarray([2.0, 2.0])  # jets >= 2, muons < 2
SLOTS = {
    "one set": (("jets", 0), ("jets", 1), ("jets", 2)),
    "two collections": (("muons", 0), ("bjets", 0)),
    "one collection": (("jets", 0), ("bjets", 0)),
}


def events() -> list[dict]:
    """Two events; jets that cannot pass (q = 0) among the leading ones by pT, some
    certain (q = 1), b-tags of 0 on some."""
    return [
        {"Jet": {"pt": np.array([90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0]),
                 "jets": np.array([0.0, 0.7, 0.0, 1.0, 0.4, 0.0, 0.6]),
                 "bjets": np.array([0.5, 0.3, 0.9, 0.0, 0.6, 0.2, 0.8])},
         "Muon": {"pt": np.array([25.0, 15.0]), "muons": np.array([0.6, 0.3])}},
        {"Jet": {"pt": np.array([55.0, 65.0, 45.0, 35.0]),
                 "jets": np.array([0.8, 0.0, 0.5, 1.0]),
                 "bjets": np.array([0.4, 0.7, 0.0, 0.5])},
         "Muon": {"pt": np.array([30.0]), "muons": np.array([0.5])}},
    ]


def oracle(ev: dict, slots) -> tuple[float, float]:
    """``(P(the indexed objects exist, event passes), E[sum of their pT; same])``."""
    own = {"jets": ev["Jet"]["jets"], "bjets": ev["Jet"]["bjets"], "muons": ev["Muon"]["muons"]}
    mem, prob = members(own, {"bjets": "jets"})
    ok = (mem["jets"].sum(1) >= 2) & (mem["muons"].sum(1) < 2)
    total = np.zeros(len(prob))
    for name, r in slots:
        coll = "Muon" if name == "muons" else "Jet"
        pick = ranked(mem[name], ev[coll]["pt"], r)
        ok &= pick >= 0
        total += ev[coll]["pt"][np.maximum(pick, 0)]
    return float(prob @ ok), float(prob @ (ok * total))


def ours(evs: list[dict], slots, possible):
    lays, dense, probs = {}, {}, {}
    for coll, names in (("Jet", ("jets", "bjets")), ("Muon", ("muons",))):
        counts = np.array([len(e[coll]["pt"]) for e in evs])
        lays[coll] = layout(np.cumsum(counts) - counts, counts, int(counts.max()))
        flat = {k: jnp.asarray(np.concatenate([e[coll][k] for e in evs]))
                for k in ("pt",) + names}
        dense[coll] = lays[coll].dense(flat["pt"])
        for n in names:
            probs[n] = lays[coll].dense(flat[n])
    rank = {"jets": dense["Jet"], "bjets": dense["Jet"], "muons": dense["Muon"]}
    idx, w = leading(probs, lays, MODEL, TH, slots, rank, possible=possible)
    total = sum(take(dense["Muon" if n == "muons" else "Jet"], i) for (n, _), i in
                zip(slots, idx))
    w = np.asarray(w)
    return w.sum(1), np.where(w != 0, w * np.asarray(total), 0.0).sum(1), probs, lays


@pytest.mark.parametrize("case", list(SLOTS))
def test_possible_objects_only_equal_the_oracle(case: str) -> None:
    evs, slots = events(), SLOTS[case]
    _, _, probs, lays = ours(evs, slots, None)
    k = {n: int(jnp.max(jnp.sum(can_be_in(probs, lays, MODEL, n), axis=1)))
         for n in {n for n, _ in slots}}
    assert k["jets" if "jets" in k else "bjets"] < 7  # fewer than the 7 jets of event 0
    p, s, _, _ = ours(evs, slots, k)
    want = np.array([oracle(e, slots) for e in evs])
    assert want[:, 0].min() > 0.01
    np.testing.assert_allclose(p, want[:, 0], rtol=1e-12)
    np.testing.assert_allclose(s, want[:, 1], rtol=1e-12)
    # too small a K: the event with more objects that can pass is NaN, not dropped
    small = {n: v - 1 for n, v in k.items()}
    p, _, _, _ = ours(evs, slots, small)
    assert np.isnan(p).any()
