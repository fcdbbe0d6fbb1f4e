"""A pass that ``auto`` sends to the JAX reference on the CPU is said aloud (issue 49):
one line at the default level (``diffcoffea: warning: ...``: the pass, the numba
backend's reason, the expected cost and how to silence it), once per run however many
passes and chunks; nothing with ``backend: jax`` asked for, nor where numba serves."""

from __future__ import annotations

import warnings
from pathlib import Path

import yaml

from analysis.cli.parser import main
from analysis.config.loader import load_config
from analysis.driver.runner import Evaluator
from analysis.errors import DiffcoffeaWarning

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
WHY = ("histogram 'hj': sets of Jet indexed by two ranking fields (the numba walk takes one "
       "order per collection)")


def with_bjets(data: dict) -> dict:
    """``configs/ttbar.yaml``'s ``data`` with a second object set of the jets (``BJet``,
    b-tagged, ranked by its b-tag) and histograms of the leading jet's and b-jet's pT
    (``hj``, ``hjb``: the numba walk takes one rank order per collection)."""
    sel = data.pop("selection")
    data["objects"] = {"Jet": sel["objects"], "BJet": {"from": "Jet", "rank_by": "btagCSVV2",
                                                       "cuts": [{"var": "btagCSVV2", "op": ">",
                                                                 "value": 0.8, "width": 0.05}]}}
    data["selection"] = sel["events"]
    data["histograms"] = [{"name": "hj", "x": "Jet[0].pt", "edges": [0, 100, 200, 400]},
                          {"name": "hjb", "x": "BJet[0].pt", "edges": [0, 100, 200, 400]}]
    return data


def _config(tmp_path: Path, engine: dict | None = None) -> Path:
    data = with_bjets(yaml.safe_load((CONFIGS / "ttbar.yaml").read_text()))
    if engine is not None:
        data["engine"] = engine
    path = tmp_path / "fallback.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _said(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DiffcoffeaWarning)]


def test_the_fallback_is_said_once_per_run_on_the_command_line(tmp_path, capsys):
    assert main(["evaluate", str(_config(tmp_path)), "-o", str(tmp_path / "a")]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "JAX reference" in ln]
    assert lines == [
        f"diffcoffea: warning: the states pass runs on the JAX reference on the CPU, not "
        f"numba: {WHY}; expect it to be ~50x slower; set `engine: {{backend: jax}}` to "
        "silence"]
    # asked for: silent
    path = _config(tmp_path, {"backend": "jax"})
    assert main(["evaluate", str(path), "-o", str(tmp_path / "b")]) == 0
    assert "JAX reference" not in capsys.readouterr().err


def test_once_per_evaluator_and_silent_where_numba_serves(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # order 1 on the whole file (200 events): the program the command-line test
        # above compiled (~5 s cold for another order or chunk shape)
        with Evaluator(load_config(_config(tmp_path)), chunksize=200) as ev:
            ev.run(order=1)
            ev.run({"jet_pt_min": 35.0}, order=1)  # a second pass: nothing more
        assert len(_said(caught)) == 1 and WHY in _said(caught)[0]
        with Evaluator(load_config(CONFIGS / "ttbar.yaml"), chunksize=200) as ev:
            ev.run(order=1)  # numba serves it
    assert len(_said(caught)) == 1
