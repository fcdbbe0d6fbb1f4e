"""Column cache and files: a cached pass opens no ROOT file; a file rewritten at the
same path (new UUID) is read again; ``cache: false`` and ``--no-cache`` read every
pass; a chunk that failed is never cached, dropped non-finite entries stay recorded."""

from __future__ import annotations

import numpy as np
import uproot

from analysis.cli.parser import build_parser, make_evaluator
from analysis.data.cache import ColumnCache, uuid_text
from analysis.driver.runner import Evaluator
from tests.cache_helpers import STEPS, OpenCounter, assert_same, small_config, small_files
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.conftest import write_config
from tests.faults_helpers import jets, write_nano

pytestmark = NANOAOD_WARNINGS


def test_second_pass_opens_no_root_file(tmp_path, monkeypatch):
    opens = OpenCounter(monkeypatch)
    with Evaluator(small_config(tmp_path)) as ev:
        at_start = opens.calls  # the driver's file checks
        ev.run(STEPS[0])
        assert opens.calls > at_start  # validation + every chunk
        before = opens.calls
        for params in STEPS[1:]:
            ev.run(params)
        ev.run_histograms(1, 5, -3.0, 3.0, STEPS[1])
        assert opens.calls == before


def test_rewritten_file_is_read_again(tmp_path, monkeypatch):
    files = small_files(tmp_path)
    config = small_config(tmp_path, files)
    shared = ColumnCache()
    with Evaluator(config, cache=shared) as ev:
        old = ev.run(STEPS[1])
        old_uuid = ev.fileset["dy"]["entries"][str(files["dy"])][1]
    assert len(shared) == 8
    write_nano(files["dy"], jets(seed=7))  # same path, new content, new UUID
    opens = OpenCounter(monkeypatch)
    with Evaluator(config, cache=shared) as ev:
        new_uuid = ev.fileset["dy"]["entries"][str(files["dy"])][1]
        assert uuid_text(new_uuid) != uuid_text(old_uuid)
        at_start = opens.calls
        got = ev.run(STEPS[1])
        assert opens.calls > at_start  # the rewritten file was read
        assert len(shared) == 12  # its 4 chunks under the new UUID, beside the old ones
    with Evaluator(config, cache=False) as ev:
        want = ev.run(STEPS[1])
    assert_same(got, want, plan=ev.plan)
    assert_same({"ttbar": got["ttbar"]}, {"ttbar": old["ttbar"]}, plan=ev.plan)
    assert got["dy"].sumw != old["dy"].sumw  # the new content, not the cached old one
    shared.close()


def test_cache_false_reads_every_pass(tmp_path, monkeypatch):
    opens = OpenCounter(monkeypatch)
    with Evaluator(small_config(tmp_path, cache=False)) as ev:
        assert ev.cache is None
        counts = [opens.calls]
        for params in STEPS:
            ev.run(params)
            counts.append(opens.calls)
    # every pass opens every chunk's file (8 chunks)
    assert all(b - a >= 8 for a, b in zip(counts[1:], counts[2:], strict=False))


def test_no_cache_flag(tmp_path):
    path = write_config(
        tmp_path, {"datasets": {"d": {"files": [str(small_files(tmp_path)["dy"])]}}}
    )
    args = build_parser().parse_args(["evaluate", str(path), "--no-cache"])
    from analysis.config.loader import load_config
    with make_evaluator(load_config(path), args) as ev:
        assert ev.cache is None
    args = build_parser().parse_args(["evaluate", str(path)])
    with make_evaluator(load_config(path), args) as ev:
        assert ev.cache is not None


