"""The objective and its gradient by reverse mode: two passes whatever the parameter count.

``reverse_objective(objective, evaluator, params, widths)`` returns what
:func:`analysis.optimize.objectives.objective_from_states` returns at order 1
(objective, gradient over the plan's trainable parameters, significance, yields):

1. a values-only pass, merged per dataset (``S``);
2. ``L = objective(S)`` and its cotangent ``S_bar = dL/dS`` (``jax.value_and_grad`` of
   the objective's JAX function of the merged states);
3. a second pass pulling ``S_bar`` back through every chunk
   (:meth:`analysis.driver.runner.Evaluator.run_pullback`); the chunks' gradient shares
   add (exact across chunks and executors, :mod:`analysis.stats.pullback`).

Each step costs two passes (the second about a JAX reverse sweep of the kernel, or the
numba backend's sensitivities where its rules serve the plan and the payload),
independent of the number of parameters: the choice for plans with many trainable
parameters (:func:`analysis.stats.derive.choose_mode`, as for own processors).

One pass where the objective reads only the selected yields (a ``significance``
objective) and the backend's chooser serves one-pass yield gradients for the plan: the
values pass gives each dataset's yield gradients ``dY/dtheta``, ``dY2/dtheta`` too
(:meth:`analysis.driver.runner.Evaluator.run_yield_gradients`; they add over chunks),
and ``dL/dtheta = sum_datasets (dL/dY dY/dtheta + dL/dY2 dY2/dtheta)``: the same
gradient as the pullback pass, exactly (the chain rule through the linear merge of the
yields). When the cotangent reads another state the pullback pass runs after all, and
the objective remembers it (later steps take two passes from the start).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from analysis.errors import DiffcoffeaError
from analysis.optimize.objectives import PythonTerm, dataset_scales
from analysis.pipeline.backend import Backend
from analysis.pipeline.request import Request
from analysis.pipeline.results import DatasetState, state_names, yield_cotangents
from analysis.stats.derive import Derived
from analysis.stats.pullback import prune, pullback_payload

_payload = jax.jit(pullback_payload)  # compiled once per merged-state structure


def _to_numpy(tree):
    return jax.tree_util.tree_map(lambda v: np.asarray(v, dtype=np.float64), tree)


def _cotangent(objective, names: tuple[str, ...]):
    """The jitted ``(values, scales) -> ((L, stats), dL/dvalues)`` of ``objective``
    (``scales``: :func:`analysis.optimize.objectives.dataset_scales`; eager with a
    ``python`` term). Compiled once per objective and datasets ``names``: the datasets'
    totals and the MC variance's factor are arguments, as in
    :func:`analysis.optimize.objectives._compiled`, so one program serves samples of
    other totals (keep-best's training, held-out and whole samples)."""
    key = ("reverse", names)
    cache = objective.__dict__.setdefault("_compiled", {})
    if key not in cache:

        def fn(vals, scales):
            stats = objective.stats_scaled(vals, scales)
            return objective.value(stats), stats

        run = jax.value_and_grad(fn, has_aux=True)  # dL/dvalues only (argnums 0)
        eager = any(isinstance(term, PythonTerm) for term in objective.terms)
        cache[key] = run if eager else jax.jit(run)
    return cache[key]

__all__ = ["reverse_objective"]


def reverse_objective(
    objective, evaluator, params: dict[str, float] | None, widths, *, chunks=None,
    strict: bool = True,
) -> dict[str, Any]:
    """Objective value and gradient by two passes, or one (module docstring);
    ``"states"``: the first pass's ``{dataset: DatasetState}`` (values only)."""
    plan = evaluator.plan
    backend = getattr(evaluator, "backend", Backend())
    one = (hasattr(evaluator, "run_yield_gradients") and objective.__dict__.get("_one_pass", True)
           and backend.chooser.supports(plan, Request(
               *evaluator.theta_and_widths(params, widths), order=0,
               yield_rows=(True, True))) is None)  # one pass: the numba backend only
    rows = objective.__dict__.get("_yield_rows")  # what the last step's cotangent read
    if one:
        first = evaluator.run_yield_gradients(params, widths=widths, chunks=chunks, rows=rows)
        states = {n: DatasetState(events=st.events, sumw=st.sumw, chunks=st.chunks,
                                  derived=Derived(plan.trainable_names, st.derived.value))
                  for n, st in first.items()}
    else:
        states = evaluator.run(params, widths=widths, order=0, chunks=chunks)
    values = {n: st.taylor()[0] for n, st in states.items()}
    sumw = {n: st.sumw for n, st in states.items()}
    events = {n: st.events for n, st in states.items()}

    scales = dataset_scales(objective.config, sumw, events,
                            variance_scale=objective.variance_scale)
    (val, stats0), cot = _cotangent(objective, tuple(sumw))(values, scales)
    yields = {n: float(stats0[n]["yield"]) for n in states}
    base = {"hess": None, "yields": yields, "states": states}
    try:
        objective.check(stats0)
    except DiffcoffeaError as err:
        if strict:
            raise
        return {**base, "objective": None, "grad": None, "significance": None, "error": str(err)}
    # states the objective does not read (zero cotangent) are left out of the sweep
    payloads = {n: prune(_to_numpy(_payload(values[n], cot[n]))) for n in states}
    grad = None
    if one:
        names = state_names(plan)
        cots = {n: yield_cotangents(names, payloads[n]) for n in states}
        if all(isinstance(c, tuple) for c in cots.values()):
            need = {n: (c[0] != 0, c[1] != 0) for n, c in cots.items()}
            have = rows or {}
            if all(not a or b for n in need
                   for a, b in zip(need[n], have.get(n, (True, True)), strict=True)):
                grad = np.zeros(len(plan.trainable))
                for n, st in first.items():
                    grad = grad + cots[n][0] * st.derived.grad[0] + cots[n][1] * st.derived.grad[1]
            # later steps compute only the yield gradients this cotangent reads (a row
            # read now but left out this step: the pullback pass below, exact)
            objective.__dict__["_yield_rows"] = need
        else:  # the objective reads more than the yields: two passes from now on
            objective.__dict__["_one_pass"] = False
    if grad is None:
        pulled = evaluator.run_pullback(params, payloads, widths=widths, chunks=chunks)
        grad = np.zeros(len(plan.trainable))
        for st in pulled.values():
            grad = grad + st.derived.grad
    sig = None
    if objective.signal and objective.background:
        sig = float(objective.significance(stats0))
    return {**base, "objective": float(val), "grad": grad, "significance": sig}
