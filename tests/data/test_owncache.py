"""analysis.data.owncache.CachedColumns: an own processor's columns read once across passes.

Reference: the same (small) processor without keeping columns (budget 0), on the real ttbar file
through coffea's Runner (iterative): equal outputs, and ``columns`` called once per chunk
over two passes; a budget smaller than one chunk keeps nothing; chunks not from a Runner
(no file UUID) are never kept.
"""

from __future__ import annotations

import os
import warnings

import pytest
from coffea import processor
from coffea.nanoevents import NanoAODSchema

from analysis import stats
from analysis.data import owncache, ownkeys, placement
from analysis.soft import soft_cut
from analysis.testing import assert_derived_close, load_chunk
from tests.chunked_helpers import NANOAOD_WARNINGS

pytestmark = NANOAOD_WARNINGS
TTBAR = "nanoAOD_2015_CMS_Open_Data_ttbar.root"


class Counting(owncache.CachedColumns, processor.ProcessorABC):
    """A small own processor: mean jet pT with a soft cut (JetMomentsProcessor, which
    uses the mix-in too, costs several seconds per pass)."""

    calls = 0

    def __init__(self, theta=None):  # noqa: ANN001
        self.theta = theta or {"jet_pt_min": 30.0}

    def columns(self, events):  # noqa: ANN001, ANN201
        Counting.calls += 1
        return {"pt": stats.from_awkward(events.Jet.pt)}

    def process_columns(self, columns, metadata):  # noqa: ANN001, ANN201
        pt = columns["pt"]

        def fn(theta):  # noqa: ANN001, ANN202
            return {"pt": stats.moments(pt, weight=soft_cut(pt, ">", theta["jet_pt_min"], 5.0))}

        return {metadata["dataset"]: stats.derive(fn, self.theta)}

    def postprocess(self, accumulator):  # noqa: ANN001, ANN201
        return accumulator


