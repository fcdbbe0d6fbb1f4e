"""A branch missing from a dataset's file: one line naming the file, the missing name,
the closest names the file has (difflib, best first), the config key that reads it
(as written in the config file) and the dataset (``datasets.NAME``); a per-event weight
branch missing from one dataset of two names that dataset.

Reference: the branch lists of the real files (uproot), and the config as written.
"""

from __future__ import annotations

import pytest

from analysis.cli.parser import main
from tests.chunked_helpers import DY, NANOAOD_WARNINGS, analysis_config
from tests.conftest import one_line_error, write_config

pytestmark = NANOAOD_WARNINGS


def _fails(tmp_path, cfg, capsys) -> str:
    path = write_config(tmp_path, cfg)
    capsys.readouterr()
    assert main(["evaluate", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    return one_line_error(capsys.readouterr().err)


def two_datasets():
    cfg = analysis_config()
    del cfg["datasets"]["empty"]
    return cfg


def test_a_missing_field_names_the_config_key_and_the_closest_branches(tmp_path, capsys):
    cfg = two_datasets()
    cfg["selection"]["objects"]["cuts"].append(
        {"var": "btagDeepCSV", "op": ">", "value": 0.5, "width": 0.05})
    line = _fails(tmp_path, cfg, capsys)
    assert "no field of Jet 'btagDeepCSV'" in line
    assert "did you mean 'btagDeepC" in line and "(or '" in line  # three closest names
    assert "read by selection.objects.cuts[" in line and "].var" in line
    assert "datasets." in line


def test_a_weight_branch_missing_from_one_dataset_names_it(tmp_path, capsys):
    cfg = two_datasets()
    cfg["datasets"]["dy"]["weight"] = "genWeigth"
    line = _fails(tmp_path, cfg, capsys)
    assert str(DY.name) in line and "no branch 'genWeigth'" in line
    assert "did you mean 'genWeight'?" in line
    assert "read by datasets.dy.weight" in line
    others = [n for n in cfg["datasets"] if n != "dy"]
    assert others and not any(f"datasets.{n}" in line for n in others)


@pytest.mark.parametrize("word, keys", [("genWeight", ["datasets.dy.weight"]),
                                        ("PSWeight", ["systematics[isr].up"])])
def test_config_keys(word, keys, tmp_path):
    from analysis.driver.missing import config_keys

    cfg = two_datasets()
    cfg["systematics"] = [{"name": "isr", "type": "weight", "up": "PSWeight[0]",
                           "down": "1.0"}]
    path = write_config(tmp_path, cfg)
    raw = config_keys(type("C", (), {"source": str(path)})(), word, "dy")
    assert [k for k in raw if k in keys] == keys
    assert not any(k.startswith("datasets.ttbar") for k in raw)  # another dataset's key
