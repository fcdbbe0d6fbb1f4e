"""How an optimisation ended: convergence, advice, parameters on a bound, hard-cut figures.

:func:`run_status` reads an :class:`~analysis.optimize.loop.Optimization` after its
last step; the result goes into results.json (``status``) and the closing line of
``diffcoffea optimize``. ``run`` is typed ``Any``: naming ``Optimization`` here would
import the loop back (an import cycle, refused by ``tests/test_layers.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["run_status"]


def run_status(
    run: Any, final: dict[str, Any], initial_hard: dict[str, Any] | None = None
) -> dict[str, Any]:
    """How the run ended, for results.json and the closing line of ``optimize``.

    ``{"converged", "criterion", "step", "relative_change", "advice", "at_bound",
    "hard_objective", "hard_significance", "soft_hard_gap"}``: ``criterion`` is the
    convergence rule (:mod:`analysis.optimize.loop`); ``step`` the step it was met at (``None``
    if not); ``advice`` what to change when not converged (more steps; a smaller
    learning rate when the objective or a parameter oscillates, a larger one when
    it creeps);
    ``at_bound``: ``{name: "lower" | "upper"}`` of the final parameters on a bound;
    ``beyond_bound``: those of them whose soft gradient points out of the bounds
    (the objective would still improve beyond);
    ``hard_objective``/``hard_significance``: ``{"initial", "final"}`` (hard cuts;
    initial from ``initial_hard``, the result of :meth:`Optimization.hard` at the initial
    parameters); ``soft_hard_gap``: final soft minus final hard objective.
    """
    cfg = run.opt_cfg
    w, tol = cfg.window, cfg.tolerance
    criterion = f"objective changes by <= {tol:g} (relative) over {w} steps"
    if cfg.anneal.schedule != "none":
        criterion += ", both at the final widths"
    change = run._relative_change()
    advice = None
    if not run.converged:
        objs = [h["objective"] for h in run.history[-(2 * w + 1):]]
        diffs = np.diff(objs)
        flips = int(np.sum(np.sign(diffs[1:]) * np.sign(diffs[:-1]) < 0)) if len(diffs) > 1 else 0
        # a parameter that turns back and forth (momentum ringing) oscillates too
        trace = np.array([[h["parameters"][n] for n in run.coords.names] for h in run.history])
        turns = np.sign(np.diff(trace, axis=0)) if len(trace) > 1 else np.zeros((0, 1))
        reversals = int(np.max(np.sum(turns[1:] * turns[:-1] < 0, axis=0), initial=0))
        oscillates = flips > len(diffs) // 2 or reversals >= 3
        lr = "" if cfg.method == "newton" else f"optimizer.learning_rate (now {cfg.learning_rate:g})"
        more = f"more steps (--steps; optimizer.steps is {cfg.steps})"
        if lr and oscillates:
            advice = f"a smaller {lr}: the run oscillates; or {more}"
        elif lr:
            advice = f"{more} or a larger {lr}"
        else:
            advice = more
        if cfg.anneal.schedule != "none" and run.step < run.anneal_steps + w:
            # the criterion needs window + 1 steps at the final widths
            advice += (f"; the last {w} steps were not all at the final widths (annealing "
                       f"ends at step {run.anneal_steps - 1}: optimizer.anneal.steps "
                       f"{run.anneal_steps} of optimizer.steps {cfg.steps})")
    at_bound = {}
    for i, name in enumerate(run.coords.names):
        if not run.coords.bounded[i]:  # a learned score's weight: no bounds
            continue
        if run.u[i] <= 1e-9:
            at_bound[name] = "lower"
        elif run.u[i] >= 1 - 1e-9:
            at_bound[name] = "upper"
    soft, hard = final["soft"], final["hard"]
    # the objective is minimised: at a lower bound a positive gradient (an upper
    # bound, a negative one) means it would still improve beyond the bound
    grad = soft.get("gradient") or {}
    beyond = [
        n for n, side in at_bound.items()
        if grad.get(n) is not None and (grad[n] > 0 if side == "lower" else grad[n] < 0)
    ]

    def pair(key):
        return {"initial": None if initial_hard is None else initial_hard.get(key),
                "final": hard.get(key)}

    gap = None
    if soft.get("objective") is not None and hard.get("objective") is not None:
        gap = float(soft["objective"]) - float(hard["objective"])
    return {
        "converged": bool(run.converged),
        "criterion": criterion,
        "step": run.step - 1 if run.converged else None,
        "steps_run": run.step,
        "relative_change": change,
        "advice": advice,
        "at_bound": at_bound,
        "beyond_bound": beyond,
        "hard_objective": pair("objective"),
        "hard_significance": pair("significance"),
        "soft_hard_gap": gap,
    }
