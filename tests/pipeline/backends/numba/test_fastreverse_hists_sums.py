"""Reverse mode on numba for payloads that read histograms of event sums
(analysis.pipeline.backends.numba._revhistsums): HT ``sum(jets.pt)`` (hard bins, also a
likelihood template in a channel region with a shift of the jets' pT and a weight
variation), ``sum(bjets.pt)`` (soft bins, trainable edges, a set with its parent) and
``count(bjets)``, beside the histograms of fields and branches, the yields, the
observables and a trainable count threshold, on real files (ttbar 2015 and NanoAOD v12).
The numba pullback equals the JAX sweep (1e-10: gradient and value states) and central
differences of the JAX kernel's pulled sum."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from analysis.pipeline.backend import run_once
from analysis.pipeline.backends.jax import reverse as jax_reverse
from analysis.pipeline.backends.numba import _revhistsums, fastreverse
from analysis.pipeline.request import Request
from analysis.stats.pullback import pulled_sum
from tests.conftest import numba_refusal
from tests.pipeline.backends.numba.test_fastreverse_hists import (
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


def numba_differences(cols, plan, theta, widths, payload, g: np.ndarray) -> None:
    """The gradient ``g`` against central differences of the pulled sum of numba value
    passes (no JAX compile: an independent reference cheap enough for the default suite)
    along a random direction and the trainable count threshold ``n_min``."""
    n_states = len(payload)

    def loss(step: np.ndarray) -> float:
        req = Request(theta + step, widths, order=0, pullback=[None] * n_states)
        return float(pulled_sum(run_once(cols, plan, req, backend="numba").derived.value,
                                payload))

    differences_agree(loss, g, plan, theta, along=("n_min",), seed=5)


def test_hard_widths_tiny_chunks_threads_and_one_tangent_a_pass(monkeypatch) -> None:
    """Every width 0 and chunks of 0, 1 and 3 events: the numba pullback equals the JAX
    sweep; 1 and 3 threads (blocks of 16 events) give the same bits; the forward
    tangents for every event (hard bins too: not the backward sweep), one tangent a pass
    (many more passes), the same gradient (1e-12)."""
    plan, theta, widths, cols = setup(sums_config(), "nano_tt_v12.root")
    payload = [e if n.startswith(("templates.htc", "histograms.")) else None
               for n, e in zip(state_paths(plan), hists_payload(cols, plan, theta, widths,
                                                                seed=2), strict=True)]
    monkeypatch.setattr(_revhistsums, "BLOCK", 16)
    one = threads_and_tiny_chunks(cols, plan, theta, widths, payload,
                                  spans=((0, 0), (3, 4), (5, 8)))
    monkeypatch.setattr(_revhistsums, "_adjoint", lambda fwd, cev, *_: np.arange(cev.shape[0]))
    monkeypatch.setattr(_revhistsums, "TANGENTS", 1)
    single = np.asarray(fastreverse.chunk_pullback(cols, plan, theta, widths, payload).derived.grad)
    g = np.asarray(one.derived.grad)
    np.testing.assert_allclose(single, g, rtol=1e-12, atol=1e-12 * np.abs(g).max())
    monkeypatch.undo()


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
