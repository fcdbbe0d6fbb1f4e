"""benchmarks/bench_params.py runs end to end at a tiny size (so that it cannot rot): both
passes on numba (12 parameters in blocks of tangents), the ratio printed and recorded; the
reverse-mode step over two sets with a learned score (159 parameters) on numba beside its
value pass."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # 56 s: two states passes with numba kernels compiled at 4 and 12 lanes' blocks
def test_bench_params_tiny(capsys):
    bench = load_script(ROOT / "benchmarks" / "bench_params.py")
    out = bench.main(["--events", "600", "--chunksize", "300", "--repeat", "1"])
    rev = out["reverse"]
    assert {r["backend"] for r in rev["rows"].values()} == {"numba"}
    assert rev["rows"]["reverse step"]["trainable"] > 100 and rev["ratio"] > 0
    out = out["params"]
    rows = out["rows"]
    assert [rows[k]["trainable"] for k in ("4 parameters", "12 parameters")] == [4, 12]
    assert {r["backend"] for r in rows.values()} == {"numba"}
    assert out["ratio"] > 0 and out["peak_gb"] > 0
    printed = capsys.readouterr().out
    assert "600 events (ttbar, Poisson(6) jets), 2 chunks of <= 300" in printed
    assert "ratio 12 / 4 parameters = " in printed
    assert "ratio reverse step / value pass = " in printed
    record = Path(os.environ["DIFFCOFFEA_BENCH_RESULTS"]) / "params.twelve_vs_four.json"
    entry = json.loads(record.read_text())
    assert entry["command"] == ("python benchmarks/bench_params.py --events 600 --chunksize 300 "
                                "--repeat 1")
    assert entry["details"]["12 parameters backend"] == "numba"
    entry = json.loads((record.parent / "params.reverse_vs_values.json").read_text())
    assert entry["details"]["reverse step backend"] == "numba"
