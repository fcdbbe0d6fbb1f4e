"""Differentiable weighted statistics of jagged data, mirroring awkward's API.

``from analysis import stats`` then ``stats.mean(events.Jet.pt, weight=w, axis=1)``.
See :mod:`analysis.stats.api` for the conventions (inputs, axis, weights, NaN for
empty selections), :mod:`analysis.stats.jagged` for the jit-friendly :class:`Jagged`
type, :mod:`analysis.stats._core` for the moment states shared with the chunked
processor, :mod:`analysis.stats.merge` for the exact merge of states,
:mod:`analysis.stats.derive` for states with derivatives (:class:`Derived`,
:func:`derive`, :func:`differentiable`, forward or reverse mode), :mod:`analysis.stats.pullback`
for reverse mode across chunks, :mod:`analysis.stats.mlp` for a learned score (:func:`mlp`,
:func:`score`).
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
from analysis.stats.derive import Derived, PassTheta, Pullback, derive, differentiable
from analysis.stats.jagged import Jagged, from_awkward
from analysis.stats.merge import merge
from analysis.stats.mlp import MLP, Standardisation, mlp, score

__all__ = [
    "CoMoments",
    "Derived",
    "Jagged",
    "MLP",
    "LinearFit",
    "Moments",
    "PassTheta",
    "Pullback",
    "Standardisation",
    "central_moment",
    "comoments",
    "corr",
    "covar",
    "derive",
    "differentiable",
    "from_awkward",
    "kurtosis",
    "linear_fit",
    "mean",
    "merge",
    "mlp",
    "moment",
    "moments",
    "score",
    "skew",
    "std",
    "var",
]
