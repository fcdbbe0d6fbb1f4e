"""Reverse mode on numba for payloads that read histograms of event sums
(analysis.pipeline.backends.numba._revhistsums): HT ``sum(jets.pt)`` (hard bins, also a
likelihood template in a channel region with a shift of the jets' pT and a weight
variation), ``sum(bjets.pt)`` (soft bins, trainable edges, a set with its parent) and
``count(bjets)``, beside the histograms of fields and branches, the yields, the
observables and a trainable count threshold, on real files (ttbar 2015 and NanoAOD v12).
The numba pullback equals the JAX sweep (1e-10: gradient and value states) and central
differences of the JAX kernel's pulled sum."""

from __future__ import annotations

from dataclasses import replace

import jax
import numpy as np
import pytest

from analysis.pipeline.backend import run_once
from analysis.pipeline.backends.jax import reverse as jax_reverse
from analysis.pipeline.backends.numba import _fastsens, _revhistsums, fastreverse
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_esum_fill
from analysis.pipeline.request import Request
from analysis.stats.pullback import pulled_sum
from tests.chunked_helpers import slice_columns
from tests.conftest import numba_refusal
from tests.pipeline.backends.numba.test_fastreverse_hists import (
    TINY_SPANS,
    differences_agree,
    hists_config,
    hists_payload,
    same_as_jax,
    setup,
    state_paths,
    threads_and_tiny_chunks,
)
from tests.pipeline.backends.numba.test_fastreverse_sets import FILES


def sums_config(*, btag: str = "btagDeepFlavB") -> dict:
    """:func:`tests.pipeline.backends.numba.test_fastreverse_hists.hists_config` with
    histograms of event sums, HT a channel's template in a region."""
    cfg = hists_config(btag=btag)
    cfg["histograms"] += [
        {"name": "ht", "x": "sum(jets.pt)", "edges": [100.0, 200.0, 300.0, 500.0, 800.0]},
        {"name": "htb", "x": "sum(bjets.pt)", "bins": {"n": 4, "lo": 0.0, "hi": 400.0},
         "width": 20.0, "trainable_edges": True},
        {"name": "nb", "x": "count(bjets)", "edges": [0.5, 1.5, 2.5, 3.5]},
    ]
    cfg["likelihood"]["channels"]["htc"] = {"histogram": "ht", "selection": [
        {"count": "bjets", "op": ">=", "value": 2}]}
    return cfg


def values_equal(got, ref) -> None:
    """The value states equal (1e-10; soft bins' empty bins: 1e-12 of the largest bin,
    where the JAX kernel's rounding leaves ~1e-17 relative)."""
    for x, y in zip(jax.tree_util.tree_leaves(got.derived.value),
                    jax.tree_util.tree_leaves(ref.derived.value), strict=True):
        y = np.asarray(y)
        np.testing.assert_allclose(np.asarray(x), y, rtol=1e-10,
                                   atol=1e-12 * max(1.0, float(np.abs(y).max(initial=0.0))))


# slow on every file (v12: ~50-150 s of JAX sweep compiles on 2 cores); the default suite
# keeps numba = JAX sweep on each template alone and on hard widths and tiny chunks below
@pytest.mark.slow
@pytest.mark.parametrize("name", list(FILES))
def test_event_sum_histograms_equal_the_jax_sweep(name: str) -> None:
    """Every histogram and template read, those of event sums among them: the numba
    pullback equals the JAX sweep (gradient, value states) and central differences
    along a random direction and a trainable edge of ``sum(bjets.pt)``."""
    plan, theta, widths, cols = setup(sums_config(btag=FILES[name]), name)
    payload = hists_payload(cols, plan, theta, widths)
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    got, ref = same_as_jax(cols, plan, theta, widths, payload)
    values_equal(got, ref)
    g = np.asarray(got.derived.grad)
    names = plan.trainable_names
    for n in ("htb.edges[1]", "htb.edges[3]", "n_min", "b_min"):
        assert abs(g[names.index(n)]) > 0, n

    def loss(step: np.ndarray) -> float:
        st = jax_reverse.chunk_pullback(cols, plan, theta + step, widths, payload)
        return float(pulled_sum(st.derived.value, payload))

    differences_agree(loss, g, plan, theta, along=("htb.edges[2]",))


