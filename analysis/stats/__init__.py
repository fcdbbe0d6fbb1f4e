"""Differentiable weighted statistics of jagged data, mirroring awkward's API.

``from analysis import stats`` then ``stats.mean(events.Jet.pt, weight=w, axis=1)``.
See :mod:`analysis.stats.api` for the conventions (inputs, axis, weights, NaN for
empty selections), :mod:`analysis.stats.jagged` for the jit-friendly :class:`Jagged`
type, :mod:`analysis.stats._core` for the moment states shared with the chunked
processor, :mod:`analysis.stats.merge` for the exact merge of states,
:mod:`analysis.stats.derive` for states with derivatives (:class:`Derived`,
:func:`derive`, :func:`differentiable`, :func:`join`), :mod:`analysis.stats.histogram` for soft
histograms (:func:`histogram`, :class:`Histogram`).
"""

from __future__ import annotations

from analysis.stats._core import CoMoments, Moments
from analysis.stats.api import (
    LinearFit,
    central_moment,
    comoments,
    corr,
    covar,
    kurtosis,
    linear_fit,
    mean,
    moment,
    moments,
    skew,
    std,
    var,
)
from analysis.stats.derive import Derived, derive, differentiable, join
from analysis.stats.histogram import Histogram, histogram
from analysis.stats.jagged import Jagged, from_awkward
from analysis.stats.merge import merge

__all__ = [
    "CoMoments",
    "Derived",
    "Histogram",
    "Jagged",
    "LinearFit",
    "Moments",
    "central_moment",
    "comoments",
    "corr",
    "covar",
    "derive",
    "differentiable",
    "from_awkward",
    "histogram",
    "join",
    "kurtosis",
    "linear_fit",
    "mean",
    "merge",
    "moment",
    "moments",
    "skew",
    "std",
    "var",
]
