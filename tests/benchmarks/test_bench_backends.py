"""benchmarks/bench_backends.py runs end to end at a tiny size (so that it cannot rot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [*NANOAOD_WARNINGS]


@pytest.mark.slow
def test_bench_backends_tiny(tmp_path, capsys):
    bench = load_script(ROOT / "benchmarks" / "bench_backends.py")
    argv = ["--events", "2000", "--chunksize", "1000", "--repeat", "1",
            "--data-dir", str(tmp_path)]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "| numba | cpu |" in out and "| jax | cpu |" in out


@pytest.mark.parametrize("value", ["cuda:0", "numba:cpu", "jax"])
def test_bench_backends_refuses_an_unknown_pair(value, capsys):
    """``--backends`` names only the timed JAX runs (numba on the CPU is the reference,
    always run); anything else stops before any data is made, naming the value."""
    bench = load_script(ROOT / "benchmarks" / "bench_backends.py")
    with pytest.raises(SystemExit) as stop:
        bench.main(["--backends", value])
    assert stop.value.code == 2
    assert f"expected jax:cpu and/or jax:gpu, got '{value}'" in capsys.readouterr().err
