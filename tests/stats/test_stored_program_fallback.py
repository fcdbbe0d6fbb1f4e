"""A stored program that cannot run in this process (a fresh dask worker without the
XLA FFI handlers its kernels need) is traced and compiled again, not a failed chunk.

Reference: the same derive with nothing stored (values equal to rounding)."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import stats
from analysis.stats import _compiled, _stored


def fn_of(pt):
    def fn(theta):
        return {"pt": stats.moments(pt, weight=stats.where(pt > 0, 1.0, 0.0) * theta["a"])}
    return fn


def test_a_stored_program_that_fails_is_traced_again(monkeypatch, tmp_path):
    pt = stats.Jagged(np.arange(1.0, 31.0), np.array([0, 10, 20, 30]))
    expected = stats.derive(fn_of(pt), {"a": 2.0})

    def broken(*args):
        raise RuntimeError("NOT_FOUND: No FFI handler registered for diffcoffea_single_tangent")

    monkeypatch.setattr(_compiled, "_PROGRAMS", type(_compiled._PROGRAMS)())
    monkeypatch.setattr(_stored, "path_for", lambda key: str(tmp_path / "p.bin"))
    monkeypatch.setattr(_stored, "load", lambda path: broken)
    before = _compiled.BUILT["programs"]
    got = stats.derive(fn_of(pt), {"a": 2.0})
    assert _compiled.BUILT["programs"] == before + 1  # traced and compiled here
    assert float(stats.mean(got.value["pt"])) == pytest.approx(
        float(stats.mean(expected.value["pt"])), rel=1e-12)
