"""Soft bins of the YAML pipeline's histograms (issue 50, item 1) on the DY file.

- width > 0: the enumeration oracle of tests/pipeline/test_histograms.py (every event's
  pass/fail configurations of a soft selection) with each configuration's entries spread
  over the bins by the issue's formula in numpy (``soft_bins``): event sums (``ht``,
  ``nj``: the bins of each subset's sum), a leading object, per-object fields, a branch,
  a 4-vector mass and a channel's template, 1e-10;
- d(bin)/d(cut) and d(bin)/d(shift of x) against central differences (x moving under
  the soft bins has a derivative now);
- the soft bins' widths are cut widths: annealed with them, and the hard evaluation
  (every width 0) is the ``hist`` fill (tests/pipeline/test_histograms.py's hard test
  runs with soft bins configured too);
- the numba backend serves soft bins of every kind of x, event sums included: ``backend:
  numba`` equals the same oracle (1e-10) on the histograms it serves (numba = JAX:
  tests/pipeline/backends/numba/test_fasthist_softbins.py,
  tests/pipeline/backends/numba/test_numba_esum_soft.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.results import width_labels
from tests.conftest import central_difference, numba_refusal
from tests.pipeline.test_histograms import PARAMS, _cfg, reference

#: the soft bins' widths per histogram (of the order of its bins)
SOFT = {"ht": 20.0, "nj": 0.4, "lead": 10.0, "jpt": 8.0, "met": 5.0, "mjj": 15.0}


def soft_cfg() -> dict:
    cfg = _cfg()
    for h in cfg["histograms"]:
        h["width"] = SOFT[h["name"]]
    return cfg


def test_soft_bin_widths_are_cut_widths() -> None:
    """Each soft histogram takes one width after the channels' own (its templates share
    it), labelled in results.json; width 0 adds none."""
    cfg = soft_cfg()
    cfg["histograms"][2]["width"] = 0.0  # lead: hard
    config = config_from_dict(cfg)
    plan = build_plan(config)
    w = initial_widths(config)
    assert len(w) == plan.n_widths
    assert w[-5:] == [20.0, 0.4, 8.0, 5.0, 15.0]
    by_key = {h.key: h.width_index for h in plan.hists}
    assert by_key["lead"] is None
    assert by_key["sr"] == by_key["low"] == by_key["ht"] == plan.n_widths - 5
    assert width_labels(config)[-5:] == [f"histogram {n} bins"
                                         for n in ("ht", "nj", "jpt", "met", "mjj")]
    # numba serves the event sum's histogram soft as hard (auto runs it there)
    ht = [h for h in plan.hists if h.key == "ht"]
    only = dataclasses.replace(plan, observables=(), hists=tuple(ht))
    assert numba_refusal(only, 1) is None
    hard = dataclasses.replace(only, hists=(dataclasses.replace(ht[0], width_index=None),))
    assert numba_refusal(hard, 1) is None


@pytest.mark.slow  # enumeration of the 40 events and one compilation, ~60-100 s
def test_soft_bins_against_enumeration() -> None:
    ref = reference(SOFT)
    with Evaluator(config_from_dict(soft_cfg())) as evaluator:
        state = evaluator.run(PARAMS, order=1)["dy"]
        value = state.derived.value
        got = dict(value["histograms"])
        got["low"] = value["templates"]["low"]
        for name, (sumw, sumw2) in ref.items():
            h = got[name]
            # soft bins fill every bin (a hard histogram leaves some empty)
            assert np.all(sumw > 0), name
            np.testing.assert_allclose(np.asarray(h.sumw_flow), sumw, rtol=1e-10, atol=1e-9,
                                       err_msg=name)
            np.testing.assert_allclose(np.asarray(h.sumw2_flow), sumw2, rtol=1e-10, atol=1e-6,
                                       err_msg=name)
        # d(bin)/d(cut): the event sum and the per-object field, central differences
        names = list(state.derived.names)
        i = names.index("jet_pt")
        for h in ("ht", "jpt", "lead"):
            jac = np.asarray(state.derived.jac["histograms"][h].sumw)[:, i]

            def bins(x, h=h):
                params = dict(PARAMS, jet_pt=float(x[0]))
                run = evaluator.run(params, order=0)["dy"].derived.value
                return np.asarray(run["histograms"][h].sumw)

            fd = np.asarray(central_difference(bins, [PARAMS["jet_pt"]], 1e-4)).reshape(-1)
            np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-6 * np.abs(jac).max(),
                                       err_msg=h)
            assert np.abs(jac).max() > 0, h
        # the widths array carries them (annealing scales it): halved, the oracle's at
        # half the widths
        widths = np.asarray(initial_widths(evaluator.config))
        widths[-len(SOFT):] *= 0.5
        half = evaluator.run(PARAMS, widths=widths, order=0)["dy"].derived.value
        for name, (sumw, _) in reference({k: v * 0.5 for k, v in SOFT.items()}).items():
            h = half["templates"]["low"] if name == "low" else half["histograms"][name]
            np.testing.assert_allclose(np.asarray(h.sumw_flow), sumw, rtol=1e-10, atol=1e-9,
                                       err_msg=name)


def test_soft_bins_on_numba_against_enumeration() -> None:
    """``backend: numba`` on the DY file (the observables and the histogram of two indexed
    sets, which numba does not serve, left out): the event sums ``ht`` (and its channel
    ``low``) and ``nj``, the leading jet, per-object fields and a branch with soft bins
    equal the enumeration oracle (1e-10)."""
    keep = ("ht", "nj", "lead", "jpt", "met")
    cfg = soft_cfg()
    cfg.pop("observables", None)
    cfg["histograms"] = [h for h in cfg["histograms"] if h["name"] in keep]
    with Evaluator(config_from_dict(cfg), backend="numba") as evaluator:
        value = evaluator.run(PARAMS, order=1)["dy"].derived.value
    got = dict(value["histograms"], low=value["templates"]["low"])
    ref = reference({k: SOFT[k] for k in keep})
    for name in (*keep, "low"):
        sumw, sumw2 = ref[name]
        h = got[name]
        assert np.all(sumw > 0), name
        np.testing.assert_allclose(np.asarray(h.sumw_flow), sumw, rtol=1e-10, atol=1e-9,
                                   err_msg=name)
        np.testing.assert_allclose(np.asarray(h.sumw2_flow), sumw2, rtol=1e-10, atol=1e-6,
                                   err_msg=name)


@pytest.mark.slow  # one compilation at order 1, one at order 0, the enumeration: ~2-4 min
def test_trainable_edges_against_enumeration_and_finite_differences(monkeypatch) -> None:
    """``trainable_edges: true`` on the event-sum histogram ``ht`` (soft bins): the
    parameters ``ht.edges[1..3]``, the histogram at moved edges = the oracle with those
    edges (1e-10), d(bin)/d(edge) = central differences; an edge set out of order is one
    line naming the parameters."""
    import tests.pipeline.test_histograms as th
    from analysis.errors import InputError

    cfg = soft_cfg()
    cfg["histograms"][0]["trainable_edges"] = True
    edges = {"ht.edges[1]": 60.0, "ht.edges[2]": 90.0, "ht.edges[3]": 250.0}
    with Evaluator(config_from_dict(cfg)) as evaluator:
        assert evaluator.plan.trainable_names[-3:] == tuple(edges)
        params = dict(PARAMS, **edges)
        state = evaluator.run(params, order=1)["dy"]
        got = state.derived.value
        moved = [0.0, *edges.values(), 400.0]
        monkeypatch.setitem(th.EDGES, "ht", moved)
        ref = reference({"ht": SOFT["ht"]})
        for h in (got["histograms"]["ht"], got["templates"]["sr"]):
            np.testing.assert_allclose(np.asarray(h.sumw_flow), ref["ht"][0], rtol=1e-10)
        names = list(state.derived.names)
        jac = np.asarray(state.derived.jac["histograms"]["ht"].sumw_flow)
        keys = list(edges)

        def bins(x):
            run = evaluator.run(dict(params, **dict(zip(keys, map(float, x)))), order=0)
            return np.asarray(run["dy"].derived.value["histograms"]["ht"].sumw_flow)

        fd = np.asarray(central_difference(bins, list(edges.values()), 1e-3))
        cols = [names.index(k) for k in keys]
        np.testing.assert_allclose(jac[:, cols], fd, rtol=1e-6,
                                   atol=1e-8 * np.abs(jac[:, cols]).max())
        assert np.all(np.abs(jac[:, cols]).max(axis=0) > 0)
        with pytest.raises(InputError, match=r"histogram 'ht': edges at the parameters ht\.edges"):
            evaluator.run(dict(params, **{"ht.edges[2]": 300.0}), order=0)
