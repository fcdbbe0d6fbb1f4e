"""One column-cache placement (issue 51): the YAML engine and own processors reach a
dask worker's store, and drop it, the same way (:mod:`analysis.data.placement`).

On an in-process LocalCluster of one worker (cheap; the worker processes of
``test_cache_dask.py`` and ``test_owncache.py`` are slow tests). References: a chunk
kept on the worker and evaluated there equals the same processor on the same columns
here (bit for bit); an own processor's later pass from the worker's kept columns
equals the iterative CachedRunner's (bit for bit: both merge in the Runner's chunk
order); one drop on every worker leaves no store of either token.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from coffea import processor
from coffea.nanoevents import NanoAODSchema

from analysis.data import owncache, placement
from analysis.data.cache import PLACES_KEY, ColumnCache
from analysis.driver.runner import Evaluator, empty_columns
from analysis.driver.workers import evaluate_kept
from analysis.pipeline.job import Job
from analysis.pipeline.request import Request
from processors import DiffProcessor
from tests.cache_helpers import small_config
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.data.test_owncache import Counting
from tests.reference import flatten

pytestmark = NANOAOD_WARNINGS


@pytest.fixture(scope="module")
def client():  # noqa: ANN201
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def fileset(tmp_path_factory):  # noqa: ANN001, ANN201
    """One generated file of 300 events (3 chunks of 100)."""
    from analysis.data.generate import ensure_dataset

    files = ensure_dataset(tmp_path_factory.mktemp("own"), process="ttbar", n_events=300,
                           n_files=1, seed=7)
    return {"ttbar": [str(f) for f in files]}


def _runner(executor):  # noqa: ANN001, ANN202
    return processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=100)


def _size(kept: ColumnCache) -> int:
    return len(kept)


def test_registry_one_store_per_token_and_process() -> None:
    made = placement.store("tok-registry", budget=10)
    assert placement.store("tok-registry") is made and placement.store("tok-none") is None
    with pytest.raises(ValueError, match="kept with evict='spill', asked for evict='drop'"):
        placement.store("tok-registry", budget=10, evict="drop")
    made.pid = -1  # as a forked copy sees it: never used, a new store is made
    assert placement.store("tok-registry") is None
    assert placement.store("tok-registry", budget=10) is not made
    assert placement.drop("tok-registry") == 0 and placement.store("tok-registry") is None
    # an owner's registered cache: found, never closed by a drop (its owner closes it)
    owned = ColumnCache()
    owned.put(("k",), np.zeros(2), nbytes=16)
    placement.register(owned)
    assert placement.store(owned.token) is owned
    assert placement.drop(owned.token) == 0 and owned.holds(("k",))
    owned.close()


def test_yaml_chunk_kept_and_evaluated_on_its_worker(tmp_path, client) -> None:  # noqa: ANN001
    ev = Evaluator(small_config(tmp_path), cache=False)
    theta, w = ev.theta_and_widths()
    proc = DiffProcessor(Job(ev.plan, Request(theta, w), ev.weight_branches))
    cols = empty_columns(ev.plan)
    token = "tok-yaml"  # no driver cache of that token here: the worker keeps the chunk
    out = client.submit(placement.keep_columns, ("k",), cols, token=token,
                        worker_budget=1 << 20, pure=False).result()
    (address,) = client.scheduler_info()["workers"]
    assert out[PLACES_KEY].places == {("k",): address}
    more = client.submit(placement.keep_columns, ("k2",), cols, token=token,
                         worker_budget=1 << 20, pure=False).result()
    assert more[PLACES_KEY].places == {("k2",): address}  # its store, not an owner's
    there = placement.on_worker(client, address, evaluate_kept, token, proc, ("k",), "dy")
    want = proc.evaluate("dy", cols)
    assert there.result()["dy"].events == want["dy"].events == 0
    assert np.array_equal(there.result()["dy"].sumw, want["dy"].sumw)
    missing = placement.on_worker(client, address, evaluate_kept, token, proc, ("x",), "dy")
    assert missing.result() is None  # not kept there: the driver reads it again
    assert placement.on_workers(client, _size, token) == {address: 2}
    assert placement.drop_everywhere(token, client=client) == 2
    assert placement.on_workers(client, _size, token) == {address: None}


def test_own_processor_later_pass_from_its_worker(fileset, client) -> None:  # noqa: ANN001
    theta = {"jet_pt_min": 35.0}

    def passes(executor):  # noqa: ANN001, ANN202
        run = owncache.CachedRunner(_runner(executor))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run(fileset, Counting(theta), treename="Events")
            assert run.last == "runner"
            out = run(fileset, Counting(theta), treename="Events")
        assert run.last == "cached", run.why
        return run, out

    owncache.clear_cache(client=client)
    _, want = passes(processor.IterativeExecutor(status=False))
    assert owncache.clear_cache() == 3
    run, got = passes(processor.DaskExecutor(client=client, status=False, worker_affinity=True))
    assert run.why == "3 chunks from the kept columns of 1 dask workers"
    leaves = [dict(flatten({"value": d.value, "jac": d.jac})) for d in (got["ttbar"], want["ttbar"])]
    assert sorted(leaves[0]) == sorted(leaves[1]) and len(leaves[0]) > 2
    for path, leaf in leaves[0].items():  # bit for bit
        assert np.array_equal(np.asarray(leaf), np.asarray(leaves[1][path])), path
    assert owncache.clear_cache(client=client) == 3  # here and on every worker
    assert placement.on_workers(client, _size, owncache.OWN_STORE) == {
        a: None for a in client.scheduler_info()["workers"]}
    assert owncache.cache_info() == {"hits": 0, "misses": 0, "bytes": 0, "chunks": 0}


class Named(Counting):
    """Counting with the mix-in's options as constructor arguments."""

    def __init__(self, theta=None, **options):  # noqa: ANN001, ANN003
        super().__init__(theta)
        owncache.CachedColumns.__init__(self, **options)


def test_own_processor_store_is_a_constructor_option(fileset) -> None:  # noqa: ANN001
    owncache.clear_cache()
    Counting.calls = 0
    run = _runner(processor.IterativeExecutor(status=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(fileset, Named(column_store="tok-own"), treename="Events")
        run(fileset, Named({"jet_pt_min": 40.0}, column_store="tok-own"), treename="Events")
        assert Counting.calls == 3  # the second pass read nothing
        assert owncache.cache_info("tok-own")["hits"] == 3
        assert owncache.cache_info("tok-own")["chunks"] == 3
        assert owncache.cache_info()["chunks"] == 0  # not in the default store
        run(fileset, Named(column_budget=0, column_store="tok-own"), treename="Events")
    assert Counting.calls == 6  # budget 0: read again, nothing more kept
    assert owncache.clear_cache("tok-own") == 3
    assert owncache.cache_info("tok-own")["chunks"] == 0
