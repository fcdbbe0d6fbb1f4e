"""benchmarks/bench_rerun.py runs end to end at a tiny size (so that it cannot rot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # two fresh processes, each compiling or loading kernels


def test_bench_rerun_tiny(tmp_path, capsys):
    bench = load_script(ROOT / "benchmarks" / "bench_rerun.py")
    result = bench.main(["--events", "4000", "--files", "2", "--steps", "2",
                         "--data-dir", str(tmp_path)])
    first, second = result["runs"]
    assert len(first["steps_s"]) == len(second["steps_s"]) == 2
    # the second process loads what the first compiled: its first step is the faster
    assert second["steps_s"][0] < first["steps_s"][0]
    assert "second run's first step / plain coffea pass = " in capsys.readouterr().out
