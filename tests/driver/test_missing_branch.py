"""A branch missing from a dataset's file: one line naming the file, the missing name,
the closest names the file has (difflib, best first), the config key that reads it
(as written in the config file) and the dataset (``datasets.NAME``); a per-event weight
branch, or a weight systematic's branch (`PSWeight`), missing from one dataset of two names
that dataset.

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
    assert "read by selection.objects.cuts.2.var" in line
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
                                        ("PSWeight", ["systematics.0.up"])])
def test_config_keys(word, keys, tmp_path):
    from analysis.driver.missing import config_keys

    cfg = two_datasets()
    cfg["systematics"] = [{"name": "isr", "type": "weight", "up": "PSWeight[0]",
                           "down": "1.0"}]
    path = write_config(tmp_path, cfg)
    raw = config_keys(type("C", (), {"source": str(path)})(), word, "dy")
    assert [k for k in raw if k in keys] == keys
    assert not any(k.startswith("datasets.ttbar") for k in raw)  # another dataset's key


def test_a_weight_systematic_missing_from_one_dataset_names_it(tmp_path, capsys):
    """The issue's case: a ``PSWeight`` systematic on a file without ``PSWeight`` (two
    generated files; only ``dy``'s lacks the branch) names that file, the systematic's
    keys and ``datasets.dy``, not the other dataset."""
    pytest.importorskip("evermore")
    import uuid

    from analysis.data.generate import _write_root, generate_events

    datasets = {}
    for name, role in (("ttbar", "signal"), ("dy", "background")):
        arrays = generate_events(name, 50, seed=1)
        if name == "dy":
            del arrays["PSWeight"]
        _write_root(tmp_path / f"{name}.root", arrays, uuid.uuid4())
        datasets[name] = {"files": [str(tmp_path / f"{name}.root")], "weight": "genWeight",
                          "role": role, "xsec": 1.0}
    cfg = analysis_config(datasets)
    cfg["histograms"] = [{"name": "ht", "x": "sum(Jet.pt)", "edges": [0, 100, 200, 400]}]
    cfg["likelihood"] = {"channels": {"sr": {"histogram": "ht"}}}
    cfg["objective"] = {"terms": [{"type": "discovery_significance"}]}
    cfg["systematics"] = [{"name": "isr", "type": "weight", "up": "PSWeight[0]",
                           "down": "PSWeight[2]"}]
    line = _fails(tmp_path, cfg, capsys)
    assert "dy.root: no branch 'PSWeight'" in line
    assert "systematics.0.up" in line and "systematics.0.down" in line
    assert line.endswith("for datasets.dy") and "datasets.ttbar" not in line
