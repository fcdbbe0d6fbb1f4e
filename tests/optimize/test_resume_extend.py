"""``--resume --steps N`` extends a run (issue 21.6).

The step budget is the path's length, not the path: it is not part of the checkpoint's
fingerprint. An extended run repeats the first run's steps exactly (they are read back)
and goes on; its annealing schedule keeps the first run's length, so the extension runs
at the final widths (without annealing: exactly the steps of a run asked for N steps).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.cli.parser import main
from tests import opt_helpers as H
from tests.conftest import write_config


def _run(config: Path, out: Path, *extra: str) -> dict:
    assert main(["optimize", str(config), "-o", str(out), "--quiet", "--no-plots", *extra]) == 0
    return json.loads((out / "results.json").read_text())


def test_a_finished_run_is_extended(small_data, tmp_path) -> None:
    cfg = H.config_dict(small_data, optimizer={"steps": 2, "tolerance": 0.0})
    config = write_config(tmp_path / "opt.yaml", cfg)
    out = tmp_path / "out"
    first = _run(config, out)
    assert first["steps_run"] == 2
    more = _run(config, out, "--resume", "--steps", "3")
    assert more["steps_run"] == 3
    assert H.comparable_history(more["history"][:2]) == H.comparable_history(first["history"])
    # annealed over the first run's 2 steps: the extension keeps the final widths
    np.testing.assert_array_equal(more["history"][2]["widths"], first["history"][1]["widths"])


@pytest.mark.slow  # three short optimisations
def test_without_annealing_the_extension_is_the_longer_run(small_data, tmp_path) -> None:
    cfg = H.config_dict(small_data, optimizer={"steps": 2, "tolerance": 0.0,
                                               "anneal": {"schedule": "none"}})
    config = write_config(tmp_path / "opt.yaml", cfg)
    _run(config, tmp_path / "a")
    extended = _run(config, tmp_path / "a", "--resume", "--steps", "4")
    whole = _run(config, tmp_path / "b", "--steps", "4")
    assert H.comparable_history(extended["history"]) == H.comparable_history(whole["history"])
    assert extended["parameters"] == whole["parameters"]
