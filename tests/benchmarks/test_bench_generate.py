"""benchmarks/bench_generate.py runs end to end at a tiny size (so that it cannot rot)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_bench_generate_tiny(capsys):
    bench = load_script(ROOT / "benchmarks" / "bench_generate.py")
    times = bench.main(["--events", "2000", "--files", "2", "--repeat", "1"])
    out = capsys.readouterr().out
    assert out.startswith("2000 events, 2 files")
    assert "write_dataset (generate + write)" in out and "ratio: " in out
    assert all(t > 0 for t in times.values())
