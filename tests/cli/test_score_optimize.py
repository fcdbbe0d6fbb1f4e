"""``optimize`` with learned scores: reverse-mode steps from YAML, the trained weights in
``score_NAME.npz`` (loadable as ``init: {file: ...}``, equal to the final parameters)
and in the checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from analysis.config.loader import config_from_dict
from analysis.pipeline.plan import build_plan
from analysis.select.weights import load_weights
from analysis.stats.mlp import mlp, to_arrays
from tests.opt_helpers import run_cli
from tests.optimize.test_score_reverse import _config


@pytest.mark.slow
def test_optimize_writes_trained_weights(tmp_path) -> None:
    cfg = _config(100_000)
    cfg["optimizer"] = {"name": "adam", "learning_rate": 0.02, "score_learning_rate": 0.005,
                        "steps": 2}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = run_cli("optimize", str(path), "--output", str(tmp_path / "out"), "--no-plots",
                  "--quiet", timeout=900)
    assert out.returncode == 0, out.stderr
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    final = res["final"]["soft"]["parameters"]
    assert len(res["history"]) == 2
    # reverse mode: the objective's gradient per step, no per-statistic gradients (null,
    # said so, never silent zeros)
    grad = res["history"][0]["gradient"]
    assert len(grad) == len(res["trainable"]) and np.abs(list(grad.values())).max() > 0
    for ds in res["datasets"].values():
        assert ds["selected_sumw_grad"] is None and "not computed" in ds["gradients"]
        assert ds["observables"]["ht"]["mean"]["grad"] is None
    net, standard = load_weights(tmp_path / "out" / "score_tag.npz",
                                 mlp(3, hidden=(3,), seed=0))
    arrays = to_arrays(net)
    w0 = to_arrays(mlp(3, hidden=(3,), seed=1))
    assert arrays["layers.0.weight"][1, 2] == final["score.tag.layers.0.weight[1,2]"]
    assert not np.allclose(arrays["layers.0.weight"], w0["layers.0.weight"])  # trained
    np.testing.assert_array_equal(standard.std, cfg["scores"][0]["standardise"]["std"])
    # the file is a valid init for the same score: the plan starts from the trained weights
    cfg["scores"][0]["init"] = {"file": str(tmp_path / "out" / "score_tag.npz")}
    loaded = config_from_dict(cfg)
    plan = build_plan(loaded)
    start = plan.scores[0].start
    assert loaded.initial_params()[plan.param_names[start]] == final[plan.param_names[start]]
    # the checkpoint holds every trainable entry as data; the weights unscaled (u = theta)
    with np.load(tmp_path / "out" / "checkpoint.npz", allow_pickle=False) as ckpt:
        u = ckpt["u"]
    names = res["trainable"]
    assert len(u) == len(names)
    k = names.index("score.tag.layers.0.weight[1,2]")
    assert u[k] == final["score.tag.layers.0.weight[1,2]"]


@pytest.mark.parametrize("change", [{"optimizer": {"method": "newton", "steps": 2}},
                                    {"output": {"hessian": True}}])
def test_a_hessian_over_the_weights_is_refused_in_one_line(tmp_path, change) -> None:
    """Reverse mode gives gradients only: Newton steps or the final Hessian over a
    network's weights stop before any step, in one line (exit 2)."""
    from tests.conftest import one_line_error

    cfg = {**_config(100_000), **change}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = run_cli("optimize", str(path), "--output", str(tmp_path / "out"), "--quiet")
    assert out.returncode == 2, out.stderr
    line = one_line_error(out.stderr)
    what = "optimizer.method: newton" if "optimizer" in change else "output.hessian: true"
    assert what in line and "reverse mode gives gradients only" in line
