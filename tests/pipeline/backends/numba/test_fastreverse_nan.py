"""Reverse mode on numba with a NaN among one event's probabilities (a NaN b-tag reaching
a soft cut) and histograms of every kind the numba pass pulls back (fields, ``abs``, a
branch, leading objects, event sums; hard and soft bins, trainable edges), some read by
the payload and some not: the numba pullback is the JAX sweep's (the reference), NaN in
the same places and equal (1e-10) elsewhere, a histogram the payload does not read
adding nothing (its trainable edges' gradient 0, as the JAX sweep's pulled sum skips
its None entry), and the value states NaN in the same bins (a hard bin's NaN entry in
its own bin alone)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from analysis.pipeline.backends.jax import reverse as jax_reverse
from analysis.pipeline.backends.numba import fastreverse
from tests.chunked_helpers import slice_columns
from tests.conftest import SHARED_DATA, numba_refusal
from tests.pipeline.backends.numba.test_fastreverse_hists import hists_payload, setup, state_paths
from tests.pipeline.backends.numba.test_fastreverse_hists_lead import lead_config
from tests.pipeline.backends.numba.test_fastreverse_hists_sums import with_nan

SOFT = {"bins": {"n": 4, "lo": 20.0, "hi": 220.0}, "width": 10.0, "trainable_edges": True}


def nan_config() -> dict:
    """Jets with b-jets (the b-tag cut soft: where :func:`with_nan`'s NaN enters), ``>=
    n_min`` jets, and a histogram of each kind, the soft ones with trainable edges."""
    return {
        "datasets": {"tt": {"files": [str(SHARED_DATA / "nano_tt_v12.root")],
                            "weight": "genWeight"}},
        "parameters": {"jet_pt_min": {"init": 25.0, "bounds": [15.0, 60.0]},
                       "b_min": {"init": 0.3, "bounds": [0.0, 1.0]},
                       "n_min": {"init": 2, "bounds": [0, 4]}},
        "objects": {"jets": {"collection": "Jet", "cuts": [
            {"var": "pt", "op": ">", "param": "jet_pt_min", "width": 5.0}]},
            "bjets": {"from": "jets", "cuts": [
                {"var": "btagDeepFlavB", "op": ">", "param": "b_min", "width": 0.1}]}},
        "selection": [{"count": "jets", "op": ">=", "param": "n_min", "width": 0.5},
                      {"count": "bjets", "op": ">=", "value": 1}],
        "histograms": [
            {"name": "jpt", "x": "jets.pt", **SOFT},
            {"name": "aeta", "x": "abs(jets.eta)", "edges": [0.0, 0.8, 1.6, 2.4],
             "width": 0.1, "trainable_edges": True},
            {"name": "met", "x": "MET.pt", "edges": [0.0, 30.0, 60.0, 100.0, 200.0]},
            {"name": "mets", "x": "MET.pt", "bins": {"n": 4, "lo": 0.0, "hi": 200.0},
             "width": 10.0, "trainable_edges": True},
            {"name": "j1", "x": "jets[1].pt", "edges": [20.0, 40.0, 60.0, 100.0, 200.0]},
            {"name": "j0", "x": "jets[0].pt", **SOFT},
            {"name": "ht", "x": "sum(jets.pt)", "edges": [100.0, 200.0, 300.0, 500.0, 800.0]},
            {"name": "hts", "x": "sum(jets.pt)", "bins": {"n": 4, "lo": 0.0, "hi": 400.0},
             "width": 20.0, "trainable_edges": True},
        ],
    }


def read_only(cols, plan, theta, widths, unread: tuple[str, ...], seed: int = 4) -> list:
    """:func:`tests.pipeline.backends.numba.test_fastreverse_hists.hists_payload` with None
    (as :func:`analysis.stats.pullback.prune` leaves a state the loss does not read) for the
    histograms named in ``unread``."""
    full = hists_payload(cols, plan, theta, widths, seed=seed)
    return [None if n.startswith(tuple(f"histograms.{u}." for u in unread)) else e
            for n, e in zip(state_paths(plan), full, strict=True)]


def nan_as_the_jax_sweep(cols, plan, theta, widths, payload) -> np.ndarray:
    """The numba pullback against the JAX sweep on ``payload`` itself (its None entries
    kept: no sweep through them): NaN in the same places, 1e-10 elsewhere, gradient and
    value states; returns the JAX sweep's gradient."""
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    ref = jax_reverse.chunk_pullback(cols, plan, theta, widths, payload)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    names = plan.trainable_names
    assert [n for n, a in zip(names, np.isnan(g), strict=True) if a] == [
        n for n, a in zip(names, np.isnan(r), strict=True) if a]
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * np.nanmax(np.abs(r), initial=0))
    leaves = jax.tree_util.tree_leaves_with_path(ref.derived.value)
    for x, (path, y) in zip(jax.tree_util.tree_leaves(got.derived.value), leaves, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        where = jax.tree_util.keystr(path)
        np.testing.assert_array_equal(np.isnan(x), np.isnan(y), err_msg=where)
        np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12, err_msg=where)
    return r


