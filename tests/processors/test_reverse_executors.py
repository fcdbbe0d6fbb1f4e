"""Reverse mode through coffea's Runner (issue 18): an own processor written as in
``examples/own_processor.py`` (``stats.derive(fn, self.theta)`` in ``process``), its
jets weighed by a soft cut on a learned score (an equinox MLP, ~100 parameters) and a
soft pt cut.

* Reverse-mode gradients equal forward-mode gradients (1e-10) with the iterative
  executor, and are the same for one chunk and several (1e-10).
* The futures and dask executors (the pass object travels to their worker processes)
  give the same reverse-mode gradient (1e-10).
"""

from __future__ import annotations

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from coffea import processor
from coffea.nanoevents import NanoAODSchema
from jax.flatten_util import ravel_pytree

from analysis import stats
from analysis.soft import soft_cut

TTBAR = "nanoAOD_2015_CMS_Open_Data_ttbar.root"
STANDARD = stats.Standardisation(np.array([50.0, 0.0, 0.5]), np.array([40.0, 1.5, 0.35]))


class ScoredJets(processor.ProcessorABC):
    def __init__(self, theta):
        self.theta = theta  # {"pt_min": float, "cut": float, "net": stats.MLP}

    def process(self, events):
        pt = stats.from_awkward(events.Jet.pt)
        inputs = [pt, stats.from_awkward(events.Jet.eta), stats.from_awkward(events.Jet.btagCSVV2)]

        def fn(theta):
            s = stats.score(theta["net"], inputs, standard=STANDARD)
            w = soft_cut(s.values, ">", theta["cut"], 0.5) * soft_cut(
                pt.values, ">", theta["pt_min"], 5.0
            )
            return {"jet_pt": stats.moments(pt.values, weight=w), "n": jnp.sum(w)}

        return {events.metadata["dataset"]: stats.derive(fn, self.theta)}

    def postprocess(self, accumulator):
        return accumulator


def theta0():
    return {"pt_min": 30.0, "cut": 0.1, "net": stats.mlp(3, hidden=(8, 8), seed=2)}


def loss(s):
    return (stats.mean(s["jet_pt"]) - 70.0) ** 2 + stats.std(s["jet_pt"]) + 0.05 * s["n"]


def gradient(shared_data, executor, chunksize, mode):
    import coffea.util

    coffea.util.coffea_console.quiet = True
    NanoAODSchema.warn_missing_crossrefs = False
    runner = processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=chunksize)
    fileset = {"ttbar": [str(shared_data / TTBAR)]}

    def run(th):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return runner(fileset, ScoredJets(th), treename="Events")["ttbar"]

    f = stats.differentiable(run, mode=mode)
    value, grad = jax.value_and_grad(lambda th: loss(f(th)))(theta0())
    assert f.passes() == (2 if mode == "reverse" else 1)
    return float(value), np.asarray(ravel_pytree(grad)[0])


@pytest.fixture(scope="module")
def reference(shared_data):
    """Reverse mode, the whole file as one chunk, iterative."""
    return gradient(shared_data, processor.IterativeExecutor(status=False), 100_000, "reverse")


def _close(got, want, what):
    value, grad = got
    assert value == pytest.approx(want[0], rel=1e-12), what
    np.testing.assert_allclose(grad, want[1], rtol=1e-10, atol=1e-12 * np.abs(want[1]).max(), err_msg=what)


@pytest.mark.slow  # ~60 s cold; tests/stats/test_reverse_mode.py checks reverse == forward by default
def test_reverse_equals_forward_and_is_chunk_invariant(shared_data, reference) -> None:
    assert ravel_pytree(theta0())[0].size > 100
    assert np.count_nonzero(reference[1]) > 50
    iterative = processor.IterativeExecutor(status=False)
    _close(gradient(shared_data, iterative, 100_000, "forward"), reference, "forward, one chunk")
    _close(gradient(shared_data, iterative, 60, "reverse"), reference, "reverse, 4 chunks")
    _close(gradient(shared_data, iterative, 60, "forward"), reference, "forward, 4 chunks")


@pytest.mark.slow
def test_futures_and_dask_executors_give_the_same_reverse_gradient(shared_data, reference) -> None:
    futures = processor.FuturesExecutor(workers=2, status=False)
    _close(gradient(shared_data, futures, 60, "reverse"), reference, "futures")

    from dask.distributed import Client, LocalCluster

    assert os.environ.get("JAX_ENABLE_X64") == "1"  # inherited by the dask workers
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        with Client(cluster) as client:
            dask = processor.DaskExecutor(client=client, status=False)
            _close(gradient(shared_data, dask, 60, "reverse"), reference, "dask")
