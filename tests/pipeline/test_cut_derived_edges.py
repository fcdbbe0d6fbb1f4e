"""A cut kind whose one-sided thresholds are derived from its bounds, added for the test only.

``rel`` (below, registered by monkeypatching :data:`analysis.select.cuts.KINDS` and
``OPS``): ``c (1 - f) < x < c (1 + f)``, a window about a centre ``c`` of relative
half-width ``f``; its ``edges`` ``c (1 - f)`` and ``c (1 + f)`` are nonlinear in both
bounds, so the numba backend's chain rule
(:mod:`analysis.pipeline.backends.numba.cutedges`) carries a Jacobian that varies with
the point. A plan on the DY and the 2015 ttbar files with the kind on the jets' pT
(both bounds parameters) and on ``MET.pt`` (the centre a parameter), b-jets derived
from the jets, three counts (one joint: jets and b-jets), a field, a leading object, an event sum and a branch:

- the states at width > 0 against the enumeration oracle (:mod:`tests.reference`: every
  pass/fail configuration of the jets', b-jets' and MET's bits, each passing with the
  probability written out here in numpy), to 1e-10, on both backends;
- the numba backend's values and Jacobians equal the JAX backend's (1e-12): states with
  histograms, a shift of the cut field and a channel region with a derived cut of its
  own (eight tangents: two blocks), entries, selected weights, bootstrap replicas; reverse
  mode's yield gradients (one set) equal the JAX backend's forward Jacobian, and a
  significance's gradient by the numba reverse pass (one pass, and values then the
  pullback; one set, and two with joint counts) equals forward mode's (1e-10);
- the Jacobian against central differences;
- width 0 against awkward's hard ``c (1 - f) < x < c (1 + f)``; a width-0 cut with
  constant bounds drops the objects outside its derived edges before the walk
  (:mod:`analysis.pipeline.hardcut`).
"""

from __future__ import annotations

import copy

import awkward as ak
import jax
import numpy as np
import pytest
import uproot

from analysis.config.loader import config_from_dict
from analysis.pipeline import hardcut
from analysis.pipeline.backend import run_once
from analysis.pipeline.backends.numba import cutedges
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.replicas import ReplicaLanes, ReplicaSums
from analysis.pipeline.request import Replicas, Request
from analysis.select import cuts
from tests.chunked_helpers import NANOAOD_WARNINGS, read_columns
from tests.conftest import SHARED_DATA, central_difference, numba_refusal
from tests.pipeline.backends.numba.test_fastkernel import assert_close, leaves
from tests.reference import members, ranked

pytestmark = NANOAOD_WARNINGS
FILES = {"dy": SHARED_DATA / "nano_dy.root",
         "ttbar": SHARED_DATA / "nanoAOD_2015_CMS_Open_Data_ttbar.root"}
PARAMS = {"jc": 55.0, "jf": 0.45, "bmin": 0.25, "mc": 40.0}
MET_FRAC, JET_W, B_W, MET_W, JOINT_MAX = 0.6, 6.0, 0.1, 9.0, 4
OBS = ("ht", "lead", "met", "bpt")


class Relative:
    """``c (1 - f) < x < c (1 + f)`` (``center:``/``center_param:``, ``frac:``/``frac_param:``)."""

    ops = ("rel",)
    bounds = ("center", "frac")

    def sides(self, op):
        return ((True, False), (False, False))  # x above the first edge, below the second

    def edges(self, op, bounds):
        c, f = bounds
        return (c * (1.0 - f), c * (1.0 + f))

    def probability(self, x, bounds, width, *, op):
        return cuts.sided_probability(self, x, bounds, width, op=op)

    def check(self, op, values):
        _, f = values
        return None if f is None or f > 0 else f"rel needs frac > 0, got {f:g}"


@pytest.fixture
def rel(monkeypatch):
    kind = Relative()
    monkeypatch.setattr(cuts, "KINDS", cuts.KINDS + (kind,))
    monkeypatch.setattr(cuts, "OPS", cuts.OPS + kind.ops)
    return kind


