"""Resource bounds (issue 21): sizes a config or an argument sets are checked before any
computation, against a limit derived from the available memory.

Without the checks each case below asks the allocator for terabytes (or is killed by the
kernel's out-of-memory killer); with them it is one line naming the key, the size and the
limit, in well under a second.
"""

from __future__ import annotations

import time
from typing import Any

import awkward as ak
import pytest

from analysis import runtime
from analysis.cli.parser import main
from analysis.config.loader import config_from_dict
from analysis.errors import ConfigError
from analysis.limits import ENV_LIMIT, ResourceError, check_bytes, memory_limit
from analysis.pipeline.bounds import check_sizes
from analysis.pipeline.plan import build_plan
from analysis.soft import count_at_least
from tests.conftest import SHARED_DATA, edited, one_line_error, write_config

TTBAR = str(SHARED_DATA / "nanoAOD_2015_CMS_Open_Data_ttbar.root")


@pytest.fixture(autouse=True)
def _limit(monkeypatch):
    """4 GB, whatever the machine: the cases below must fail here, never allocate."""
    monkeypatch.setenv(ENV_LIMIT, "4096")


def single() -> dict[str, Any]:
    return {
        "datasets": {"tt": {"files": [TTBAR], "weight": "genWeight"}},
        "parameters": {"pt": {"init": 30.0, "bounds": [15.0, 60.0]},
                       "min_jets": {"init": 2, "bounds": [1, 6], "integer": True}},
        "selection": {"objects": {"collection": "Jet",
                                  "cuts": [{"var": "pt", "op": ">", "param": "pt", "width": 5.0}]},
                      "events": [{"count": "Jet", "op": ">=", "param": "min_jets"}]},
        "observables": [{"name": "jet_pt", "x": "Jet.pt", "stats": ["mean"],
                         "hist": {"bins": 10, "range": [0, 100]}}],
    }


def sets() -> dict[str, Any]:
    return {
        "datasets": {"tt": {"files": [TTBAR], "weight": "genWeight"}},
        "parameters": {"min_jets": {"init": 2, "bounds": [1, 6], "integer": True}},
        "objects": {"jets": {"collection": "Jet", "max_objects": 20,
                             "cuts": [{"var": "pt", "op": ">", "value": 25.0, "width": 5.0}]}},
        "selection": [{"count": "jets", "op": ">=", "param": "min_jets"}],
        "observables": [{"name": "m3j", "x": "mass(jets[0] + jets[1] + jets[2])",
                         "stats": ["mean"]}],
    }


HUGE = [
    # one engine: the single form is an object set, with the same count cap
    ("count bound, single form", single(), "parameters/min_jets/bounds", [1, 1_000_000_000],
     "parameters.min_jets.bounds: implies 1000000001 count states x 256 events per chunk"),
    ("count bound, object sets", sets(), "parameters/min_jets/bounds", [1, 1_000_000_000],
     "parameters.min_jets.bounds: implies 1000000001 count states x 256 events per chunk"),
    ("count value, object sets", sets(), "selection/0",
     {"count": "jets", "op": ">=", "value": 10**12},
     "selection.0.value: implies 1000000000001 count states"),
    ("candidates", sets(), "objects/jets/max_objects", 100_000,
     "objects.jets.max_objects: implies 166661666700000 candidates of observables.0"),
    ("histogram bins", single(), "observables/0/hist/bins", 10**13,
     "observables.0.hist.bins: implies 10000000000002 histogram bins"),
]


@pytest.mark.parametrize("what,cfg,path,value,message", HUGE, ids=[h[0] for h in HUGE])
def test_a_size_beyond_memory_is_one_line_before_any_chunk(what, cfg, path, value, message):
    config = config_from_dict(edited(cfg, path, value), source="c.yaml")
    start = time.perf_counter()
    with pytest.raises(ResourceError) as info:
        check_sizes(config, build_plan(config), events=200)
    assert time.perf_counter() - start < 1.0
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"c.yaml: {message}"), text
    assert "more than the memory limit" in text
    # and the shipped sizes pass
    config = config_from_dict(cfg, source="c.yaml")
    check_sizes(config, build_plan(config), events=200)


