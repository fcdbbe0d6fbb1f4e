"""benchmarks/bench_pass.py runs end to end at a tiny size (so that it cannot rot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [*NANOAOD_WARNINGS, pytest.mark.slow]


def test_bench_pass_tiny(tmp_path, capsys):
    bench = load_script(ROOT / "benchmarks" / "bench_pass.py")
    argv = ["--events", "4000", "--files", "2", "--chunksize", "1000", "--repeat", "1"]
    assert bench.main([*argv, "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "4000 events in 2 files, 4 chunks of <= 1000, iterative executor" in out
    assert "ratio gradient / plain = " in out
    assert "ratio cached gradient / plain = " in out
    assert "ratio cached gradient / floor = " in out
    # Both passes saw both datasets, and the soft yields are of the hard yields' order.
    for name in ("ttbar", "dy"):
        line = next(x for x in out.splitlines() if x.strip().startswith(f"{name}:"))
        hard, soft = (float(part.split("=")[1]) for part in line.split(":", 1)[1].split(","))
        assert hard > 0 and 0.2 < soft / hard < 5
