"""Histograms of candidate tuples on numba (analysis.pipeline.backends.numba._histmulti):
``mass(jets[0] + jets[1])`` (hard bins, also a likelihood template in a channel region with
a shift of the jets' pT and a weight variation), ``deltaR(bjets[0], bjets[1])`` (soft bins,
trainable edges) and ``pt(jets[0] + jets[1] + jets[2])`` (soft bins), beside a leading
object's histogram of the same depth and indexed observables, on real files (ttbar 2015
and NanoAOD v12). The states and Jacobians equal the JAX kernel's (1e-12,
analysis.pipeline.backends.jax.histkernel over analysis.select.objects.leading, itself
checked against enumeration); the numba pullback equals the JAX sweep (1e-10) and
central differences of the JAX kernel's pulled sum."""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.numba import _revhistlead, _revobs, fastreverse
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.select.exprs import parse
from tests.chunked_helpers import NANOAOD_WARNINGS, read_columns, slice_columns
from tests.conftest import SHARED_DATA, numba_refusal
from tests.pipeline.backends.numba.test_fasthist import assert_trees_close
from tests.pipeline.backends.numba.test_fastkernel import DATASETS, sets_config
from tests.pipeline.backends.numba.test_fastreverse_hists import (
    check,
    hists_payload,
    same_as_jax,
    state_paths,
    threads_and_tiny_chunks,
)
from tests.pipeline.backends.numba.test_fastreverse_sets import auto_equals_jax_sweep

pytestmark = NANOAOD_WARNINGS
FILES = ("nano_tt_v12.root", "nanoAOD_2015_CMS_Open_Data_ttbar.root")
MULTI = [
    {"name": "mjj", "x": "mass(jets[0] + jets[1])",
     "edges": [0.0, 50.0, 100.0, 200.0, 400.0, 800.0]},
    {"name": "drbb", "x": "deltaR(bjets[0], bjets[1])", "bins": {"n": 4, "lo": 0.0, "hi": 4.0},
     "width": 0.2, "trainable_edges": True},
    {"name": "pt3", "x": "pt(jets[0] + jets[1] + jets[2])",
     "bins": {"n": 5, "lo": 0.0, "hi": 300.0}, "width": 8.0},
    {"name": "j1", "x": "jets[1].pt", "edges": [20.0, 50.0, 100.0, 200.0]},
]


def multi_config(*, width: float = 1.0, likelihood: bool = True) -> dict:
    """The numba kernel tests' sets (jets, b-jets from jets, muons, joint counts, a MET
    cut; :func:`tests.pipeline.backends.numba.test_fastkernel.sets_config`) with the
    histograms :data:`MULTI`, an indexed observable of the dijet mass and, with
    ``likelihood``, the dijet mass as a channel's template in a region (two b-jets) with
    a shift of the jets' pT and a weight variation."""
    cfg = sets_config(width=width)
    cfg["datasets"] = {"sig": {**DATASETS["sig"], "role": "signal"},
                       "bkg": {**DATASETS["sig"], "role": "background"}}
    cfg["objects"]["muons"]["cuts"][0]["param"] = "mu"
    cfg["selection"] = [c for c in cfg["selection"] if c.get("count") != "muons"]
    cfg["observables"] = [{"name": "m", "x": "mass(jets[0] + jets[1])", "stats": ["mean"]},
                          {"name": "pt", "x": "jets.pt", "stats": ["mean"]}]
    cfg["histograms"] = copy.deepcopy(MULTI)
    if likelihood:
        cfg["systematics"] = [
            {"name": "jes", "type": "shift", "field": "Jet.pt", "up": 1.03, "down": 0.97},
            {"name": "scale", "type": "weight", "up": "LHEScaleWeight[8]",
             "down": "LHEScaleWeight[0] * 2"}]
        cfg["likelihood"] = {"channels": {"mass": {"histogram": "mjj", "selection": [
            {"count": "bjets", "op": ">=", "value": 2}]}}}
    return cfg


def setup(name: str = FILES[0], *, make=None, **kw):
    """``(plan, theta, widths, columns)`` of ``make(**kw)`` (:func:`multi_config` by
    default) on the shared file ``name``, the jet count threshold between two counts."""
    cfg = (make or multi_config)(**kw)
    if not name.startswith("nano_tt"):  # the 2015 file: no LHE weights, another b-tag
        cfg.pop("systematics", None)
        cfg["objects"]["bjets"]["cuts"][0]["var"] = "btagCSVV2"
    config = config_from_dict(cfg)
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    theta[plan.param_names.index("n")] = 2.4
    widths = np.array(initial_widths(config), np.float64)
    return plan, theta, widths, read_columns(SHARED_DATA / name, plan)


