"""Reverse mode on numba for payloads that read histograms (analysis.pipeline.backends.numba._fastrevhist):
histograms of object fields (two jet sets, muons, ``abs``, a b-tag) and branches (an event score,
MET), hard and soft bins, trainable edges, likelihood templates in channel regions with a
shift and a weight variation, learned scores beside the sets, on real files (ttbar 2015
and NanoAOD v12). The numba pullback equals the JAX sweep
(analysis.pipeline.backends.jax.reverse, the reference; 1e-10) and central finite
differences of the JAX kernel's pulled sum; its value states equal the JAX sweep's."""

from __future__ import annotations

from collections import Counter
from typing import Any

import jax
import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.pipeline import scorecols
from analysis.pipeline.backend import run_once
from analysis.pipeline.backends.jax import reverse as jax_reverse
from analysis.pipeline.backends.numba import fastreverse
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.request import Request
from analysis.pipeline.results import state_names
from analysis.stats.merge import is_state
from analysis.stats.pullback import pulled_sum
from tests.chunked_helpers import read_columns
from tests.conftest import SHARED_DATA, numba_refusal
from tests.pipeline.backends.numba.test_fastreverse_sets import FILES, sets_config, zero_filled
from tests.pipeline.backends.numba.test_fastreverse_sets import _setup as setup

SOFT = (0.2, 10.0)  # the event score's and the b-jets' soft bins' widths


def hists_config(*, btag: str = "btagDeepFlavB", likelihood: bool = True) -> dict:
    """:func:`tests.pipeline.backends.numba.test_fastreverse_sets.sets_config` (a jet score
    in the jets' cuts, an event score in the selection, b-jets, muons, a joint count)
    with histograms of every kind the numba reverse pass pulls back and, with
    ``likelihood``, a likelihood whose channels read them in two regions, with a shift
    of the jets' pT and a weight variation."""
    cfg = sets_config(btag=btag)
    cfg["datasets"]["tt"]["role"] = "signal"
    cfg["datasets"]["bg"] = {**cfg["datasets"]["tt"], "role": "background"}
    cfg["histograms"] = [
        {"name": "jpt", "x": "jets.pt", "edges": [20.0, 40.0, 60.0, 100.0, 200.0, 400.0]},
        {"name": "bpt", "x": "bjets.pt", "bins": {"n": 5, "lo": 20.0, "hi": 220.0},
         "width": SOFT[1], "trainable_edges": True},
        {"name": "tag", "x": f"jets.{btag}", "bins": {"n": 4, "lo": 0.0, "hi": 1.0},
         "width": 0.05},
        {"name": "evs", "x": "score.ev", "bins": {"n": 6, "lo": -1.5, "hi": 1.5},
         "width": SOFT[0], "trainable_edges": True},
        {"name": "aeta", "x": "abs(jets.eta)", "edges": [0.0, 0.8, 1.6, 2.4], "width": 0.1,
         "trainable_edges": True},
        {"name": "met", "x": "MET.pt", "edges": [0.0, 30.0, 60.0, 100.0, 200.0]},
        {"name": "mupt", "x": "muons.pt", "bins": {"n": 3, "lo": 0.0, "hi": 60.0}},
    ]
    if likelihood:
        cfg["systematics"] = [
            {"name": "jes", "type": "shift", "field": "Jet.pt", "up": 1.03, "down": 0.97},
            {"name": "scale", "type": "weight", "up": "LHEScaleWeight[8]",
             "down": "LHEScaleWeight[0] * 2"},
            {"name": "norm", "type": "lnN", "datasets": ["bg"], "kappa": 1.2}]
        cfg["likelihood"] = {"channels": {
            "sr": {"histogram": "evs"},
            "b2": {"histogram": "bpt", "selection": [
                {"count": "bjets", "op": ">=", "value": 2},
                {"var": "MET.pt", "op": "<", "value": 80.0, "width": 5.0}]},
            "tags": {"histogram": "tag"}}}
        cfg["objective"] = {"terms": [{"type": "discovery_significance"}]}
    return cfg