def test_the_template_alone_against_central_differences() -> None:
    """The HT template read alone (in a channel region: with its shift sides, weight
    variations, soft bins and trainable edges), nothing else: the numba pullback equals
    central differences of numba value passes (no JAX compile: the default suite's
    independent reference; :func:`test_each_event_sum_histogram_alone` compares it with
    the JAX sweep too, under ``-m slow``)."""
    plan, theta, widths, cols = setup(sums_config(), "nano_tt_v12.root")
    payload = hists_payload(cols, plan, theta, widths, seed=1, only="templates.htc")
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    g = np.asarray(got.derived.grad)
    assert np.abs(g).max() > 1e-6
    numba_differences(cols, plan, theta, widths, payload, g)


@pytest.mark.slow  # a JAX sweep compile each (the default suite: the template's central
# differences above, the JAX sweep at width 0 below)
@pytest.mark.parametrize("only", ["templates.htc", "histograms.ht", "histograms.htb",
                                  "histograms.nb"])
def test_each_event_sum_histogram_alone(only: str) -> None:
    """One event sum's histogram read at a time (a template in a channel region: with
    its shift sides and weight variations), nothing else: the numba pullback equals the
    JAX sweep and central differences of numba value passes."""
    plan, theta, widths, cols = setup(sums_config(), "nano_tt_v12.root")
    payload = hists_payload(cols, plan, theta, widths, seed=1, only=only)
    assert numba_refusal(plan, 0, theta, pullback=payload) is None
    got, ref = same_as_jax(cols, plan, theta, widths, payload)
    assert np.abs(np.asarray(ref.derived.grad)).max() > 1e-6
    numba_differences(cols, plan, theta, widths, payload, np.asarray(got.derived.grad))


def numba_differences(cols, plan, theta, widths, payload, g: np.ndarray, *,
                      along: tuple[str, ...] = ()) -> None:
    """The gradient ``g`` against central differences of the pulled sum of numba value
    passes (no JAX compile: an independent reference cheap enough for the default suite)
    along a random direction, the trainable count threshold ``n_min`` and ``along``."""
    n_states = len(payload)

    def loss(step: np.ndarray) -> float:
        req = Request(theta + step, widths, order=0, pullback=[None] * n_states)
        return float(pulled_sum(run_once(cols, plan, req, backend="numba").derived.value,
                                payload))

    differences_agree(loss, g, plan, theta, along=("n_min", *along), seed=5)


def test_soft_bins_and_trainable_edges_against_central_differences() -> None:
    """``sum(bjets.pt)``'s soft bins with trainable edges read alone: the backward
    sweep's gradient (the pairs' soft-bin weights, the edges' cotangents) equals central
    differences of numba value passes along a random direction, an edge and ``n_min``."""
    plan, theta, widths, cols = setup(sums_config(), "nano_tt_v12.root")
    payload = hists_payload(cols, plan, theta, widths, seed=3, only="histograms.htb")
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    g = np.asarray(got.derived.grad)
    names = plan.trainable_names
    assert abs(g[names.index("htb.edges[2]")]) > 1e-3 * np.abs(g).max()
    numba_differences(cols, plan, theta, widths, payload, g, along=("htb.edges[2]",))


def test_hard_widths_tiny_chunks_and_threads(monkeypatch) -> None:
    """Chunks of 0, 1 and 3 events at the configured widths (soft bins) and at every
    width 0 (hard cuts and bins: a soft histogram's fill is the hard one): the numba
    pullback equals the JAX sweep; 1 and 3 threads (blocks of 16 events) give the same
    bits."""
    plan, theta, widths, cols = setup(sums_config(), "nano_tt_v12.root")
    payload = [e if n.startswith(("templates.htc", "histograms.")) else None
               for n, e in zip(state_paths(plan), hists_payload(cols, plan, theta, widths,
                                                                seed=2), strict=True)]
    monkeypatch.setattr(_revhistsums, "BLOCK", 16)
    threads_and_tiny_chunks(cols, plan, theta, widths, payload,
                            spans=TINY_SPANS)


