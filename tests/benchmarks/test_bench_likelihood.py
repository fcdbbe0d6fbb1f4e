"""benchmarks/bench_likelihood.py runs end to end at a tiny size (so that it cannot rot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_bench_likelihood_tiny(capsys):
    bench = load_script(ROOT / "benchmarks" / "bench_likelihood.py")
    argv = ["--events", "500", "--bins", "3", "--shapes", "1", "--norms", "1", "--repeat", "1"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "2 channels x 3 bins, 4 samples, 1 lnN + 1 shape nuisances, mc_stat: 8 fitted" in out
    assert "| fit + gradient (4 params, envelope), jitted |" in out
    assert "fit + gradient / step = " in out and "(goal <= 0.2: " in out
