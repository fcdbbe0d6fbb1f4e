"""Exact enumeration of subsets (analysis.select.subsets.sum_bins) and per-object
pattern factors (analysis.select.objects.FACTOR) against the enumeration oracle.

One event per row, jets with a derived b-jet set and a lepton collection; the
selection ``>= 2 jets and == 1 b-jet and >= 1 lepton``. The reference lists every
configuration of the independent own-cut bits (tests/reference), builds each one's
hard-cut members, decision and event sum with numpy and weighs it by its probability.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from analysis.select.objects import (
    FACTOR,
    Count,
    CountModel,
    ObjectSet,
    event_pass,
    layout,
    object_weights,
)
from analysis.select.subsets import sum_bins
from tests.reference import members

SETS = (ObjectSet("jets", "Jet"), ObjectSet("bjets", "Jet", parent="jets"),
        ObjectSet("leps", "Lep"))
MODEL = CountModel(SETS, (Count(("jets",), ">=", 2), Count(("bjets",), "==", 2),
                          Count(("leps",), ">=", 1)))
THRESH = jnp.asarray([2.0, 1.0, 1.0])
EDGES = (0.0, 60.0, 120.0, 200.0)


def events(seed=3):
    rng = np.random.default_rng(seed)
    n_jet, n_lep = np.array([5, 3, 0, 4]), np.array([2, 1, 1, 0])
    q = {"jets": [rng.uniform(0.05, 0.95, n) for n in n_jet],
         "bjets": [rng.uniform(0.05, 0.95, n) for n in n_jet],
         "leps": [rng.uniform(0.05, 0.95, n) for n in n_lep]}
    pt = [rng.uniform(20, 90, n) for n in n_jet]
    sf = [rng.uniform(0.8, 1.2, n) for n in n_jet]
    return n_jet, n_lep, q, pt, sf


def dense(rows, m):
    out = np.zeros((len(rows), m))
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return jnp.asarray(out)


def arrays(n_jet, n_lep, q, pt, sf, m=6):
    lays = {"Jet": layout(np.cumsum(n_jet) - n_jet, n_jet, m),
            "Lep": layout(np.cumsum(n_lep) - n_lep, n_lep, 2)}
    probs = {"jets": dense(q["jets"], m), "bjets": dense(q["bjets"], m),
             "leps": dense(q["leps"], 2)}
    return lays, probs, dense(pt, m), dense(sf, m)


def reference(n_jet, q, pt, sf, e):
    member, prob = members({"jets": q["jets"][e], "bjets": q["bjets"][e],
                            "leps": q["leps"][e]}, {"bjets": "jets"})
    ok = ((member["jets"].sum(1) >= 2) & (member["bjets"].sum(1) == 1)
          & (member["leps"].sum(1) >= 1))
    wp = prob * ok
    ht = member["jets"] @ pt[e]
    bins = np.zeros(len(EDGES) + 1)
    np.add.at(bins, np.searchsorted(EDGES, ht, side="right"), wp)
    weighted = wp @ np.prod(np.where(member["bjets"], sf[e], 1.0), axis=1)
    ow = (wp * np.prod(np.where(member["bjets"], sf[e], 1.0), axis=1)) @ member["jets"]
    return bins, weighted, ow


def test_sum_bins_and_pattern_factors_against_enumeration() -> None:
    n_jet, n_lep, q, pt, sf = events()
    lays, probs, ptd, sfd = arrays(n_jet, n_lep, q, pt, sf)
    got = np.asarray(sum_bins(probs, lays, MODEL, THRESH, ptd, "jets", EDGES))
    with_sf = dict(probs, **{FACTOR + "bjets": sfd})
    p_sf = np.asarray(event_pass(with_sf, lays, MODEL, THRESH))
    ow_sf = np.asarray(object_weights(with_sf, lays, MODEL, THRESH)["jets"])
    for e in range(len(n_jet)):
        bins, weighted, ow = reference(n_jet, q, pt, sf, e)
        np.testing.assert_allclose(got[e], bins, rtol=1e-12, atol=1e-15, err_msg=str(e))
        np.testing.assert_allclose(p_sf[e], weighted, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(ow_sf[e, : n_jet[e]], ow, rtol=1e-12, atol=1e-15)
    assert got[:2].sum() > 0.01 and not np.allclose(p_sf, np.asarray(
        event_pass(probs, lays, MODEL, THRESH)))
