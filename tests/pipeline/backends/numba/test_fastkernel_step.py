"""An optimisation step's numba pass (issue 49's step: the cached pass of the objective's
states): what it leaves out and how it is handed to threads, against the pieces it
replaces.

- A plan without observables and soft branch cuts sums the ``(E,)`` event weights, and
  the one-set walk's threads also sum the selected yields of their blocks: the states
  equal, bit for bit, the yields of the ``(E, LANES)`` event-weight lanes
  (:func:`fastkernel._event_weights`) summed after the walk, and the general loop's.
- A cached pass hands all of the driver's chunks to the chunk thread at once.
"""

from __future__ import annotations

import copy

import jax
import numpy as np
import pytest

from analysis.driver import runner
from analysis.driver.runner import Evaluator
from analysis.pipeline.backends.numba import fastkernel
from analysis.pipeline.backends.numba._fastpool import yield_sums
from analysis.pipeline.plan import only_observables
from tests.opt_helpers import make_config
from tests.pipeline.backends.numba.test_fastkernel import make_plan, synthetic, test_demo_config

DEMO = test_demo_config.__globals__["REPO"] / "configs" / "demo.yaml"


def step_plan():
    """The demo's plan without observables (an optimisation step's), its parameters."""
    import yaml

    cfg = yaml.safe_load(DEMO.read_text())
    cfg["observables"] = []
    return make_plan(cfg)


def bits(tree) -> list[bytes]:
    return [np.asarray(x, np.float64).tobytes() for x in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 2 * fastkernel.BLOCK + 37])
def test_step_sums_the_weights_alone_in_the_walk(n, threads):
    plan, theta, widths = step_plan()
    assert not plan.observables and not plan.event_cuts and fastkernel._tables(plan).one_set
    cols = synthetic(n, seed=21, mean_jets=6.0, big=12)
    keep: list = []
    value, jac = fastkernel.evaluate_columns(cols, plan, theta, widths, threads=threads,
                                             keep=keep)
    wt = keep[0]
    assert wt.ev.ndim == 1 and wt.ys is not None  # no (E, LANES) array; yields in the walk
    # the reference: the lanes' event weights, summed after the walk
    lanes = fastkernel._event_weights(cols, plan, *fastkernel._inputs(plan, 1, theta, widths))
    assert lanes.shape == (n, fastkernel._numba_dp.LANES)
    ref = yield_sums(lanes, wt.pe, wt.np1, fastkernel.BLOCK, threads)
    np.testing.assert_array_equal(wt.ys.view(np.int64), ref.view(np.int64))
    assert float(value["selected_sumw"]) == ref[0, 0]
    # and the general loop (its yields summed after it): the same floats
    general = fastkernel.evaluate_columns(cols, plan, theta, widths, threads=threads,
                                          fused=False)
    assert bits((value, jac)) == bits(general)


def test_a_cached_pass_is_one_hand_off(small_data, monkeypatch):
    config = make_config(small_data)
    calls: list[int] = []
    real = runner.on_chunk_thread
    monkeypatch.setattr(runner, "on_chunk_thread", lambda fn: calls.append(1) or real(fn))
    with Evaluator(config) as ev:
        first = ev.run(order=1)
        assert calls == [] and len(ev.cache) == len(ev.chunks) > 1  # read: no hand-off
        again = ev.run(order=1)
        assert calls == [1]  # every cached chunk in one hand-off
        assert bits({k: s.derived.value for k, s in again.items()}) == bits(
            {k: s.derived.value for k, s in first.items()})
        assert only_observables(ev.plan, frozenset()).observables == ()
        params = copy.deepcopy(config.initial_params())
        ev.run(params, observables=())
        assert calls == [1, 1]


def test_a_chunks_offsets_are_made_once_and_kept_with_its_columns():
    """The object offsets of a chunk's counts (per collection, the running sums; each
    collection's first global index; the most objects per event) once per columns: a
    second pass over the same columns gets the same arrays, equal to numpy's cumsum;
    other columns (of the same sizes) get their own; columns derived from them (moved
    fields: ``replace``) share them while their counts are the same arrays, and a copy
    given other counts gets its own; pickled columns travel without them; they are the
    columns' own (nothing kept elsewhere: gone with the columns)."""
    import gc
    import pickle
    import weakref

    from analysis.pipeline.backends.numba import _fasttables

    plan, _, _ = step_plan()
    sets, coll = plan.sets, ("Jet", "Muon")
    cols = synthetic(500, seed=4, big=9)
    first = _fasttables.offsets(cols, coll, sets)
    again = _fasttables.offsets(cols, coll, sets)
    assert again[0] is first[0] and again[1] is first[1]
    counts = [cols.collections[c][0] for c in coll]
    ref = np.zeros((2, 501), np.int64)
    for ci, n in enumerate(counts):
        ref[ci, 1:] = np.cumsum(n)
    np.testing.assert_array_equal(first[0], ref)
    assert first[1].tolist() == [0, int(counts[0].sum()), int(counts[0].sum() + counts[1].sum())]
    assert first[3] == int(counts[0].max() + counts[1].max())
    other = synthetic(500, seed=5, big=3)
    assert not np.array_equal(_fasttables.offsets(other, coll, sets)[0], first[0])
    # derived columns with the same counts: the same arrays; with other counts: their own
    moved = cols.replace(events=dict(cols.events))
    assert _fasttables.offsets(moved, coll, sets)[0] is first[0]
    cut = cols.replace(collections={**cols.collections, "Jet": other.collections["Jet"]})
    np.testing.assert_array_equal(_fasttables.offsets(cut, coll, sets)[0][0],
                                  _fasttables.offsets(other, coll, sets)[0][0])
    assert _fasttables.offsets(cols, coll, sets)[0] is not first[0]  # made again, the same
    np.testing.assert_array_equal(_fasttables.offsets(cols, coll, sets)[0], ref)
    back = pickle.loads(pickle.dumps(cols))
    assert not back._offsets and "_offsets" not in pickle.dumps(cols).decode("latin-1")
    np.testing.assert_array_equal(_fasttables.offsets(back, coll, sets)[0], ref)
    # nothing else holds them: gone with the columns
    kept = weakref.ref(_fasttables.offsets(cols, coll, sets)[0])
    del cols, moved, cut, counts, first, again
    gc.collect()
    assert kept() is None