def test_a_nan_event_gives_the_jax_sweeps_nan_and_zeros() -> None:
    """Eight events, the third with a NaN b-tag; the payload reads a soft field's, a hard
    branch's, a leading object's and an event sum's histograms, not a soft one of each
    kind (``abs`` of a field, a branch, a leading object, an event sum; trainable edges):
    the numba pullback is the JAX sweep's, the unread histograms' edges 0, a hard
    histogram's bins NaN only where the event's entries fall."""
    plan, theta, widths, cols = setup(nan_config(), "nano_tt_v12.root")
    cols = with_nan(slice_columns(cols, 0, 8))
    payload = read_only(cols, plan, theta, widths, ("aeta", "mets", "j0", "hts"))
    r = nan_as_the_jax_sweep(cols, plan, theta, widths, payload)
    names = plan.trainable_names
    for n in ("b_min", "n_min", "jpt.edges[2]"):  # what the event reaches is NaN
        assert np.isnan(r[names.index(n)]), n
    for n in ("aeta.edges[1]", "mets.edges[2]", "j0.edges[2]", "hts.edges[2]"):
        assert r[names.index(n)] == 0.0, n  # not read: nothing, not 0 * NaN
    met = np.asarray(fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
                     .derived.value["histograms"]["met"].sumw_flow)
    assert np.isnan(met).sum() == 1  # the event's own bin


@pytest.mark.slow  # the JAX sweep's compile (minutes on 2 busy cores)
def test_a_nan_event_with_every_histogram_as_the_jax_sweep() -> None:
    """Forty events, the third with a NaN b-tag, the histograms and templates of
    :func:`tests.pipeline.backends.numba.test_fastreverse_hists_lead.lead_config` (two
    channel regions, a shift and a weight variation, learned scores) and event sums;
    the payload reads all but five histograms (``abs`` of a field, a branch, a leading
    object, an event sum, the muons'; four with trainable edges): the numba pullback is
    the JAX sweep's, NaN in the same places, the unread histograms' edges 0."""
    cfg = lead_config()
    cfg["histograms"] += [
        {"name": "ht", "x": "sum(jets.pt)", "edges": [100.0, 200.0, 300.0, 500.0, 800.0]},
        {"name": "htb", "x": "sum(bjets.pt)", "bins": {"n": 4, "lo": 0.0, "hi": 400.0},
         "width": 20.0, "trainable_edges": True}]
    plan, theta, widths, cols = setup(cfg, "nano_tt_v12.root")
    cols = with_nan(slice_columns(cols, 0, 40))
    payload = read_only(cols, plan, theta, widths, ("aeta", "evs", "b1", "htb", "mupt"))
    r = nan_as_the_jax_sweep(cols, plan, theta, widths, payload)
    names = plan.trainable_names
    assert np.isnan(r[names.index("bpt.edges[2]")])  # read by the template b2
    for n in ("aeta.edges[1]", "b1.edges[2]", "htb.edges[2]"):
        assert r[names.index(n)] == 0.0, n


def muons_config() -> dict:
    """:func:`nan_config` with muons in the selection (at most one, a trainable
    threshold ``mu_min``) and the soft field histogram ``jpt`` alone."""
    cfg = nan_config()
    cfg["parameters"]["mu_min"] = {"init": 8.0, "bounds": [0.0, 50.0]}
    cfg["objects"]["muons"] = {"collection": "Muon", "cuts": [
        {"var": "pt", "op": ">", "param": "mu_min", "width": 3.0}]}
    cfg["selection"].append({"count": "muons", "op": "<=", "value": 1})
    cfg["histograms"] = cfg["histograms"][:1]
    return cfg