def _run(path, proc):  # noqa: ANN001, ANN202
    import coffea.util

    coffea.util.coffea_console.quiet = True
    runner = processor.Runner(executor=processor.IterativeExecutor(status=False),
                              schema=NanoAODSchema, chunksize=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return runner({"ttbar": [str(path)]}, proc, treename="Events")["ttbar"]


@pytest.mark.slow
def test_columns_read_once_across_passes(shared_data) -> None:  # noqa: ANN001
    path = shared_data / TTBAR
    owncache.clear_cache()
    Counting.calls = 0
    first = _run(path, Counting({"jet_pt_min": 30.0}))
    chunks = Counting.calls
    assert chunks >= 3  # 200 events in chunks of about 60
    second = _run(path, Counting({"jet_pt_min": 40.0}))
    assert Counting.calls == chunks  # the second pass reads nothing
    info = owncache.cache_info()
    assert info["hits"] == chunks and info["chunks"] == chunks and info["bytes"] > 0
    plain = Counting({"jet_pt_min": 40.0})
    plain.column_budget = 0  # keeps nothing: the reference
    reference = _run(path, plain)
    assert Counting.calls == 2 * chunks
    assert_derived_close(reference, second, rtol=1e-13)
    with pytest.raises(AssertionError):  # the two passes differ: the comparison can fail
        assert_derived_close(reference, first, rtol=1e-13)


@pytest.mark.slow
def test_budget_and_chunks_without_uuid(shared_data) -> None:  # noqa: ANN001
    path = shared_data / TTBAR
    owncache.clear_cache()
    Counting.calls = 0
    small = Counting()
    small.column_budget = 1000  # less than one chunk
    _run(path, small)
    chunks = Counting.calls
    _run(path, small)
    assert Counting.calls == 2 * chunks and owncache.cache_info()["chunks"] == 0
    events = load_chunk(path, entry_stop=40)  # no fileuuid in its metadata
    Counting().process(events)
    Counting().process(events)
    assert Counting.calls == 2 * chunks + 2 and owncache.cache_info()["chunks"] == 0


# --- CachedRunner: later passes from the kept columns, without coffea's Runner --------


class Plain(processor.ProcessorABC):
    """Not a CachedColumns processor: CachedRunner always runs the Runner."""

    def process(self, events):  # noqa: ANN001, ANN201
        return {"n": len(events)}

    def postprocess(self, accumulator):  # noqa: ANN001, ANN201
        return accumulator


def _runner(chunksize: int, metadata_cache=None):  # noqa: ANN001, ANN202
    import coffea.util

    coffea.util.coffea_console.quiet = True
    return processor.Runner(executor=processor.IterativeExecutor(status=False),
                            schema=NanoAODSchema, chunksize=chunksize,
                            metadata_cache=metadata_cache)


def _reference(fileset, theta, chunksize):  # noqa: ANN001, ANN202
    """The plain Runner, nothing kept, coffea's file metadata read afresh."""
    plain = Counting(theta)
    plain.column_budget = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _runner(chunksize, metadata_cache={})(fileset, plain, treename="Events")


def _passes(fileset, chunksize):  # noqa: ANN001, ANN202
    """A CachedRunner's first pass (the Runner) and second pass (the kept columns)."""
    run = owncache.CachedRunner(_runner(chunksize))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = run(fileset, Counting({"jet_pt_min": 30.0}), treename="Events")
        assert run.last == "runner" and "not kept" in run.why
        calls = Counting.calls
        second = run(fileset, Counting({"jet_pt_min": 40.0}), treename="Events")
    assert run.last == "cached", run.why
    assert Counting.calls == calls  # nothing read
    return run, first, second


def _assert_same(want, got) -> None:  # noqa: ANN001
    assert sorted(want) == sorted(got)
    for dataset in want:
        assert_derived_close(want[dataset], got[dataset], rtol=1e-12)


@pytest.mark.parametrize("chunksize", [45, 100])
def test_cached_runner_equals_the_runner_on_the_real_file(shared_data, chunksize) -> None:  # noqa: ANN001
    fileset = {"ttbar": [str(shared_data / TTBAR)]}
    owncache.clear_cache()
    _, first, second = _passes(fileset, chunksize)
    _assert_same(_reference(fileset, {"jet_pt_min": 40.0}, chunksize), second)
    with pytest.raises(AssertionError):  # other parameters: the comparison can fail
        _assert_same(second, first)


@pytest.mark.parametrize("chunksize", [700, 1600])
def test_cached_runner_equals_the_runner_on_generated_data(tmp_path, chunksize) -> None:  # noqa: ANN001
    from analysis.data.generate import ensure_dataset

    fileset = {
        "ttbar": [str(f) for f in ensure_dataset(tmp_path / "tt", process="ttbar",
                                                  n_events=2500, n_files=2, seed=3)],
        "dy": [str(f) for f in ensure_dataset(tmp_path / "dy", process="dy",
                                               n_events=1500, n_files=1, seed=4)],
    }
    owncache.clear_cache()
    _, _, second = _passes(fileset, chunksize)
    _assert_same(_reference(fileset, {"jet_pt_min": 40.0}, chunksize), second)


def test_cached_runner_falls_back_when_a_file_changed(tmp_path) -> None:  # noqa: ANN001
    """The generator writes a file of the same name and UUID (its UUID depends on the
    process, seed and file index): rewritten with more events, the kept columns and
    coffea's metadata of the old file (200 entries, where the new one has 300) must not
    be used."""
    from analysis.data.generate import ensure_dataset

    files = ensure_dataset(tmp_path, process="ttbar", n_events=200, n_files=1, seed=5)
    fileset = {"ttbar": [str(f) for f in files]}
    owncache.clear_cache()
    run, _, _ = _passes(fileset, 60)
    assert ensure_dataset(tmp_path, process="ttbar", n_events=300, n_files=1, seed=5) == files
    theta = {"jet_pt_min": 35.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        changed = run(fileset, Counting(theta), treename="Events")
        assert run.last == "runner" and "changed" in run.why
        again = run(fileset, Counting(theta), treename="Events")
    assert run.last == "cached"
    reference = _reference(fileset, theta, 60)
    _assert_same(reference, changed)
    _assert_same(reference, again)
    assert float(again["ttbar"].value["pt"].sumw) > 0


def test_cached_runner_runs_the_runner_for_other_processors(shared_data) -> None:  # noqa: ANN001
    fileset = {"ttbar": [str(shared_data / TTBAR)]}
    run = owncache.CachedRunner(_runner(100))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert run(fileset, Plain(), treename="Events") == {"n": 200}
    assert run.last == "runner" and "not a CachedColumns" in run.why
    small = Counting()
    small.column_budget = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(fileset, small, treename="Events")
        run(fileset, small, treename="Events")
    assert run.last == "runner" and "column_budget" in run.why
    futures = owncache.CachedRunner(processor.Runner(
        executor=processor.FuturesExecutor(workers=1, status=False), schema=NanoAODSchema))
    assert futures._unsupported(Counting()) == (
        "the Runner's FuturesExecutor keeps columns in its workers")


def test_a_touched_file_is_read_again(tmp_path, shared_data) -> None:  # noqa: ANN001
    """Through the plain Runner (coffea keeps the file's UUID and entries for the
    session): a file whose modification time changed is read again, chunk by chunk."""
    import shutil

    path = tmp_path / TTBAR
    shutil.copyfile(shared_data / TTBAR, path)
    owncache.clear_cache()
    Counting.calls = 0
    _run(path, Counting())
    chunks = Counting.calls
    _run(path, Counting())
    assert Counting.calls == chunks
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    _run(path, Counting())
    assert Counting.calls == 2 * chunks
    _run(path, Counting())
    assert Counting.calls == 2 * chunks and owncache.cache_info()["chunks"] == chunks


# --- CachedRunner on dask: later passes from the kept columns of the workers -----------


@pytest.fixture(scope="module")
def dask_client():  # noqa: ANN201
    """A LocalCluster of 2 worker processes, shared by this module's dask tests (its
    start-up costs seconds)."""
    from dask.distributed import Client, LocalCluster

    # Workers compute in float64 only if they inherit JAX_ENABLE_X64 (set by `analysis`).
    assert os.environ.get("JAX_ENABLE_X64") == "1"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        yield client


def _dask_run(client, chunksize):  # noqa: ANN001, ANN202
    import coffea.util

    coffea.util.coffea_console.quiet = True
    owncache.clear_cache(client=client)
    return owncache.CachedRunner(processor.Runner(
        executor=processor.DaskExecutor(client=client, status=False, worker_affinity=True),
        schema=NanoAODSchema, chunksize=chunksize))


def _drop_one() -> None:
    """In a worker: drop its least recently used kept chunk."""
    store = placement.store(owncache.OWN_STORE)
    store.discard(store.keys()[0])


def _misses(client) -> int:  # noqa: ANN001
    return sum(i["misses"] for i in client.run(owncache.cache_info).values())


@pytest.mark.slow
def test_cached_runner_on_dask_equals_the_runner(shared_data, dask_client) -> None:  # noqa: ANN001
    """Pass 2 from the workers' kept columns equals the plain iterative Runner; a chunk
    dropped from a worker's cache makes the next pass run the Runner (and read it)."""
    fileset = {"ttbar": [str(shared_data / TTBAR)]}
    run = _dask_run(dask_client, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = run(fileset, Counting({"jet_pt_min": 30.0}), treename="Events")
        assert run.last == "runner" and "10 of 10 chunks not kept on the dask" in run.why
        misses = _misses(dask_client)
        assert misses == 10  # 200 events in chunks of 20
        second = run(fileset, Counting({"jet_pt_min": 40.0}), treename="Events")
        assert run.last == "cached", run.why
        # coffea's worker_affinity spreads these chunks over both workers (a hash)
        assert run.why == "10 chunks from the kept columns of 2 dask workers"
        assert _misses(dask_client) == misses  # nothing read
        _assert_same(_reference(fileset, {"jet_pt_min": 40.0}, 20), second)
        with pytest.raises(AssertionError):  # other parameters: the comparison can fail
            _assert_same(second, first)
        # one chunk dropped from a worker's kept columns (the others still kept): the
        # Runner runs and reads it again
        holder = next(a for a, i in dask_client.run(owncache.cache_info).items()
                      if i["chunks"])
        dask_client.run(_drop_one, workers=[holder])
        third = run(fileset, Counting({"jet_pt_min": 35.0}), treename="Events")
        assert run.last == "runner" and "not kept on the dask workers" in run.why
        _assert_same(_reference(fileset, {"jet_pt_min": 35.0}, 20), third)
        run(fileset, Counting({"jet_pt_min": 35.0}), treename="Events")
        assert run.last == "cached", run.why
    # one drop reaches every worker's store (analysis.data.placement)
    kept = sum(i["chunks"] for i in dask_client.run(owncache.cache_info).values())
    assert kept >= 10 and owncache.clear_cache(client=dask_client) == kept
    assert {i["chunks"] for i in dask_client.run(owncache.cache_info).values()} == {0}


@pytest.mark.slow
def test_cached_runner_on_dask_falls_back_when_a_file_changed(tmp_path, dask_client) -> None:  # noqa: ANN001
    """As test_cached_runner_falls_back_when_a_file_changed, the columns kept in the
    workers: the rewritten file (same name and UUID, 300 entries where the old had 200)
    is chunked and read afresh by the Runner."""
    from analysis.data.generate import ensure_dataset

    files = ensure_dataset(tmp_path, process="ttbar", n_events=200, n_files=1, seed=5)
    fileset = {"ttbar": [str(f) for f in files]}
    run = _dask_run(dask_client, 60)
    theta = {"jet_pt_min": 35.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(fileset, Counting(theta), treename="Events")
        run(fileset, Counting(theta), treename="Events")
        assert run.last == "cached", run.why
        assert ensure_dataset(tmp_path, process="ttbar", n_events=300, n_files=1,
                              seed=5) == files
        changed = run(fileset, Counting(theta), treename="Events")
        assert run.last == "runner" and "files changed" in run.why
        again = run(fileset, Counting(theta), treename="Events")
    assert run.last == "cached", run.why
    reference = _reference(fileset, theta, 60)
    _assert_same(reference, changed)
    _assert_same(reference, again)


@pytest.mark.slow
def test_cached_runner_on_dask_with_a_class_defined_in_a_function(tmp_path, dask_client) -> None:  # noqa: ANN001
    """cloudpickle sends a class defined in a function by value, and the workers get it
    back under its bare name: the chunk keys must be the ones the workers make."""
    from analysis.data.generate import ensure_dataset

    class Local(Counting):
        pass

    fileset = {"ttbar": [str(f) for f in ensure_dataset(tmp_path, process="ttbar",
                                                         n_events=300, n_files=1, seed=6)]}
    run = _dask_run(dask_client, 100)
    theta = {"jet_pt_min": 35.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(fileset, Local(theta), treename="Events")
        second = run(fileset, Local(theta), treename="Events")
    assert run.last == "cached", run.why
    _assert_same(_reference(fileset, theta, 100), second)


def test_a_worker_serves_only_what_it_keeps() -> None:
    """A dask worker asked for chunks it does not keep computes nothing and reports none
    of them (the driver then runs the Runner) instead of reading them."""
    owncache.clear_cache()
    metadata = {"dataset": "d", "filename": "x", "treename": "Events", "entrystart": 0,
                "entrystop": 10, "fileuuid": "u"}
    store = owncache._store(Counting())
    assert owncache._serve_kept(store, Counting(), [metadata]) == ([], [])
    assert ownkeys.kept_here(store, Counting(), [metadata]) == ([], [])


class ByMetadata(owncache.CachedColumns, processor.ProcessorABC):
    """Event weights as the fileset's metadata says: genWeight for MC, 1 for data."""

    def columns(self, events):  # noqa: ANN001, ANN201
        import numpy as np

        if events.metadata.get("isMC"):
            return {"w": np.asarray(events.genWeight, dtype=np.float64)}
        return {"w": np.ones(len(events), dtype=np.float64)}

    def process_columns(self, columns, metadata):  # noqa: ANN001, ANN201
        return {metadata["dataset"]: float(columns["w"].sum())}

    def postprocess(self, accumulator):  # noqa: ANN001, ANN201
        return accumulator


def test_key_holds_the_dataset_and_its_metadata(shared_data) -> None:  # noqa: ANN001
    """Two datasets on one file, MC (genWeight) and data (unit weights): each its own
    columns, in the Runner's first pass and through CachedRunner (issue 54: the data
    got the MC's genWeight sum)."""
    import coffea.util
    import numpy as np
    import uproot

    path = str(shared_data / "nano_dy.root")
    with uproot.open(path) as f:
        tree = f["Events"]
        events, gen = tree.num_entries, float(np.sum(tree["genWeight"].array(library="np")))
    assert gen != events  # else the test could not tell them apart
    fileset = {"mc": {"files": {path: "Events"}, "metadata": {"isMC": True}},
               "data": {"files": {path: "Events"}, "metadata": {"isMC": False}}}
    coffea.util.coffea_console.quiet = True
    runner = processor.Runner(executor=processor.IterativeExecutor(status=False),
                              schema=NanoAODSchema, chunksize=30)
    cached = owncache.CachedRunner(runner)
    owncache.clear_cache()
    for _ in range(2):  # the Runner's pass, then the kept columns
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = cached(fileset, ByMetadata(), treename="Events")
        assert out["data"] == pytest.approx(events) and out["mc"] == pytest.approx(gen)
    assert cached.last == "cached"


def test_key_without_a_description_keeps_nothing() -> None:
    proc = ByMetadata()
    meta = {"fileuuid": "u", "treename": "Events", "entrystart": 0, "entrystop": 5,
            "dataset": "d", "filename": "/a.root"}
    assert ownkeys.own_key(proc, {**meta, "x": object()}) is None
    same = ownkeys.own_key(proc, {**meta, "filename": "/b.root", "tags": {"b": 1, "a": [2]}})
    assert same == ownkeys.own_key(proc, {**meta, "tags": {"a": [2], "b": 1}})
    assert ownkeys.own_key(proc, meta) != ownkeys.own_key(proc, {**meta, "dataset": "e"})
