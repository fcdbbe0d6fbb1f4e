"""Bad input to ``optimize``: exit status 2 and one line naming the key and the value."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from analysis.cli.parser import main
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config


def _fails(cfg: dict, tmp_path: Path, capsys, *extra: str) -> str:
    config = write_config(tmp_path / "bad.yaml", cfg)
    out = tmp_path / "out"
    capsys.readouterr()
    argv = ["optimize", str(config), "-o", str(out), "--quiet", "--no-plots", *extra]
    assert main(argv) == 2
    line = one_line_error(capsys.readouterr().err)
    assert not (out / "results.json").exists()
    return line


def _terms(*terms: dict) -> dict:
    return {"terms": list(terms)}


CASES = {
    "unknown optimiser": (
        {"optimizer": {"name": "adamm"}},
        ["optimizer.name", "'adamm'", "did you mean 'adam'"],
    ),
    "unknown schedule": (
        {"optimizer": {"schedule": {"name": "cosine_decay_schedul", "kwargs": {"decay_steps": 5}}}},
        ["optimizer.schedule.name", "cosine_decay_schedul"],
    ),
    "bad optimiser argument": (
        {"optimizer": {"name": "sgd", "kwargs": {"momentun": 0.9}}},
        ["optimizer", "sgd", "momentun"],
    ),
    "unknown objective type": (
        {"objective": _terms({"type": "significanse"})},
        ["objective.terms.0.type", "significanse"],
    ),
    "target on a missing statistic": (
        {
            "objective": _terms(
                {"type": "significance"},
                {"type": "target", "stat": "ttbar.jet_pt.meen", "value": 50},
            )
        },
        ["objective.terms.1.stat", "'ttbar.jet_pt.meen'", "did you mean 'ttbar.jet_pt.mean'"],
    ),
    "target on a missing dataset": (
        {"objective": _terms({"type": "target", "stat": "wjets.yield", "value": 1.0})},
        [
            "objective.terms.0.stat",
            "'wjets.yield'",
            "unknown dataset 'wjets'",
            "datasets: ttbar, dy",
        ],
    ),
    "target without value": (
        {"objective": _terms({"type": "target", "stat": "ttbar.yield"})},
        ["objective.terms.0.value", "target term needs 'value'"],
    ),
    "python module missing": (
        {"objective": _terms({"type": "python", "function": "tests.nosuchmodule:loss"})},
        ["objective.terms.0.function", "'tests.nosuchmodule:loss'", "ModuleNotFoundError"],
    ),
    "python function missing": (
        {"objective": _terms({"type": "python", "function": "tests.userlosses:nope"})},
        ["objective.terms.0.function", "'tests.userlosses:nope'", "AttributeError"],
    ),
    "python object not callable": (
        {"objective": _terms({"type": "python", "function": "tests.userlosses:NOT_CALLABLE"})},
        ["objective.terms.0.function", "'tests.userlosses:NOT_CALLABLE'", "not callable"],
    ),
    "python function malformed": (
        {"objective": _terms({"type": "python", "function": "tests/userlosses.py"})},
        ["objective.terms.0.function", "tests/userlosses.py", "pkg.module:func"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_objective_or_optimizer(small_data, tmp_path, capsys, case):
    sections, expected = CASES[case]
    line = _fails(H.config_dict(small_data, **sections), tmp_path, capsys)
    for text in expected:
        assert text in line, f"{text!r} not in {line!r}"


def test_significance_without_background(small_data, tmp_path, capsys):
    cfg = H.config_dict(small_data)
    del cfg["datasets"]["dy"]["role"]
    line = _fails(cfg, tmp_path, capsys)
    assert "objective.terms.0" in line and "role: background" in line
    assert "ttbar" in line and "dy" in line  # which datasets were looked at


def test_significance_without_signal(small_data, tmp_path, capsys):
    cfg = H.config_dict(small_data)
    cfg["datasets"]["ttbar"]["role"] = "background"
    line = _fails(cfg, tmp_path, capsys)
    assert "role: signal" in line


def test_zero_background_yield(small_data, tmp_path, capsys):
    """Hard cuts no background event passes, from the first step: one clear line, no NaN run."""
    params = copy.deepcopy(H.PARAMETERS)
    params["btag_min"]["init"] = 0.95
    params["min_jets"]["init"] = 6
    cfg = H.config_dict(small_data, parameters=params)
    for cut in cfg["selection"]["objects"]["cuts"]:
        cut["width"] = 0.0
    line = _fails(cfg, tmp_path, capsys)
    assert "background yield is 0" in line and "(datasets dy)" in line
    assert "significance is undefined" in line


def test_no_trainable_parameter(small_data, tmp_path, capsys):
    params = {n: {**p, "trainable": False} for n, p in H.PARAMETERS.items()}
    line = _fails(H.config_dict(small_data, parameters=params), tmp_path, capsys)
    assert "parameters" in line and "no trainable parameter" in line


def test_resume_without_checkpoint(small_data, tmp_path, capsys):
    line = _fails(H.config_dict(small_data), tmp_path, capsys, "--resume")
    assert "checkpoint.npz" in line and "no checkpoint to resume from" in line


def test_resume_with_a_changed_config(small_data, tmp_path, capsys):
    config = write_config(tmp_path / "bad.yaml", H.config_dict(small_data, optimizer={"steps": 2}))
    out = tmp_path / "out"
    assert main(["optimize", str(config), "-o", str(out), "--quiet", "--no-plots"]) == 0
    (out / "results.json").unlink()
    before = (out / "checkpoint.npz").read_bytes()
    changed = H.config_dict(small_data, optimizer={"steps": 2, "learning_rate": 0.01})
    line = _fails(changed, tmp_path, capsys, "--resume")
    assert "checkpoint.npz" in line and "different config" in line
    # The old checkpoint is not touched.
    assert (out / "checkpoint.npz").read_bytes() == before


def test_debug_shows_the_traceback(small_data, tmp_path):
    config = write_config(
        tmp_path / "bad.yaml", H.config_dict(small_data, optimizer={"name": "adamm"})
    )
    from analysis.errors import ConfigError

    with pytest.raises(ConfigError, match="adamm"):
        main(["--debug", "optimize", str(config), "-o", str(tmp_path / "out"), "--quiet"])