def hists_payload(cols, plan, theta, widths, *, seed: int = 0, only: str | None = None) -> list:
    """A payload with random cotangents (scaled by each state's size) for every state
    (``only``: the histogram states whose name starts with it, the rest None); moments
    about a point near the means."""
    rng = np.random.default_rng(seed)
    names = state_paths(plan)
    # the numba pass's value states (the JAX sweep's: tested below), no JAX compile
    value = run_once(cols, plan, Request(theta, widths, order=0, pullback=[None] * len(names)),
                     backend="numba").derived.value
    out: list = []
    for n, leaf in zip(names, jax.tree_util.tree_leaves(value, is_leaf=is_state), strict=True):
        if only is not None and not n.startswith(only):
            out.append(None)
        elif hasattr(leaf, "dmean_x"):
            scale = np.array([1.0, 40.0, 1.0, 1600.0, 1.0, 40.0])
            out.append(((np.float64(40.0), np.float64(1.0)),
                        tuple(np.float64(v) for v in rng.normal(size=6) / scale)))
        elif hasattr(leaf, "dmean"):
            out.append((np.float64(40.0), tuple(np.float64(rng.normal() / 40.0**r)
                                                for r in range(5))))
        else:
            a = np.asarray(leaf, np.float64)
            out.append((None, rng.normal(size=a.shape) / max(1.0, float(np.abs(a).max()))))
    return out


def state_paths(plan) -> list[str]:
    """The dotted names of the JAX sweep's state leaves (states as leaves)."""
    run = scorecols.bare(plan)
    names = [f"histograms.{s.key}.{a}" for s in sorted(
        (s for s in run.hists if s.group == "histograms"), key=lambda s: s.key)
        for a in ("sumw_flow", "sumw2_flow")]
    names += state_names(run)  # the observables, the yields
    names += [f"templates.{s.key}.{a}" for s in sorted(
        (s for s in run.hists if s.group == "templates"), key=lambda s: s.key)
        for a in ("sumw_flow", "sumw2_flow")]
    return names


def same_as_jax(cols, plan, theta, widths, payload, *, fill: bool = True) -> tuple:
    """The numba pullback's and the JAX sweep's ``(DatasetState, DatasetState)``, their
    gradients equal (1e-10 of the largest entry); the JAX sweep on ``payload``
    :func:`~tests.pipeline.backends.numba.test_fastreverse_sets.zero_filled` from
    :func:`hists_payload` with ``fill`` (one compile for payloads of one chunk shape),
    else on ``payload`` itself (a smaller program: for chunks of shapes of their own);
    the numba pass on ``payload`` (it skips what is not read)."""
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    if fill and any(e is None for e in payload):
        payload = zero_filled(payload, hists_payload(cols, plan, theta, widths))
    ref = jax_reverse.chunk_pullback(cols, plan, theta, widths, payload)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * np.abs(r).max(initial=0.0))
    return got, ref


def check(cols, plan, theta, widths, payload, fd: tuple[str, ...] = ()) -> np.ndarray:
    """The numba pullback against the JAX sweep (1e-10: gradient and value states) and
    central differences of the JAX kernel's pulled sum along a random direction and
    the parameters ``fd``; returns the gradient."""
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    got, ref = same_as_jax(cols, plan, theta, widths, payload)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    assert np.abs(r).max() > 1e-6
    a = jax.tree_util.tree_leaves(got.derived.value)
    b = jax.tree_util.tree_leaves(ref.derived.value)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)

    def loss(step: np.ndarray) -> float:
        st = jax_reverse.chunk_pullback(cols, plan, theta + step, widths, payload)
        return float(pulled_sum(st.derived.value, payload))

    differences_agree(loss, g, plan, theta, along=fd)
    return g


def differences_agree(loss, g: np.ndarray, plan, theta: np.ndarray, *,
                      along: tuple[str, ...] = (), seed: int = 4) -> None:
    """``g @ d`` equals the central difference of ``loss`` (a function of the step added to
    ``theta``; step 1e-5, 1e-6 relative) along a random direction (``seed``) and along each
    trainable parameter named in ``along``."""
    names = plan.trainable_names
    idx = np.asarray(plan.trainable)
    v = np.random.default_rng(seed).normal(size=len(names))
    dirs = [v / np.linalg.norm(v)]
    for n in along:
        e = np.zeros(len(names))
        e[names.index(n)] = 1.0
        dirs.append(e)
    for d in dirs:
        h = 1e-5
        step = np.zeros_like(theta)
        step[idx] = h * d
        want = (loss(step) - loss(-step)) / (2 * h)
        np.testing.assert_allclose(g @ d, want, rtol=1e-6, atol=1e-8 * np.abs(g).max())


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if n.startswith("nanoAOD_2015") else n for n in FILES])
def test_histograms_and_templates_equal_the_jax_sweep(name: str) -> None:
    """Every histogram and template read (fields of both jet sets and the muons, a
    b-tag, ``abs``, an event score and MET; hard and soft bins, trainable
    edges; templates in two regions with a shift of the jets' pT and a weight
    variation), with the yields and observables: the numba pullback equals the JAX
    sweep and central differences, each selection walked once."""
    plan, theta, widths, cols = setup(hists_config(btag=FILES[name]), name)
    payload = hists_payload(cols, plan, theta, widths)
    g = check(cols, plan, theta, widths, payload,
              fd=("bpt.edges[2]",))
    names = plan.trainable_names
    for n in ("bpt.edges[1]", "evs.edges[5]", "n_min", "eta_max", "mu_min"):
        assert abs(g[names.index(n)]) > 0, n
    trace: Counter = Counter()
    fastreverse.chunk_pullback(cols, plan, theta, widths, payload, trace=trace)
    sides = [None] + [(s.key, s.factor) for s in plan.shifts]  # jes up and down
    assert trace == Counter({(side, r): 1 for side in sides for r in (0, 1)})


