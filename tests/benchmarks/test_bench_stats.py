"""benchmarks/bench_stats.py runs end to end at a tiny size (so that it cannot rot), and
the public-API path it times computes the right thing: values against float64 numpy,
the Jacobian against central finite differences of that numpy reference."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench():
    return load_script(ROOT / "benchmarks" / "bench_stats.py")


def test_bench_stats_tiny(bench, capsys):
    argv = ["--events", "2000", "--repeat", "1", "--skip-awkward-jax"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "2000 events, " in out and "load average" in out
    assert "| public API, jit(jacfwd), float64" in out
    assert "| awkward numpy, hard cuts" in out
    assert "awkward JAX backend" not in out  # skipped as asked
    line = next(x for x in out.splitlines() if x.startswith("public API vs float64 numpy"))
    assert float(line.rsplit(" ", 1)[1]) < 1e-10
    assert "public API (value + Jacobian) / awkward numpy (value) = " in out
    assert "(goal <= 0.5: " in out


def test_bench_stats_api_against_numpy_and_finite_differences(bench):
    d = bench.make_data(300, seed=7)
    value, jac = bench.api_method(d)(jnp.asarray(bench.THETA))
    theta = np.asarray(bench.THETA)
    np.testing.assert_allclose(value, bench.numpy_reference(d, theta), rtol=1e-10)
    fd = np.empty((4, 3))
    for i, h in enumerate((1e-3, 1e-5, 1e-5)):  # steps well below each cut's width
        step = np.zeros(3)
        step[i] = h
        up, down = bench.numpy_reference(d, theta + step), bench.numpy_reference(d, theta - step)
        fd[:, i] = (up - down) / (2 * h)
    assert bench.max_rel(jac, fd) < 1e-6
