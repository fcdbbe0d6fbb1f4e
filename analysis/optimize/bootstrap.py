"""The objective over Poisson-bootstrap replicas: its Monte Carlo statistical uncertainty.

A replica pass (:mod:`analysis.pipeline.replicas`) gives per dataset and replica ``k``
four sums of the same pass's weights and cuts: the events ``n_k``, the sum of weights
``sumw_k``, and the selected sums ``s1_k = sum_e P_ek s_e``, ``s2_k = sum_e P_ek s_e^2``
(``s_e``: weight x pass probability). :func:`bootstrap_values` is the objective in each
replica, :func:`bootstrap_uncertainty` its standard deviation (``ddof=1``): replicas of
two points drawn from the same events are paired, so the spread of their difference is
the difference's MC uncertainty (keep-best's winner's-curse rule,
:mod:`analysis.optimize.keepbest`).

* ``significance`` terms: each replica's yield, MC variance and floor follow
  :func:`~analysis.optimize.objectives.dataset_stats` from its own sums, all replicas
  at once.
* Likelihood terms (``discovery_significance``, ``mu_uncertainty``): a replica's
  templates are the point's, per dataset scaled as its selected yield is, ``sumw`` by
  ``(norm_k s1_k) / (norm s1)`` and ``sumw2`` by ``(norm_k / norm)^2 s2_k / s2``
  (``norm_k``: the normalisation of the replica's ``sumw_k``); the objective (a profile
  fit each) is evaluated replica by replica. The replicas carry no per-bin sums, so this
  replicates each sample's normalisation, paired between points (the events that enter
  or leave the selection), not the migration of events between bins: for a one-bin
  channel it is the bootstrap of the bin, for more bins a lower estimate of the spread.
* Other terms (``target``, ``python``, ``cls_upper_limit``: a root of several fits per
  replica): not replicated (``None``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis.config.terms import DiscoverySignificanceTerm, MuUncertaintyTerm, SignificanceTerm
from analysis.optimize.objectives import Objective, dataset_norm
from analysis.pipeline.results import YIELDS, DatasetState
from analysis.stats.histogram import Histogram

__all__ = ["bootstrap_uncertainty", "bootstrap_values", "replicated", "spread"]

#: the likelihood terms whose replicas :func:`bootstrap_values` evaluates
_LIKELIHOOD = (DiscoverySignificanceTerm, MuUncertaintyTerm)


def replicated(objective: Objective) -> str | None:
    """How :func:`bootstrap_values` replicates ``objective``: ``"yields"`` (significance
    terms only: all replicas at once), ``"templates"`` (likelihood terms among them:
    replica by replica), or None (a term it does not replicate)."""
    terms = objective.terms
    if all(isinstance(t, SignificanceTerm) for t in terms):
        return "yields"
    if all(isinstance(t, (SignificanceTerm, *_LIKELIHOOD)) for t in terms):
        return "templates"
    return None


def spread(values: np.ndarray | None) -> float | None:
    """The standard deviation (``ddof=1``) of the defined replica values; None where
    fewer than half of them (or than 2) are defined."""
    if values is None:
        return None
    good = np.isfinite(values)
    if good.sum() < max(2, values.size // 2):
        return None
    return float(np.std(values[good], ddof=1))


def bootstrap_uncertainty(
    objective: Objective, states: dict[str, DatasetState], replicas: dict[str, Any] | None
) -> float | None:
    """The Monte Carlo statistical standard deviation of the objective at ``states``:
    :func:`spread` of :func:`bootstrap_values` (module docstring).

    Parameters
    ----------
    objective : Objective
        The objective.
    states : dict of str to DatasetState
        The point's merged states (values).
    replicas : dict of str to array or None
        ``{dataset: (4, K) array}``: per replica ``n_k``, ``sumw_k``, ``s1_k``, ``s2_k``.

    Returns
    -------
    float or None
        float64 standard deviation; None without replicas, where fewer than half of them
        give a defined value (no background), or for a term not replicated.
    """
    return spread(bootstrap_values(objective, states, replicas))


def bootstrap_values(
    objective: Objective, states: dict[str, DatasetState], replicas: dict[str, Any] | None
) -> np.ndarray | None:
    """The objective in each Poisson-bootstrap replica (:func:`bootstrap_uncertainty`'s
    arguments; module docstring).

    Returns
    -------
    numpy.ndarray or None
        ``(K,)`` float64, NaN where undefined (no background yield); None without
        replicas or for a term not replicated.
    """
    how = None if replicas is None else replicated(objective)
    if how is None:
        return None
    values = {name: st.taylor()[0] for name, st in states.items()}
    sumw = {name: st.sumw for name, st in states.items()}
    events = {name: st.events for name, st in states.items()}
    stats = objective.stats(values, sumw, events)
    base = {name: stats[name] for name in states}
    for name in states:
        n_k, sumw_k, s1, s2 = (np.asarray(r, dtype=np.float64) for r in replicas[name])
        with np.errstate(divide="ignore", invalid="ignore"):
            norm = np.array([dataset_norm(objective.config, name, float(x)) for x in sumw_k])
            one_event = np.where(n_k > 0, norm * sumw_k / np.where(n_k > 0, n_k, 1.0), 0.0)
        var = objective.variance_scale * norm * norm * s2
        stats[name] = {**stats[name], "yield": norm * s1, "mc_variance": var,
                       "mc_variance_floor": one_event * one_event,
                       **dict(zip(YIELDS, (s1, s2), strict=True)), "sumw": sumw_k}
    b = sum(stats[n]["yield"] for n in objective.background)
    if how == "yields":
        value = np.asarray(objective.value(stats), dtype=np.float64)
    else:
        value = _template_values(objective, base, stats, len(np.asarray(b).reshape(-1)))
    return np.where(np.isfinite(value) & (np.asarray(b) > 0), value, np.nan)


def _template_values(objective: Objective, base: dict[str, Any], reps: dict[str, Any],
                     count: int) -> np.ndarray:
    """The objective replica by replica, each dataset's templates scaled as its selected
    yield (module docstring); ``base``: the point's statistics, ``reps``: the replicas'
    (arrays of ``count``)."""
    out = np.full(count, np.nan)
    for k in range(count):
        stats = {}
        for name, rep in reps.items():
            one = {key: (np.asarray(v)[k] if key in _REPLICATED else v) for key, v in rep.items()}
            point = base[name]
            w = _ratio(one["yield"], point["yield"])
            w2 = _ratio(one["mc_variance"], point["mc_variance"])
            if "templates" in point:
                one["templates"] = {key: Histogram(tuple(h.edges.tolist()), w * h.sumw_flow,
                                                   w2 * h.sumw2_flow)
                                    for key, h in point["templates"].items()}
            stats[name] = one
        out[k] = float(objective.value(stats))
    return out


#: the statistics :func:`bootstrap_values` replaces by per-replica arrays
_REPLICATED = frozenset({"yield", "mc_variance", "mc_variance_floor", *YIELDS, "sumw"})


def _ratio(replica: Any, point: Any) -> float:
    """``replica / point`` (0 where the point's is 0: nothing to scale)."""
    p = float(point)
    return float(replica) / p if p != 0 else 0.0