# the 2015 file slow: the v12 file's case makes every assertion against the same JAX
# kernel through the same walks (as test_fasthist_multiset's)
@pytest.mark.parametrize("name", [FILES[0], pytest.param(FILES[1], marks=pytest.mark.slow)])
def test_states_and_jacobians_equal_the_jax_kernel(name: str) -> None:
    """Every histogram and template (the dijet mass in a channel region, its shift
    sides and weight variations; soft bins; trainable edges) and the observables: the
    numba states and Jacobians equal the JAX kernel's (1e-12)."""
    plan, theta, widths, cols = setup(name)
    assert numba_refusal(plan, 1, theta) is None
    fast = chunk_state(cols, plan, theta, widths, order=1, backend="numba")
    ref = chunk_state(cols, plan, theta, widths, order=1, backend="jax")
    assert_trees_close(ref.derived.value, fast.derived.value, "value")
    assert_trees_close(ref.derived.jac, fast.derived.jac, "jacobian")
    assert float(np.abs(fast.derived.jac["histograms"]["drbb"].sumw_flow).max()) > 0


def test_pullback_equals_the_jax_sweep_and_central_differences() -> None:
    """Every histogram, template and observable read: the numba pullback equals the JAX
    sweep (gradient and value states, 1e-10) and central differences along a random
    direction and a trainable edge of ``deltaR(bjets[0], bjets[1])``; each selection
    walked once by the pullback's walks."""
    plan, theta, widths, cols = setup()
    payload = hists_payload(cols, plan, theta, widths)
    g = check(cols, plan, theta, widths, payload, fd=("drbb.edges[2]",))
    names = plan.trainable_names
    for n in ("drbb.edges[1]", "n", "b", "pt_min"):
        assert abs(g[names.index(n)]) > 0, n
    trace: Counter = Counter()
    fastreverse.chunk_pullback(cols, plan, theta, widths, payload, trace=trace)
    # the selection twice (the value walk: indexed observables), the template's region
    # once per shift side
    want = Counter({(None, 0): 2, (None, 1): 1})
    assert trace == want + Counter({((s.key, s.factor), 1): 1 for s in plan.shifts})


@pytest.mark.parametrize("only", ["templates.mass", "histograms.mjj", "histograms.pt3"])
def test_each_histogram_of_tuples_alone(only: str) -> None:
    """One histogram of candidate tuples read at a time (nothing else): the numba pullback
    equals the JAX sweep (a share that cancels elsewhere cannot hide)."""
    plan, theta, widths, cols = setup()
    payload = hists_payload(cols, plan, theta, widths, seed=1, only=only)
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    _, ref = same_as_jax(cols, plan, theta, widths, payload)
    assert np.abs(np.asarray(ref.derived.grad)).max() > 1e-6


@pytest.mark.slow  # JAX sweeps of four chunkings (the default suite: states = the JAX kernel,
# the pullback = the JAX sweep and central differences)
def test_hard_widths_tiny_chunks_and_threads() -> None:
    """Every width 0 and chunks of 0, 1 and 3 events: the states and the pullback equal
    the JAX kernel's and sweep's; 1 and 3 threads give the same bits (states and
    pullback)."""
    plan, theta, widths, cols = setup(likelihood=False)
    payload = hists_payload(cols, plan, theta, widths, seed=2)
    threads_and_tiny_chunks(cols, plan, theta, widths, payload,
                            spans=((0, 0), (3, 4), (5, 8)))
    one, three = (chunk_state(cols, plan, theta, widths, order=1, backend="numba", threads=t)
                  for t in (1, 3))
    for group in ("value", "jac"):
        for key in ("mjj", "drbb", "pt3"):
            a, b = (getattr(s.derived, group)["histograms"][key] for s in (one, three))
            assert np.array_equal(a.sumw_flow, b.sumw_flow), (group, key)
            assert np.array_equal(a.sumw2_flow, b.sumw2_flow), (group, key)
    for w in (widths, np.zeros_like(widths)):
        for a, b in ((0, 0), (3, 4), (5, 8)):
            part = slice_columns(cols, a, b)
            fast = chunk_state(part, plan, theta, w, order=1, backend="numba")
            ref = chunk_state(part, plan, theta, w, order=1, backend="jax")
            assert_trees_close(ref.derived.value, fast.derived.value, f"value {a}:{b}")
            assert_trees_close(ref.derived.jac, fast.derived.jac, f"jacobian {a}:{b}")