@pytest.mark.parametrize("only", ["histograms.evs", "templates.b2", "templates.sr:jes:up",
                                  "templates.tags:scale:down"])
def test_each_histogram_alone(only: str) -> None:
    """One histogram read at a time (an event score's with trainable edges; a template
    in a channel region, of a shift side, of a weight variation: each with the others of
    its name), the yields and observables not: the numba pullback equals the JAX sweep
    (a share that cancels elsewhere cannot hide)."""
    plan, theta, widths, cols = setup(hists_config(), "nano_tt_v12.root")
    payload = hists_payload(cols, plan, theta, widths, seed=1, only=only)
    assert any(e is not None for e in payload)
    _, ref = same_as_jax(cols, plan, theta, widths, payload)
    assert np.abs(np.asarray(ref.derived.grad)).max() > 1e-6


#: Chunks of 0, 1 and 3 events of the v12 file for :func:`threads_and_tiny_chunks`. The
#: 1-event chunk is event 7, the one of events 5, 6, 7 with the most jets (10): it pads
#: to the 3-event chunk's static shapes (the JAX sweep's ``Shapes``: the per-event object
#: axis and, for leading objects, the candidates' counts, at the widths and at width 0),
#: so the two share the JAX sweep's compiles. Event 3 (5 jets) was one compile more for
#: event sums and two for leading objects (their counts differ at width 0), ~40 s CPU
#: each, cold, on 2 busy cores.
TINY_SPANS = ((0, 0), (7, 8), (5, 8))


def threads_and_tiny_chunks(cols, plan, theta, widths, payload, *, spans) -> Any:
    """The numba pullback on 1 and 3 threads gives the same bits (returned: the 1-thread
    state), and on the events ``spans`` (``(start, stop)``), at ``widths`` and at width
    0, it equals the JAX sweep."""
    from tests.chunked_helpers import slice_columns

    one, three = (fastreverse.chunk_pullback(cols, plan, theta, widths, payload, threads=t)
                  for t in (1, 3))
    for x, y in zip(jax.tree_util.tree_leaves((one.derived.value, one.derived.grad)),
                    jax.tree_util.tree_leaves((three.derived.value, three.derived.grad)),
                    strict=True):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    for w in (widths, np.zeros_like(widths)):
        for a, b in spans:
            # each span its own shape: nothing to share, the smaller sweep
            same_as_jax(slice_columns(cols, a, b), plan, theta, w, payload, fill=False)
    return one


def test_hard_widths_tiny_chunks_and_threads(monkeypatch) -> None:
    """Every width 0 (hard cuts and bins: the trainable edges' and the values' cotangents
    vanish) and chunks of 0, 1 and 200 events: the numba pullback equals the JAX sweep;
    the entries' kernel in blocks of 16 events gives the same bits on 1 and 3 threads."""
    from analysis.pipeline.backends.numba import _fastrevhist

    plan, theta, widths, cols = setup(hists_config(), "nano_tt_v12.root")
    payload = hists_payload(cols, plan, theta, widths, seed=2)
    monkeypatch.setattr(_fastrevhist, "BLOCK", 16)
    threads_and_tiny_chunks(cols, plan, theta, widths, payload, spans=((0, 0), (3, 4), (0, 200)))


