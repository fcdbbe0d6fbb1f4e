"""Shared helpers for the column-cache tests (``test_cache_*``): small files, configs,
state comparison and a counter of ROOT file opens. Not a test module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uproot

from analysis.config.loader import config_from_dict
from analysis.pipeline.results import DatasetState, dataset_report
from tests.chunked_helpers import analysis_config, differences
from tests.faults_helpers import jets, write_nano
from tests.reference import flatten

#: parameter values of successive passes (several optimisation-like steps)
STEPS = [
    {"jet_pt_min": 30.0, "jet_abs_eta_max": 2.4},
    {"jet_pt_min": 41.5, "jet_abs_eta_max": 1.9},
    {"jet_pt_min": 22.0, "jet_abs_eta_max": 2.8},
]


def small_files(tmp: Path) -> dict[str, Path]:
    """Two small NanoAOD-layout files (60 events each, few branches: fast to open)."""
    return {
        "ttbar": write_nano(tmp / "a.root", jets(seed=1)),
        "dy": write_nano(tmp / "b.root", jets(seed=2)),
    }


def small_config(tmp: Path, files: dict[str, Path] | None = None, **top: Any):
    """The chunked analysis on :func:`small_files`, chunks of 15 events (8 chunks)."""
    files = files or small_files(tmp)
    data = analysis_config(
        {name: {"files": [str(p)], "weight": "genWeight"} for name, p in files.items()}
    )
    data["executor"] = {"type": "iterative", "workers": 2, "chunksize": 15}
    data.update(top)
    return config_from_dict(data, source="cache-test", base_dir=tmp)


def state_leaves(state: Any) -> list[np.ndarray]:
    """Every number of a pass's output for one dataset (state or histogram)."""
    if isinstance(state, DatasetState):
        d = state.derived
        tree = {"events": state.events, "sumw": state.sumw, "chunks": state.chunks,
                "value": d.value, "jac": d.jac, "hess": d.hess}
        return [np.asarray(x, dtype=np.float64) for _, x in flatten(tree) if x is not None]
    return [np.asarray(state.values(flow=True)), np.asarray(state.variances(flow=True))]


def assert_same(
    got: dict[str, Any], want: dict[str, Any], *, plan=None, order: int = 1, rtol: float = 1e-12
) -> None:
    """Equal outputs to ``rtol`` relative.

    With ``plan``, states are compared through their results.json entries (values and
    derivatives of every statistic): the raw moment states depend on the order in which
    chunks were merged (the futures and dask executors merge as chunks finish), the
    statistics do not. Without it, every leaf (same merge order: iterative executor).
    """
    assert got.keys() == want.keys()
    for name in want:
        if plan is not None:
            diff = differences(
                dataset_report(got[name], plan, order=order),
                dataset_report(want[name], plan, order=order),
                rtol=rtol,
            )
            assert not diff, (name, diff[:5])
            continue
        a, b = state_leaves(got[name]), state_leaves(want[name])
        assert len(a) == len(b), name
        for x, y in zip(a, b, strict=True):
            assert x.shape == y.shape, name
            scale = max(float(np.max(np.abs(y), initial=0.0)), 1e-300)
            np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * scale, err_msg=name)


class OpenCounter:
    """Counts ``uproot.open`` calls in this process (the iterative executor, NanoEvents and
    the driver's checks all open files through it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = uproot.open

        def counting(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(uproot, "open", counting)
