"""Chunk- and executor-invariance of ``evaluate`` on the shared real NanoAOD files.

Three datasets (ttbar 2015 Open Data: 200 events, DY: 40, an empty file: 0) with soft
pt and |eta| cuts, a soft ">= min_jets jets" event cut and all statistics. Every
value and gradient in results.json must agree to 1e-10 relative with the whole-file
iterative run, for chunk sizes 7, 50 and whole-file on the iterative, futures and
dask executors. Executors start slowly and every chunk re-reads TTree metadata
(~0.3-0.5 s), so chunk size 7 (36 chunks) runs once, on futures, and the dask
cluster is started once for two passes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from analysis.cli.parser import main
from analysis.config.loader import load_config
from analysis.driver.runner import Evaluator
from analysis.pipeline.results import dataset_report
from tests.chunked_helpers import (
    BIVARIATE,
    DY_EVENTS,
    LINEAR_FIT_PARTS,
    NANOAOD_WARNINGS,
    TTBAR_EVENTS,
    UNIVARIATE,
    analysis_config,
    differences,
    flatten,
    is_finite_number,
)
from tests.conftest import write_config

WHOLE_FILE = 1_000_000
EXPECTED_EVENTS = {"ttbar": TTBAR_EVENTS, "dy": DY_EVENTS, "empty": 0}

pytestmark = NANOAOD_WARNINGS


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("invariance"), analysis_config())


def _evaluate(config_path: Path, out: Path, *extra: str) -> dict[str, Any]:
    rc = main(["evaluate", str(config_path), "--output", str(out), "--quiet", *extra])
    assert rc == 0
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def reference(config_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Whole-file iterative run through the command line: the reference for all others."""
    out = tmp_path_factory.mktemp("reference")
    return _evaluate(config_path, out, "--executor", "iterative", "--chunksize", str(WHOLE_FILE))


#: what the command line adds to a dataset's entry (a pass of its own, not a statistic)
CLI_ONLY = ("hard_events", "reliable", "warning")


def _assert_matches(reference: dict[str, Any], datasets: dict[str, Any]) -> None:
    assert list(datasets) == list(EXPECTED_EVENTS)
    if not any(key in d for d in datasets.values() for key in CLI_ONLY):  # dataset_report's
        reference = {"datasets": {
            n: {k: v for k, v in d.items() if k not in CLI_ONLY}
            for n, d in reference["datasets"].items()
        }}
    # "chunks" is the one entry that legitimately depends on the chunking.
    diffs = differences(reference["datasets"], datasets, rtol=1e-10, skip=("chunks",))
    assert not diffs, "\n".join(diffs[:20])


def test_reference_events_and_empty_dataset(reference: dict[str, Any]) -> None:
    data = reference["datasets"]
    assert {name: d["events"] for name, d in data.items()} == EXPECTED_EVENTS
    assert reference["trainable"] == ["jet_pt_min", "jet_abs_eta_max"]

    # The empty file contributes no events: zero yields, undefined (null) statistics,
    # and finite (zero) gradients rather than NaN.
    empty = data["empty"]
    assert empty["sumw"] == 0.0 and empty["selected_sumw"] == 0.0
    stats = dict(flatten(empty["observables"]))
    values = {k: v for k, v in stats.items() if k.endswith("/value")}
    grads = {k: v for k, v in stats.items() if "/grad/" in k}
    assert len(values) == 2 * len(UNIVARIATE) + 2 + len(LINEAR_FIT_PARTS)
    assert all(v is None for v in values.values()), values
    assert grads and all(g == 0.0 for g in grads.values()), grads
    for key in ("selected_sumw_grad", "selected_sumw2_grad"):
        assert all(g == 0.0 for g in empty[key].values())

    # The real datasets have every statistic defined, with non-trivial gradients
    # (otherwise the invariance comparisons below would compare zeros).
    for name in ("ttbar", "dy"):
        # (a small selection's "warning" is text: dy has 40 events)
        leaves = {k: v for k, v in flatten(data[name]) if k != "warning"}
        assert all(is_finite_number(v) for v in leaves.values()), name
        obs = data[name]["observables"]
        assert set(obs["jet_pt"]) == set(UNIVARIATE) and set(obs["ht"]) == set(UNIVARIATE)
        assert set(obs["jet_pt_eta"]) == set(BIVARIATE)
        for stat in UNIVARIATE:
            assert obs["jet_pt"][stat]["grad"]["jet_pt_min"] != 0.0
            assert obs["ht"][stat]["grad"]["jet_abs_eta_max"] != 0.0
    ttbar = data["ttbar"]
    assert ttbar["chunks"] == 1
    assert 0 < ttbar["selected_sumw"] < ttbar["sumw"]
    assert math.isfinite(ttbar["observables"]["jet_pt_eta"]["linear_fit"]["slope"]["value"])


def test_iterative_chunksize_50(config_path: Path, reference: dict, tmp_path: Path) -> None:
    result = _evaluate(config_path, tmp_path, "--executor", "iterative", "--chunksize", "50")
    assert result["executor"]["chunks"] >= 4 + 1  # 200/50 ttbar chunks, DY, the empty file
    assert result["datasets"]["ttbar"]["chunks"] == 4
    _assert_matches(reference, result["datasets"])


@pytest.mark.slow
def test_futures_chunksize_7(config_path: Path, reference: dict, tmp_path: Path) -> None:
    result = _evaluate(
        config_path, tmp_path, "--executor", "futures", "--workers", "2", "--chunksize", "7"
    )
    assert result["datasets"]["ttbar"]["chunks"] >= 200 // 7
    assert result["datasets"]["dy"]["chunks"] >= 40 // 7
    _assert_matches(reference, result["datasets"])


@pytest.mark.slow
def test_futures_whole_file(config_path: Path, reference: dict, tmp_path: Path) -> None:
    result = _evaluate(
        config_path,
        tmp_path,
        "--executor",
        "futures",
        "--workers",
        "2",
        "--chunksize",
        str(WHOLE_FILE),
    )
    _assert_matches(reference, result["datasets"])


def test_dask_chunksize_50_and_whole_file(config_path: Path, reference: dict) -> None:
    config = load_config(config_path)
    # The whole-file work items, to run them on the same (slow to start) dask cluster.
    whole = Evaluator(config, executor="iterative", chunksize=WHOLE_FILE).chunks
    with Evaluator(config, executor="dask", workers=2, chunksize=50) as ev:
        for items, ttbar_chunks in ((None, 4), (whole, 1)):
            states = ev.run(chunks=items)
            assert states["ttbar"].chunks == ttbar_chunks
            datasets = {name: dataset_report(states[name], ev.plan) for name in EXPECTED_EVENTS}
            _assert_matches(reference, datasets)
