"""The ``likelihood`` section of results.json from merged per-dataset states.

:func:`likelihood_section` normalises each dataset's channel templates as the rest of
results.json (``norm_d``: :func:`analysis.optimize.objectives.dataset_norm`), builds the
model of the config (:func:`analysis.config.likelihood.build_model`), runs the ``mu =
0`` profile fit and returns :func:`analysis.likelihood.results_section`: templates,
``Z`` and ``dZ/dparameter`` (from the states' Jacobian, the envelope gradient), the
fit's status and nuisances, and, when asked for (:func:`limit_level`: a
``cls_upper_limit`` term, or ``likelihood: {upper_limit: true}``), the expected CLs
upper limit on ``mu`` with its gradient: its root takes several profile fits (and a
compilation of its own, ~40 s cold), so it is not computed otherwise and
``likelihood.upper_limit`` is then absent. ``evaluate`` writes it at the evaluated parameters,
``optimize`` at the final hard-cut evaluation (top level; no gradient at width 0) and
under ``final.soft`` / ``final.hard``.
"""

from __future__ import annotations

import warnings
from typing import Any

from analysis.config.likelihood import build_model, model_states
from analysis.errors import DiffcoffeaWarning
from analysis.optimize.objectives import dataset_stats
from analysis.pipeline.results import DatasetState, derivatives

__all__ = ["floor_only", "floor_warning", "histograms_section", "likelihood_section",
           "limit_level", "warn_floor"]


def likelihood_section(config: Any, plan: Any, states: dict[str, DatasetState]) -> dict | None:
    """The section (module docstring), or None without a ``likelihood:`` section, with
    ``floor_only`` where a bin with signal has only the floor as background
    (:func:`floor_only`). Unusable templates raise
    :class:`analysis.likelihood.LikelihoodError` (one line)."""
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
    tmpl, edges = lk.templates(mstates, model), lk.edges(mstates, model)
    lk.check_templates(tmpl, model, edges)
    result = lk.significance(mstates, model)
    level = limit_level(config)
    limit = None if level is None else lk.cls_limit(mstates, model, level=level)
    names = next(iter(states.values())).derived.names if states else ()
    grad: dict[str, float] = {}
    limit_grad: dict[str, float] = {}
    if names and next(iter(states.values())).derived.jac is not None:

        def z(s):
            ms = model_states(dataset_stats(config, plan, s, sumw, events), config)
            out = {"z": lk.discovery_significance(ms, model)}
            if level is not None:
                out["limit"] = lk.upper_limit(ms, model, level=level)
            return out

        _, g, _ = derivatives(z, values, jacs, None, order=1)
        grad = {n: float(v) for n, v in zip(names, g["z"])}
        if level is not None:
            limit_grad = {n: float(v) for n, v in zip(names, g["limit"])}
    out = lk.results_section(mstates, model, result, grad, limit=limit,
                             limit_grad=limit_grad, level=0.05 if level is None else level)
    flag = floor_only(config, tmpl, model, edges)
    if flag is not None:
        out["floor_only"] = flag
    return out


def floor_only(config: Any, tmpl: Any, model: Any, edges: Any = None) -> dict | None:
    """results.json's ``likelihood.floor_only``: :func:`analysis.likelihood.floor_report`
    of the templates with ``warn`` (whether the commands say its ``message`` as a warning:
    the floor-only bins carry more than :data:`analysis.likelihood.FLOOR_SHARE` of
    ``q0`` and ``likelihood.floor`` is not set, i.e. the floor is not a count the user
    chose); None where no bin with signal has only the floor as background."""
    from analysis import likelihood as lk

    report = lk.floor_report(tmpl, model, edges)
    if report is None:
        return None
    report["warn"] = bool(report["share"] > lk.FLOOR_SHARE and config.likelihood.floor is None)
    return report


def warn_floor(config: Any, plan: Any, states: dict[str, DatasetState]) -> None:
    """Say :func:`floor_only`'s line as a warning where it warns, for the states of a
    pass (``optimize``'s step 0: the start); nothing without a likelihood, where the
    pass computed no templates or where :func:`analysis.likelihood.check_templates`
    refuses them (the run's own check names that)."""
    line = floor_warning(config, plan, states)
    if line is not None:
        warnings.warn(DiffcoffeaWarning(line), stacklevel=2)