def test_failed_chunk_is_not_cached_and_drops_stay_recorded(tmp_path, monkeypatch):
    import processors.diff_processor as dp

    files = small_files(tmp_path)
    config = small_config(tmp_path, files, skip_bad_files=True)
    real = dp.extract_columns

    def damaged(events, *args, **kwargs):  # the first chunk of dy reads, then fails
        out = real(events, *args, **kwargs)
        if events.metadata["dataset"] == "dy" and events.metadata["entrystart"] == 0:
            raise OSError("read error")
        return out

    monkeypatch.setattr(dp, "extract_columns", damaged)
    with Evaluator(config) as ev:
        ev.run(STEPS[0])
        assert len(ev.cache) == 7  # the failed chunk (non-finite, error policy) is not kept
        skipped = ev.faults_report()["skipped"]
        assert [f["entries"] for f in skipped] == [[0, 15]]
        opens = OpenCounter(monkeypatch)
        ev.run(STEPS[1])
        assert opens.calls > 0  # the failed chunk is read (and fails) again, alone
        assert len(ev.cache) == 7 and ev.faults_report()["skipped"] == skipped
    monkeypatch.setattr(dp, "extract_columns", real)
    cols = jets(seed=2)
    cols["pt"][0] = np.nan  # in the first chunk of dy
    write_nano(files["dy"], cols)
    config = small_config(tmp_path, files, nonfinite="drop")
    with Evaluator(config) as ev:
        ev.run(STEPS[0])
        dropped = ev.faults_report()["dropped"]
        assert dropped["dy"]["objects"] == 1
        got = ev.run(STEPS[1])
        assert ev.faults_report()["dropped"] == dropped
        assert len(ev.cache) == 8
    with Evaluator(config, cache=False) as ev:
        assert_same(got, ev.run(STEPS[1]), plan=ev.plan)


def test_uuid_is_uproots_file_uuid(tmp_path):
    files = small_files(tmp_path)
    with uproot.open(files["dy"]) as f:
        want = str(f.file.uuid)
    with Evaluator(small_config(tmp_path, files)) as ev:
        item = next(i for i in ev.chunks if i.dataset == "dy")
        assert ev._key(item)[0] == want


def test_spill_roundtrip_keeps_every_field(tmp_path):
    """A spilled entry comes back equal, dtypes, ``None`` and empty dicts included."""
    from analysis.pipeline.layout import ChunkColumns
    cols = [
        ChunkColumns(
            n_events=3,
            weight=np.array([1.0, 0.5, 2.0]),
            counts=np.array([2, 0, 1], dtype=np.int64),
            objects={"pt": np.array([10.0, 20.0, 30.0])},
            events={"MET_pt": np.array([1.0, 2.0, 3.0])},
        ),
        ChunkColumns(n_events=2, weight=np.ones(2)),  # no collection: counts None
        ChunkColumns(  # object-set plans: {collection: (counts, {field: values})}
            n_events=2,
            weight=np.ones(2),
            collections={"Jet": (np.array([2, 1], dtype=np.int64), {"pt": np.arange(3.0)})},
        ),
    ]
    cache = ColumnCache(budget=0, spill_dir=str(tmp_path))
    for i, c in enumerate(cols):
        cache.put(("k", i), c)
    for i, c in enumerate(cols):
        got = cache.get(("k", i))
        assert got.n_events == c.n_events and (got.counts is None) == (c.counts is None)
        for name in ("weight", "counts"):
            a, b = getattr(got, name), getattr(c, name)
            if b is not None:
                assert a.dtype == b.dtype and np.array_equal(a, b)
        for name in ("objects", "events"):
            a, b = getattr(got, name), getattr(c, name)
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in b)
        for name, (counts, flat) in c.collections.items():
            got_counts, got_flat = got.collections[name]
            assert got_counts.dtype == counts.dtype and np.array_equal(got_counts, counts)
            assert got_flat.keys() == flat.keys()
            assert all(np.array_equal(got_flat[k], flat[k]) for k in flat)
    assert cache.spilled == 3 and cache.memory_bytes == 0
    cache.close()


def test_object_set_plans_key_on_their_fields(tmp_path):
    """Two object-set configs that read different fields never share a cache entry."""
    from analysis.config.loader import config_from_dict
    from analysis.data.cache import plan_branches
    from analysis.pipeline.plan import build_plan
    def plan(field):
        data = {
            "datasets": {"d": {"files": ["x.root"]}},
            "parameters": {"t": {"init": 30.0, "bounds": [10.0, 50.0]}},
            "objects": {
                "jets": {
                    "collection": "Jet",
                    "cuts": [{"var": field, "op": ">", "param": "t", "width": 1.0}],
                }
            },
            "selection": [{"count": "jets", "op": ">=", "value": 1}],
            "observables": [{"name": "pt", "x": "jets.pt", "stats": ["mean"]}],
        }
        return build_plan(config_from_dict(data, base_dir=tmp_path))

    assert plan_branches(plan("pt")) != plan_branches(plan("mass"))
