"""benchmarks/bench_awkward_path.py runs end to end at a tiny size (so that it cannot rot),
and its agreement check can fail."""

from __future__ import annotations

from pathlib import Path

import awkward as ak
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load_script(ROOT / "benchmarks" / "bench_awkward_path.py")


def test_bench_awkward_path_tiny(bench, capsys):
    assert bench.main(["--events", "500", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "500 events, " in out and "load average" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "True" in line]
    assert len(rows) == 6  # every call, each agreeing with awkward


def test_agree_detects_a_difference(bench):
    a = ak.Array([[1.0, 2.0], [3.0]])
    assert bench.agree(a, a)
    assert not bench.agree(a, ak.Array([[1.0, 2.0], [3.0 + 1e-6]]))
    assert bench.agree(ak.Array([float("nan")]), ak.Array([float("inf")]))  # documented rule
    assert not bench.agree(ak.Array([float("nan")]), ak.Array([1.0]))
