"""The shipped object-set configs load, plan and (dimuon, AGC) evaluate on the real files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.cli.parser import main
from analysis.config.loader import load_config
from analysis.pipeline.plan import build_plan, initial_widths

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
NAMES = ["agc_ttbar.yaml", "agc_ttbar_v12.yaml", "agc_ttbar_optimize.yaml", "dimuon.yaml",
         "wmunu.yaml"]


@pytest.mark.parametrize("name", NAMES)
def test_object_set_configs_load_and_plan(name) -> None:
    config = load_config(CONFIGS / name)
    plan = build_plan(config)
    assert plan.sets is not None
    assert len(initial_widths(config)) == plan.n_widths
    for path in (f for ds in config.datasets.values() for f in ds.files):
        assert path.startswith("skhep:")  # no path into ../shared outside the repo


def _finite_numbers(tree) -> list[float]:
    if isinstance(tree, dict):
        return [v for x in tree.values() for v in _finite_numbers(x)]
    if isinstance(tree, list):
        return [v for x in tree for v in _finite_numbers(x)]
    return [tree] if isinstance(tree, float) else []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dimuon.yaml", "agc_ttbar.yaml", "wmunu.yaml"])
def test_evaluate_object_set_config_on_real_files(name, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["evaluate", str(CONFIGS / name), "--quiet", "-o", str(out)]) == 0
    text = (out / "results.json").read_text()
    numbers = _finite_numbers(json.loads(text))
    assert numbers and all(math.isfinite(v) for v in numbers)
    assert "NaN" not in text


def test_empty_file_gives_zero_yields(shared_data) -> None:
    import yaml

    from analysis.config.loader import config_from_dict
    from analysis.driver.runner import Evaluator
    data = yaml.safe_load((CONFIGS / "dimuon.yaml").read_text())
    data["datasets"]["dy"]["files"] = [str(shared_data / "nano_dy_empty.root")]
    state = Evaluator(config_from_dict(data)).run(order=1)["dy"]
    assert state.events == 0
    assert float(state.derived.value["selected_sumw"]) == 0.0
    assert float(state.observables["mll"]["moments"].sumw) == 0.0