def learned_binning(chunksize: int = 70) -> dict:
    """``configs/learned_binning.yaml`` (an event score's soft histogram with trainable
    edges as the one channel's template, a MET shift, lnN normalisations, the
    discovery significance) on the shared ttbar and DY files, in chunks."""
    import yaml

    from tests.conftest import REPO

    with open(REPO / "configs" / "learned_binning.yaml") as f:
        cfg = yaml.safe_load(f)
    cfg["datasets"] = {
        "ttbar": {"files": [str(SHARED_DATA / "nano_tt_v12.root")], "weight": "genWeight",
                  "role": "signal", "xsec": 831.76},
        "dy": {"files": [str(SHARED_DATA / "nano_dy.root")], "weight": "genWeight",
               "role": "background", "xsec": 6077.0}}
    cfg["executor"] = {"type": "iterative", "chunksize": chunksize}
    for key in ("optimizer", "output"):
        cfg.pop(key)
    return cfg


@pytest.mark.slow  # ~25 s under load: two evaluators, the JAX sweep's compile
def test_learned_binning_runs_the_numba_pullback_under_auto(monkeypatch) -> None:
    """A learned score and a binned likelihood with many parameters (reverse mode):
    under ``auto`` the pullback pass runs on numba, and the objective's gradient equals
    the JAX sweep's (1e-10) over two datasets in chunks."""
    from analysis.driver.runner import Evaluator
    from analysis.optimize.objectives import Objective
    from analysis.optimize.reverse import reverse_objective
    from analysis.pipeline.backend import Backend
    from tests.pipeline.backends.numba.test_fastreverse import _count_numba

    cfg = config_from_dict(learned_binning())
    with Evaluator(cfg) as ev:
        assert len(ev.plan.trainable) > 100
        calls = _count_numba(monkeypatch)
        got = reverse_objective(Objective(cfg, ev.plan), ev, None, None)
        assert calls  # the numba pass ran
        n = len(calls)
    # the values pass on numba both times (the JAX kernel's: test_score_shifts)
    with Evaluator(cfg, backend=Backend(numba_reverse=False)) as ref:
        want = reverse_objective(Objective(cfg, ref.plan), ref, None, None)
        assert len(calls) == n
    grad = want["grad"]
    names = ev.plan.trainable_names
    assert all(abs(grad[names.index(p)]) > 0 for p in ("score_hist.edges[2]", "jet_pt_min"))
    np.testing.assert_allclose(got["objective"], want["objective"], rtol=1e-10)
    np.testing.assert_allclose(got["grad"], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())


def test_a_shift_of_a_scores_input_moves_the_score_on_both_backends() -> None:
    """``learned_binning.yaml``'s MET scale shift on its MET score: the numba states
    pass's shifted templates equal the JAX kernel's (1e-10)."""
    from analysis.pipeline.backend import Backend, chunk_state

    config = config_from_dict(learned_binning())
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names], np.float64)
    widths = np.array(initial_widths(config), np.float64)
    cols = read_columns(SHARED_DATA / "nano_tt_v12.root", plan)
    got, ref = (chunk_state(cols, plan, theta, widths, order=0, backend=Backend(b))
                .derived.value["templates"] for b in ("numba", "jax"))
    assert not np.allclose(np.asarray(ref["sr:met_scale:up"].sumw_flow),
                           np.asarray(ref["sr"].sumw_flow), rtol=1e-6)  # the score moves
    for key, h in ref.items():
        np.testing.assert_allclose(np.asarray(got[key].sumw_flow), np.asarray(h.sumw_flow),
                                   rtol=1e-10, err_msg=key)


@pytest.mark.slow  # ~15 s: the JAX sweep's compile
def test_a_cut_with_derived_edges_beside_histograms() -> None:
    """The jets' pT window about a trainable centre and half-width (``around``: derived
    edges, pseudo-parameters chained once per pass) with every histogram read: the numba
    pullback equals the JAX backend's (1e-10), the half-width's entry too."""
    cfg = hists_config()
    cfg["parameters"]["half"] = {"init": 80.0, "bounds": [10.0, 200.0]}
    cfg["objects"]["jets"]["cuts"][0] = {"var": "pt", "op": "around", "center_param": "jet_pt_min",
                                         "half_param": "half", "width": 5.0}
    plan, theta, widths, cols = setup(cfg, "nano_tt_v12.root")
    theta[plan.param_names.index("jet_pt_min")] = 100.0
    payload = hists_payload(cols, plan, theta, widths, seed=3)
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    got, ref = (np.asarray(run_once(cols, plan, Request(theta, widths, order=0, pullback=payload),
                                    backend=b).derived.grad) for b in ("numba", "jax"))
    assert abs(ref[plan.trainable_names.index("half")]) > 0
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