def test_each_selection_makes_its_tables_once(monkeypatch) -> None:
    """A pullback reading every state (HT and the leading jet's pT as observables too:
    their walks' shares; histograms of fields, event sums and a leading object) over the
    nominal selection, a shift's sides and a channel region: each selection's walk tables
    and pattern probabilities (``_fastsens.inputs``) are made once, for its walk and the
    observables' and histograms' shares alike; the event sums' fills are compiled by the
    kernels' one policy (``vectorised``: the SLP vectorizer on in a reverse-only process)."""
    cfg = sums_config()
    cfg["observables"] += [{"name": "hto", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
                           {"name": "j0", "x": "jets[0].pt", "stats": ["mean"]}]
    cfg["histograms"].append({"name": "j1", "x": "jets[1].pt", "edges": [20.0, 60.0, 300.0]})
    plan, theta, widths, cols = setup(cfg, "nano_tt_v12.root")
    cols = slice_columns(cols, 0, 200)
    payload = hists_payload(cols, plan, theta, widths, seed=6)
    made: list = []  # each call's own probabilities (held: their ids stay unique)
    real = _fastsens.inputs
    monkeypatch.setattr(_fastsens, "inputs", lambda *a: made.append(a[3]) or real(*a))
    kernels: list = []
    vectorised = _numba_dp.vectorised
    monkeypatch.setattr(_numba_dp, "vectorised",
                        lambda k, args: kernels.append(k) or vectorised(k, args))
    fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    assert len(made) >= 3  # the nominal selection, the shift's sides, the region
    assert len({id(q) for q in made}) == len(made)
    assert _numba_esum_fill.fill_bins in kernels


def with_nan(cols, event: int = 2):
    """``cols`` with the b-tag of event ``event``'s second jet NaN (a NaN among its
    probabilities: the reading checks refuse such a branch; a score or a derived field
    can still make one)."""
    counts, flat = cols.collections["Jet"]
    assert counts[event] >= 3
    tag = dict(flat)
    tag["btagDeepFlavB"] = flat["btagDeepFlavB"].copy()
    tag["btagDeepFlavB"][int(np.sum(counts[:event])) + 1] = np.nan
    return replace(cols, collections={**cols.collections, "Jet": (counts, tag)})


def test_a_nan_event_is_swept_and_leaves_the_others(monkeypatch) -> None:
    """A NaN among one event's probabilities: the backward sweep covers it (soft and
    hard bins: its ``dL/df`` NaN, as the JAX sweep's, :func:`test_a_nan_event_as_the_jax_sweep`),
    every other event's outputs the same bits as without the NaN."""
    from analysis.pipeline.backends.numba.kernels._numba_esum_adj import event_sum_vjp

    plan, theta, widths, cols = setup(sums_config(), "nano_tt_v12.root")
    cols = slice_columns(cols, 0, 40)
    payload = hists_payload(cols, plan, theta, widths, seed=4, only="histograms.ht")
    calls: dict = {}
    seen: list = []  # the sweeps' arguments and outputs of one pullback
    run = _revhistsums._run

    def keep(kernel, args, n_ev, threads):
        run(kernel, args, n_ev, threads)
        if kernel is event_sum_vjp:
            seen.append([np.array(a, copy=True) if hasattr(a, "shape") else a for a in args])

    monkeypatch.setattr(_revhistsums, "_run", keep)
    for which, c in (("clean", cols), ("nan", with_nan(cols))):
        fastreverse.chunk_pullback(c, plan, theta, widths, payload)
        calls[which] = seen[:]
        seen.clear()
    assert {a[13] > 0 for a in calls["nan"]} == {False, True}  # hard and soft bins
    for clean, nan in zip(calls["clean"], calls["nan"], strict=True):
        coff, base = clean[0], clean[1]
        mine = np.zeros(base[-1], bool)  # event 2's objects
        for c in range(coff.shape[0]):
            mine[base[c] + coff[c, 2]: base[c] + coff[c, 3]] = True
        assert np.isnan(nan[-2][2]).any() and np.isnan(nan[-3][mine]).any()  # fbar, gp
        np.testing.assert_array_equal(nan[-3][~mine], clean[-3][~mine])
        for i in (-2, -1):  # fbar, ebar: per event
            np.testing.assert_array_equal(np.delete(nan[i], 2, axis=0),
                                          np.delete(clean[i], 2, axis=0))
    monkeypatch.undo()


@pytest.mark.slow  # the JAX sweep's compile (~3 min on 2 busy cores)
def test_a_nan_event_as_the_jax_sweep() -> None:
    """A NaN among one event's probabilities, the event sums' histograms alone (hard and
    soft bins, trainable edges): the numba pullback is NaN where the JAX sweep's is (every
    parameter the event reads) and equal elsewhere; the value states' NaN the same."""
    cfg = sums_config()
    cfg["histograms"] = [h for h in cfg["histograms"] if h["name"] in ("ht", "htb", "nb")]
    cfg["likelihood"]["channels"] = {"htc": cfg["likelihood"]["channels"]["htc"]}
    plan, theta, widths, cols = setup(cfg, "nano_tt_v12.root")
    cols = with_nan(slice_columns(cols, 0, 40))
    payload = hists_payload(cols, plan, theta, widths, seed=4)
    got = fastreverse.chunk_pullback(cols, plan, theta, widths, payload)
    ref = jax_reverse.chunk_pullback(cols, plan, theta, widths, payload)
    g, r = np.asarray(got.derived.grad), np.asarray(ref.derived.grad)
    assert np.isnan(r[plan.trainable_names.index("htb.edges[2]")])
    np.testing.assert_array_equal(np.isnan(g), np.isnan(r))
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10 * np.nanmax(np.abs(r), initial=0))
    for x, y in zip(jax.tree_util.tree_leaves(got.derived.value),
                    jax.tree_util.tree_leaves(ref.derived.value), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)


