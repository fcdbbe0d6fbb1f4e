"""A pass that weighs one validation part (a training step) walks that part's events only
(``ChunkColumns.subset``, ``DiffProcessor.evaluate``): the held-out events weigh exactly
0, so the states are the weighted full chunk's but for summation order.

References: the subset against per-event slices of the flat columns (a Python loop over
the events' object offsets); the part's states (values and Jacobians, order 1) against
the prepared pass run on the whole chunk with the part's weights (zeros walked), to
1e-13 relative, on a real file (``nano_tt_v12.root``, configs/agc_ttbar_v12.yaml) and on
generated events, with an empty part (every event held out) and a chunk of 0 events.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.config.loader import load_config
from analysis.pipeline.job import Job
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.request import Request
from analysis.pipeline.split import part_factor
from processors import DiffProcessor
from tests import opt_helpers as H
from tests.chunked_helpers import DATA_DIR, NANOAOD_WARNINGS, read_events
from tests.conftest import REPO, write_config
from tests.reference.states import flatten

pytestmark = NANOAOD_WARNINGS

V12 = DATA_DIR / "nano_tt_v12.root"
PART = ("train", 0.3)


def _v12(tmp_path: Path):
    """configs/agc_ttbar_v12.yaml on the shared v12 file: its config and the file's columns."""
    text = (REPO / "configs" / "agc_ttbar_v12.yaml").read_text()
    cfg = yaml.safe_load(text.replace("skhep:nano_tt_v12.root", str(V12)))
    cfg["output"] = {"dir": str(tmp_path / "out")}
    config = load_config(write_config(tmp_path, cfg))
    return config, V12


def _generated(small_data: Path):
    """The optimisation tests' config on one generated ttbar file."""
    return H.make_config(small_data), sorted((small_data / "ttbar").glob("*.root"))[0]


@pytest.fixture(scope="module", params=["nano_tt_v12", "generated"])
def chunk(request, tmp_path_factory, small_data):
    """``(plan, config, columns of the whole file)`` of a real and of a generated file."""
    if request.param == "nano_tt_v12":
        config, path = _v12(tmp_path_factory.mktemp("v12"))
    else:
        config, path = _generated(small_data)
    plan = build_plan(config)
    from analysis.data.columns import extract_columns

    cols = extract_columns(read_events(path), plan, weight_branch="genWeight",
                           source=str(path))
    assert cols.uid is not None and cols.n_events > 10
    return plan, config, cols


def _by_loop(cols: ChunkColumns, keep: np.ndarray) -> ChunkColumns:
    """The reference subset: each kept event's entries and object slices, one by one."""
    idx = [e for e in range(cols.n_events) if keep[e]]
    collections = {}
    for name, (counts, flat) in cols.collections.items():
        start = np.concatenate([[0], np.cumsum(counts)])
        collections[name] = (
            np.array([counts[e] for e in idx], dtype=np.asarray(counts).dtype),
            {f: np.array([x for e in idx for x in v[start[e]:start[e + 1]]], dtype=v.dtype)
             for f, v in flat.items()})
    return ChunkColumns(
        n_events=len(idx), weight=np.array([cols.weight[e] for e in idx]),
        events={k: np.array([v[e] for e in idx], dtype=v.dtype) for k, v in cols.events.items()},
        collections=collections, uid=np.array([cols.uid[e] for e in idx]))


def _same_columns(a: ChunkColumns, b: ChunkColumns) -> None:
    assert a.n_events == b.n_events
    np.testing.assert_array_equal(a.weight, b.weight)
    np.testing.assert_array_equal(a.uid, b.uid)
    assert a.events.keys() == b.events.keys()
    for k in a.events:
        np.testing.assert_array_equal(a.events[k], b.events[k], err_msg=k)
    assert a.collections.keys() == b.collections.keys()
    for name, (counts, flat) in a.collections.items():
        np.testing.assert_array_equal(counts, b.collections[name][0], err_msg=name)
        assert flat.keys() == b.collections[name][1].keys()
        for f, v in flat.items():
            assert v.dtype == b.collections[name][1][f].dtype
            np.testing.assert_array_equal(v, b.collections[name][1][f], err_msg=f"{name}.{f}")


def test_subset_is_the_kept_events_objects(chunk) -> None:
    _, _, cols = chunk
    rng = np.random.default_rng(5)
    for keep in (rng.random(cols.n_events) < 0.7, np.ones(cols.n_events, bool),
                 np.zeros(cols.n_events, bool)):
        _same_columns(cols.subset(keep), _by_loop(cols, keep))
    empty = cols.subset(np.zeros(cols.n_events, bool))
    assert empty.n_events == 0 and all(len(c) == 0 for c, _ in empty.collections.values())
    _same_columns(empty.subset(np.zeros(0, bool)), empty)  # a chunk of 0 events
    with pytest.raises(ValueError, match=r"keep has shape \(3,\), expected"):
        cols.subset(np.ones(3, bool))


