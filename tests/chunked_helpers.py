"""Shared helpers for the chunked-evaluation tests (configs, real files, comparisons).

Not a test module: imported by ``test_chunked_invariance``, ``test_chunk_gradients``,
``test_selection_reference``, ``test_merge``, ``test_cli_errors`` and
``test_compile_buckets``. Kept free of pytest fixtures so that each test module
decides its own fixture scopes.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import analysis  # noqa: F401  (enables JAX float64 before anything else imports jax)
from analysis.data.columns import extract_columns
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.spec import statistics as registry
from tests.conftest import SHARED_DATA as DATA_DIR
from tests.reference import flatten  # the one state flattener (re-exported for its users)

TTBAR = DATA_DIR / "nanoAOD_2015_CMS_Open_Data_ttbar.root"
DY = DATA_DIR / "nano_dy.root"
EMPTY = DATA_DIR / "nano_dy_empty.root"
TTBAR_EVENTS, DY_EVENTS = 200, 40

# NanoAODSchema notes, once per chunk, branches it rebuilds in these slim files.
NANOAOD_WARNINGS = [
    pytest.mark.filterwarnings("ignore:Branch .* already exists:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:Missing cross-reference:RuntimeWarning"),
]

UNIVARIATE = list(registry.UNIVARIATE)
BIVARIATE = list(registry.BIVARIATE)
LINEAR_FIT_PARTS = registry.STATISTICS["linear_fit"].fields


def analysis_config(
    datasets: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    pt_width: float = 5.0,
    eta_width: float = 0.1,
    pt_min: float = 30.0,
    eta_max: float = 2.4,
    min_jets: int = 2,
) -> dict[str, Any]:
    """The issue's analysis as a config mapping: soft pt / |eta| cuts, >= min_jets jets,
    jet pt moments, pt-vs-eta co-moments and the soft-selected scalar sum of jet pt."""
    if datasets is None:
        datasets = {
            "ttbar": {"files": ["skhep:" + TTBAR.name], "weight": "genWeight"},
            "dy": {"files": [str(DY)], "weight": "genWeight"},
            "empty": {"files": [str(EMPTY)], "weight": "genWeight"},
        }
    return {
        "datasets": copy.deepcopy(dict(datasets)),
        "executor": {"type": "iterative", "workers": 2, "chunksize": 100_000},
        "parameters": {
            "jet_pt_min": {"init": pt_min, "bounds": [15.0, 200.0]},
            "jet_abs_eta_max": {"init": eta_max, "bounds": [0.5, 4.7]},
            # the upper bound sets the count's cap (tests set min_jets up to 3)
            "min_jets": {"init": min_jets, "bounds": [0, 4], "trainable": False},
        },
        "selection": {
            "objects": {
                "collection": "Jet",
                "cuts": [
                    {"var": "pt", "op": ">", "param": "jet_pt_min", "width": pt_width},
                    {"var": "abs_eta", "op": "<", "param": "jet_abs_eta_max", "width": eta_width},
                ],
            },
            "events": [{"count": "Jet", "op": ">=", "param": "min_jets"}],
        },
        "observables": [
            {"name": "jet_pt", "x": "Jet.pt", "stats": list(UNIVARIATE)},
            {"name": "jet_pt_eta", "x": "Jet.pt", "y": "Jet.eta", "stats": list(BIVARIATE)},
            {"name": "ht", "x": "sum(Jet.pt)", "stats": list(UNIVARIATE)},
        ],
    }


# --- reading real files ------------------------------------------------------------


def read_events(path: Path):
    """All events of one NanoAOD file as eager NanoEvents (the processor's view of a chunk)."""
    import warnings

    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

    NanoAODSchema.warn_missing_crossrefs = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # schema notes about rebuilt/missing branches
        return NanoEventsFactory.from_root(
            {str(path): "Events"}, schemaclass=NanoAODSchema, mode="eager"
        ).events()


def read_columns(path: Path, plan: Plan, weight_branch: str | None = "genWeight") -> ChunkColumns:
    """The whole file as one chunk of columns, as the processor would extract them."""
    return extract_columns(read_events(path), plan, weight_branch=weight_branch, source=str(path))


def slice_columns(cols: ChunkColumns, start: int, stop: int) -> ChunkColumns:
    """Events ``[start, stop)`` of ``cols`` as a chunk of their own."""
    collections = {}
    for name, (counts, flat) in cols.collections.items():
        offsets = np.concatenate([[0], np.cumsum(counts)])
        lo, hi = offsets[start], offsets[stop]
        collections[name] = (counts[start:stop].copy(),
                             {k: v[lo:hi].copy() for k, v in flat.items()})
    return ChunkColumns(
        n_events=stop - start,
        weight=cols.weight[start:stop].copy(),
        events={k: v[start:stop].copy() for k, v in cols.events.items()},
        collections=collections,
    )


def split_columns(cols: ChunkColumns, size: int) -> list[ChunkColumns]:
    """``cols`` cut into consecutive chunks of ``size`` events (the last one shorter)."""
    return [
        slice_columns(cols, s, min(s + size, cols.n_events)) for s in range(0, cols.n_events, size)
    ]


# --- comparing results -----------------------------------------------------------------


def differences(
    a: Mapping[str, Any], b: Mapping[str, Any], *, rtol: float = 1e-10, skip: tuple[str, ...] = ()
) -> list[str]:
    """Leaves of two results.json-like trees that differ by more than ``rtol`` relative.

    ``None`` (a null, i.e. undefined, statistic) only equals ``None``; numbers must
    satisfy ``|x - y| <= rtol * max(|x|, |y|)`` (so an exact 0 must be 0 on both sides).
    Keys whose last component is in ``skip`` are ignored.
    """
    fa, fb = dict(flatten(a)), dict(flatten(b))
    out = []
    if fa.keys() != fb.keys():
        out.append(f"different keys: {sorted(fa.keys() ^ fb.keys())[:5]}")
    for key in fa.keys() & fb.keys():
        if key.rsplit("/", 1)[-1] in skip:
            continue
        x, y = fa[key], fb[key]
        if x is None or y is None:
            if not (x is None and y is None):
                out.append(f"{key}: {x!r} != {y!r}")
            continue
        if isinstance(x, str) or isinstance(y, str):
            if x != y:
                out.append(f"{key}: {x!r} != {y!r}")
            continue
        if not abs(x - y) <= rtol * max(abs(x), abs(y)):
            rel = abs(x - y) / max(abs(x), abs(y))
            out.append(f"{key}: {x!r} vs {y!r} (relative {rel:.2e})")
    return sorted(out)


def is_finite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