@pytest.mark.slow  # two evaluators, the JAX sweep's compile
@pytest.mark.parametrize("name", ["ht_likelihood_v12", "agc_likelihood"])
def test_likelihood_configs_run_the_numba_pullback_under_auto(name: str, monkeypatch) -> None:
    """``configs/ht_likelihood_v12.yaml`` (HT's template) and ``configs/agc_likelihood.yaml``
    (the leading jet's pT's template in a region, a shift, weight variations): under
    ``auto`` the pullback runs on numba, the objective and gradient those of the JAX sweep
    (1e-10)."""
    import yaml

    from analysis.config.loader import config_from_dict
    from analysis.driver.runner import Evaluator
    from analysis.optimize.objectives import Objective
    from analysis.optimize.reverse import reverse_objective
    from analysis.pipeline.backend import Backend
    from tests.conftest import REPO
    from tests.pipeline.backends.numba.test_fastreverse import _count_numba

    path = REPO / "configs" / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data.pop("output")
    cfg = config_from_dict(data, source=str(path), base_dir=path.parent)
    with Evaluator(cfg, cache=False) as ev:
        calls = _count_numba(monkeypatch)
        got = reverse_objective(Objective(cfg, ev.plan), ev, None, None)
        assert calls  # the numba pass ran
    with Evaluator(cfg, cache=False, backend=Backend(numba_reverse=False)) as ref:
        want = reverse_objective(Objective(cfg, ref.plan), ref, None, None)
    grad = np.asarray(want["grad"])
    assert np.abs(grad).min() > 0
    np.testing.assert_allclose(got["objective"], want["objective"], rtol=1e-10)
    np.testing.assert_allclose(got["grad"], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())
