"""numba's once-per-process initialisation on a thread (issue 35):
:class:`analysis.driver.warmup.NumbaWarmUp` and ``Evaluator(warm_up=True)``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from tests.conftest import SHARED_DATA
from tests.opt_helpers import cli_env

ROOT = Path(__file__).resolve().parents[2]
DY = str(SHARED_DATA / "nano_dy.root")

CHILD = """
import sys, threading
from numba.core import entrypoints
assert not entrypoints._already_initialized
from analysis.driver.warmup import NumbaWarmUp
warm = NumbaWarmUp()
warm.wait()
assert warm.done and warm.error is None
assert entrypoints._already_initialized  # the numba_extensions entry points ran
from numba.core.runtime import rtsys
assert rtsys._init  # numba's runtime, which every cached kernel links to
# not the registries: the kernels' cached code loads without them (analysis.select.lanes.policy)
assert "numba.np.arraymath" not in sys.modules and "scipy.linalg" not in sys.modules
print("ok", threading.active_count())
"""


def test_the_warm_up_runs_numbas_initialisation_in_a_fresh_process():
    env = cli_env()
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok", "1"]  # and the thread has ended


SKIPPED = """
import sys
from numba.core import entrypoints
from analysis.driver.warmup import NumbaWarmUp
warm = NumbaWarmUp(skip=("vector",))
warm.wait()
assert warm.error is None and entrypoints._already_initialized
entrypoints.init_all()  # what numba's first compilation runs: nothing more now
assert "vector.backends._numba_object" not in sys.modules, "vector's extension ran"
assert "awkward._connect.numba" in sys.modules  # the others did
import awkward as ak, numba
@numba.njit
def total(a):
    s = 0.0
    for x in a:
        s += x
    return s
assert total(ak.Array([1.0, 2.5])) == 3.5  # awkward's extension works
import vector
vector.register_numba()  # what code that needs vector's own objects in numba calls
@numba.njit
def pt(v):
    return v.rho
assert abs(pt(vector.obj(x=3.0, y=4.0)) - 5.0) < 1e-12
print("ok")
"""


def test_an_extension_left_out_is_not_run_and_the_others_work():
    """The command line's warm-up leaves vector's numba extension out (its kernels take
    numpy arrays): numba does not run it later either; awkward's works; vector's own
    ``register_numba`` still makes its objects usable in numba."""
    env = cli_env()
    out = subprocess.run([sys.executable, "-c", SKIPPED], env=env, capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok"]


def test_the_command_line_s_evaluators_leave_vector_s_extension_out(monkeypatch):
    from analysis.cli import commands
    from analysis.driver import runner

    seen = {}
    monkeypatch.setattr(runner, "NumbaWarmUp", lambda skip=(): seen.setdefault("skip", skip))
    args = type("Args", (), {"executor": None, "workers": None, "chunksize": None,
                             "quiet": True})()
    commands.make_evaluator(config_from_dict(_config("iterative")), args).close()
    assert tuple(seen["skip"]) == ("vector",)


def _config(executor: str) -> dict:
    return {
        "datasets": {"dy": {"files": [DY], "weight": "genWeight"}},
        "executor": {"type": executor, "workers": 1},
        "parameters": {"pt_min": {"init": 25.0, "bounds": [10.0, 60.0]}},
        "objects": {"jets": {"collection": "Jet",
                             "cuts": [{"var": "pt", "op": ">", "param": "pt_min",
                                       "width": 5.0}]}},
        "selection": [{"count": "jets", "op": ">=", "value": 1}],
        "observables": [{"name": "ht", "x": "sum(jets.pt)", "stats": ["mean"]}],
    }


def test_the_first_pass_waits_for_it_and_the_states_are_unchanged():
    cfg = config_from_dict(_config("iterative"))
    with Evaluator(cfg, cache=False) as plain:
        assert plain._warm_up is None  # off by default
        ref = plain.run({}, order=1)["dy"]
    with Evaluator(cfg, cache=False, warm_up=True) as ev:
        warm = ev._warm_up
        assert warm is not None
        got = ev.run({}, order=1)["dy"]
        assert warm.done and ev._warm_up is None  # joined by the first pass
    values, jacs, _ = got.taylor()
    ref_values, ref_jacs, _ = ref.taylor()
    for a, b in ((values, ref_values), (jacs, ref_jacs)):
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_no_thread_where_the_kernels_run_in_worker_processes():
    cfg = config_from_dict(_config("futures"))
    ev = Evaluator(cfg, cache=False, warm_up=True)
    try:
        assert ev._warm_up is None
    finally:
        ev.close()


def test_numba_ready_waits_for_whoever_holds_numbas_compiler_lock():
    import threading

    from numba.core.compiler_lock import global_compiler_lock

    from analysis.driver.warmup import numba_ready

    held, finished = threading.Event(), []

    def initialise():
        with global_compiler_lock:
            held.set()
            threading.Event().wait(0.3)
            finished.append(True)

    t = threading.Thread(target=initialise)
    t.start()
    held.wait()
    numba_ready()
    assert finished == [True]  # returned only once the lock was released
    t.join()


EVENTS: list[str] = []


def _ready() -> None:
    EVENTS.append("ready")


def test_the_first_pass_reads_its_chunks_before_waiting_and_waits_before_kernels(monkeypatch):
    """With the warm-up pending, the pass waits for the extensions only, reads each chunk,
    then calls ``before_kernels`` (numba_ready) before that chunk's kernels; the thread
    is joined before the pass ends."""
    from analysis.driver import runner
    from processors import diff_processor

    events = EVENTS
    events.clear()

    class Fake:
        done = False

        def wait_extensions(self):
            events.append("extensions")

        def wait(self):
            events.append("joined")
            self.done = True

    real_extract, real_evaluate = diff_processor.extract_columns, diff_processor.DiffProcessor.evaluate
    monkeypatch.setattr(runner, "NumbaWarmUp", lambda skip=(): Fake())
    monkeypatch.setattr(runner, "numba_ready", _ready)  # pickled with the processor: by name
    monkeypatch.setattr(diff_processor, "extract_columns",
                        lambda *a, **k: events.append("read") or real_extract(*a, **k))
    monkeypatch.setattr(diff_processor.DiffProcessor, "evaluate",
                        lambda self, *a: events.append("kernels") or real_evaluate(self, *a))
    cfg = config_from_dict(_config("iterative"))
    with Evaluator(cfg, cache=False, warm_up=True) as ev:
        ev.run({}, order=1)
        assert ev._warm_up is None
        n = events.count("read")
        assert n >= 1
        assert events == ["extensions"] + ["read", "ready", "kernels"] * n + ["joined"]
        ev.run({}, order=1)  # later passes: nothing more
        assert events.count("ready") == n and events.count("extensions") == 1
