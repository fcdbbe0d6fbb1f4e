"""coffea processors: the YAML pipeline's glue (:class:`DiffProcessor`) and hand-written
processors on the public API (:mod:`processors.jet_moments`, :mod:`processors.dimuon`),
each returning ``{dataset: analysis.stats.Derived}``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from processors.diff_processor import DiffProcessor

if TYPE_CHECKING:
    from processors.dimuon import DimuonProcessor
    from processors.jet_moments import JetMomentsProcessor

__all__ = ["DiffProcessor", "DimuonProcessor", "JetMomentsProcessor"]

# The hand-written processors import analysis.soft, whose compiled pass-weight kernels
# (~0.4 s to load) the YAML pipeline, which imports DiffProcessor from here, never runs:
# they are imported on first use.
_LAZY = {"DimuonProcessor": "processors.dimuon", "JetMomentsProcessor": "processors.jet_moments"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'processors' has no attribute {name!r}")
