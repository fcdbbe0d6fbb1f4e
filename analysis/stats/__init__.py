"""Differentiable weighted statistics of jagged data, mirroring awkward's API.

``from analysis import stats`` then ``stats.mean(events.Jet.pt, weight=w, axis=1)``.
See :mod:`analysis.stats.api` for the conventions (inputs, axis, weights, NaN for
empty selections), :mod:`analysis.stats.jagged` for the jit-friendly :class:`Jagged`
type, :mod:`analysis.stats._core` for the moment states shared with the chunked
processor, and :mod:`analysis.stats.fused` for the fast soft-cut kernel.
"""

from __future__ import annotations

from analysis.stats import fused
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
from analysis.stats.jagged import Jagged, from_awkward

__all__ = [
    "CoMoments",
    "Jagged",
    "LinearFit",
    "Moments",
    "central_moment",
    "comoments",
    "corr",
    "covar",
    "from_awkward",
    "fused",
    "kurtosis",
    "linear_fit",
    "mean",
    "moment",
    "moments",
    "skew",
    "std",
    "var",
]
