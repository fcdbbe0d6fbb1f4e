"""Differentiable weighted statistics of jagged data, mirroring awkward's API.

``from analysis import stats`` then ``stats.mean(events.Jet.pt, weight=w, axis=1)``.
See :mod:`analysis.stats.api` for the conventions (inputs, axis, weights, NaN for
empty selections), :mod:`analysis.stats.jagged` for the jit-friendly :class:`Jagged`
type, :mod:`analysis.stats._core` for the moment states shared with the chunked
processor, :mod:`analysis.stats.merge` for the exact merge of states,
:mod:`analysis.stats.derive` for states with derivatives (:class:`Derived`,
:func:`derive`, :func:`differentiable`, forward or reverse mode, :func:`join`),
:mod:`analysis.stats.pullback` for reverse mode across chunks, :mod:`analysis.stats.mlp`
for a learned score (:func:`mlp`, :func:`score`), :mod:`analysis.stats.histogram` for
soft histograms (:func:`histogram`, :class:`Histogram`), :mod:`analysis.stats.sums` for
weighted sums (:func:`sum`, as ``ak.sum``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from analysis.stats.derive import Derived, PassTheta, Pullback, derive, differentiable, join
from analysis.stats.histogram import Histogram, histogram
from analysis.stats.jagged import Jagged, from_awkward, where
from analysis.stats.merge import merge
from analysis.stats.mlp import Standardisation, mlp, score
from analysis.stats.sums import sum  # noqa: A004  (stats.sum, as ak.sum)

if TYPE_CHECKING:
    from analysis.stats._mlpnet import MLP

__all__ = [
    "CoMoments",
    "Derived",
    "Histogram",
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
    "histogram",
    "join",
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
    "sum",
    "var",
    "where",
]


def __getattr__(name: str) -> Any:
    # MLP (an equinox module) is imported when first asked for: equinox takes 0.3-0.6 s
    # to load, which a config without a learned score never needs (docs/explanation/performance.md)
    if name == "MLP":
        from analysis.stats._mlpnet import MLP

        return MLP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
