"""The parsl executor (coffea's ParslExecutor on a local HighThroughputExecutor): the
same states as the iterative executor, 1e-12 relative, on two chunkings; retries reach
coffea's executor; a second pass is served by the driver's column cache; a user's Parsl
config file (``executor.parsl_config``) is loaded instead of the default.

Reference: the whole-file iterative pass (values and gradients of every statistic).
Kept short: the small real files (200 + 40 events), one worker, one DataFlowKernel
for both chunkings (its worker's start-up, imports and compilations dominate).
"""

from __future__ import annotations

import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.errors import DiffcoffeaError
from analysis.pipeline.results import dataset_report
from tests.chunked_helpers import NANOAOD_WARNINGS, analysis_config, differences

pytest.importorskip("parsl")
pytestmark = NANOAOD_WARNINGS

PARAMS = {"jet_pt_min": 28.0, "jet_abs_eta_max": 2.1}


def report(ev: Evaluator) -> dict:
    return {n: dataset_report(st, ev.plan) for n, st in ev.run(PARAMS).items()}


def test_parsl_equals_iterative_on_two_chunkings(tmp_path) -> None:
    cfg = analysis_config()
    cfg["executor"] = {"type": "iterative", "chunksize": 1_000_000}
    with Evaluator(config_from_dict(cfg)) as ev:
        reference = report(ev)
    cfg["executor"] = {"type": "parsl", "workers": 1, "chunksize": 50, "retries": 2}
    with Evaluator(config_from_dict(cfg)) as ev:
        got = report(ev)
        assert [e.label for e in ev._parsl.config.executors] == ["jobs"]  # the default HTEX
        assert ev._executor().retries == 2
        assert got["ttbar"]["chunks"] == 4
        diffs = differences(reference, got, rtol=1e-12, skip=("chunks",))
        assert not diffs, "\n".join(diffs[:10])
        assert len(ev.cache) == len(ev.chunks)  # every chunk's columns came back
        assert not differences(got, report(ev), rtol=0.0)  # served from the cache
        ev.chunksize, ev._chunks = 30, None  # another chunking, the same workers
        got = report(ev)
        assert got["ttbar"]["chunks"] == 7
        diffs = differences(reference, got, rtol=1e-12, skip=("chunks",))
        assert not diffs, "\n".join(diffs[:10])
    assert ev._parsl is None  # the DataFlowKernel is cleaned up with the evaluator


def test_a_users_parsl_config_file(tmp_path) -> None:
    run_dir = tmp_path / "my-parsl-runs"
    (tmp_path / "my_parsl.py").write_text(
        "from analysis.driver.executors import parsl_config\n"
        f"config = parsl_config(1, run_dir={str(run_dir)!r})\n")
    (tmp_path / "noconfig.py").write_text("x = 1\n")
    cfg = analysis_config()
    cfg["executor"] = {"type": "parsl", "parsl_config": "my_parsl.py"}  # relative to config
    with Evaluator(config_from_dict(cfg, base_dir=tmp_path)) as ev:
        assert type(ev._executor()).__name__ == "ParslExecutor"
        assert ev._parsl.config.run_dir == str(run_dir) and run_dir.is_dir()
    assert ev._parsl is None
    for name, expected in (("missing.py", "no such file"),
                           ("noconfig.py", "expected a variable 'config'")):
        cfg["executor"] = {"type": "parsl", "parsl_config": name}
        with Evaluator(config_from_dict(cfg, base_dir=tmp_path)) as ev, \
                pytest.raises(DiffcoffeaError, match=expected) as err:
            ev.run(PARAMS)
        assert "\n" not in str(err.value) and name in str(err.value)
    cfg["executor"] = {"type": "dask", "parsl_config": "x.py"}
    with pytest.raises(DiffcoffeaError, match="parsl_config: only allowed with type: parsl"):
        config_from_dict(cfg)
