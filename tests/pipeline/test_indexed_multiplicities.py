"""Indexed observables at natural multiplicities (issue 33): objects that cannot be in
the indexed set (a width-0 cut failed, a pass probability of exactly 0) leave the
candidate tuples before they are counted, on both backends; the cap on candidate
tuples counts only the objects that can pass.

References: a numpy + ``vector`` oracle over every configuration of the uncertain pass
bits (tests.reference.configurations; the certain ones fixed) for built events of 31
jets of which 8 pass a width-0 pT cut; awkward + vector + hist hard cuts at width 0;
finite differences for the Jacobian.
"""

from __future__ import annotations

import awkward as ak
import hist
import numpy as np
import pytest
import vector

from analysis.config.loader import config_from_dict
from analysis.pipeline.backend import chunk_state, run_once
from analysis.pipeline.backends.jax.passes import candidate_shapes
from analysis.pipeline.backends.jax.reverse import chunk_pullback
from analysis.pipeline.layout import ChunkColumns, pad_columns
from analysis.pipeline.plan import build_plan
from analysis.pipeline.request import Request
from analysis.select.objects import ObjectCapError
from tests.conftest import central_difference
from tests.reference import configurations, ranked

EDGES = [0.0, 100.0, 200.0, 300.0, 500.0]
ETA, SOFT, WIDTH = 1.5, 50.0, 5.0  # the hard |eta| pre-selection, the soft pT cut, width
M3J = "mass(jets[0] + jets[1] + jets[2])"


def config(*, hists: bool = False) -> dict:
    cfg = {
        "datasets": {"tt": {"files": ["x.root"]}},
        "parameters": {"jet_pt_min": {"init": SOFT, "bounds": [20.0, 80.0]}},
        "objects": {"jets": {"collection": "Jet", "cuts": [
            {"var": "abs_eta", "op": "<", "value": ETA, "width": 0},
            {"var": "pt", "op": ">", "param": "jet_pt_min", "width": WIDTH}]}},
        "selection": [{"count": "jets", "op": ">=", "value": 3}],
        "observables": [{"name": "m3j", "x": M3J, "stats": ["mean", "std"]},
                        {"name": "third", "x": "jets[2].pt", "stats": ["mean"]}],
    }
    if hists:
        cfg["histograms"] = [{"name": "m3j", "x": M3J, "edges": EDGES}]
    return cfg


def built_events(n_pass: int = 8, n_fail: int = 23) -> list[dict]:
    """An event of ``n_pass + n_fail`` jets (``n_pass`` past the |eta| pre-selection,
    the others failing it at every pT: among the leading ones by pT), one of 6 jets (4
    past it), one of 2 jets."""
    rng = np.random.default_rng(331)

    def jets(a, b):
        eta = rng.permutation(np.concatenate([
            rng.uniform(-1.4, 1.4, a), rng.choice([-1, 1], b) * rng.uniform(1.6, 2.4, b)]))
        n = len(eta)
        return {"pt": rng.uniform(35.0, 110.0, n), "eta": eta, "phi": rng.uniform(-3, 3, n),
                "mass": rng.uniform(1.0, 15.0, n), "weight": rng.uniform(0.5, 2.0)}

    return [jets(n_pass, n_fail), jets(4, 2), jets(2, 0)]


def columns(events: list[dict]) -> ChunkColumns:
    counts = np.array([len(e["pt"]) for e in events], np.int64)
    flat = {f: np.concatenate([e[f] for e in events]) for f in ("pt", "eta", "phi", "mass")}
    return ChunkColumns(n_events=len(events), weight=np.array([e["weight"] for e in events]),
                        collections={"Jet": (counts, flat)})


