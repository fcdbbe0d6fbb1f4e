"""A config error is one line ``FILE: dotted.key: what`` (exit 2, no traceback) that says
each thing once: the key is written as pydantic's dotted location (``cuts.0.width``, not
``cuts[0].width``), the message does not repeat the key's last word (``lumi: must be >
0.0``, not ``lumi: lumi must be > 0.0``; ``edges: expected ...``, not ``edges: edges:``)
and a missing absolute file path is named once.
"""

from __future__ import annotations

import pytest
import yaml

from analysis.cli.parser import main
from tests.chunked_helpers import DY, NANOAOD_WARNINGS, analysis_config
from tests.conftest import REPO, edited, one_line_error, write_config

pytestmark = NANOAOD_WARNINGS


def _base():
    return analysis_config({"dy": {"files": [str(DY)], "weight": "genWeight"}})


def _hist(edges):
    return [{"name": "h", "x": "sum(Jet.pt)", "edges": edges}]


# (label, edit of the base config, the line after "FILE: ")
CASES = [
    ("lumi", lambda c: edited(c, "lumi", 0), "lumi: must be > 0.0, got 0"),
    ("chunksize", lambda c: edited(c, "executor/chunksize", 0),
     "executor.chunksize: must be >= 1, got 0"),
    ("empty stats", lambda c: edited(c, "observables/0/stats", []),
     "observables.0.stats: must not be empty"),
    ("cut width", lambda c: edited(c, "selection/objects/cuts/0/width", -1),
     "selection.objects.cuts.0.width: must be a number >= 0 or 'auto', got -1"),
    ("init outside bounds", lambda c: edited(c, "parameters/jet_pt_min/init", 500),
     "parameters.jet_pt_min.init: 500.0 is outside bounds [15.0, 200.0]"),
    ("decreasing edges", lambda c: edited(c, "histograms", _hist([0, 2, 1])),
     "histograms.0.edges: expected strictly increasing edges, found edges[2] = 1 after "
     "edges[1] = 2"),
    ("one edge", lambda c: edited(c, "histograms", _hist([0])),
     "histograms.0.edges: expected at least two bin edges (a 1-D list), found [0.0]"),
]


@pytest.mark.parametrize("label, edit, want", CASES, ids=[c[0] for c in CASES])
def test_each_thing_is_said_once(label, edit, want, tmp_path, capsys):
    path = write_config(tmp_path, edit(_base()))
    capsys.readouterr()
    assert main(["evaluate", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line == f"diffcoffea: error: {path}: {want}"
    key, what = want.split(": ", 1)
    assert not what.startswith((key.rsplit(".", 1)[-1] + " ", key.rsplit(".", 1)[-1] + ":"))
    assert "[" not in key


def test_a_missing_absolute_file_is_named_once(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "dy.root"
    cfg = edited(_base(), "datasets/dy/files", [str(missing)])
    path = write_config(tmp_path, cfg)
    capsys.readouterr()
    assert main(["evaluate", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line == (f"diffcoffea: error: {path}: datasets.dy.files: no such file "
                    f"'{missing}'")


def test_a_missing_relative_file_says_where_it_was_looked_for(tmp_path, capsys):
    cfg = edited(_base(), "datasets/dy/files", ["data/dy.root"])
    path = write_config(tmp_path, cfg)
    capsys.readouterr()
    assert main(["evaluate", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    line = one_line_error(capsys.readouterr().err)
    looked = tmp_path / "data" / "dy.root"
    assert line.endswith(f"no such file 'data/dy.root' (looked for {looked})")


def test_the_keys_that_read_a_branch_are_dotted(tmp_path):
    from analysis.driver.missing import config_keys

    cfg = _base()
    cfg["systematics"] = [{"name": "isr", "type": "weight", "up": "PSWeight[0]",
                           "down": "PSWeight[2]"}]
    path = write_config(tmp_path, cfg)
    conf = type("C", (), {"source": str(path)})()
    assert config_keys(conf, "PSWeight", "dy") == ["systematics.0.up", "systematics.0.down"]
    assert config_keys(conf, "jet_pt_min", "dy") == ["selection.objects.cuts.0.param"]


@pytest.mark.parametrize("count, want", [
    (-1, "selection.0.count: expected a string or a list, got -1"),
    ({}, "selection.0.count: expected a string or a list, got {}"),
    (["jets", 3], "selection.1.count.1: expected a string, got 3"),
])
def test_a_union_is_one_key_and_one_line(count, want, tmp_path, capsys):
    """``count: str | list[str]``: pydantic's member names (``count.str``,
    ``count.list[str]``) are no keys of the config; the members' lines are one."""
    cfg = yaml.safe_load((REPO / "configs" / "agc_ttbar.yaml").read_text())
    index = int(want.split(".")[1])
    path = write_config(tmp_path, edited(cfg, f"selection/{index}/count", count))
    capsys.readouterr()
    assert main(["evaluate", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    assert one_line_error(capsys.readouterr().err) == f"diffcoffea: error: {path}: {want}"
