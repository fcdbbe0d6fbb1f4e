"""Bad input through the command line: exit code 2 and ONE line naming the culprit.

Config problems (unknown key, wrong type, inverted bounds, negative width, missing
or empty file lists) name the config file and the dotted key; data problems
(unknown collection, field or weight branch) name the data file and the missing
name, with a suggestion. Valid-but-degenerate inputs (an empty file, cuts that
reject everything, a weight branch that is zero) are not errors: undefined
statistics are null with finite gradients. ``--debug`` raises instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot

from analysis.cli.parser import main
from analysis.errors import ConfigError, DiffcoffeaError
from tests.chunked_helpers import (
    DY,
    DY_EVENTS,
    EMPTY,
    NANOAOD_WARNINGS,
    analysis_config,
    flatten,
)
from tests.conftest import one_line_error, write_config

pytestmark = NANOAOD_WARNINGS


def _config(**dataset: Any) -> dict[str, Any]:
    return analysis_config({"dy": {"files": [str(DY)], "weight": "genWeight", **dataset}})


def _run(tmp_path: Path, data: dict[str, Any], *extra: str) -> tuple[int, Path]:
    path = write_config(tmp_path, data)
    rc = main(["evaluate", str(path), "--output", str(tmp_path / "out"), "--quiet", *extra])
    return rc, path


def _set(keys: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        node = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return mutate


def _rename_stats(data: dict[str, Any]) -> None:
    data["observables"][0]["stat"] = data["observables"][0].pop("stats")


CONFIG_ERRORS = {
    "unknown key": (_rename_stats, ["observables.0.stat", "unknown key", "did you mean 'stats'"]),
    "wrong type": (
        _set(["executor", "chunksize"], "big"),
        ["executor.chunksize", "expected an integer", "'big'"],
    ),
    "inverted bounds": (
        _set(["parameters", "jet_pt_min", "bounds"], [200.0, 15.0]),
        ["parameters.jet_pt_min.bounds", "200.0", "15.0"],
    ),
    "negative width": (
        _set(["selection", "objects", "cuts", 0, "width"], -1.0),
        ["selection.objects.cuts.0.width", ">= 0", "-1.0"],
    ),
    "missing file": (
        _set(["datasets", "dy", "files"], ["no_such_file.root"]),
        ["datasets.dy.files", "no_such_file.root"],
    ),
    "empty file list": (
        _set(["datasets", "dy", "files"], []),
        ["datasets.dy.files", "empty file list"],
    ),
}


@pytest.mark.parametrize("case", list(CONFIG_ERRORS))
def test_config_error_is_one_line_naming_file_and_key(case, tmp_path, capsys) -> None:
    mutate, expected = CONFIG_ERRORS[case]
    data = _config()
    mutate(data)
    rc, path = _run(tmp_path, data)
    assert rc == 2
    message = one_line_error(capsys.readouterr().err)
    assert str(path) in message
    for text in expected:
        assert text in message, (text, message)
    assert not (tmp_path / "out" / "results.json").exists()


def test_missing_config_file(tmp_path, capsys) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["evaluate", str(missing), "--quiet"]) == 2
    message = one_line_error(capsys.readouterr().err)
    assert str(missing) in message and "no such file" in message


def _rename_collection(data: dict[str, Any]) -> None:
    data["selection"]["objects"]["collection"] = "Jets"
    data["selection"]["events"][0]["count"] = "Jets"
    for obs in data["observables"]:
        for key in ("x", "y"):
            if key in obs:
                obs[key] = obs[key].replace("Jet", "Jets")


DATA_ERRORS = {
    "unknown collection": (_rename_collection, ["'Jets'", "did you mean 'Jet'"]),
    "unknown field": (_set(["observables", 0, "x"], "Jet.ptt"), ["'ptt'", "did you mean 'pt'"]),
    "unknown cut field": (
        _set(["selection", "objects", "cuts", 0, "var"], "ptt"),
        ["'ptt'", "did you mean 'pt'"],
    ),
    "unknown weight branch": (
        _set(["datasets", "dy", "weight"], "genWeigth"),
        ["'genWeigth'", "did you mean 'genWeight'"],
    ),
}


@pytest.mark.parametrize("case", list(DATA_ERRORS))
def test_data_error_is_one_line_naming_data_file_and_name(case, tmp_path, capsys) -> None:
    mutate, expected = DATA_ERRORS[case]
    data = _config()
    mutate(data)
    rc, _ = _run(tmp_path, data)
    assert rc == 2
    message = one_line_error(capsys.readouterr().err)
    assert str(DY) in message
    for text in expected:
        assert text in message, (text, message)


@pytest.mark.slow
def test_data_error_on_futures_executor_is_one_line(tmp_path, capsys) -> None:
    data = _config(weight="genWeigth")
    rc, _ = _run(tmp_path, data, "--executor", "futures", "--workers", "2")
    assert rc == 2
    assert "genWeigth" in one_line_error(capsys.readouterr().err)


def test_debug_shows_the_traceback(tmp_path) -> None:
    data = _config()
    _rename_stats(data)
    path = write_config(tmp_path, data)
    with pytest.raises(ConfigError, match="did you mean 'stats'"):
        main(["--debug", "evaluate", str(path), "--quiet"])
    data = _config(weight="genWeigth")
    path = write_config(tmp_path, data)
    with pytest.raises(Exception) as info:  # noqa: B017 (coffea may wrap it)
        main(["--debug", "evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")])
    chain, err = [], info.value
    while err is not None:
        chain.append(err)
        err = err.__cause__ or err.__context__
    assert any(isinstance(e, DiffcoffeaError) and "genWeigth" in str(e) for e in chain)


# --- degenerate but valid input -------------------------------------------------------------


def _results(tmp_path: Path) -> dict[str, Any]:
    # Strict JSON (the writer refuses NaN): undefined statistics must be null.
    return json.loads((tmp_path / "out" / "results.json").read_text())


def _assert_null_statistics_with_finite_gradients(dataset: dict[str, Any]) -> None:
    assert dataset["selected_sumw"] == 0.0
    leaves = dict(flatten(dataset["observables"]))
    values = [v for k, v in leaves.items() if k.endswith("/value")]
    grads = [v for k, v in leaves.items() if "/grad/" in k]
    assert values and all(v is None for v in values)
    assert grads and all(g == 0.0 for g in grads)
    assert all(g == 0.0 for g in dataset["selected_sumw_grad"].values())


def test_empty_file_contributes_zero_events(tmp_path, capsys) -> None:
    data = analysis_config(
        {
            "dy": {"files": [str(DY), str(EMPTY)], "weight": "genWeight"},
            "empty": {"files": [str(EMPTY)], "weight": "genWeight"},
        }
    )
    rc, _ = _run(tmp_path, data)
    assert rc == 0, capsys.readouterr().err
    result = _results(tmp_path)["datasets"]
    assert result["dy"]["events"] == DY_EVENTS and result["empty"]["events"] == 0
    assert result["dy"]["observables"]["jet_pt"]["mean"]["value"] is not None
    _assert_null_statistics_with_finite_gradients(result["empty"])


def test_cuts_rejecting_everything_give_null_values(tmp_path, capsys) -> None:
    data = analysis_config(
        {"dy": {"files": [str(DY)], "weight": "genWeight"}}, pt_width=0.0, eta_width=0.0
    )
    # Several chunks: merging states of zero weight must stay finite too.
    rc, _ = _run(tmp_path, data, "--set", "jet_pt_min=1e9", "--chunksize", "10")
    assert rc == 0, capsys.readouterr().err
    result = _results(tmp_path)
    assert result["parameters"]["jet_pt_min"] == 1e9
    assert result["datasets"]["dy"]["events"] == DY_EVENTS
    assert result["datasets"]["dy"]["chunks"] == 4
    _assert_null_statistics_with_finite_gradients(result["datasets"]["dy"])


def _write_zero_weight_file(path: Path, n: int = 30) -> None:
    """A small NanoAOD-layout file whose ``zeroWeight`` branch is 0 for every event."""
    rng = np.random.default_rng(3)
    counts = rng.poisson(3, n)
    jets = ak.zip(
        {
            "pt": ak.unflatten(rng.exponential(40, counts.sum()).astype(np.float32), counts),
            "eta": ak.unflatten(rng.normal(0, 2, counts.sum()).astype(np.float32), counts),
        }
    )
    with uproot.recreate(path) as f:
        f["Events"] = {
            "run": np.ones(n, dtype=np.uint32),
            "luminosityBlock": np.ones(n, dtype=np.uint32),
            "event": np.arange(n, dtype=np.uint64),
            "Jet": jets,
            "zeroWeight": np.zeros(n, dtype=np.float32),
        }


def test_zero_weight_branch_gives_null_values(tmp_path, capsys) -> None:
    _write_zero_weight_file(tmp_path / "zero.root")
    data = analysis_config({"zero": {"files": ["zero.root"], "weight": "zeroWeight"}})
    # A relative file name (resolved next to the config); several chunks to merge.
    rc, _ = _run(tmp_path, data, "--chunksize", "10")
    assert rc == 0, capsys.readouterr().err
    result = _results(tmp_path)["datasets"]["zero"]
    assert result["events"] == 30 and result["sumw"] == 0.0 and result["chunks"] == 3
    _assert_null_statistics_with_finite_gradients(result)


def test_unknown_set_name_is_named_with_a_suggestion(tmp_path, capsys) -> None:
    """A typo in ``--set`` is one line naming the argument and the closest parameter,
    before any file is read (a config parameter and a trainable edge alike)."""
    data = _config()
    data["histograms"] = [{"name": "ht", "x": "sum(Jet.pt)", "edges": [0, 100, 200, 400],
                           "trainable_edges": True}]
    for given, close in (("jet_pt_mn=35", "jet_pt_min"), ("ht.edge[1]=150", "ht.edges[1]")):
        rc, _ = _run(tmp_path, data, "--set", given)
        line = one_line_error(capsys.readouterr().err)
        assert rc == 2
        assert f"--set '{given}': unknown parameter" in line and f"did you mean '{close}'?" in line
