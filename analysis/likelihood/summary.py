"""The ``likelihood`` section of results.json (a contract: code outside the repository reads it).

:func:`results_section` turns concrete merged states, the model and a
:class:`~analysis.likelihood.Significance` into plain JSON types::

    {"channels": {CH: {"edges": [...], "samples": {DATASET: {
        "nominal": {"sumw": [...], "sumw2": [...]},
        "variations": {NAME: {"up": [...], "down": [...]}}}}}},
     "normalisations": {NAME: {"datasets": [...], "kappa": k}},
     "signal": [DATASET, ...], "mc_stat": true|false, "floor": f,
     "significance": {"value": Z, "grad": {PARAM: dZ/dparam}, "reliable": bool},
     "upper_limit": {"value": mu_up, "grad": {PARAM: dmu_up/dparam}, "level": 0.05,
                     "reliable": bool, "data": "background-only asimov"},
     "fit": {"converged": bool, "nuisances": {NAME: value},
             "uncertainties": {NAME: sigma}, "pull_threshold": 3.0,
             "large_pulls": {NAME: value}, "mu": 0.0, "data": "asimov",
             "description": "..."}}

Sums are of the in-range bins (no flow bins); ``nuisances`` are the ``mu = 0`` profile
fit's, named as :func:`~analysis.likelihood.nuisance_names`, with their post-fit
``uncertainties`` ``sqrt(C_ii)`` (:func:`~analysis.likelihood.covariance.fit_covariance`,
the inverse Hessian of the NLL at that fit's minimum; ``null`` where it is not positive
definite); ``large_pulls`` the nuisances fitted further than ``pull_threshold`` (3)
prior standard deviations from 0 (empty when none; :data:`PULL_THRESHOLD`); ``description`` says which fit that is (:data:`FIT_DESCRIPTION`); ``floor`` the model's
smallest expected count of a bin (:mod:`analysis.likelihood.expected`); ``reliable`` is
false when that fit did not converge (``fit.converged``): ``Z`` and its gradient are then
not those of the profile likelihood (an unconverged minimum), and must not be used.
``upper_limit`` (given an :class:`~analysis.likelihood.UpperLimit`): the expected CLs
upper limit on ``mu`` at ``level`` (:mod:`analysis.likelihood.limit`) and its gradient;
``reliable`` false when its root or the fit at the limit did not converge.
Returns a dict; writing
it is the caller's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from analysis.likelihood.covariance import fit_covariance
from analysis.likelihood.expected import asimov, nuisance_names
from analysis.likelihood.histograms import edges, templates
from analysis.likelihood.limit import UpperLimit
from analysis.likelihood.model import Model
from analysis.likelihood.significance import Significance

__all__ = ["FIT_DESCRIPTION", "PULL_THRESHOLD", "results_section"]

#: What the ``fit`` of the section is: the fit behind Z, and why its nuisances move.
FIT_DESCRIPTION = (
    "background-only fit (mu = 0) to Asimov signal + background data (mu = 1, nominal "
    "nuisances), the fit behind Z: nuisances that raise the background (normalisations "
    "above all) are pulled to absorb the signal"
)


#: A nuisance whose fitted value lies further than this from its prior's centre (in prior
#: standard deviations) is listed in ``fit.large_pulls`` and named on the console: the
#: model cannot describe the data without it.
PULL_THRESHOLD = 3.0


def _floats(a: Any) -> list[float]:
    return [float(v) for v in np.asarray(a, dtype=np.float64).reshape(-1)]


def results_section(
    states: Mapping[str, Any],
    model: Model,
    result: Significance,
    grad: Mapping[str, float] | None = None,
    *,
    limit: UpperLimit | None = None,
    limit_grad: Mapping[str, float] | None = None,
    level: float = 0.05,
) -> dict[str, Any]:
    """The ``likelihood`` section (module docstring) of concrete ``states``; ``grad``:
    ``{parameter: dZ/dparameter}`` (empty if None); ``upper_limit`` with ``limit``.

    Parameters
    ----------
    states : Mapping[str, Any]
        Concrete merged histogram states ``{dataset: {key: stats.Histogram}}``.
    model : Model
        The model.
    result : Significance
        The result of :func:`~analysis.likelihood.significance` on ``states``.
    grad : Mapping[str, float] or None, optional
        ``{parameter: dZ/dparameter}`` (default None: empty).
    limit : UpperLimit or None, optional
        Keyword-only. :func:`~analysis.likelihood.cls_limit` of ``states`` at ``level``
        (default None: no ``upper_limit`` entry).
    limit_grad : Mapping[str, float] or None, optional
        Keyword-only. ``{parameter: dmu_up/dparameter}`` (default None: empty).
    level : float, optional
        Keyword-only. The CLs level of ``limit`` (default 0.05).

    Returns
    -------
    dict
        Plain JSON types (float, list, dict, bool, str), the layout of the module
        docstring.
    """
    tmpl = templates(states, model)
    bin_edges = edges(states, model)
    channels = {}
    for c in model.channels:
        samples = {}
        for ds, t in tmpl[c.name].items():
            samples[ds] = {
                "nominal": {k: _floats(t["nominal"][k]) for k in ("sumw", "sumw2")},
                "variations": {
                    s: {k: _floats(v[k]) for k in ("up", "down")}
                    for s, v in t["variations"].items()
                },
            }
        channels[c.name] = {"edges": [float(e) for e in bin_edges[c.name]], "samples": samples}
    names = nuisance_names(tmpl, model)
    pulls = _floats(result.fit.nuisances)
    converged = bool(np.asarray(result.fit.converged))
    cov = np.asarray(fit_covariance(tmpl, model, asimov(tmpl, model), 0.0, result.fit.nuisances))
    sigma = [float(np.sqrt(v)) if np.isfinite(v) and v > 0 else None for v in np.diag(cov)]
    out = {
        "channels": channels,
        "normalisations": {
            n.name: {"datasets": list(n.datasets), "kappa": n.kappa} for n in model.normalisations
        },
        "signal": list(model.signal),
        "mc_stat": model.mc_stat,
        "floor": float(model.floor),
        "significance": {
            "value": float(np.asarray(result.z)),
            "grad": {k: float(v) for k, v in (grad or {}).items()},
            "reliable": converged,
        },
        "fit": {
            "converged": converged,
            "nuisances": dict(zip(names, pulls, strict=True)),
            "uncertainties": dict(zip(names, sigma, strict=True)),
            "pull_threshold": PULL_THRESHOLD,
            "large_pulls": {n: v for n, v in zip(names, pulls, strict=True)
                            if abs(v) > PULL_THRESHOLD},
            "mu": 0.0,
            "data": "asimov",
            "description": FIT_DESCRIPTION,
        },
    }
    if limit is not None:
        out["upper_limit"] = {
            "value": float(np.asarray(limit.mu)),
            "grad": {k: float(v) for k, v in (limit_grad or {}).items()},
            "level": float(level),
            "reliable": bool(np.asarray(limit.converged)),
            "data": "background-only asimov",
        }
    return out
