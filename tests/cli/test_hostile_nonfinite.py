"""Non-finite numbers are refused up front (config, --set, --grid), an objective that turns
non-finite mid-run stops there (results.json says the step) and keeps the last good checkpoint,
and results.json is always strict JSON."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from analysis.cli.parser import main, parse_grid, write_json
from analysis.config.loader import ConfigError, config_from_dict, load_config
from analysis.errors import DiffcoffeaError
from analysis.optimize.checkpoint import CHECKPOINT, read_checkpoint
from tests import opt_helpers as H
from tests.conftest import write_config


@pytest.fixture(scope="module")
def data(small_data) -> Path:
    return small_data


BASE = """\
datasets:
  a: {files: a.root, xsec: 1.0, role: signal}
  b: {files: b.root, scale: 2.0, role: background}
lumi: 10.0
parameters:
  p: {init: 30.0, bounds: [15.0, 120.0]}
  n: {init: 2, bounds: [1, 6], integer: true}
selection:
  objects:
    collection: Jet
    cuts: [{var: pt, op: ">", param: p, width: 5.0}]
  events: [{count: Jet, op: ">=", param: n, width: 1.0}]
optimizer: {learning_rate: 0.05}
"""

NONFINITE = {
    "init": ("init: 30.0", "init: .nan", "parameters.p.init"),
    "bound": ("bounds: [15.0, 120.0]", "bounds: [15.0, .inf]", "parameters.p.bounds.1"),
    "lower bound": ("bounds: [15.0, 120.0]", "bounds: [-.inf, 120.0]", "parameters.p.bounds.0"),
    "lumi": ("lumi: 10.0", "lumi: .inf", "lumi"),
    "xsec": ("xsec: 1.0", "xsec: .nan", "datasets.a.xsec"),
    "scale": ("scale: 2.0", "scale: .inf", "datasets.b.scale"),
    "object width": ("width: 5.0", "width: .inf", "selection.objects.cuts.0.width"),
    "event width": ("width: 1.0", "width: .nan", "selection.events.0.width"),
    "learning rate": ("learning_rate: 0.05", "learning_rate: .inf", "optimizer.learning_rate"),
    "optax kwargs": (
        "learning_rate: 0.05",
        "learning_rate: 0.05, kwargs: {b1: .nan}",
        "optimizer.kwargs.b1",
    ),
}


def test_base_config_is_valid(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE)
    assert load_config(path).lumi == 10.0


@pytest.mark.parametrize("case", list(NONFINITE))
def test_nonfinite_config_values_name_the_key(tmp_path, case):
    old, new, key = NONFINITE[case]
    assert old in BASE
    path = tmp_path / "c.yaml"
    path.write_text(BASE.replace(old, new, 1))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: {key}: ") and "finite" in msg, msg


def test_nonfinite_python_floats_too():
    """Not only YAML's .nan: a config dict built in Python is checked the same way."""
    data = {"datasets": {"a": {"files": "a.root"}}, "lumi": float("nan")}
    with pytest.raises(ConfigError, match="lumi: expected a finite number"):
        config_from_dict(data)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999"])
def test_set_refuses_nonfinite(tmp_path, capsys, value):
    path = tmp_path / "c.yaml"
    path.write_text(BASE)
    argv = ["evaluate", str(path), "-o", str(tmp_path / "out"), "--quiet", "--set", f"p={value}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--set 'p={value}'" in err and "finite" in err


@pytest.mark.parametrize("spec", ["p=nan:100:5", "p=20:inf:5", "p=-inf:3:2", "p=1:2:0"])
def test_grid_refuses_nonfinite(tmp_path, spec):
    path = tmp_path / "c.yaml"
    path.write_text(BASE)
    config = load_config(path)
    with pytest.raises(DiffcoffeaError, match="finite LOW, HIGH"):
        parse_grid([spec], config)
    assert list(parse_grid(["p=20:40:3"], config)["p"]) == [20.0, 30.0, 40.0]


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_results_json_is_always_strict_json(tmp_path):
    data = {
        "a": float("nan"),
        "b": [1.0, float("inf"), -math.inf],
        "c": {"d": np.float64("nan"), "e": np.float32(2.5), "f": np.array([1.0, np.nan])},
        "g": np.int64(3),
        "h": None,
    }
    write_json(tmp_path / "results.json", data)
    back = _strict((tmp_path / "results.json").read_text())
    assert back == {
        "a": None,
        "b": [1.0, None, None],
        "c": {"d": None, "e": 2.5, "f": [1.0, None]},
        "g": 3,
        "h": None,
    }


def test_results_json_write_failure_is_one_line(tmp_path):
    (tmp_path / "results.json").mkdir()  # a directory where the file should go
    with pytest.raises(DiffcoffeaError, match="cannot write results"):
        write_json(tmp_path / "results.json", {"a": 1})


LOSS = """\
import os

import jax.numpy as jnp


def loss(stats):
    # The signal yield, to minimise: every step tightens the cuts. Below the limit the
    # objective is NaN (as a user's function dividing by a vanishing yield would be).
    y = stats["ttbar"]["yield"]
    limit = float(os.environ.get("HOSTILE10_NAN_BELOW", "-1"))
    return jnp.where(y < limit, jnp.nan, 1e-3 * y)
"""


@pytest.mark.slow
def test_nonfinite_objective_mid_run_stops_and_keeps_the_checkpoint(
    data, tmp_path, capsys, monkeypatch
):
    # The loss module sits next to the config: found there (config directory first).
    (tmp_path / "hostile10_nanloss.py").write_text(textwrap.dedent(LOSS))
    terms = [{"type": "python", "function": "hostile10_nanloss:loss"}]
    cfg = H.config_dict(data, objective={"terms": terms}, optimizer={"steps": 4})
    config = write_config(tmp_path / "opt.yaml", cfg)

    def run(out: Path) -> int:
        return main(["optimize", str(config), "-o", str(out), "--quiet", "--no-plots"])

    monkeypatch.delenv("HOSTILE10_NAN_BELOW", raising=False)
    assert run(tmp_path / "probe") == 0
    history = _strict((tmp_path / "probe" / "results.json").read_text())["history"]
    y = [entry["yields"]["ttbar"] for entry in history]
    assert y[0] > y[1] > y[2]

    monkeypatch.setenv("HOSTILE10_NAN_BELOW", str((y[1] + y[2]) / 2))
    out = tmp_path / "out"
    capsys.readouterr()
    # after the start: the run stops there and reports its points (exit 0), the history
    # up to step 1 (analysis/optimize/undefined.py)
    assert run(out) == 0
    report = _strict((out / "results.json").read_text())
    stopped = report["status"]["stopped"]
    assert stopped.startswith("objective undefined at step 2: ") and "nan" in stopped.lower()
    assert report["steps_run"] == 2
    assert H.comparable_history(report["history"]) == H.comparable_history(history[:2])
    ckpt = read_checkpoint(out / CHECKPOINT)
    assert ckpt["step"] == 2
    assert H.comparable_history(ckpt["history"]) == H.comparable_history(history[:2])
    assert all(math.isfinite(e["objective"]) for e in ckpt["history"])