def test_subset_is_kept_per_key_while_its_columns_are_the_same(chunk) -> None:
    _, _, cols = chunk
    calls = []

    def keep():
        calls.append(1)
        return cols.uid >= 0.5

    first = cols.subset(keep, key="k")
    assert cols.subset(keep, key="k") is first and len(calls) == 1
    assert cols.replace().subset(keep, key="k") is first  # shared memo, same arrays
    other = cols.replace(weight=cols.weight * 2.0)  # another array: made again
    again = other.subset(keep, key="k")
    assert again is not first and len(calls) == 2
    np.testing.assert_array_equal(again.weight, 2.0 * first.weight)


def _relative(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = np.maximum(np.abs(a), np.abs(b))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(scale > 0, np.abs(a - b) / scale, 0.0)
    return float(np.max(r, initial=0.0))


def _check_part(plan, config, cols: ChunkColumns, part) -> tuple[int, float]:
    """The part's state from :meth:`DiffProcessor.evaluate` against the prepared pass on
    the whole chunk at the part's weights; ``(events walked, max relative difference)``."""
    theta = [config.parameters[n].init for n in plan.param_names]
    proc = DiffProcessor(Job(plan, Request(theta, initial_widths(config), order=1),
                             {"d": "genWeight"}, part=part))
    weighted = cols.replace(weight=cols.weight * part_factor(cols.uid, *part))
    with np.errstate(all="ignore"):
        want = proc.prepared[None].run(weighted)
    got = proc.evaluate("d", cols)["d"]
    assert got.events == want.events == cols.n_events  # the events read, not those walked
    worst = _relative(got.sumw, want.sumw)
    for i, (tree_got, tree_want) in enumerate(zip(got.taylor()[:2], want.taylor()[:2],
                                                 strict=True)):
        a, b = dict(flatten(tree_got)), dict(flatten(tree_want))
        assert a.keys() == b.keys()
        for k in a:
            if k.endswith("/dmean") and i == 0:  # values
                # the mean's small correction to its center (~1e-14 of it here): its
                # rounding is relative to the mean, center + dmean
                c = k[: -len("dmean")] + "center"
                worst = max(worst, _relative(a[c] + a[k], b[c] + b[k]))
            else:
                worst = max(worst, _relative(a[k], b[k]))
    walked = [s for _, s in cols._subsets.values()]
    return (walked[-1].n_events if walked else cols.n_events), worst


def test_a_part_walks_its_events_only_with_the_weighted_chunks_states(chunk) -> None:
    plan, config, cols = chunk
    cols = cols.replace()  # a memo of this test's own
    cols._subsets = {}
    walked, worst = _check_part(plan, config, cols, PART)
    train = int(np.count_nonzero(part_factor(cols.uid, *PART)))
    assert 0 < walked == train < cols.n_events
    assert worst <= 1e-13, worst
    # every event held out: the training part is empty (zero states)
    held = cols.replace(uid=np.zeros(cols.n_events))
    held._subsets = {}
    walked, worst = _check_part(plan, config, held, PART)
    assert walked == 0 and worst == 0.0
    # a chunk of 0 events
    none = cols.subset(np.zeros(cols.n_events, bool))
    walked, worst = _check_part(plan, config, none, PART)
    assert walked == 0 and worst == 0.0


def test_the_column_cache_counts_a_kept_part_and_lets_it_go_past_its_budget(chunk) -> None:
    """What a pass keeps with cached columns (the part's events, its weights, the object
    offsets) counts in the cache's budget (``ColumnCache.recount``, called after each
    cached pass); where the columns and their part no longer fit, the part is let go
    (made again on each pass) and the cache stays within its budget."""
    from analysis.data.cache import ColumnCache
    from analysis.data.spill import columns_nbytes

    _, _, whole = chunk
    own = columns_nbytes(whole)
    for budget, kept in ((4 * own, True), (own + own // 10, False)):
        cache = ColumnCache(budget=budget)
        assert cache.put(("k",), whole)
        cols = cache.get(("k",))
        part = cols.subset(lambda c=cols: c.uid >= 0.3, key=("part", "train", 0.3))
        cols.object_offsets(tuple(cols.collections))
        cache.recount(("k",))
        assert bool(cols._subsets) is kept
        assert cache.memory_bytes == own + cols.memo_nbytes() <= budget
        if kept:  # the part's arrays are counted
            assert cols.memo_nbytes() >= columns_nbytes(part)
        cache.recount(("k",))  # counted once, not once per pass
        assert cache.memory_bytes == own + cols.memo_nbytes()
