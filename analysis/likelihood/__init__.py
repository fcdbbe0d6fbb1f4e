"""Binned likelihoods of soft histograms: the model, profile fits and objectives.

``from analysis import likelihood as lk``; describe the model with :class:`Model`,
:class:`Channel` and :class:`Normalisation` (:mod:`analysis.likelihood.model`), then
:func:`discovery_significance` / :func:`mu_uncertainty` are JAX functions of merged
histogram states ``{dataset: {key: stats.Histogram}}``
(:mod:`analysis.likelihood.significance`), and so is :func:`upper_limit`, the expected
CLs upper limit on ``mu`` (:mod:`analysis.likelihood.limit`). The likelihood is built with evermore's
effects and pdfs (:mod:`analysis.likelihood.expected`), fitted with optimistix
(:mod:`analysis.likelihood.fit`; post-fit covariance: :mod:`analysis.likelihood.covariance`); :func:`results_section` is the ``likelihood`` section
of results.json (:mod:`analysis.likelihood.summary`); :func:`pyhf_workspace` and
:func:`combine_inputs` write that section for pyhf and Combine
(:mod:`analysis.likelihood.export`). Pure maths: knows :mod:`analysis.stats` only.
"""

from __future__ import annotations

# first: without the 'likelihood' extra, one line that names it (not evermore's traceback)
import analysis.likelihood._installed  # noqa: F401
from analysis.likelihood.covariance import fit_covariance
from analysis.likelihood.expected import asimov, expected, mc_stat_widths, nll, nuisance_names
from analysis.likelihood.export import combine_inputs, pyhf_workspace
from analysis.likelihood.fit import FitResult, fit_status, profile, raise_for_fit
from analysis.likelihood.histograms import (
    FLOOR_SHARE,
    NEGATIVE_TOLERANCE,
    check_templates,
    edges,
    floor_report,
    floor_share,
    templates,
)
from analysis.likelihood.limit import (
    UpperLimit,
    background_asimov,
    cls_limit,
    raise_for_limit,
    upper_limit,
)
from analysis.likelihood.model import (
    Channel,
    FitError,
    LikelihoodError,
    Model,
    Normalisation,
)
from analysis.likelihood.significance import (
    Significance,
    discovery_significance,
    mu_uncertainty,
    significance,
)
from analysis.likelihood.summary import results_section

__all__ = [
    "FLOOR_SHARE",
    "NEGATIVE_TOLERANCE",
    "Channel",
    "FitError",
    "FitResult",
    "LikelihoodError",
    "Model",
    "Normalisation",
    "Significance",
    "UpperLimit",
    "asimov",
    "background_asimov",
    "check_templates",
    "cls_limit",
    "combine_inputs",
    "discovery_significance",
    "edges",
    "expected",
    "fit_covariance",
    "fit_status",
    "floor_report",
    "floor_share",
    "mc_stat_widths",
    "mu_uncertainty",
    "nll",
    "nuisance_names",
    "profile",
    "pyhf_workspace",
    "raise_for_fit",
    "raise_for_limit",
    "results_section",
    "significance",
    "templates",
    "upper_limit",
]
