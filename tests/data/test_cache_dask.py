"""Column cache on dask: each worker keeps the chunks it read; later passes run them on
that worker (no column reaches the driver, no coffea pass); a chunk whose worker died is
read again; results equal the iterative executor's (1e-10). The placement's helpers
(:mod:`analysis.data.placement`) for it, outside a cluster."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import numpy as np
import pytest

from analysis.data import placement
from analysis.data.cache import (
    COLUMNS_KEY,
    PLACES_KEY,
    ColumnBatch,
    ColumnCache,
    ColumnPlaces,
)
from analysis.data.placement import keep_columns
from analysis.driver.runner import Evaluator, empty_columns
from analysis.driver.workers import evaluate_kept
from analysis.pipeline.job import Job
from analysis.pipeline.request import Request
from processors import DiffProcessor
from tests.cache_helpers import STEPS, assert_same, small_config
from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.data.test_faults_dask_kill import _bounded

pytestmark = NANOAOD_WARNINGS


# --- the helpers, in this process (no cluster) ---------------------------------------


def test_keep_columns_outside_a_worker_ships_them(tmp_path):
    ev_plan = Evaluator(small_config(tmp_path), cache=False).plan
    cols = empty_columns(ev_plan)
    # no driver cache of that token here and not in a dask worker: the columns go back
    out = keep_columns(("k",), cols, token="no-such-token", worker_budget=10)
    assert list(out) == [COLUMNS_KEY] and isinstance(out[COLUMNS_KEY], ColumnBatch)
    # the driver's own cache (registered by its owner): straight in, nothing goes back
    here = ColumnCache()
    placement.register(here)
    assert keep_columns(("k",), cols, token=here.token, worker_budget=10) == {}
    assert here.holds(("k",)) and PLACES_KEY not in out
    here.close()


def test_places_add_and_count_in_the_cache():
    merged = ColumnPlaces({("a",): "tcp://w1"}) + ColumnPlaces({("b",): "tcp://w2"})
    assert merged.places == {("a",): "tcp://w1", ("b",): "tcp://w2"}
    cache = ColumnCache()
    cache.place(("a",), "tcp://w1")
    assert ("a",) in cache and len(cache) == 1 and not cache.holds(("a",))
    assert cache.where(("a",)) == "tcp://w1"
    with pytest.raises(KeyError):
        cache.get(("a",))  # a worker's chunk is never handed out here
    cache.forget(("a",))
    assert ("a",) not in cache and len(cache) == 0


def test_worker_cache_evaluates_only_what_it_holds(tmp_path):
    ev = Evaluator(small_config(tmp_path), cache=False)
    theta, w = ev.theta_and_widths()
    proc = DiffProcessor(Job(ev.plan, Request(theta, w), ev.weight_branches))
    cols = empty_columns(ev.plan)
    run = placement.in_store  # what a task pinned to a worker runs there
    assert run(evaluate_kept, "tok-test", None, "spill", proc, ("k",), "dy") is None  # no store
    placement.store("tok-test", budget=0).put(("k",), cols)
    assert placement.store("tok-test").holds(("k",))
    out = run(evaluate_kept, "tok-test", None, "spill", proc, ("k",), "dy")
    assert out["dy"].events == 0
    assert run(evaluate_kept, "tok-test", None, "spill", proc, ("other",), "dy") is None
    # a move: taken out here, kept again (on another worker, in a cluster)
    taken = run(placement.take, "tok-test", None, "spill", ("k",))
    assert taken.n_events == cols.n_events and not placement.store("tok-test").holds(("k",))
    assert run(placement.take, "tok-test", None, "spill", ("k",)) is None
    assert run(placement.adopt, "tok-test", 0, "spill", ("k",), None) is None
    assert run(placement.adopt, "tok-test", 0, "spill", ("k",), taken) is True
    assert placement.drop("tok-test") == 1 and placement.store("tok-test") is None


# --- on a LocalCluster of 2 workers ---------------------------------------------------


def _reference(config) -> list:
    with Evaluator(config, cache=False) as it:
        return [it.run(p) for p in STEPS]


def _recording(monkeypatch, ev: Evaluator) -> list:
    """The work items of every coffea pass ``ev`` runs, and whether columns came back."""
    calls: list = []
    call = ev._call

    def recording(items, proc):
        out = call(items, proc)
        calls.append(([(i.filename, i.entrystart) for i in items], COLUMNS_KEY in out))
        return out

    monkeypatch.setattr(ev, "_call", recording)
    return calls


def _held(ev: Evaluator) -> dict[str, tuple[int, int]]:
    """``{worker address: (chunks held, chunks spilled)}`` of ``ev``'s worker caches."""
    token = ev.cache.token

    def held(cache):
        return (len(cache), cache.spilled)

    return {a: h or (0, 0) for a, h in placement.on_workers(ev._client, held, token).items()}


