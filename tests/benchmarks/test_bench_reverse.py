"""benchmarks/bench_reverse.py runs end to end at a tiny size (so that it cannot rot), and
its threshold-table mode's reverse-mode gradient is forward mode's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # ~22 s: forward mode at P = 100 and the compilations


def test_threshold_table_reverse_equals_forward(capsys):
    bench = load_script(ROOT / "benchmarks" / "bench_reverse.py")
    rows = bench.main(["--table", "--events", "600", "--chunks", "3", "--repeat", "1",
                       "--params", "4", "100"])
    assert [rows[p]["P"] for p in (4, 100)] == [4, 100]
    assert [rows[p]["auto_mode"] for p in (4, 100)] == ["forward", "reverse"]
    for p in (4, 100):  # both modes ran: the gradients agree (largest entry's scale)
        assert rows[p]["agree"] < 1e-12, rows[p]
    out = capsys.readouterr().out
    assert "reverse step / value pass over every P:" in out

    # the table is the cut: each jet's threshold is its eta bin's entry
    theta = bench.theta_for(100, table=True)
    assert set(theta) == {"pt_table", "eta_max", "btag_min", "pt_max"}
    assert np.shape(theta["pt_table"]) == (97,)