def test_the_cli_exits_2_with_the_line(tmp_path, capsys):
    cfg = edited(single(), "parameters/min_jets/bounds", [1, 1_000_000_000])
    path = write_config(tmp_path / "c.yaml", cfg)
    assert main(["evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out" / "results.json").exists()
    line = one_line_error(capsys.readouterr().err)
    assert "parameters.min_jets.bounds: implies 1000000001 count states" in line, line


def test_chunk_buffers(monkeypatch):
    config = config_from_dict(single(), source="c.yaml")
    monkeypatch.setenv(ENV_LIMIT, "1024")
    with pytest.raises(ResourceError, match=r"^c.yaml: executor.chunksize: implies 2 columns x "
                                            r"1073741824 events per chunk = 16 GB"):
        check_sizes(config, build_plan(config), events=10**9)


def test_grid_points_multiply(monkeypatch):
    config = config_from_dict(single(), source="c.yaml")
    plan = build_plan(config)
    monkeypatch.setenv(ENV_LIMIT, "1")  # 1 MB: 7 states x 256 events x 8 bytes = 14 KB
    check_sizes(config, plan, events=200)
    with pytest.raises(ResourceError, match=r"7 count states x 256 events per chunk x 100 grid points = 1.37 MB"):
        check_sizes(config, plan, events=200, grid_points=100)


def test_the_limit_follows_the_environment(monkeypatch):
    monkeypatch.setenv(ENV_LIMIT, "2")
    assert memory_limit() == 2 * 2**20
    check_bytes("k", 2 * 2**20, "x")
    with pytest.raises(ResourceError, match=r"^k: implies x = 2 MB, more than the memory limit 2 MB"):
        check_bytes("k", 2 * 2**20 + 1, "x")
    monkeypatch.setenv(ENV_LIMIT, "lots")
    runtime.reset()  # read the environment again
    with pytest.raises(ConfigError, match="expected a positive number of megabytes"):
        memory_limit()
    monkeypatch.delenv(ENV_LIMIT)
    runtime.reset()
    assert 2**20 < memory_limit() < 2**50


def test_count_at_least_refuses_a_huge_n_fast():
    p = ak.Array([[0.5, 0.2], [0.9]])
    start = time.perf_counter()
    with pytest.raises(ResourceError, match=r"^count_at_least: n: implies 1000000002 count states"):
        count_at_least(p, 1e9)
    with pytest.raises(MemoryError):  # what a caller would have met, much later
        count_at_least(p, 1, cap=10**12)
    assert time.perf_counter() - start < 1.0
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="count_at_least: n: expected a finite number"):
            count_at_least(p, bad)


def test_a_huge_index_is_a_config_error_at_load():
    cfg = edited(sets(), "observables/0", {"name": "x", "x": "jets[99999999999999999999].pt",
                                           "stats": ["mean"]})
    with pytest.raises(ConfigError, match=r"index 99999999999999999999 is too large; expected "
                                          r"at most 4095"):
        config_from_dict(cfg, source="c.yaml")


def test_object_set_functions_refuse_a_huge_count_model_fast():
    import jax.numpy as jnp
    import numpy as np

    from analysis.select.objects import Count, CountModel, ObjectSet, event_pass, layout

    model = CountModel((ObjectSet("jets", "Jet"),), (Count(("jets",), ">=", 10**9),))
    lays = {"Jet": layout(np.array([0, 2]), np.array([2, 1]), 2)}
    probs = {"jets": jnp.full((2, 2), 0.5)}
    start = time.perf_counter()
    with pytest.raises(ResourceError, match=r"^CountModel: count caps: implies 1000000001 "
                                            r"joint count states x 2 events"):
        event_pass(probs, lays, model, jnp.asarray([10.0**9]))
    assert time.perf_counter() - start < 1.0
