"""analysis.data.owncache.CachedColumns: an own processor's columns read once across passes.

Reference: the same (small) processor without keeping columns (budget 0), on the real ttbar file
through coffea's Runner (iterative): equal outputs, and ``columns`` called once per chunk
over two passes; a budget smaller than one chunk keeps nothing; chunks not from a Runner
(no file UUID) are never kept.
"""

from __future__ import annotations

import warnings

import pytest
from coffea import processor
from coffea.nanoevents import NanoAODSchema

from analysis import stats
from analysis.data import owncache
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
