"""The ``likelihood`` section of results.json from merged per-dataset states.

:func:`likelihood_section` normalises each dataset's channel templates as the rest of
results.json (``norm_d``: :func:`analysis.optimize.objectives.dataset_norm`), builds the
model of the config (:func:`analysis.config.likelihood.build_model`), runs the ``mu =
0`` profile fit and returns :func:`analysis.likelihood.results_section`: templates,
``Z`` and ``dZ/dparameter`` (from the states' Jacobian, the envelope gradient), the
fit's status and nuisances, and the expected CLs upper limit on ``mu`` with its gradient
(at the ``level`` of the objective's ``cls_upper_limit`` term, else 0.05). ``evaluate`` writes it at the evaluated parameters,
``optimize`` at the final hard-cut evaluation (top level; no gradient at width 0) and
under ``final.soft`` / ``final.hard``.
"""

from __future__ import annotations

from typing import Any

from analysis.config.likelihood import build_model, model_states
from analysis.optimize.objectives import dataset_stats
from analysis.pipeline.results import DatasetState, derivatives

__all__ = ["histograms_section", "likelihood_section", "limit_level"]


def likelihood_section(config: Any, plan: Any, states: dict[str, DatasetState]) -> dict | None:
    """The section (module docstring), or None without a ``likelihood:`` section.
    Unusable templates raise :class:`analysis.likelihood.LikelihoodError` (one line)."""
    from analysis import likelihood as lk  # the 'likelihood' extra: configs that have one

    model = build_model(config)
    if model is None:
        return None
    values, jacs = {}, {}
    for name, st in states.items():
        values[name], jacs[name], _ = st.taylor()
    sumw = {n: st.sumw for n, st in states.items()}
    events = {n: st.events for n, st in states.items()}
    mstates = model_states(dataset_stats(config, plan, values, sumw, events), config)
    lk.check_templates(lk.templates(mstates, model), model, lk.edges(mstates, model))
    result = lk.significance(mstates, model)
    level = limit_level(config)
    limit = lk.cls_limit(mstates, model, level=level)
    names = next(iter(states.values())).derived.names if states else ()
    grad: dict[str, float] = {}
    limit_grad: dict[str, float] = {}
    if names and next(iter(states.values())).derived.jac is not None:

        def z(s):
            ms = model_states(dataset_stats(config, plan, s, sumw, events), config)
            return {"z": lk.discovery_significance(ms, model),
                    "limit": lk.upper_limit(ms, model, level=level)}

        _, g, _ = derivatives(z, values, jacs, None, order=1)
        grad = {n: float(v) for n, v in zip(names, g["z"])}
        limit_grad = {n: float(v) for n, v in zip(names, g["limit"])}
    return lk.results_section(mstates, model, result, grad, limit=limit,
                              limit_grad=limit_grad, level=level)


def limit_level(config: Any) -> float:
    """The CLs level of results.json's ``upper_limit``: that of the objective's first
    ``cls_upper_limit`` term, else 0.05 (the 95% CL limit)."""
    terms = config.objective.terms if config.objective is not None else []
    for term in terms:
        if getattr(term, "type", None) == "cls_upper_limit":
            return float(term.level)
    return 0.05


def _floats(a: Any) -> list[float]:
    import numpy as np

    return [float(v) for v in np.asarray(a, dtype=np.float64).reshape(-1)]


def histograms_section(config: Any, plan: Any, states: dict[str, DatasetState]) -> dict:
    """results.json's ``histograms``: ``{name: {"x", "edges", "datasets": {DATASET:
    {"sumw", "sumw2", "underflow": [sumw, sumw2], "overflow": [sumw, sumw2]}}}}`` of the
    configured histograms at the selection, normalised as the yields (values only)."""
    values = {n: st.derived.value for n, st in states.items()}
    sumw = {n: st.sumw for n, st in states.items()}
    events = {n: st.events for n, st in states.items()}
    stats = dataset_stats(config, plan, values, sumw, events)
    out = {}
    for h in config.histograms:
        per = {}
        for ds, s in stats.items():
            st = s.get("histograms", {}).get(h.name)
            if st is None:
                continue
            flow = st.flow
            per[ds] = {"sumw": _floats(st.sumw), "sumw2": _floats(st.sumw2),
                       "underflow": _floats([flow.underflow_sumw, flow.underflow_sumw2]),
                       "overflow": _floats([flow.overflow_sumw, flow.overflow_sumw2])}
        out[h.name] = {"x": h.x, "edges": list(h.bin_edges()), "datasets": per}
    return out