def test_one_candidates_walk_per_set_and_depth_in_a_pullback(monkeypatch) -> None:
    """A pullback that reads the dijet mass's moments and its histogram, and a leading
    object's histogram of the same depth: the histograms take the candidates that the
    observables' reverse mode walked (one walk per ``(set, depth)`` of the selection),
    and the observables' and histograms' cotangents of them are summed first (one
    vector-Jacobian product per ``(set, depth)``)."""
    plan, theta, widths, cols = setup(likelihood=False)
    payload = hists_payload(cols, plan, theta, widths, seed=3)
    walked: list = []
    real = _revhistlead._candidates
    monkeypatch.setattr(_revhistlead, "_candidates",
                        lambda *a, **k: walked.append(a[0]) or real(*a, **k))
    pulled: list = []  # each vector-Jacobian product's candidates
    vjp = _revobs.cands_vjp
    monkeypatch.setattr(_revobs, "cands_vjp",
                        lambda cand, *a, **k: pulled.append(cand) or vjp(cand, *a, **k))
    same_as_jax(cols, plan, theta, widths, payload)
    assert walked == [("bjets", 1), ("jets", 2)]  # (jets, 1): the observables' walk's
    # (jets, 1) (the observable, the histograms mjj and j1), (bjets, 1), (jets, 2)
    assert len(pulled) == len({id(c) for c in pulled}) == 3


def test_rules_serve_one_indexed_set_and_refuse_several() -> None:
    """Histograms of candidate tuples of one indexed set are served in states and
    pullback passes; one over three indexed sets is refused, named, in both (two sets:
    test_fasthist_multiset, test_fasthist_samecoll); one whose values read a learned
    score's column is refused in the pullback (named)."""
    for x, served in (("mass(jets[0] + jets[1])", True), ("deltaR(jets[0], jets[2])", True),
                      ("mt(muons[0], MET)", True), ("pt(jets[0] + bjets[0] + muons[0])",
                                                    False)):
        cfg = multi_config(likelihood=False)
        cfg["histograms"] = [{"name": "other", "x": x, "edges": [0.0, 100.0, 300.0]}]
        plan = build_plan(config_from_dict(cfg))
        theta = np.zeros(len(plan.param_names))
        for why in (numba_refusal(plan, 1, theta),
                    numba_refusal(plan, 0, theta, pullback=[None] * len(state_paths(plan)))):
            assert (why is None) == served, why
            assert served or "'other'" in why and "indexes 3 sets" in why, why
    # a tuple's value that is a learned score's column (an event-level score ``score.pt``
    # read as the per-event object ``score``): its states served, its pullback refused
    spec = dataclasses.replace(plan.hists[0], node=parse("mt(jets[0], score)"))
    other = dataclasses.replace(plan, hists=(spec,))
    assert numba_refusal(other, 0, theta) is None
    why = numba_refusal(other, 0, theta, pullback=[None] * len(state_paths(plan)))
    assert "'other'" in why and "reads a learned score's column" in why, why


@pytest.mark.slow  # two evaluators, the JAX sweep's compile
def test_auto_runs_a_dijet_mass_template_on_numba(monkeypatch) -> None:
    """``configs/ht_likelihood_v12.yaml`` with the dijet mass ``mass(jets[0] + jets[1])``
    as its channel's template (a shift of the jets' pT, lnN normalisations): under
    ``auto`` the states and the pullback run on numba (no fallback line), the objective
    and gradient those of the JAX sweep (1e-10)."""
    import yaml

    from tests.conftest import REPO

    path = REPO / "configs" / "ht_likelihood_v12.yaml"
    data = yaml.safe_load(path.read_text())
    data.pop("output")
    data["histograms"] = [{"name": "mjj", "x": "mass(jets[0] + jets[1])",
                           "edges": [0, 100, 200, 2000]}]  # DY in every bin
    data["likelihood"]["channels"] = {"sr": {"histogram": "mjj"}}
    states = auto_equals_jax_sweep(data, monkeypatch, path=path, cache=False,
                                   scores_on_numba=True, moved=None, states=True)
    assert float(states["ttbar_v12"].derived.value["templates"]["sr"].sumw_flow.sum()) > 0