def floor_warning(config: Any, plan: Any, states: dict[str, DatasetState]) -> str | None:
    """:func:`warn_floor`'s line, or None."""
    if config.likelihood is None or config.likelihood.floor is not None:
        return None
    # imported past the check: optimistix and evermore cost ~0.85 s of CPU, which every
    # optimize run without a likelihood (the README's main job) would pay at its first step
    from analysis import likelihood as lk

    model = build_model(config)
    values = {n: st.derived.value for n, st in states.items()}
    if not values or any("templates" not in v for v in values.values()):
        return None  # a pass that computed no templates
    sumw = {n: st.sumw for n, st in states.items()}
    events = {n: st.events for n, st in states.items()}
    mstates = model_states(dataset_stats(config, plan, values, sumw, events), config)
    try:
        tmpl, edges = lk.templates(mstates, model), lk.edges(mstates, model)
        lk.check_templates(tmpl, model, edges)
    except lk.LikelihoodError:
        return None
    flag = floor_only(config, tmpl, model, edges)
    return flag["message"] if flag is not None and flag["warn"] else None


def limit_level(config: Any) -> float | None:
    """The CLs level of results.json's ``upper_limit``: that of the objective's first
    ``cls_upper_limit`` term, else 0.05 (the 95% CL limit) with ``likelihood:
    {upper_limit: true}``, else None (no limit computed)."""
    terms = config.objective.terms if config.objective is not None else []
    for term in terms:
        if getattr(term, "type", None) == "cls_upper_limit":
            return float(term.level)
    if config.likelihood is not None and config.likelihood.upper_limit:
        return 0.05
    return None


def _floats(a: Any) -> list[float]:
    import numpy as np

    return [float(v) for v in np.asarray(a, dtype=np.float64).reshape(-1)]


def _sumw_grads(config: Any, plan: Any, states: dict[str, DatasetState]) -> dict:
    """``{dataset: {histogram: {param: [d sumw_b / d param per bin]}}}`` of the
    normalised histograms (the chain rule through the states' Jacobian, as
    :func:`likelihood_section`'s dZ/dparam); empty where the states carry none."""
    import numpy as np

    first = next(iter(states.values()), None)
    if first is None or first.derived.jac is None or not first.derived.names:
        return {}
    names = first.derived.names
    values, jacs = {}, {}
    for name, st in states.items():
        values[name], jacs[name], _ = st.taylor()
    sumw = {n: st.sumw for n, st in states.items()}
    events = {n: st.events for n, st in states.items()}

    def bins(s):
        stats = dataset_stats(config, plan, s, sumw, events)
        return {ds: {h: st.sumw for h, st in d.get("histograms", {}).items()}
                for ds, d in stats.items()}

    _, grad, _ = derivatives(bins, values, jacs, None, order=1)
    return {ds: {h: {p: [float(v) for v in np.asarray(g)[:, i]] for i, p in enumerate(names)}
                 for h, g in per.items()} for ds, per in grad.items()}


def histograms_section(config: Any, plan: Any, states: dict[str, DatasetState],
                       params: dict[str, float] | None = None) -> dict:
    """results.json's ``histograms``: ``{name: {"x", "edges", "datasets": {DATASET:
    {"sumw", "sumw2", "underflow": [sumw, sumw2], "overflow": [sumw, sumw2],
    "sumw_grad": {PARAM: [per bin]}}}}}`` of the configured histograms at the selection,
    normalised as the yields; ``sumw_grad`` (d sumw / d param, trainable parameters) where
    the states carry derivatives (``evaluate``; not the hard final states of
    ``optimize``). ``edges``: trainable edges at ``params`` (the evaluated parameters;
    None: the configured edges)."""
    values = {n: st.derived.value for n, st in states.items()}
    sumw = {n: st.sumw for n, st in states.items()}
    events = {n: st.events for n, st in states.items()}
    stats = dataset_stats(config, plan, values, sumw, events)
    grads = _sumw_grads(config, plan, states)
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
            g = grads.get(ds, {}).get(h.name)
            if g is not None:
                per[ds]["sumw_grad"] = g
        out[h.name] = {"x": h.x, "edges": list(h.edges_at(params)), "datasets": per}
    return out
