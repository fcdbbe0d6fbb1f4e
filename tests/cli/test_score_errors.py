"""Bad input to a learned score: one line naming the file/key, exit 2."""

from __future__ import annotations

import numpy as np
import yaml

from analysis.stats.mlp import mlp, to_arrays
from tests.conftest import one_line_error
from tests.opt_helpers import run_cli
from tests.pipeline.test_score_kernel import config


def _run(tmp_path, cfg) -> str:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = run_cli("evaluate", str(path), "--output", str(tmp_path / "out"))
    assert out.returncode == 2, out.stderr
    return one_line_error(out.stderr)


def _with_file(cfg, name: str) -> dict:
    cfg["scores"][0]["init"] = {"file": name}
    return cfg


def test_weights_of_the_wrong_shape(tmp_path) -> None:
    np.savez(tmp_path / "w.npz", **to_arrays(mlp(3, hidden=(5, 3), seed=0)))
    line = _run(tmp_path, _with_file(config(), str(tmp_path / "w.npz")))
    assert "w.npz" in line and "layers.0.weight" in line and "expected shape (4, 3)" in line


def test_non_finite_weight(tmp_path) -> None:
    arrays = {k: v.copy() for k, v in to_arrays(mlp(3, hidden=(4, 3), seed=0)).items()}
    arrays["layers.1.bias"][2] = np.nan
    np.savez(tmp_path / "w.npz", **arrays)
    line = _run(tmp_path, _with_file(config(), str(tmp_path / "w.npz")))
    assert "w.npz" in line and "layers.1.bias[2]" in line and "finite" in line


def test_input_that_does_not_exist(tmp_path) -> None:
    cfg = config()
    cfg["scores"][0]["mlp"]["inputs"][2] = "jets.btagNope"
    line = _run(tmp_path, cfg)
    assert "btagNope" in line


def test_inputs_of_two_levels(tmp_path) -> None:
    cfg = config()
    cfg["scores"][0]["mlp"]["inputs"][2] = "MET.pt"
    line = _run(tmp_path, cfg)
    assert "scores.0.mlp.inputs" in line and "all fields of one object set" in line
