"""Histograms of event sums at natural multiplicities (issue 33): deterministic objects
leave the subset enumeration, events with more than 12 uncertain objects run meet in
the middle, and the pass counts both (``DatasetState.enumeration``).

References: a numpy oracle over every configuration of the uncertain pass bits (the
certain ones fixed) for built events of 30 jets, on both backends (the default runs
the numba kernel, analysis.pipeline.backends.numba.kernels._numba_esum); awkward + hist hard cuts on the real
NanoAOD v12 file at width 0.
"""

from __future__ import annotations

import logging

import awkward as ak
import hist
import numpy as np
import pytest
import uproot

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.errors import InputError
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.jax.passes import enumeration_shapes
from analysis.pipeline.layout import ChunkColumns, pad_columns
from analysis.pipeline.plan import build_plan
from tests.conftest import SHARED_DATA, central_difference
from tests.reference import configurations

EDGES = [100.0, 200.0, 300.0, 400.0, 600.0, 900.0]
PRE, SOFT, WIDTH = 30.0, 50.0, 5.0  # the hard pre-selection, the soft cut and its width


def config(*, widths: bool = True, pre: bool = True) -> dict:
    cuts = [{"var": "pt", "op": ">", "param": "jet_pt_min", "width": WIDTH if widths else 0.0}]
    if pre:
        cuts.insert(0, {"var": "pt", "op": ">", "value": PRE, "width": 0})
        cuts.insert(0, {"var": "abs_eta", "op": "<", "value": 2.4, "width": 0})
    return {
        "datasets": {"tt": {"files": [str(SHARED_DATA / "nano_tt_v12.root")],
                            "weight": "genWeight"}},
        "executor": {"type": "iterative", "chunksize": 100_000},
        "parameters": {"jet_pt_min": {"init": SOFT, "bounds": [20.0, 80.0]}},
        "objects": {"jets": {"collection": "Jet", "cuts": cuts}},
        "selection": [{"count": "jets", "op": ">=", "value": 3}],
        "histograms": [{"name": "ht", "x": "sum(jets.pt)", "edges": EDGES}],
    }


def built_events(extra: bool) -> list[dict]:
    """Events of 30 jets (8 past the pre-selection; 22 failing it), 5 jets all failing,
    12 jets of which 3 pass with probability exactly 1 (pT 400+: the sigmoid saturates)
    and 4 are uncertain; ``extra``: one more of 30 jets with 14 past the pre-selection."""
    rng = np.random.default_rng(33)

    def jets(n_pass, n_fail, n_sure=0):
        pt = np.concatenate([rng.uniform(35.0, 110.0, n_pass), rng.uniform(5.0, 29.0, n_fail),
                             rng.uniform(400.0, 500.0, n_sure)])
        return rng.permutation(pt)

    out = [jets(8, 22), jets(0, 5), jets(4, 5, 3)]
    if extra:
        out.append(jets(14, 16))
    return [{"pt": pt, "eta": rng.uniform(-2.3, 2.3, len(pt)), "weight": rng.uniform(0.5, 2.0)}
            for pt in out]


def columns(events: list[dict]) -> ChunkColumns:
    counts = np.array([len(e["pt"]) for e in events], np.int64)
    flat = {f: np.concatenate([e[f] for e in events]) for f in ("pt", "eta")}
    return ChunkColumns(n_events=len(events), weight=np.array([e["weight"] for e in events]),
                        collections={"Jet": (counts, flat)})


def oracle(events: list[dict], soft: float = SOFT) -> tuple[np.ndarray, np.ndarray]:
    """``(sumw, sumw2)`` with flow bins over every configuration of the uncertain bits."""
    sumw, sumw2 = np.zeros(len(EDGES) + 1), np.zeros(len(EDGES) + 1)
    for e in events:
        q = np.where(e["pt"] > PRE, 1.0 / (1.0 + np.exp(-(e["pt"] - soft) / WIDTH)), 0.0)
        free = (q > 0.0) & (q < 1.0)
        conf, prob = configurations(q[free])
        bits = np.broadcast_to(q == 1.0, (len(prob), len(q))).copy()
        bits[:, free] = conf
        ok = bits.sum(1) >= 3
        idx = np.searchsorted(EDGES, bits.astype(np.float64) @ e["pt"], side="right")
        np.add.at(sumw, idx, prob * ok * e["weight"])
        np.add.at(sumw2, idx, prob * ok * e["weight"] ** 2)
    return sumw, sumw2


