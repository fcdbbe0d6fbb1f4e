"""Overflow is an error, not "undefined" (issue 21.5).

With float64 branches one jet of pT 1e300 overflows the centred sums of powers, and a
weight of 1e300 overflows ``sum w^2``: one line naming the dataset, the statistic and
the largest value, exit 2, no numpy warning. An object whose soft weight is exactly 0
(pT -1e300 under a ``pt >`` cut) never changes a result: the results are those of the
file without it (both kernels: the single-collection form and object sets).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import awkward as ak
import jax
import numpy as np
import pytest
import uproot

from analysis.cli.parser import main
from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.conftest import one_line_error, write_config

pytestmark = NANOAOD_WARNINGS


def _write(path: Path, counts, pt, weight) -> Path:
    """A NanoAOD-layout file with float64 jet branches (float32 could not hold 1e300)."""
    counts = np.asarray(counts)
    n = int(counts.sum())
    rng = np.random.default_rng(7)
    tree = {
        "Jet": ak.zip({"pt": ak.unflatten(np.asarray(pt, dtype=np.float64), counts),
                       "eta": ak.unflatten(rng.normal(0, 1, n), counts),
                       "phi": ak.unflatten(np.zeros(n), counts),
                       "mass": ak.unflatten(np.full(n, 5.0), counts)}),
        "genWeight": np.asarray(weight, dtype=np.float64),
    }
    with uproot.recreate(path) as f:
        f.mktree("Events", {k: (v.type if isinstance(v, ak.Array) else v.dtype)
                            for k, v in tree.items()})
        f["Events"].extend(tree)
    return path


def _sample(n: int = 40):
    rng = np.random.default_rng(1)
    counts = np.full(n, 3)
    return counts, rng.uniform(20, 100, counts.sum()), rng.uniform(0.5, 1.5, n)


def _single(path: Path) -> dict[str, Any]:
    return {
        "datasets": {"d": {"files": [str(path)], "weight": "genWeight"}},
        "parameters": {"pt_min": {"init": 30.0, "bounds": [15.0, 60.0]}},
        "selection": {"objects": {"collection": "Jet", "cuts": [
            {"var": "pt", "op": ">", "param": "pt_min", "width": 5.0}]},
            "events": [{"count": "Jet", "op": ">=", "value": 1}]},
        "observables": [{"name": "jet_pt", "x": "Jet.pt", "stats": ["mean", "var", "kurtosis"]},
                        {"name": "ht", "x": "sum(Jet.pt)", "stats": ["mean", "std"]}],
    }


def _sets(path: Path) -> dict[str, Any]:
    return {
        "datasets": {"d": {"files": [str(path)], "weight": "genWeight"}},
        "parameters": {"pt_min": {"init": 30.0, "bounds": [15.0, 60.0]}},
        "objects": {"jets": {"collection": "Jet", "cuts": [
            {"var": "pt", "op": ">", "param": "pt_min", "width": 5.0}]}},
        "selection": [{"count": "jets", "op": ">=", "value": 1}],
        "observables": [{"name": "jet_pt", "x": "jets.pt", "stats": ["mean", "var", "kurtosis"]},
                        {"name": "ht", "x": "sum(jets.pt)", "stats": ["mean", "std"]},
                        {"name": "lead", "x": "jets[0].pt", "stats": ["mean", "var"]}],
    }


@pytest.mark.parametrize("what,edit,message", [
    ("pt 1e300", lambda pt, w: pt.__setitem__(4, 1e300),
     "of observable 'ht' of dataset 'd' overflows float64: the largest value is "
     "Jet_pt = 1e+300 (event 1 of the chunk)"),
    ("weight 1e300", lambda pt, w: w.__setitem__(3, 1e300),
     "statistic selected_sumw2 of dataset 'd' overflows float64: the largest value is "
     "weight = 1e+300 (event 3 of the chunk)"),
])
def test_overflow_is_one_line_naming_dataset_statistic_and_value(
    what, edit, message, tmp_path, capsys
) -> None:
    counts, pt, w = _sample()
    edit(pt, w)
    path = write_config(tmp_path / "c.yaml", _single(_write(tmp_path / "d.root", counts, pt, w)))
    assert main(["evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")]) == 2
    line = one_line_error(capsys.readouterr().err)  # one line: no numpy warning either
    assert "d.root, entries 0-40 (datasets.d): statistic " in line and message in line, line


def _leaves(tree) -> dict[str, Any]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in flat}


@pytest.mark.parametrize("form", [_single, _sets], ids=["single", "sets"])
def test_an_object_of_weight_zero_never_changes_a_result(form, tmp_path) -> None:
    counts, pt, w = _sample()
    pt[4] = -1e300  # sigmoid((-1e300 - 30) / 5) is exactly 0
    bad = _write(tmp_path / "bad.root", counts, pt, w)
    keep = np.ones(len(pt), dtype=bool)
    keep[4] = False
    less = counts.copy()
    less[1] -= 1
    ref = _write(tmp_path / "ref.root", less, pt[keep], w)
    got = Evaluator(config_from_dict(form(bad))).run(order=1)["d"]
    want = Evaluator(config_from_dict(form(ref))).run(order=1)["d"]
    a, b = _leaves(got.taylor()[0]), _leaves(want.taylor()[0])
    assert a.keys() == b.keys()
    for k in a:  # NaN only where the reference has NaN (M3/M4 of an order-2 state)
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-12, err_msg=k)
    ga, gb = _leaves(got.taylor()[1]), _leaves(want.taylor()[1])
    assert ga.keys() == gb.keys()
    for k in ga:
        np.testing.assert_allclose(ga[k], gb[k], rtol=1e-10, atol=1e-10, err_msg=k)