def test_a_points_walk_tables_are_made_once_and_copied_to_each_chunk(monkeypatch):
    """The pass table of a point (targets, table, tangents: numpy work per call) once per
    point, not per chunk: a second chunk at the same point gets the same floats without
    making them again, as copies (a caller writing into its arrays changes no later
    chunk's); another point gets its own."""
    from analysis.pipeline.backends.numba import _fasttables

    plan, theta, widths = step_plan()
    tab = _fasttables._tables(plan)
    tab.walks.clear()
    made: list[int] = []
    real = _fasttables._walk_table
    monkeypatch.setattr(_fasttables, "_walk_table", lambda *a: made.append(1) or real(*a))
    trainable = plan.trainable
    first = _fasttables.walk_table(tab, plan.sets, theta, widths, trainable)
    ref = real(tab, plan.sets, np.asarray(theta, np.float64), np.asarray(widths, np.float64),
               trainable)
    assert bits(first) == bits(ref) and made == [1]
    for a in first:
        a[...] = -1  # the caller's own copy
    again = _fasttables.walk_table(tab, plan.sets, theta, widths, trainable)
    assert bits(again) == bits(ref) and made == [1]
    other = np.array(theta, np.float64)
    other[list(plan.param_names).index("min_jets")] += 0.5
    moved = _fasttables.walk_table(tab, plan.sets, other, widths, trainable)
    assert made == [1, 1] and bits(moved) != bits(ref)
    assert bits(moved) == bits(real(tab, plan.sets, other, np.asarray(widths, np.float64),
                                     trainable))


def test_a_parts_weights_are_made_once_per_cached_chunk(small_data, monkeypatch):
    """A validation part's event weights (the weights times the part's factor, hashed
    from the events' uid) once per cached chunk, not on every pass: the cached passes
    after the first make none, and their states are, bit for bit, a pass's that reads
    the files (weights made afresh)."""
    import processors.diff_processor as dp

    config = make_config(small_data)
    made: list[int] = []
    real = dp.part_factor
    monkeypatch.setattr(dp, "part_factor", lambda *a: made.append(1) or real(*a))
    part = ("train", 0.3)
    with Evaluator(config) as ev:
        ev.run(order=1)  # fills the cache
        ev.part = part
        ev.run(order=1)
        made.clear()
        cached = ev.run(order=1)
        assert made == []  # kept with the cached columns
        n_chunks = len(ev.chunks)
    with Evaluator(config, cache=False) as fresh:
        fresh.part = part
        read = fresh.run(order=1)
    assert len(made) == n_chunks > 1  # read from the files: made for each chunk
    for name in read:
        assert bits((cached[name].derived.value, cached[name].derived.jac)) == bits(
            (read[name].derived.value, read[name].derived.jac))


def test_derived_weights_are_kept_while_weight_and_uid_are_the_same_arrays():
    """``ChunkColumns.derived_weight``: made once per key; made again where the weights
    or the uid are other arrays (columns derived with other weights share the memo, and
    must not get the first columns' result); not pickled."""
    import pickle

    cols = synthetic(100, seed=3)
    cols.uid = np.linspace(0.0, 0.99, 100)
    made: list[int] = []

    def make(c):
        return lambda: made.append(1) or c.weight * 2.0

    first = cols.derived_weight("k", make(cols))
    assert cols.derived_weight("k", make(cols)) is first and made == [1]
    assert cols.replace(events={}).derived_weight("k", make(cols)) is first
    other = cols.replace(weight=cols.weight + 1.0)
    np.testing.assert_array_equal(other.derived_weight("k", make(other)), other.weight * 2.0)
    assert made == [1, 1]
    moved = cols.replace(uid=cols.uid[::-1].copy())
    assert moved.derived_weight("k", make(moved)) is not first and made == [1, 1, 1]
    back = pickle.loads(pickle.dumps(cols))
    assert not back._weights