def test_hard_cut_objects_do_not_count_and_bins_equal_the_oracle() -> None:
    plan = build_plan(config_from_dict(config()))
    theta, widths = np.array([SOFT]), np.array([0.0, 0.0, WIDTH])
    groups = {False: ((0, 16), (4, 16), (8, 16)), True: ((0, 16), (4, 16), (8, 16), (16, 16))}
    for extra, counts in ((False, (3, 0, 8)), (True, (4, 1, 14))):
        events = built_events(extra)
        cols = columns(events)
        state = chunk_state(cols, plan, theta, widths, order=0)  # the numba kernel
        ref = chunk_state(cols, plan, theta, widths, order=0, backend="jax")
        # the 30-jet event with 8 past the pre-selection: 8 uncertain, the cheap path,
        # on both backends
        assert state.enumeration == ref.enumeration == counts
        # each event at its own width: the 30-jet one at 8 beside the one at 16
        arrays, shapes = pad_columns(cols, plan)
        arrays, shapes, _ = enumeration_shapes(cols, plan, theta, widths, arrays, shapes)
        assert shapes.uncertain == (("Jet", groups[extra]),)
        idx = arrays["enum:Jet"]  # the third group (width 8): event 0, then padding
        assert idx[32] == 0 and (idx[33:48] == shapes.events).all()
        want = oracle(events)
        assert want[0].sum() > 0.5
        for st in (state, ref):
            h = st.derived.value["histograms"]["ht"]
            np.testing.assert_allclose(np.asarray(h.sumw_flow), want[0], rtol=1e-10,
                                       atol=1e-14)
            np.testing.assert_allclose(np.asarray(h.sumw2_flow), want[1], rtol=1e-10,
                                       atol=1e-14)


def test_too_many_uncertain_objects_is_one_line_naming_event_count_and_remedy() -> None:
    plan = build_plan(config_from_dict(config(pre=False)))
    # without the pre-selection every jet of the first event is uncertain
    with pytest.raises(InputError) as err:
        chunk_state(columns(built_events(False)), plan, np.array([SOFT]), np.array([WIDTH]),
                    order=0)
    msg = str(err.value)
    assert "\n" not in msg and "max_objects" not in msg
    for words in ("event 0 of this chunk", "30 uncertain Jet objects", "more than 24",
                  "width: 0", "jets.pt"):
        assert words in msg, msg


@pytest.mark.slow
def test_gradient_against_differences() -> None:
    plan = build_plan(config_from_dict(config()))
    cols = columns(built_events(True))
    widths = np.array([0.0, 0.0, WIDTH])

    def f(x):
        h = chunk_state(cols, plan, x, widths, order=0).derived.value["histograms"]["ht"]
        return np.concatenate([np.asarray(h.sumw_flow), np.asarray(h.sumw2_flow)])

    state = chunk_state(cols, plan, np.array([SOFT]), widths, order=1)
    _, jac, _ = state.taylor()
    got = np.concatenate([np.asarray(jac["histograms"]["ht"].sumw_flow),
                          np.asarray(jac["histograms"]["ht"].sumw2_flow)])[:, 0]
    fd = central_difference(f, np.array([SOFT]), 1e-2, points=5)[:, 0]
    assert np.abs(fd).max() > 1e-3
    np.testing.assert_allclose(got, fd, rtol=1e-7, atol=1e-9 * np.abs(fd).max())


def test_width0_on_real_nanoaod_equals_awkward_and_hist(caplog) -> None:
    ev = Evaluator(config_from_dict(config(widths=False)))
    with caplog.at_level(logging.DEBUG, logger="analysis.pipeline.results"):
        state = ev.run(order=1)["tt"]
    # the pass's --debug line: events on the expensive path, the most uncertain objects
    assert ("event-sum histograms: 0 of 200 events had more than 12 uncertain objects; "
            "at most 0 uncertain objects in an event") in caplog.text
    h = state.derived.value["histograms"]["ht"]
    arr = uproot.open(SHARED_DATA / "nano_tt_v12.root")["Events"].arrays(
        ["genWeight", "Jet_pt", "Jet_eta"])
    pt = ak.values_astype(arr.Jet_pt, np.float64)
    eta = ak.values_astype(arr.Jet_eta, np.float64)
    keep = (abs(eta) < 2.4) & (pt > PRE) & (pt > SOFT)
    ok = np.asarray(ak.sum(keep, axis=1) >= 3)
    ref = hist.Hist(hist.axis.Variable(EDGES), storage=hist.storage.Weight())
    w = np.asarray(arr.genWeight, np.float64)
    ref.fill(np.asarray(ak.sum(pt[keep], axis=1))[ok], weight=w[ok])
    view = ref.view(flow=True)
    assert ok.sum() > 20 and ak.max(ak.num(pt)) >= 13  # the file's natural multiplicities
    np.testing.assert_allclose(np.asarray(h.sumw_flow), view.value, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(h.sumw2_flow), view.variance, rtol=1e-12)
    assert state.enumeration == (200, 0, 0)  # width 0: nothing to enumerate


def test_chunks_add_up_to_the_whole() -> None:
    """Two chunks (other groups, other widths) merge into the whole chunk's state; the
    enumeration counts add (the largest: the larger)."""
    plan = build_plan(config_from_dict(config()))
    theta, widths = np.array([SOFT]), np.array([0.0, 0.0, WIDTH])
    events = built_events(True)
    whole = chunk_state(columns(events), plan, theta, widths, order=0)
    merged = (chunk_state(columns(events[:2]), plan, theta, widths, order=0)
              + chunk_state(columns(events[2:]), plan, theta, widths, order=0))
    assert merged.enumeration == whole.enumeration == (4, 1, 14)
    a, b = (s.derived.value["histograms"]["ht"] for s in (whole, merged))
    np.testing.assert_allclose(np.asarray(b.sumw_flow), np.asarray(a.sumw_flow), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(b.sumw2_flow), np.asarray(a.sumw2_flow), rtol=1e-12)
