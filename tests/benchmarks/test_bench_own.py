"""benchmarks/bench_own.py's check that the futures and dask passes gave the iterative
passes' loss and gradient (the script fails on a broken parallel path, not only slows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


def _result() -> dict:
    # (pt_min, loss, gradient) of each pass, as bench_own's child records them
    iterative = [(30.0, 360.32550375108127, 30.678507881514488),
                 (31.0, 391.87254594608515, 32.414528202395076),
                 (35.0, 535.3030544967619, 39.27711506610355)]
    return {"passes": iterative,
            # the same passes in another order, one summed in another order (1 ulp)
            "dask_passes": [iterative[1], (30.0, 360.32550375108127, 30.67850788151449)]}


def test_same_passes_accepts_the_iterative_figures():
    bench = load_script(ROOT / "benchmarks" / "bench_own.py")
    bench._same_passes(_result(), "dask_")


@pytest.mark.parametrize("index", [1, 2])
def test_same_passes_names_a_differing_loss_or_gradient(index):
    bench = load_script(ROOT / "benchmarks" / "bench_own.py")
    result = _result()
    wrong = list(result["dask_passes"][1])
    wrong[index] *= 1 + 1e-9  # float32 workers or a lost chunk differ far more
    result["dask_passes"][1] = tuple(wrong)
    with pytest.raises(AssertionError, match=r"dask at pt_min 30\.0"):
        bench._same_passes(result, "dask_")
