"""Hand-written processors through coffea's Runner: executors, chunkings, jax.grad, the example.

* The merged ``Derived`` of :class:`JetMomentsProcessor` is the same (1e-10, gradients
  included) for the whole file processed as one chunk and for the iterative, futures
  and dask executors with smaller chunks.
* ``jax.grad`` of a loss of the merged dimuon states through ``stats.differentiable``
  (one Runner pass per gradient) equals central finite differences of the full pass.
* ``examples/own_processor.py`` runs end to end from the repository root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import pytest
from coffea import processor
from coffea.nanoevents import NanoAODSchema

from analysis import stats
from analysis.testing import assert_derived_close
from processors import DimuonProcessor, JetMomentsProcessor
from tests.chunked_helpers import read_events
from tests.opt_helpers import cli_env

ROOT = Path(__file__).resolve().parents[2]
TTBAR = "nanoAOD_2015_CMS_Open_Data_ttbar.root"


def _run(executor, fileset, proc, chunksize: int):
    import coffea.util

    coffea.util.coffea_console.quiet = True
    NanoAODSchema.warn_missing_crossrefs = False
    runner = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=chunksize)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return runner(fileset, proc, treename="Events")


@pytest.fixture(scope="module")
def ttbar_whole(shared_data):
    events = read_events(shared_data / TTBAR)
    events.metadata["dataset"] = "ttbar"
    return JetMomentsProcessor().process(events)["ttbar"]


def test_iterative_executor_chunks_equal_the_whole_file(shared_data, ttbar_whole) -> None:
    fileset = {"ttbar": [str(shared_data / TTBAR)]}
    out = _run(processor.IterativeExecutor(status=False), fileset, JetMomentsProcessor(), 100)
    assert_derived_close(ttbar_whole, out["ttbar"], rtol=1e-10)


@pytest.mark.slow
def test_futures_and_dask_executors_equal_the_whole_file(shared_data, ttbar_whole) -> None:
    fileset = {"ttbar": [str(shared_data / TTBAR)]}
    futures = processor.FuturesExecutor(workers=2, status=False)
    out = _run(futures, fileset, JetMomentsProcessor(), 100)
    assert_derived_close(ttbar_whole, out["ttbar"], rtol=1e-10)

    from dask.distributed import Client, LocalCluster

    # Workers compute in float64 only if they inherit JAX_ENABLE_X64 (set by `analysis`).
    assert os.environ.get("JAX_ENABLE_X64") == "1"
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        with Client(cluster) as client:
            out = _run(
                processor.DaskExecutor(client=client, status=False),
                fileset,
                JetMomentsProcessor(),
                100,
            )
    assert_derived_close(ttbar_whole, out["ttbar"], rtol=1e-10)


@pytest.mark.slow
def test_jax_grad_through_differentiable_equals_finite_differences(shared_data) -> None:
    fileset = {"dy": [str(shared_data / "nano_dy.root")]}
    executor = processor.IterativeExecutor(status=False)

    def run(theta, order=1):
        return _run(executor, fileset, DimuonProcessor(theta, order=order), 20)["dy"]

    f = stats.differentiable(run)

    def loss(theta):
        s = f(theta)
        return stats.mean(s["mass"]) + 0.5 * stats.std(s["mass"]) + s["pairs"]

    theta = {"mu_pt_min": 12.0, "mu_abs_eta_max": 2.2, "mu_iso_max": 0.12}
    value, grad = jax.value_and_grad(loss)(theta)
    assert f.passes() == 1

    def plain(th):
        s = run(th, order=0).value
        return float(stats.mean(s["mass"]) + 0.5 * stats.std(s["mass"]) + s["pairs"])

    assert float(value) == pytest.approx(plain(theta), rel=1e-12)
    widths = DimuonProcessor().widths
    for k in theta:
        h = 1e-3 * widths[k]
        fd = (plain({**theta, k: theta[k] + h}) - plain({**theta, k: theta[k] - h})) / (2 * h)
        assert float(grad[k]) == pytest.approx(fd, rel=1e-6, abs=1e-9), k
        assert grad[k] != 0.0


@pytest.mark.slow
def test_example_script_runs_end_to_end(shared_data) -> None:
    env = cli_env()
    out = subprocess.run(
        [
            sys.executable,
            "examples/own_processor.py",
            "--steps",
            "2",
            "--file",
            str(shared_data / TTBAR),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == 2
    losses = [float(line.split("loss ")[1].split(",")[0]) for line in lines]
    assert losses[1] < losses[0]
