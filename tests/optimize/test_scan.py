"""Grid scan: all points in one pass, equal to separate hard-cut evaluations; the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.cli.parser import main, parse_grid
from analysis.driver.runner import Evaluator
from analysis.errors import DiffcoffeaError
from analysis.optimize.objectives import Objective, objective_from_states
from analysis.optimize.scan import scan
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config

GRID = {
    "jet_pt_min": np.linspace(25.0, 45.0, 5),
    "btag_min": np.linspace(0.1, 0.4, 4),
    "min_jets": np.linspace(1.0, 3.0, 3),
}


@pytest.fixture(scope="module")
def scanned(small_data):
    cfg = H.make_config(small_data)
    ev = Evaluator(cfg)
    ev.chunks  # noqa: B018 - preprocess first: only the scan's own passes are counted
    passes = []
    runner = ev._runner

    def counting_runner():
        passes.append(1)
        return runner()

    ev._runner = counting_runner  # type: ignore[method-assign]
    result = scan(cfg, ev, GRID)
    n_passes = len(passes)
    ev._runner = runner  # type: ignore[method-assign]
    return cfg, ev, result, n_passes


def test_scan_covers_the_grid_in_one_pass(scanned):
    _, _, result, n_passes = scanned
    assert n_passes == 1
    assert result["n_points"] == 5 * 4 * 3
    assert result["parameters"] == list(GRID)
    assert len(result["points"]) == len(result["objective"]) == len(result["significance"]) == 60
    assert {tuple(p) for p in result["points"]} == {
        (a, b, c) for a in GRID["jet_pt_min"] for b in GRID["btag_min"] for c in GRID["min_jets"]
    }


@pytest.mark.parametrize(
    "point", [(25.0, 0.1, 1.0), (30.0, 0.2, 2.0), (45.0, 0.4, 1.0), (30.0, 0.1, 3.0)]
)
def test_scan_equals_separate_hard_cut_evaluations(scanned, point):
    cfg, ev, result, _ = scanned
    points = np.array(result["points"])
    i = int(np.flatnonzero(np.all(np.isclose(points, point, rtol=1e-12), axis=1))[0])
    params = dict(zip(GRID, points[i], strict=True))
    states = ev.run(params, widths=np.zeros(4), order=1)
    alone = objective_from_states(Objective(cfg, ev.plan), states)
    assert result["objective"][i] is not None
    assert result["objective"][i] == pytest.approx(alone["objective"], rel=1e-10)
    assert result["significance"][i] == pytest.approx(alone["significance"], rel=1e-10)


def test_scan_marks_points_without_background_invalid(scanned):
    """A point where no background survives is not a candidate, and alone it is an error."""
    cfg, ev, result, _ = scanned
    empty = [i for i, v in enumerate(result["objective"]) if v is None]
    assert empty, "the grid should reach a point without background"
    params = dict(zip(GRID, result["points"][empty[0]], strict=True))
    states = ev.run(params, widths=np.zeros(4), order=1)
    with pytest.raises(DiffcoffeaError, match="background yield is 0"):
        objective_from_states(Objective(cfg, ev.plan), states)
    best = result["best"]
    valid = [v for v in result["objective"] if v is not None]
    assert best["objective"] == min(valid)
    assert best["significance"] == pytest.approx(-best["objective"], rel=1e-12)


def test_scan_command_writes_the_best_point(small_data, tmp_path, capsys):
    config = write_config(tmp_path / "scan.yaml", H.config_dict(small_data))
    out = tmp_path / "out"
    argv = ["scan", str(config), "-o", str(out), "--quiet"]
    argv += ["--grid", "jet_pt_min=20:60:5", "--grid", "min_jets=1:3:3"]
    assert main(argv) == 0
    result = json.loads((out / "scan.json").read_text())
    assert result["n_points"] == 15
    values = np.array([np.inf if v is None else v for v in result["objective"]])
    best = int(np.argmin(values))
    assert np.isfinite(values[best])
    assert result["best"]["objective"] == values[best]
    assert result["best"]["parameters"] == dict(
        zip(["jet_pt_min", "min_jets"], result["points"][best], strict=True)
    )
    assert result["best"]["parameters"]["min_jets"] in (1.0, 2.0, 3.0)


@pytest.mark.parametrize(
    ("grid", "expect"),
    [
        ("jet_pt_min=20:60", "expected NAME=LOW:HIGH:N"),
        ("jet_pt_min", "expected NAME=LOW:HIGH:N"),
        ("jet_pt_min=a:60:5", "expected NAME=LOW:HIGH:N"),
        ("jet_pt_min=20:60:0", "expected NAME=LOW:HIGH:N"),
        ("jet_pt_min=20:60:2.5", "expected NAME=LOW:HIGH:N"),
        ("jet_pt_min=20:60:5:1", "expected NAME=LOW:HIGH:N"),
        ("jet_pt_mni=20:60:5", "unknown parameter 'jet_pt_mni'"),
    ],
)
def test_bad_grid_exits_2_with_one_line(small_data, tmp_path, capsys, grid, expect):
    config = write_config(tmp_path / "scan.yaml", H.config_dict(small_data))
    capsys.readouterr()
    assert main(["scan", str(config), "-o", str(tmp_path / "out"), "--quiet", "--grid", grid]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert grid in line and expect in line
    assert not (tmp_path / "out" / "scan.json").exists()


def test_scan_without_grid_exits_2(small_data, tmp_path, capsys):
    config = write_config(tmp_path / "scan.yaml", H.config_dict(small_data))
    capsys.readouterr()
    assert main(["scan", str(config), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    assert "--grid" in one_line_error(capsys.readouterr().err)


def test_parse_grid_is_inclusive(small_data):
    grid = parse_grid(["jet_pt_min=20:60:5", "min_jets=1:6:6"], H.make_config(small_data))
    np.testing.assert_array_equal(grid["jet_pt_min"], [20.0, 30.0, 40.0, 50.0, 60.0])
    np.testing.assert_array_equal(grid["min_jets"], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
