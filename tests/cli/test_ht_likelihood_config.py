"""configs/ht_likelihood_v12.yaml: the histogram of HT = sum(jets.pt) over the full jet
collection of real NanoAOD (up to 13 jets, no max_objects) in a likelihood, with a hard
pre-selection under the soft cuts: ``evaluate`` and ``optimize --steps 3`` run (issue 33)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.cli.parser import main

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "ht_likelihood_v12.yaml"


@pytest.mark.slow
def test_evaluate_and_optimize_run_at_natural_multiplicities(tmp_path) -> None:
    assert "max_objects" not in CONFIG.read_text().split("datasets:")[1]
    out = tmp_path / "evaluate"
    assert main(["evaluate", str(CONFIG), "--quiet", "-o", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    z = report["likelihood"]["significance"]["value"]
    assert math.isfinite(z) and z > 1.0
    out = tmp_path / "optimize"
    assert main(["optimize", str(CONFIG), "--steps", "3", "--quiet", "-o", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["steps_run"] == 3
    assert math.isfinite(report["likelihood"]["significance"]["value"])
