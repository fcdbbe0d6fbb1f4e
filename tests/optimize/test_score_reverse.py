"""Reverse mode in the YAML pipeline: the objective's gradient by two passes equals the
forward-mode gradient (1e-10) on every executor and chunking, for a plan with a learned
score's weights among its trainable parameters."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.optimize.objectives import Objective, dataset_scales, objective_from_states
from analysis.optimize.reverse import reverse_objective
from tests.conftest import SHARED_DATA
from tests.pipeline.test_score_kernel import config


def _config(chunksize: int) -> dict:
    cfg = config(hidden=(3,), chunksize=chunksize)
    cfg["datasets"] = {
        "tt": {"files": [cfg["datasets"]["tt"]["files"][0]], "weight": "genWeight",
               "role": "signal", "xsec": 800.0},
        "dy": {"files": [str(SHARED_DATA / "nano_dy.root")], "weight": "genWeight",
               "role": "background", "xsec": 6000.0},
    }
    cfg["objective"] = {"terms": [{"type": "significance", "sigma_b": 0.1}]}
    return cfg


@pytest.fixture(scope="module")
def forward() -> tuple[float, np.ndarray]:
    cfg = config_from_dict(_config(100_000))
    ev = Evaluator(cfg)
    res = objective_from_states(Objective(cfg, ev.plan), ev.run(order=1), order=1)
    return res["objective"], res["grad"]


@pytest.mark.slow
@pytest.mark.parametrize("executor,chunksize", [("iterative", 100_000), ("iterative", 37),
                                                ("futures", 29)])
def test_reverse_equals_forward(forward, executor: str, chunksize: int) -> None:
    cfg = config_from_dict(_config(chunksize))
    with Evaluator(cfg, executor=executor, workers=2) as ev:
        assert len(ev.plan.trainable) > 30  # cuts and network weights
        res = reverse_objective(Objective(cfg, ev.plan), ev, None, None)
    value, grad = forward
    np.testing.assert_allclose(res["objective"], value, rtol=1e-10)
    assert np.all(np.isfinite(res["grad"])) and np.abs(grad).max() > 0
    np.testing.assert_allclose(res["grad"], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())


@pytest.mark.slow
def test_directional_derivatives_at_1000_parameters() -> None:
    """At 1,000+ parameters: the reverse-mode gradient along random directions equals the
    central finite difference of the whole pass (1e-6)."""
    data = _config(60)  # several chunks
    data["scores"][0]["mlp"]["hidden"] = [30, 30]
    cfg = config_from_dict(data)
    ev = Evaluator(cfg)
    names = ev.plan.trainable_names
    assert len(names) > 1000
    obj = Objective(cfg, ev.plan)
    res = reverse_objective(obj, ev, None, None)
    init = cfg.initial_params()
    x0 = np.array([init[n] for n in names])
    rng = np.random.default_rng(5)

    def loss(x) -> float:
        states = ev.run(dict(zip(names, map(float, x))), order=0)
        return objective_from_states(obj, states, order=0)["objective"]

    for _ in range(2):
        v = rng.normal(size=len(names))
        v[:3] = 0.0  # cut thresholds (GeV scale) apart; the weights' directions
        v /= np.linalg.norm(v)
        h = 1e-4
        fd = (loss(x0 + h * v) - loss(x0 - h * v)) / (2 * h)
        got = float(res["grad"] @ v)
        assert abs(got) > 0
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


@pytest.mark.slow
def test_reverse_on_dask_is_chunk_and_executor_invariant(forward) -> None:
    """On dask (2 worker processes, small chunks): the YAML reverse-mode gradient equals
    forward mode's on one chunk (1e-10), on the first pass (columns read, then kept by the
    workers) and on the next (both passes from the workers' column caches, no file read)."""
    cfg = config_from_dict(_config(29))
    value, grad = forward
    with Evaluator(cfg, executor="dask", workers=2) as ev:
        obj = Objective(cfg, ev.plan)
        first = reverse_objective(obj, ev, None, None)
        assert ev.cache is not None and ev.cache.remote  # the workers hold the columns
        again = reverse_objective(obj, ev, None, None)
        assert sum(st.chunks for st in again["states"].values()) > 4
    for res in (first, again):
        np.testing.assert_allclose(res["objective"], value, rtol=1e-10)
        np.testing.assert_allclose(res["grad"], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())


@pytest.mark.slow
def test_reverse_equals_forward_when_the_objective_reads_an_observable() -> None:
    """A target on one observable's mean: its states are swept, the other observables'
    (zero cotangent, :func:`analysis.stats.pullback.prune`) are not; the gradient still
    equals forward mode's (1e-10) over several chunks."""
    from analysis.optimize.reverse import _cotangent, _payload, _to_numpy
    from analysis.stats.pullback import prune

    data = _config(37)
    data["objective"]["terms"].append(
        {"type": "target", "stat": "tt.ht.mean", "value": 300.0, "weight": 1e-4})
    cfg = config_from_dict(data)
    with Evaluator(cfg) as ev:
        obj = Objective(cfg, ev.plan)
        fwd = objective_from_states(obj, ev.run(order=1), order=1)
        res = reverse_objective(obj, ev, None, None)
        states = res["states"]
        values = {n: st.taylor()[0] for n, st in states.items()}
        scales = dataset_scales(cfg, {n: st.sumw for n, st in states.items()},
                                {n: st.events for n, st in states.items()})
        _, cot = _cotangent(obj, tuple(states))(values, scales)
        live = {n: [p is not None for p in prune(_to_numpy(_payload(values[n], cot[n])))]
                for n in states}
    # leaves: evscore, ht, jpt (moments), selected_sumw, selected_sumw2. Read: tt's ht
    # (the target) and yield; dy's yield and sumw2 (the background's MC uncertainty)
    assert live == {"tt": [False, True, False, True, False],
                    "dy": [False, False, False, True, True]}
    np.testing.assert_allclose(res["objective"], fwd["objective"], rtol=1e-10)
    grad = fwd["grad"]
    np.testing.assert_allclose(res["grad"], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())
