"""Reverse mode on the numba kernel (analysis.pipeline.backends.numba.fastreverse): the pass probability's
sensitivities against exact enumeration; the gradients of a plan with learned scores
equal the JAX sweep's and forward mode's (1e-10) whatever the chunking and executor;
central finite differences at 1,000+ parameters; objectives that read more than the
yields go to the JAX sweep and say why."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.optimize.objectives import Objective, objective_from_states
from analysis.optimize.reverse import reverse_objective
from analysis.pipeline.backend import Backend
from analysis.pipeline.backends.numba import fastreverse
from analysis.select import chainwalk
from tests.conftest import numba_refusal
from tests.optimize import test_score_reverse
from tests.optimize.test_score_reverse import _config
from tests.reference.enumeration import configurations


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sensitivities_equal_enumeration(seed: int) -> None:
    """P, dP/dq_j, the objects' weights P(j passes and the event passes) and the final
    count distribution of a few events against all 2^n pass/fail configurations
    (dP/dq_j = P(j passes) - P(j fails): P is affine in q_j)."""
    rng = np.random.default_rng(seed)
    counts = np.array([0, 1, 3, 6, 5, 2])
    coff = np.concatenate([[0], np.cumsum(counts)])
    q = rng.uniform(0.02, 0.98, size=coff[-1])
    q[rng.uniform(size=q.size) < 0.2] = rng.choice([0.0, 1.0])  # hard cuts too
    f = np.array([0.0, 0.15, 0.7, 1.0])  # a smoothed ">= 2": chain states 0..3 (top absorbs)
    top = f.size - 1
    pe, dq, fn = np.zeros(counts.size), np.zeros(q.size), np.zeros((counts.size, f.size))
    ow = np.zeros(q.size)
    chainwalk.sens_walk(coff, q, f, True, int(counts.max()), 2, pe, dq, fn, ow, 0, 3)

    def prob(qe: np.ndarray) -> tuple[float, np.ndarray]:
        conf, p = configurations(qe)
        state = np.minimum(conf.sum(axis=1), top)
        dist = np.bincount(state, weights=p, minlength=f.size)
        return float(dist @ f), dist

    for e in range(counts.size):
        qe = q[coff[e]: coff[e + 1]]
        p_ref, dist = prob(qe)
        np.testing.assert_allclose(pe[e], p_ref, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(fn[e], dist, rtol=1e-13, atol=1e-15)
        for j in range(qe.size):
            hi, lo = qe.copy(), qe.copy()
            hi[j], lo[j] = 1.0, 0.0
            np.testing.assert_allclose(dq[coff[e] + j], prob(hi)[0] - prob(lo)[0],
                                       rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(ow[coff[e] + j], qe[j] * prob(hi)[0], rtol=1e-12,
                                       atol=1e-15)


def _count_numba(monkeypatch) -> list:
    """Record every numba reverse pass (fastreverse._shares) of this test."""
    calls: list = []
    shares = fastreverse._shares

    def counted(*args, **kwargs):
        calls.append(1)
        return shares(*args, **kwargs)

    monkeypatch.setattr(fastreverse, "_shares", counted)
    return calls


def _extra(cfg: dict) -> dict:
    """A trainable count threshold, an ``abs_`` cut and an inclusive cut besides the scores."""
    cfg["parameters"]["n_min"] = {"init": 2, "bounds": [0, 4]}
    cfg["parameters"]["eta_max"] = {"init": 2.0, "bounds": [0.5, 4.7]}
    cfg["objects"]["jets"]["cuts"].append(
        {"var": "abs_eta", "op": "<=", "param": "eta_max", "width": 0.3})
    cfg["selection"][0] = {"count": "jets", "op": ">=", "param": "n_min", "width": 0.5}
    return cfg


def _three_ways(data: dict, monkeypatch) -> tuple[dict, dict, dict, dict]:
    """Forward mode, the JAX sweep (two passes), the numba pass (one pass) and the numba
    pullback pass (two passes) of one config."""
    cfg = config_from_dict(data)
    with Evaluator(cfg) as ev:
        fwd = objective_from_states(Objective(cfg, ev.plan), ev.run(order=1), order=1)
        calls = _count_numba(monkeypatch)
        one = reverse_objective(Objective(cfg, ev.plan), ev, None, None)
        assert calls  # the numba pass ran
        two_obj = Objective(cfg, ev.plan)
        two_obj._one_pass = False  # values, then the numba pullback pass
        two = reverse_objective(two_obj, ev, None, None)
        n = len(calls)
    # the reference: the JAX sweep, and the scores on the JAX kernel
    with Evaluator(cfg, backend=Backend(numba_reverse=False, scores_on_numba=False)) as ref:
        jax_sweep = reverse_objective(Objective(cfg, ref.plan), ref, None, None)
        assert len(calls) == n  # the reference ran without it
    return fwd, one, two, jax_sweep


# the default run keeps the case with every feature (scores, a trainable count, abs and
# inclusive cuts); the scores alone are the slow run's
@pytest.mark.parametrize("extra", [pytest.param(False, marks=pytest.mark.slow),
                                   pytest.param(True, marks=pytest.mark.slow)])
def test_numba_reverse_equals_jax_sweep_and_forward_mode(extra: bool, monkeypatch) -> None:
    data = _config(37)  # several chunks per dataset
    fwd, one, two, jax_sweep = _three_ways(_extra(data) if extra else data, monkeypatch)
    grad = fwd["grad"]
    assert np.abs(grad).max() > 0 and len(grad) > 30
    if extra:  # n_min and eta_max (trainable 4 and 5) are differentiated
        assert abs(grad[3]) > 0 and abs(grad[4]) > 0
    for res in (one, two, jax_sweep):
        np.testing.assert_allclose(res["objective"], fwd["objective"], rtol=1e-10)
        assert np.all(np.isfinite(res["grad"]))
        np.testing.assert_allclose(res["grad"], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())


def test_later_steps_compute_only_the_rows_read(monkeypatch) -> None:
    """The second step computes only the yield gradients the first step's cotangent read
    (the signal's sum of squared weights is not read) and gives the same gradient."""
    cfg = config_from_dict(_config(100_000))
    with Evaluator(cfg) as ev:
        obj = Objective(cfg, ev.plan)
        first = reverse_objective(obj, ev, None, None)
        assert obj._yield_rows == {"tt": (True, False), "dy": (True, True)}
        calls = []
        run = ev.run_pullback
        monkeypatch.setattr(ev, "run_pullback", lambda *a, **k: calls.append(1) or run(*a, **k))
        again = reverse_objective(obj, ev, None, None)
        assert not calls  # one pass
    np.testing.assert_allclose(again["grad"], first["grad"], rtol=1e-13, atol=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("executor,chunksize", [("iterative", 100_000), ("iterative", 23),
                                                ("futures", 29)])
def test_numba_reverse_is_chunk_and_executor_invariant(executor: str, chunksize: int,
                                                       monkeypatch) -> None:
    ref_cfg = config_from_dict(_config(100_000))
    with Evaluator(ref_cfg) as ev:
        ref = reverse_objective(Objective(ref_cfg, ev.plan), ev, None, None)
    cfg = config_from_dict(_config(chunksize))
    with Evaluator(cfg, executor=executor, workers=2) as ev:
        res = reverse_objective(Objective(cfg, ev.plan), ev, None, None)
        assert sum(st.chunks for st in res["states"].values()) >= (2 if chunksize < 1000 else 1)
    grad = ref["grad"]
    np.testing.assert_allclose(res["objective"], ref["objective"], rtol=1e-10)
    np.testing.assert_allclose(res["grad"], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())


@pytest.mark.slow
def test_directional_derivatives_at_1000_parameters_on_the_numba_pass(monkeypatch) -> None:
    """The 1,000-parameter finite-difference check of tests/optimize runs the numba pass."""
    calls = _count_numba(monkeypatch)
    test_score_reverse.test_directional_derivatives_at_1000_parameters()
    assert calls


def test_an_objective_reading_an_event_sum_takes_two_numba_passes(caplog, monkeypatch) -> None:
    """A target on HT's mean: values, then the pullback, both on numba (the event sums'
    walk transposed, analysis.pipeline.backends.numba._revobs)."""
    data = _config(100_000)
    data["objective"]["terms"].append(
        {"type": "target", "stat": "tt.ht.mean", "value": 300.0, "weight": 1e-4})
    cfg = config_from_dict(data)
    with Evaluator(cfg) as ev, caplog.at_level(logging.DEBUG, logger="analysis.pipeline.backend"):
        calls = _count_numba(monkeypatch)
        obj = Objective(cfg, ev.plan)
        res = reverse_objective(obj, ev, None, None)
        assert obj._one_pass is False  # two passes from now on
        assert calls  # the pullback ran on numba
    assert "the objective reads" not in caplog.text
    assert np.all(np.isfinite(res["grad"]))


def test_yield_gradients_of_a_dataset_without_chunks_are_zeros() -> None:
    cfg = config_from_dict(_config(100_000))
    with Evaluator(cfg) as ev:
        tt = [c for c in ev.chunks if c.dataset == "tt"]
        out = ev.run_yield_gradients(chunks=tt)
        full = ev.run(order=0)
    n = len(ev.plan.trainable)
    assert out["dy"].events == 0 and out["dy"].derived.grad.shape == (2, n)
    assert not np.any(out["dy"].derived.grad)
    assert np.abs(out["tt"].derived.grad[0]).max() > 0
    np.testing.assert_allclose(float(out["tt"].derived.value["selected_sumw"]),
                               float(full["tt"].derived.value["selected_sumw"]), rtol=1e-14)


def test_the_rules_name_what_the_numba_pass_does_not_serve() -> None:
    from tests.pipeline.backends.numba.test_fastkernel import make_plan, sets_config

    plan, theta, _ = make_plan(sets_config())  # several sets and collections: served
    assert numba_refusal(plan, 0, theta, yield_rows=(True, True)) is None
    cfg = config_from_dict(_config(100_000))
    with Evaluator(cfg) as ev:
        assert numba_refusal(ev.plan, 0, yield_rows=(True, True)) is None
        assert "switched off" in numba_refusal(ev.plan, 0, yield_rows=(True, True),
                                               backend=Backend(numba_reverse=False))


def test_the_value_states_come_from_the_sensitivities_walk() -> None:
    """The yields and observables (S.f, abs of a branch) of the reverse pass read its walk
    (the backend's trace: one walk of the selection), the states of the forward kernel
    at order 0 (1e-14); an event sum needs the forward kernel's walk as well."""
    from collections import Counter

    from analysis.pipeline.backends.numba import fastkernel
    from tests.pipeline.backends.numba.test_fastkernel import make_plan, one_set_config, synthetic

    for sums in (False, True):
        cfg = one_set_config(width=1.0, inverted=False)
        if sums:
            cfg["observables"].append({"name": "n", "x": "count(Jet)", "stats": ["mean"]})
        plan, theta, widths = make_plan(cfg)
        cols = synthetic(3000, seed=5)
        trace: Counter = Counter()
        got = fastreverse.chunk_yield_gradients(cols, plan, theta, widths, trace=trace)
        ref, _ = fastkernel.evaluate_columns(cols, plan, theta, widths, order=0)
        assert trace[None, 0] == (2 if sums else 1), trace
        a = jax_leaves(got.derived.value)
        b = jax_leaves(ref)
        assert len(a) == len(b) > 4
        for x, y in zip(a, b, strict=True):  # the same floats here (the chain may be
            # longer with trainable count thresholds: an ulp or two on the objects' weights)
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-14, atol=0.0)


def jax_leaves(tree) -> list:
    import jax

    return jax.tree_util.tree_leaves(tree)
