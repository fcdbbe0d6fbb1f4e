"""benchmarks/bench_memory.py, bench_optimize.py and bench_dask.py run end to end at a tiny
size (so that they cannot rot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [*NANOAOD_WARNINGS, pytest.mark.slow]


def _bench(name: str):
    return load_script(ROOT / "benchmarks" / f"{name}.py")


def test_bench_memory_tiny(tmp_path, capsys):
    argv = ["--events", "4000", "--file-events", "1000", "--chunksize", "1000", "--passes", "1"]
    assert (
        _bench("bench_memory").main([*argv, "--cache-mb", "0.05", "--data-dir", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| 4000 |"))
    # 4 chunks, most of them spilled (a budget of 50 kB), none on workers
    chunks = row.split("|")[2].strip()
    assert chunks.startswith("4 (") and chunks.endswith("/0)") and not chunks.endswith("/0/0)")
    assert "largest peak = " in out


def test_bench_optimize_tiny(tmp_path, capsys):
    argv = ["--events", "4000", "--files", "2", "--chunksize", "1000", "--steps", "2"]
    assert _bench("bench_optimize").main([*argv, "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| 2 (compiled) |" in out
    assert "whole / sum of steps, compiled = " in out
    assert "final soft + hard evaluations" in out
    assert "the histograms' pass" in out and "waiting for the plot workers" in out


def test_bench_dask_tiny(tmp_path, capsys):
    argv = ["--events", "4000", "--files", "2", "--chunksize", "500", "--repeat", "1"]
    assert _bench("bench_dask").main([*argv, "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "8 chunks of <= 500" in out
    assert "|       2 |" in out and "4/4 |" in out  # evened out over the 2 workers
    assert "largest relative difference 1 vs 2 workers = " in out