def oracle(events: list[dict], soft: float = SOFT) -> dict:
    """Per configuration of the uncertain bits: the leading three members by pT, their
    mass (``vector``) and the third's pT; summed with the configurations' probabilities:
    ``sumw``, ``mean`` of m3j and of the third pT, the m3j histogram (flow bins)."""
    sw = sx = st = 0.0
    h, h2 = np.zeros(len(EDGES) + 1), np.zeros(len(EDGES) + 1)
    for e in events:
        q = np.where(np.abs(e["eta"]) < ETA, 1.0 / (1.0 + np.exp(-(e["pt"] - soft) / WIDTH)), 0.0)
        free = (q > 0.0) & (q < 1.0)
        conf, prob = configurations(q[free])
        bits = np.broadcast_to(q == 1.0, (len(prob), len(q))).copy()
        bits[:, free] = conf
        lead = np.stack([ranked(bits, e["pt"], r) for r in range(3)], axis=1)
        ok = (lead >= 0).all(axis=1)
        lead, prob = lead[ok], prob[ok] * e["weight"]
        p4 = [vector.array({k: e[k][lead[:, r]] for k in ("pt", "eta", "phi", "mass")})
              for r in range(3)]
        m = np.asarray((p4[0] + p4[1] + p4[2]).mass)
        sw, sx, st = sw + prob.sum(), sx + prob @ m, st + prob @ e["pt"][lead[:, 2]]
        idx = np.searchsorted(EDGES, m, side="right")
        np.add.at(h, idx, prob)
        np.add.at(h2, idx, prob * e["weight"])
    return {"sumw": sw, "m3j": sx / sw, "third": st / sw, "h": h, "h2": h2}


def test_hard_cut_objects_leave_the_candidates_and_values_equal_the_oracle() -> None:
    events = built_events()
    cols = columns(events)
    theta, widths = np.array([SOFT]), np.array([0.0, WIDTH])
    top = np.argsort(-events[0]["pt"])[:8]  # jets that cannot pass rank among the leading
    assert 0 < (np.abs(events[0]["eta"][top]) > ETA).sum() < 8
    want = oracle(events)
    assert want["sumw"] > 0.5
    plan = build_plan(config_from_dict(config()))
    # only the 8 jets that can pass count: C(8, 3) = 56 tuples, not C(31, 3) = 4495
    arrays, shapes = pad_columns(cols, plan)
    assert candidate_shapes(cols, plan, theta, widths, arrays, shapes).possible == (
        ("jets", 8),)
    for engine in ("auto", "jax"):  # auto: the numba kernel
        obs = chunk_state(cols, plan, theta, widths, order=0, backend=engine
                          ).derived.value["observables"]
        mom = obs["m3j"]["moments"]
        np.testing.assert_allclose(float(mom.sumw), want["sumw"], rtol=1e-10)
        np.testing.assert_allclose(float(mom.mean), want["m3j"], rtol=1e-10)
        np.testing.assert_allclose(float(obs["third"]["moments"].mean), want["third"],
                                   rtol=1e-10)
    # the histogram (the JAX kernel: 4-vector histograms) and the entries
    hplan = build_plan(config_from_dict(config(hists=True)))
    h = chunk_state(cols, hplan, theta, widths, order=0).derived.value["histograms"]["m3j"]
    np.testing.assert_allclose(np.asarray(h.sumw_flow), want["h"], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.asarray(h.sumw2_flow), want["h2"], rtol=1e-10, atol=1e-14)
    for engine in ("auto", "jax"):
        x, w = run_once(cols, plan, Request(theta, widths, order=0, entries=0), backend=engine)
        assert np.isclose(w.sum(), want["sumw"], rtol=1e-10)
        assert np.isclose(w @ x / w.sum(), want["m3j"], rtol=1e-10)


def test_width0_equals_awkward_vector_and_hist() -> None:
    events = built_events()
    cols = columns(events)
    theta, widths = np.array([SOFT]), np.array([0.0, 0.0])
    plan = build_plan(config_from_dict(config(hists=True)))
    h = chunk_state(cols, plan, theta, widths, order=0).derived.value["histograms"]["m3j"]
    vector.register_awkward()
    jets = ak.zip({k: ak.Array([e[k] for e in events]) for k in ("pt", "eta", "phi", "mass")},
                  with_name="Momentum4D")
    w = np.array([e["weight"] for e in events])
    jets = jets[(abs(jets.eta) < ETA) & (jets.pt > SOFT)]
    jets = jets[ak.argsort(jets.pt, axis=1, ascending=False, stable=True)]
    ok = np.asarray(ak.num(jets) >= 3)
    j = jets[ok]
    m = np.asarray((j[:, 0] + j[:, 1] + j[:, 2]).mass)
    ref = hist.Hist(hist.axis.Variable(EDGES), storage=hist.storage.Weight())
    ref.fill(m, weight=w[ok])
    view = ref.view(flow=True)
    assert ok.sum() == 2  # the 31-jet event and the 6-jet one
    np.testing.assert_allclose(np.asarray(h.sumw_flow), view.value, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(h.sumw2_flow), view.variance, rtol=1e-12,
                               atol=1e-14)
    for engine in ("auto", "jax"):
        mom = chunk_state(cols, plan, theta, widths, order=0, backend=engine
                          ).derived.value["observables"]["m3j"]["moments"]
        np.testing.assert_allclose(float(mom.mean), w[ok] @ m / w[ok].sum(), rtol=1e-12)


