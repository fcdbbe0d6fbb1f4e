"""Reverse mode in the YAML pipeline: the objective's gradient by two passes equals the
forward-mode gradient (1e-10) on every executor and chunking, for a plan with a learned
score's weights among its trainable parameters."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.optimize.objectives import Objective, objective_from_states
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
