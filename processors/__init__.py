"""coffea processors: the YAML pipeline's glue (:class:`DiffProcessor`) and hand-written
processors on the public API (:mod:`processors.jet_moments`, :mod:`processors.dimuon`),
each returning ``{dataset: analysis.stats.Derived}``."""

from processors.diff_processor import DiffProcessor
from processors.dimuon import DimuonProcessor
from processors.jet_moments import JetMomentsProcessor

__all__ = ["DiffProcessor", "DimuonProcessor", "JetMomentsProcessor"]