def test_grid_scan_at_width0_equals_awkward() -> None:
    """A scan's grid (the JAX kernel at width 0): K is the most over the grid's points."""
    events = built_events()
    plan = build_plan(config_from_dict(config()))
    thetas = np.array([[40.0], [SOFT], [70.0]])
    got = run_once(columns(events), plan, Request(thetas, np.zeros(plan.n_widths), order=0,
                                                  grid=True)).derived.value["observables"]["m3j"]
    vector.register_awkward()
    jets = ak.zip({k: ak.Array([e[k] for e in events]) for k in ("pt", "eta", "phi", "mass")},
                  with_name="Momentum4D")
    w = np.array([e["weight"] for e in events])
    for g, (cut,) in enumerate(thetas):
        j = jets[(abs(jets.eta) < ETA) & (jets.pt > cut)]
        j = j[ak.argsort(j.pt, axis=1, ascending=False, stable=True)]
        ok = np.asarray(ak.num(j) >= 3)
        j = j[ok]
        m = np.asarray((j[:, 0] + j[:, 1] + j[:, 2]).mass)
        assert ok.any()
        np.testing.assert_allclose(float(got["moments"].sumw[g]), w[ok].sum(), rtol=1e-12)
        np.testing.assert_allclose(float(got["moments"].mean[g]), w[ok] @ m / w[ok].sum(),
                                   rtol=1e-12)


def test_jacobian_against_differences_on_both_backends() -> None:
    cols = columns(built_events())
    plan = build_plan(config_from_dict(config()))
    widths = np.array([0.0, 4 * WIDTH])  # wide: the soft cut moves the leading jets

    def f(x):
        m = chunk_state(cols, plan, x, widths, order=0).derived.value["observables"]
        return np.array([float(m["m3j"]["moments"].sumw), float(m["m3j"]["moments"].mean)])

    fd = central_difference(f, np.array([SOFT]), 1e-3)[:, 0]
    assert np.abs(fd).min() > 1e-4
    for engine in ("auto", "jax"):
        _, jac, _ = chunk_state(cols, plan, np.array([SOFT]), widths, order=1,
                                backend=engine).taylor()
        mom = jac["observables"]["m3j"]["moments"]
        got = np.array([float(np.ravel(mom.sumw)[0]), float(np.ravel(mom.mean)[0])])
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9 * np.abs(fd).max())


def test_cap_counts_only_the_objects_that_can_pass() -> None:
    # 31 of 33 jets past the pre-selection: C(31, 3) = 4495 > 4096 candidate tuples
    cols = columns(built_events(31, 2))
    plan = build_plan(config_from_dict(config()))
    msgs = []
    for engine in ("auto", "jax"):
        with pytest.raises(ObjectCapError) as err:
            chunk_state(cols, plan, np.array([SOFT]), np.array([0.0, WIDTH]), order=0,
                        backend=engine)
        msgs.append(str(err.value))
    assert msgs[0] == msgs[1]
    assert "\n" not in msgs[0]
    assert "4495 candidate tuples per event (objects that can pass per event Jet: 31)" in msgs[0]
    assert "width: 0" in msgs[0]


def test_reverse_sweep_counts_only_the_objects_that_can_pass() -> None:
    """The JAX reverse sweep (chunk_pullback) on the 31-jet event: the gradient of the
    selected yield equals forward mode's (itself checked against differences above)."""
    cols = columns(built_events())
    plan = build_plan(config_from_dict(config()))
    theta, widths = np.array([SOFT]), np.array([0.0, 4 * WIDTH])
    _, jac, _ = chunk_state(cols, plan, theta, widths, order=1, backend="jax").taylor()
    # leaves in key order: the observables' two moment states, selected_sumw, _sumw2
    payload = [None, None, (None, 1.0), None]
    out = chunk_pullback(cols, plan, theta, widths, payload)
    np.testing.assert_allclose(np.ravel(out.derived.grad), np.ravel(jac["selected_sumw"]),
                               rtol=1e-10)
