"""Faults at scale: a dask worker killed mid-pass (LocalCluster of 2 workers).

The pass completes on the remaining worker (the nanny restarts the killed one and
the scheduler reruns its chunks) with results equal (1e-10) to an undisturbed pass,
within a bounded time. A chunk that kills every worker that runs it ends with one
line naming the file and entries (``KilledWorker``), not a traceback or a hang.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator, empty_state
from analysis.errors import InputError
from analysis.pipeline.results import dataset_report
from processors import DiffProcessor
from tests.chunked_helpers import NANOAOD_WARNINGS, analysis_config, differences
from tests.faults_helpers import jets, write_nano

pytestmark = [*NANOAOD_WARNINGS, pytest.mark.slow]

PASS_TIMEOUT = 240.0  # seconds: far above a pass here; a hang fails instead of blocking CI


def _config(tmp_path) -> dict:
    files = [str(write_nano(tmp_path / f"f{i}.root", jets(10 + i))) for i in range(3)]
    data = analysis_config({"dy": {"files": files, "weight": "genWeight"}})
    data["executor"] = {"type": "dask", "workers": 2, "chunksize": 10}
    return data


def _bounded(fn, timeout: float = PASS_TIMEOUT):
    """``fn()`` in a thread; fails the test if it does not finish within ``timeout``."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 (re-raised in the test thread)
            box["error"] = err

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"pass still running after {timeout} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def _slow_processor(ev: Evaluator, seconds: float, die_on: int | None = None):
    """A DiffProcessor that sleeps per chunk (so a kill lands mid-pass); with ``die_on``,
    the worker process exits hard on the chunk starting at that entry of the first file."""

    class Slow(DiffProcessor):  # defined here: pickled by value for the workers
        def process(self, events):
            time.sleep(seconds)
            meta = events.metadata
            if die_on is not None and meta["entrystart"] == die_on and "f0" in meta["filename"]:
                os._exit(1)
            return super().process(events)

    theta, w = ev.theta_and_widths()
    proc = Slow(ev.plan, theta, w, ev.weight_branches)
    return proc, lambda: empty_state(ev.plan, theta, w, 1)


def test_killed_worker_pass_completes_with_identical_results(tmp_path) -> None:
    config = config_from_dict(_config(tmp_path), base_dir=tmp_path)
    # cache off: the second pass must run on the workers (a cached one runs in the driver)
    with Evaluator(config, cache=False) as ev:
        proc, empty = _slow_processor(ev, 0.3)
        clean = _bounded(lambda: ev.process(proc, empty))
        pids = ev._client.run(os.getpid)
        assert len(pids) == 2
        victim = sorted(pids.values())[0]
        killer = threading.Timer(1.5, os.kill, (victim, signal.SIGKILL))
        killer.start()
        start = time.perf_counter()
        disturbed = _bounded(lambda: ev.process(proc, empty))
        killer.join()
        assert time.perf_counter() - start > 1.5, "the pass ended before the kill"
        assert victim not in ev._client.run(os.getpid).values()
    want = dataset_report(clean["dy"], ev.plan)
    got = dataset_report(disturbed["dy"], ev.plan)
    assert got["events"] == 3 * 60 and got["chunks"] == 18
    assert not differences(got, want)


def test_chunk_killing_every_worker_is_one_line(tmp_path) -> None:
    import dask

    config = config_from_dict(_config(tmp_path), base_dir=tmp_path)
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        with Evaluator(config) as ev:
            proc, empty = _slow_processor(ev, 0.0, die_on=20)
            with pytest.raises(InputError) as info:
                _bounded(lambda: ev.process(proc, empty))
    message = str(info.value)
    assert "\n" not in message
    # The culprit is f0's entries 20-30, but a chunk queued on the same dying workers
    # can be marked failed first ("workers died while trying to run it"): any chunk.
    assert re.search(rf"{re.escape(str(tmp_path))}/f\d\.root, entries \d+-\d+ ", message), message
    assert "died" in message