@pytest.mark.slow
def test_workers_keep_their_chunks(tmp_path, monkeypatch):
    config = small_config(tmp_path)
    want = _reference(config)
    spill = ColumnCache(budget=0)  # the workers get the same budget: all spilled
    with Evaluator(config, executor="dask", workers=2, cache=spill) as ev:
        calls = _recording(monkeypatch, ev)
        for params, ref in zip(STEPS, want, strict=True):
            assert_same(ev.run(params), ref, plan=ev.plan, rtol=1e-10)
        # one coffea pass (the first), and no column came back to the driver
        assert len(calls) == 1 and len(calls[0][0]) == 8 and calls[0][1] is False
        assert len(spill) == 8 and spill.memory_bytes == 0 and spill.spilled == 0
        held = _held(ev)
        assert set(spill.remote.values()) <= set(held)
        # the workers of the evaluator's LocalCluster compute with one thread each
        threads = ev._client.run(lambda: os.environ.get("NUMBA_NUM_THREADS"))
        assert set(threads.values()) == {os.environ.get("NUMBA_NUM_THREADS", "1")}
        assert sorted(n for n, _ in held.values()) == [4, 4]  # evened out after the first pass
        assert all(n == s for n, s in held.values())  # over budget: on the workers' disks
        # pile every chunk onto one worker by hand, then even them out again (moves
        # worker to worker); the passes below run on the moved columns
        client, token = ev._client, spill.token
        first, second = sorted(held)
        for key, address in list(spill.remote.items()):
            if address == second:
                taken = placement.on_worker(client, second, placement.take, token, key)
                moved = placement.on_worker(client, first, placement.adopt, token, key, taken,
                                            budget=0)
                assert moved.result() is True
                spill.place(key, first)
        assert _held(ev)[first] == (8, 8) and _held(ev)[second] == (0, 0)
        ev._rebalance()
        assert sorted(_held(ev).values()) == [(4, 4), (4, 4)]
        assert sorted(Counter(spill.remote.values()).values()) == [4, 4]
        # histogram and second-order passes also run on the workers
        hist = ev.run_histograms(0, 10, 0.0, 200.0, STEPS[1])
        order2 = ev.run(STEPS[2], order=2)
        assert len(calls) == 1
    with Evaluator(config, cache=False) as it:
        assert_same(hist, it.run_histograms(0, 10, 0.0, 200.0, STEPS[1]), rtol=1e-10)
        assert_same(order2, it.run(STEPS[2], order=2), plan=it.plan, order=2, rtol=1e-10)
    assert len(spill) == 0  # closing dropped the workers' caches and the places
    spill.close()


class _SlowEvaluate(DiffProcessor):
    """Sleeps per cached chunk, so that a worker can be killed mid-pass."""

    def evaluate(self, dataset, cols):
        time.sleep(0.4)
        return super().evaluate(dataset, cols)


@pytest.mark.slow
def test_killed_worker_chunks_are_read_again(tmp_path, monkeypatch):
    config = small_config(tmp_path)
    want = _reference(config)
    with Evaluator(config, executor="dask", workers=2) as ev:
        ev.run(STEPS[0])
        before = dict(ev.cache.remote)
        pids = ev._client.run(os.getpid)
        victim_address = max(set(before.values()), key=list(before.values()).count)
        victim = pids[victim_address]
        theta, w = ev.theta_and_widths(STEPS[1])
        proc = _SlowEvaluate(Job(ev.plan, Request(theta, w), ev.weight_branches))
        empty = lambda: None  # noqa: E731 (both datasets have chunks)
        calls = _recording(monkeypatch, ev)
        killer = threading.Timer(1.0, os.kill, (victim, signal.SIGKILL))
        killer.start()
        start = time.perf_counter()
        got = _bounded(lambda: ev.process(proc, empty), 120.0)  # a hang fails
        killer.join()
        assert time.perf_counter() - start > 1.0, "the pass ended before the kill"
        assert_same(got, want[1], plan=ev.plan, rtol=1e-10)
        # only the dead worker's chunks not yet done were read again, on the live workers
        assert len(calls) == 1
        lost = {(k[0], k[2]) for k, a in before.items() if a == victim_address}
        uuids = {ev._key(c)[0]: c.filename for c in ev.chunks}
        lost = {(uuids[u], start) for u, start in lost}
        again = set(calls[0][0])
        assert again and again <= lost
        # the next pass reads the rest of the dead worker's chunks (done before it died)
        assert_same(ev.run(STEPS[2]), want[2], plan=ev.plan, rtol=1e-10)
        rest = [set(c[0]) for c in calls[1:]]
        assert rest == ([lost - again] if lost - again else [])
        alive = set(ev._client.run(os.getpid))
        assert set(ev.cache.remote.values()) <= alive and len(ev.cache) == 8
        # and after that every pass runs on the workers
        assert_same(ev.run(STEPS[0]), want[0], plan=ev.plan, rtol=1e-10)
        assert len(calls) == 1 + len(rest)
    assert np.isfinite(got["dy"].sumw)


def test_worker_threads_env_keeps_what_the_user_set():
    from analysis.driver.runner import WORKER_THREADS_ENV, worker_threads_env
    assert worker_threads_env({}) == WORKER_THREADS_ENV
    mine = {"XLA_FLAGS": "--xla_dump_to=/tmp/x", "PATH": "/bin"}
    env = worker_threads_env(mine)
    assert "XLA_FLAGS" not in env and env["NUMBA_NUM_THREADS"] == "1"