@pytest.mark.slow  # the JAX sweep's compile
def test_a_parameter_the_nan_event_does_not_reach() -> None:
    """Muons in the selection, the NaN event without muons, the yields read: the muons'
    threshold's gradient is finite on both, the other events' shares of the chunk's
    NaN yields (the pulled sum keeps a NaN sum's cotangent,
    :func:`analysis.stats.pullback._per_event`)."""
    plan, theta, widths, cols = setup(muons_config(), "nano_tt_v12.root")
    cols = slice_columns(cols, 0, 8)
    assert cols.collections["Muon"][0][1] == 0
    cols = with_nan(cols, 1)
    payload = [e if n.startswith("selected_") else None for n, e in zip(
        state_paths(plan), hists_payload(cols, plan, theta, widths, seed=4), strict=True)]
    r = nan_as_the_jax_sweep(cols, plan, theta, widths, payload)
    assert np.isfinite(r[plan.trainable_names.index("mu_min")])


@pytest.mark.parametrize("x", ["jets.pt", "sum(jets.pt)"])
def test_the_nan_events_chunk_does_not_matter(x: str) -> None:
    """Eight events, the fifth (no muons) with a NaN b-tag, the yields, ``jpt`` and the
    moments of ``x`` read (sums over events, and a state of entries, the jets' pt or an
    event sum's ``E[X^r 1_pass]``: :func:`analysis.stats.pullback.finite_entries`), in
    chunks ``[0:3], [3:8]`` and ``[0:5], [5:8]`` (the NaN event in the second, then the
    first): the JAX sweep's summed gradients are equal, NaN in the same places (what the
    event reaches) and 1e-10 elsewhere (``mu_min``: every other event's share, whichever
    of them share the NaN event's chunk), and the numba pass's the same per chunk."""
    cfg = muons_config()
    cfg["observables"] = [{"name": "obs", "x": x, "stats": ["mean", "std"]}]
    plan, theta, widths, cols = setup(cfg, "nano_tt_v12.root")
    cols = slice_columns(cols, 0, 8)
    assert cols.collections["Muon"][0][4] == 0
    cols = with_nan(cols, 4)
    payload = [e if n.startswith(("selected_", "histograms.jpt.", "observables."))
               else None for n, e in zip(
        state_paths(plan), hists_payload(cols, plan, theta, widths, seed=4), strict=True)]
    # as a loss of the stats reads: no T_r above the order (an event sum's M3/M4 are NaN,
    # constants 0 in the pulled sum, which is then its power sums' alone: linear)
    order = plan.sets.orders[0]
    payload = [(e[0], e[1][: order + 1] + (0.0,) * (4 - order)) if n.startswith(
        "observables.") else e for n, e in zip(state_paths(plan), payload, strict=True)]
    grads = []
    for cuts in ((0, 3, 8), (0, 5, 8)):
        g = sum(nan_as_the_jax_sweep(slice_columns(cols, lo, hi), plan, theta, widths, payload)
                for lo, hi in zip(cuts, cuts[1:]))
        grads.append(g)
    a, b = grads
    names = plan.trainable_names
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    mu = a[names.index("mu_min")]
    assert np.isfinite(mu) and mu != 0.0
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * np.nanmax(np.abs(a)))


@pytest.mark.slow  # the JAX sweep's compile
def test_an_event_sum_the_nan_event_fills() -> None:
    """``sum(jets.pt)``'s moments read, the NaN event (no muons) among them: the muons'
    threshold has the other events' shares on both backends (the pulled sum reads the
    moments of the finite events: :func:`analysis.stats.pullback.finite_entries`,
    :func:`analysis.pipeline.backends.numba._revobs.coefficients`)."""
    cfg = muons_config()
    cfg["observables"] = [{"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]}]
    plan, theta, widths, cols = setup(cfg, "nano_tt_v12.root")
    cols = with_nan(slice_columns(cols, 0, 8), 4)
    payload = [e if n.startswith("observables.") else None for n, e in zip(
        state_paths(plan), hists_payload(cols, plan, theta, widths, seed=4), strict=True)]
    r = nan_as_the_jax_sweep(cols, plan, theta, widths, payload)
    assert np.isfinite(r[plan.trainable_names.index("mu_min")])
