"""The one registry of statistics (:mod:`analysis.spec.statistics`, re-exported).

The registry itself lives in the pure-Python layer :mod:`analysis.spec` so that the
config loader can check statistic names without importing JAX; this module is the
same registry (the same :data:`STATISTICS` dict), under its public name.
"""

from __future__ import annotations

from analysis.spec.statistics import (
    BIVARIATE,
    NAMES,
    STATISTICS,
    UNIVARIATE,
    Statistic,
    bivariate,
    json_paths,
    moment_order,
    names,
    observable_statistics,
    univariate,
)

__all__ = [
    "BIVARIATE",
    "NAMES",
    "STATISTICS",
    "UNIVARIATE",
    "Statistic",
    "bivariate",
    "json_paths",
    "moment_order",
    "names",
    "observable_statistics",
    "univariate",
]