def config(path, scale: float = 1.0, *, hists: bool = False, bjets: bool = True) -> dict:
    cfg = {
        "datasets": {"d": {"files": [str(path)], "weight": "genWeight"}},
        "parameters": {"jc": {"init": 50.0, "bounds": [30.0, 90.0]},
                       "jf": {"init": 0.5, "bounds": [0.2, 0.8]},
                       "bmin": {"init": 0.3, "bounds": [0.05, 0.9]},
                       "mc": {"init": 40.0, "bounds": [20.0, 80.0]}},
        "objects": {
            "jets": {"collection": "Jet", "cuts": [
                {"var": "abs_eta", "op": "<", "value": 2.4, "width": 0},
                {"var": "pt", "op": "rel", "center_param": "jc", "frac_param": "jf",
                 "width": JET_W * scale}]},
            "bjets": {"from": "jets", "cuts": [
                {"var": "btagCSVV2", "op": ">", "param": "bmin", "width": B_W * scale}]}},
        "selection": [
            {"count": "jets", "op": ">=", "value": 1},
            {"count": "bjets", "op": ">=", "value": 1},
            {"count": ["jets", "bjets"], "op": "<=", "value": JOINT_MAX},  # b-jets twice
            {"var": "MET.pt", "op": "rel", "center_param": "mc", "frac": MET_FRAC,
             "width": MET_W * scale}],
        "observables": [
            {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
            {"name": "lead", "x": "jets[0].pt", "stats": ["mean", "std"]},
            {"name": "met", "x": "MET.pt", "stats": ["mean", "std"]},
            {"name": "bpt", "x": "bjets.pt", "stats": ["mean", "std"]}],
    }  # fmt: skip
    if not bjets:  # one set: what the numba reverse pass serves
        del cfg["objects"]["bjets"], cfg["observables"][3]
        del cfg["selection"][1:3]
    if hists:
        cfg["histograms"] = [
            {"name": "h_lead", "x": "jets[0].pt", "edges": [20.0, 40.0, 60.0, 100.0]},
            {"name": "h_met", "x": "MET.pt", "edges": [0.0, 30.0, 60.0, 120.0]},
            {"name": "h_jpt", "x": "jets.pt", "edges": [20.0, 50.0, 90.0]}]
        # a shift of the cut field, and a channel region with a derived cut of its own
        cfg["datasets"] = {n: {"files": [str(path)], "weight": "genWeight", "role": role}
                           for n, role in (("d", "signal"), ("b", "background"))}
        cfg["systematics"] = [{"name": "jes", "type": "shift", "field": "Jet.pt",
                               "up": 1.03, "down": 0.97}]
        cfg["likelihood"] = {"channels": {
            "all": {"histogram": "h_met"},
            "sr": {"histogram": "h_lead", "selection": [
                {"var": "MET.pt", "op": "rel", "center_param": "mc", "frac": 0.3,
                 "width": 5.0}]}}}
        cfg["objective"] = {"terms": [{"type": "discovery_significance"}]}
    return cfg


def pieces(cfg: dict, path):
    config_ = config_from_dict(copy.deepcopy(cfg))
    plan = build_plan(config_)
    theta = np.array([PARAMS[n] for n in plan.param_names], dtype=np.float64)
    return plan, theta, np.asarray(initial_widths(config_), np.float64), read_columns(path, plan)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def rel_np(x, c, f, width):
    lo, hi = c * (1.0 - f), c * (1.0 + f)
    if width == 0:
        return ((x > lo) & (x < hi)).astype(float)
    return sigmoid((x - lo) / width) * sigmoid((hi - x) / width)


def enumerated(path, p: dict) -> dict[str, np.ndarray]:
    """``{name: [S0, S1, S2]}`` power sums and ``selected_sumw`` by enumeration."""
    a = uproot.open(path)["Events"].arrays(["Jet_pt", "Jet_eta", "Jet_btagCSVV2", "MET_pt",
                                            "genWeight"])
    out = {k: np.zeros(3) for k in OBS}
    sumw = 0.0
    for e in range(len(a)):
        central = np.abs(np.asarray(a["Jet_eta"][e], np.float64)) < 2.4  # q = 0 elsewhere
        pt = np.asarray(a["Jet_pt"][e], np.float64)[central]
        btag = np.asarray(a["Jet_btagCSVV2"][e], np.float64)[central]
        met = float(a["MET_pt"][e])
        member, prob = members({
            "jets": rel_np(pt, p["jc"], p["jf"], JET_W),
            "bjets": sigmoid((btag - p["bmin"]) / B_W),
            "met": rel_np(np.array([met]), p["mc"], MET_FRAC, MET_W),
        }, {"bjets": "jets"})
        jets, bjets = member["jets"], member["bjets"]
        wp = float(a["genWeight"][e]) * prob * (
            (jets.sum(axis=1) >= 1) & (bjets.sum(axis=1) >= 1)
            & (jets.sum(axis=1) + bjets.sum(axis=1) <= JOINT_MAX) & member["met"][:, 0])
        sumw += wp.sum()
        lead = ranked(jets, pt, 0)
        x = {"ht": jets @ pt, "lead": np.append(pt, 0.0)[lead],  # -1: none (no weight)
             "met": np.full(len(wp), met)}
        for name in ("ht", "lead", "met"):
            out[name] += [wp @ x[name] ** r for r in range(3)]
        out["bpt"] += [wp @ (bjets @ pt**r) for r in range(3)]
    out["selected_sumw"] = np.array([sumw])
    return out


def power_sums(m) -> np.ndarray:
    """``[S0, S1, S2]`` of a Moments state (S1, S2 about 0)."""
    mean = float(m.center + m.dmean)
    s0 = float(m.sumw)
    return np.array([s0, s0 * mean, float(m.m2) + s0 * mean**2])


def both(cols, plan, request):
    """``(numba, jax)`` outputs of ``request`` on ``cols``; numba serves it."""
    assert numba_refusal(plan, request.order, request.theta) is None
    return (run_once(cols, plan, request, backend="numba"),
            run_once(cols, plan, request, backend="jax"))


@pytest.mark.slow  # the JAX kernel's order-1 compilation, twice (two files' shapes)
@pytest.mark.parametrize("name", ["dy", "ttbar"])
def test_states_equal_enumeration_and_numba_equals_jax(rel, name):
    plan, theta, widths, cols = pieces(config(FILES[name]), FILES[name])
    ref = enumerated(FILES[name], PARAMS)
    fast, slow = both(cols, plan, Request(theta, widths, order=1))
    for state in (fast, slow):
        value = state.derived.value
        np.testing.assert_allclose(float(value["selected_sumw"]), ref["selected_sumw"][0],
                                   rtol=1e-10)
        for obs in OBS:
            np.testing.assert_allclose(power_sums(value["observables"][obs]["moments"]),
                                       ref[obs], rtol=1e-10, err_msg=obs)
    assert fast.derived.names == slow.derived.names == plan.trainable_names
    assert_close(slow.derived.value, fast.derived.value, 1e-12, "value")
    assert_close(slow.derived.jac, fast.derived.jac, 1e-12, "jacobian")
    jac = leaves(fast.derived.jac)["selected_sumw"]
    assert np.all(np.abs(jac) > 1e-6 * float(ref["selected_sumw"][0])), jac  # all move it


def test_jacobian_against_finite_differences(rel):
    """``jc`` also read by a plain threshold (the b-jets' pT): its column is its own lane's
    plus the chained edges'."""
    cfg = config(FILES["ttbar"])
    cfg["objects"]["bjets"]["cuts"].append({"var": "pt", "op": "<", "param": "jc",
                                            "width": 10.0})
    plan, theta, widths, cols = pieces(cfg, FILES["ttbar"])
    low = cutedges.lower(plan, Request(theta, widths, order=1))
    assert sorted(plan.trainable_names[j] for j in low.kept) == ["bmin", "jc"]
    state = run_once(cols, plan, Request(theta, widths, order=1), backend="numba")
    idx = list(plan.trainable)

    def f(t):
        th = theta.copy()
        th[idx] = t
        out = run_once(cols, plan, Request(th, widths, order=0), backend="numba")
        return leaves(out.derived.value)

    fd = central_difference(f, theta[idx], 1e-5 * np.maximum(np.abs(theta[idx]), 1.0), points=5)
    got = leaves(state.derived.jac)
    for k, row in got.items():
        if np.isnan(fd[k]).all():  # an undefined state (M3 of an order-2 sum): constant NaN
            assert not row.any(), k
            continue
        scale = np.max(np.abs(row))
        assert np.max(np.abs(row - fd[k])) <= 1e-6 * scale + 1e-9, (k, row, fd[k])
    assert np.all(np.abs(got["selected_sumw"]) > 0)


def plain(x):
    """A pass's output as a pytree of arrays (replicas' sums, states' values; a moments
    state's ``center + dmean`` as one leaf, as the fast kernel's tests compare them)."""
    if isinstance(x, ReplicaLanes):
        return {str(k): plain(v) for k, v in x.lanes.items()}
    if isinstance(x, ReplicaSums):
        return {"sums": x.sums, "state": plain(x.state)}
    if hasattr(x, "derived"):
        return plain(x.derived.value)
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if hasattr(x, "_fields"):  # a moments state: each centre with its offset, as one mean
        f = dict(x._asdict())
        for c in ("center", "center_x", "center_y"):
            if c in f:
                f["mean" + c[6:]] = np.asarray(f.pop(c)) + np.asarray(f.pop("dmean" + c[6:]))
        return f
    return x


def same(ref, got, what: str) -> None:
    """Every leaf of ``got`` equals ``ref``'s to 1e-12 of its largest entry."""
    a, ta = jax.tree_util.tree_flatten_with_path(plain(ref))
    b, tb = jax.tree_util.tree_flatten_with_path(plain(got))
    assert ta == tb, what
    for (k, x), (_, y) in zip(a, b, strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        np.testing.assert_allclose(y, x, rtol=0, atol=1e-12 * np.max(np.abs(x), initial=1e-300),
                                   err_msg=f"{what} {jax.tree_util.keystr(k)}")


@pytest.mark.slow  # the JAX kernel's histogram, entries and reverse compilations
def test_every_pass_equals_jax(rel):
    path = FILES["ttbar"]
    cfg = config(path, hists=True)
    cfg["objects"]["bjets"]["cuts"].append({"var": "pt", "op": "<", "param": "jc",
                                            "width": 10.0})  # jc keeps a lane of its own
    plan, theta, widths, cols = pieces(cfg, path)
    fast, slow = both(cols, plan, Request(theta, widths, order=1))
    same(slow.derived.value, fast.derived.value, "value")
    same(slow.derived.jac, fast.derived.jac, "jacobian")
    jac = fast.derived.jac
    assert np.all(jac["histograms"]["h_met"].sumw[1] != 0)
    assert set(jac["templates"]) == {f"{c}{s}" for c in ("all", "sr")
                                     for s in ("", ":jes:up", ":jes:down")}
    mc = plan.trainable_names.index("mc")  # the region's own derived cut moves its template
    assert np.any(jac["templates"]["sr"].sumw[..., mc] != jac["templates"]["all"].sumw[..., mc])
    # eight tangents: bmin, jc and six edges (two blocks of tangents)
    assert len(cutedges.lower(plan, Request(theta, widths, order=1)).plan.trainable) == 8
    for req in (Request(theta, widths, order=0, entries=1),
                Request(theta, widths, order=0, selected=True)):
        fast, slow = both(cols, plan, req)
        same(slow, fast, req.kind)
    points = np.stack([theta, theta * 1.05])
    for what, at in (("sums", theta), ("lanes", points)):
        fast, slow = both(cols, plan, Request(at, widths, order=0, replicas=Replicas(what, 4)))
        same(slow, fast, f"replicas {what}")
    # reverse mode (one set): the yields' gradients against the JAX backend's forward mode
    one, theta1, widths1, cols1 = pieces(config(path, bjets=False), path)
    req = Request(theta1, widths1, order=0, yield_rows=(True, True))
    assert numba_refusal(one, 0, theta1, yield_rows=(True, True)) is None
    fast = run_once(cols1, one, req, backend="numba")
    slow = run_once(cols1, one, Request(theta1, widths1, order=1), backend="jax").derived
    assert fast.derived.names == slow.names == one.trainable_names
    same(np.stack([slow.jac["selected_sumw"], slow.jac["selected_sumw2"]]), fast.derived.grad,
         "yield gradients")
    moved = [one.trainable_names.index(n) for n in ("jc", "jf", "mc")]  # bmin: no b-jets
    assert np.all(np.abs(fast.derived.grad[0, moved]) > 0)


def test_hard_cut_against_awkward(rel):
    path = FILES["ttbar"]
    plan, theta, widths, cols = pieces(config(path, 0.0), path)
    a = uproot.open(path)["Events"].arrays(["Jet_pt", "Jet_eta", "Jet_btagCSVV2", "MET_pt",
                                            "genWeight"])
    lo, hi = PARAMS["jc"] * (1 - PARAMS["jf"]), PARAMS["jc"] * (1 + PARAMS["jf"])
    jet = (abs(a["Jet_eta"]) < 2.4) & (a["Jet_pt"] > lo) & (a["Jet_pt"] < hi)
    b = jet & (a["Jet_btagCSVV2"] > PARAMS["bmin"])
    m_lo, m_hi = PARAMS["mc"] * (1 - MET_FRAC), PARAMS["mc"] * (1 + MET_FRAC)
    keep = ((ak.sum(jet, axis=1) >= 1) & (ak.sum(b, axis=1) >= 1)
            & (ak.sum(jet, axis=1) + ak.sum(b, axis=1) <= JOINT_MAX)
            & (a["MET_pt"] > m_lo) & (a["MET_pt"] < m_hi))
    w = np.asarray(a["genWeight"][keep], np.float64)
    ht = np.asarray(ak.sum(a["Jet_pt"][jet][keep], axis=1), np.float64)
    assert 5 < int(ak.sum(keep)) < len(a) - 5
    for backend in ("numba", "jax"):
        value = run_once(cols, plan, Request(theta, widths, order=0), backend=backend).derived.value
        np.testing.assert_allclose(float(value["selected_sumw"]), w.sum(), rtol=1e-12)
        np.testing.assert_allclose(power_sums(value["observables"]["ht"]["moments"]),
                                   [w.sum(), w @ ht, w @ ht**2], rtol=1e-12)


def test_lowering_and_chain(rel):
    plan, theta, widths, _ = pieces(config(FILES["dy"]), FILES["dy"])
    low = cutedges.lower(plan, Request(theta, widths, order=1))
    jc, jf, mc = PARAMS["jc"], PARAMS["jf"], PARAMS["mc"]
    n = len(plan.param_names)
    # four edges, values from the kind's own edges, the point's derivatives
    np.testing.assert_allclose(low.request.theta[n:],
                               [jc * (1 - jf), jc * (1 + jf), mc * (1 - MET_FRAC),
                                mc * (1 + MET_FRAC)], rtol=1e-15)
    names = plan.trainable_names
    d = np.zeros((4, len(names)))
    d[0, names.index("jc")], d[0, names.index("jf")] = 1 - jf, -jc
    d[1, names.index("jc")], d[1, names.index("jf")] = 1 + jf, jc
    d[2, names.index("mc")], d[3, names.index("mc")] = 1 - MET_FRAC, 1 + MET_FRAC
    np.testing.assert_allclose(low.jac, d, rtol=1e-15)
    # jc, jf, mc: read by the derived edges only, no lane of their own; bmin keeps its own
    assert low.plan.trainable == (plan.param_names.index("bmin"),) + tuple(range(n, n + 4))
    assert [names[j] for j in low.kept] == ["bmin"]
    jets = low.plan.sets.sets[0].cuts  # |eta| < 2.4, then pT's two edges
    assert [(c.param, c.greater) for c in jets[1:]] == [(n, True), (n + 1, False)]
    assert [c.param for c in low.plan.event_cuts] == [n + 2, n + 3]
    assert not any(cutedges.derives(c) for s in low.plan.sets.sets for c in s.cuts)
    assert cutedges.lower(plan, Request(theta, widths, order=1)).plan == low.plan


def test_a_width0_cut_with_constant_bounds_drops_objects_at_its_edges(rel):
    cfg = config(FILES["dy"])
    cfg["objects"]["jets"]["cuts"][1] = {"var": "pt", "op": "rel", "center": 50.0, "frac": 0.4,
                                         "width": 0}
    plan = build_plan(config_from_dict(cfg))
    pt = np.array([19.0, 30.0, 30.5, 50.0, 69.5, 70.0, 90.0])
    flat = {"pt": pt, "eta": np.zeros(pt.size)}
    keep = hardcut.survivors(plan, "Jet", flat, pt.size)  # the configured reading
    np.testing.assert_array_equal(keep, (pt > 30.0) & (pt < 70.0))  # c (1 -+ f), open
    # constant edges: no lane; the pass is the window's at them (numba, values and Jacobian)
    n = len(plan.param_names)
    theta = np.array([PARAMS[k] for k in plan.param_names])
    widths = np.asarray(initial_widths(config_from_dict(cfg)), np.float64)
    assert not set(cutedges.lower(plan, Request(theta, widths)).plan.trainable) & {n, n + 1}
    cfg["objects"]["jets"]["cuts"][1] = {"var": "pt", "op": "window", "lo": 30.0, "hi": 70.0,
                                         "width": 0}
    window = build_plan(config_from_dict(cfg))
    cols = read_columns(FILES["dy"], plan)
    a, b = (run_once(cols, p, Request(theta, widths), backend="numba").derived
            for p in (plan, window))
    same(b.value, a.value, "value")
    same(b.jac, a.jac, "jacobian")


@pytest.mark.slow  # four passes over two files, one JAX compilation
@pytest.mark.parametrize("bjets", [False, True], ids=["one set", "jets and b-jets"])
def test_reverse_mode_objective_equals_forward_mode(rel, monkeypatch, bjets):
    """A significance (DY signal, ttbar background): the numba reverse pass (one pass: the
    yields' gradients; two: values, then the pullback), chained on the host, equals
    forward mode's gradient (1e-10), on one set and on two with joint counts."""
    from analysis.driver.runner import Evaluator
    from analysis.optimize.objectives import Objective, objective_from_states
    from analysis.optimize.reverse import reverse_objective
    from analysis.pipeline.backends.numba import fastreverse

    cfg = config(FILES["dy"], bjets=bjets)
    cfg["datasets"] = {"dy": {"files": [str(FILES["dy"])], "weight": "genWeight",
                              "role": "signal"},
                       "tt": {"files": [str(FILES["ttbar"])], "weight": "genWeight",
                              "role": "background"}}
    cfg["objective"] = {"terms": [{"type": "significance"}]}
    calls: list = []
    shares = fastreverse._shares
    monkeypatch.setattr(fastreverse, "_shares", lambda *a, **k: calls.append(1) or shares(*a, **k))
    config_ = config_from_dict(cfg)
    with Evaluator(config_) as ev:
        fwd = objective_from_states(Objective(config_, ev.plan), ev.run(order=1), order=1)
        one = reverse_objective(Objective(config_, ev.plan), ev, None, None)
        two_obj = Objective(config_, ev.plan)
        two_obj._one_pass = False  # values, then the pullback pass
        two = reverse_objective(two_obj, ev, None, None)
    assert len(calls) >= 4  # both datasets, both ways, on numba
    grad = np.asarray(fwd["grad"])
    assert np.abs(grad).max() > 0
    for res in (one, two):
        np.testing.assert_allclose(res["objective"], fwd["objective"], rtol=1e-10)
        np.testing.assert_allclose(res["grad"], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())
