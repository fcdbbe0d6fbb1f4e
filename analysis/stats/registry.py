"""The one registry of statistics (:mod:`analysis.spec.statistics`, re-exported).

The registry itself lives in the pure-Python layer :mod:`analysis.spec` so that the
config loader can check statistic names without importing JAX; this module is the
same registry (the same :data:`STATISTICS` dict), under its public name.
"""

from __future__ import annotations

from analysis.spec import statistics as _statistics
from analysis.spec.statistics import BIVARIATE as BIVARIATE
from analysis.spec.statistics import NAMES as NAMES
from analysis.spec.statistics import STATISTICS as STATISTICS
from analysis.spec.statistics import UNIVARIATE as UNIVARIATE
from analysis.spec.statistics import Statistic as Statistic
from analysis.spec.statistics import bivariate as bivariate
from analysis.spec.statistics import json_paths as json_paths
from analysis.spec.statistics import moment_order as moment_order
from analysis.spec.statistics import names as names
from analysis.spec.statistics import observable_statistics as observable_statistics
from analysis.spec.statistics import univariate as univariate

__all__ = list(_statistics.__all__)
