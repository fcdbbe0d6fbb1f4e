"""benchmarks/bench_trust.py runs end to end at a tiny size (so that it cannot rot): every
config ends no worse than its start, the grid's best bounds the result from above."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # six optimisations and four grids (~3 min)


def test_bench_trust_tiny(tmp_path, shared_data):
    bench = load_script(ROOT / "benchmarks" / "bench_trust.py")
    rows = bench.main(["--events", "2000", "--steps", "3", "--data-dir", str(tmp_path)])
    assert set(rows) == {"generated_2p", "generated_4p", "generated_8p",
                         "generated_likelihood_2p", "real_2p", "real_3p"}
    assert rows["generated_8p"]["params"] == 8
    assert rows["generated_likelihood_2p"]["objective"] == "discovery_significance"
    for name, row in rows.items():
        assert row["final"] >= row["initial"], name  # keep-best: never below the start
        # the grid's best is the best hard-cut point of its parameters (up to its spacing)
        if row["grid"] is not None:
            assert row["final"] <= row["grid"] * 1.05, name
        assert row["passes"] > row["steps"] and row["auto_widths"], name
