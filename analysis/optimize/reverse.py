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

Each step costs two passes (the second about a JAX reverse sweep of the kernel),
independent of the number of parameters: the choice for plans with many trainable
parameters (:func:`analysis.stats.derive.choose_mode`, as for own processors).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from analysis.errors import DiffcoffeaError
from analysis.optimize.objectives import PythonTerm
from analysis.stats.pullback import prune, pullback_payload

_payload = jax.jit(pullback_payload)  # compiled once per merged-state structure


def _to_numpy(tree):
    return jax.tree_util.tree_map(lambda v: np.asarray(v, dtype=np.float64), tree)


def _cotangent(objective, sumw: dict, events: dict):
    """The jitted ``values -> ((L, stats), dL/dvalues)`` of ``objective`` (compiled once per
    dataset totals, as :func:`analysis.optimize.objectives._compiled`; eager with a
    ``python`` term)."""
    key = ("reverse", tuple(sumw.items()), tuple(events.items()))
    cache = objective.__dict__.setdefault("_compiled", {})
    if key not in cache:

        def fn(vals):
            stats = objective.stats(vals, sumw, events)
            return objective.value(stats), stats

        run = jax.value_and_grad(fn, has_aux=True)
        eager = any(isinstance(term, PythonTerm) for term in objective.terms)
        cache[key] = run if eager else jax.jit(run)
    return cache[key]

__all__ = ["reverse_objective"]


def reverse_objective(
    objective, evaluator, params: dict[str, float] | None, widths, *, chunks=None,
    strict: bool = True,
) -> dict[str, Any]:
    """Objective value and gradient by two passes (module docstring); ``"states"``: the
    first pass's ``{dataset: DatasetState}`` (values only)."""
    states = evaluator.run(params, widths=widths, order=0, chunks=chunks)
    values = {n: st.taylor()[0] for n, st in states.items()}
    sumw = {n: st.sumw for n, st in states.items()}
    events = {n: st.events for n, st in states.items()}

    (val, stats0), cot = _cotangent(objective, sumw, events)(values)
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
    pulled = evaluator.run_pullback(params, payloads, widths=widths, chunks=chunks)
    grad = np.zeros(len(evaluator.plan.trainable))
    for st in pulled.values():
        grad = grad + st.derived.grad
    sig = None
    if objective.signal and objective.background:
        sig = float(objective.significance(stats0))
    return {**base, "objective": float(val), "grad": grad, "significance": sig}
