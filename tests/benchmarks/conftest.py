"""The benchmarks' tests run them at tiny sizes: their figures go to a temporary folder,
never over the result files in benchmarks/results that the docs show."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _results_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFCOFFEA_BENCH_RESULTS", str(tmp_path / "bench-results"))
