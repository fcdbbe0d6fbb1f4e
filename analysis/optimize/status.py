"""How an optimisation ended: convergence, advice, parameters on a bound, hard-cut figures.

:func:`run_status` reads an :class:`~analysis.optimize.loop.Optimization` after its
last step; the result goes into results.json (``status``) and the closing line of
``diffcoffea optimize``. ``run`` is typed ``Any``: naming ``Optimization`` here would
import the loop back (an import cycle, refused by ``tests/test_layers.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["relaxation_gap", "run_status", "validation_gap", "validation_report"]


def run_status(
    run: Any, final: dict[str, Any], initial_hard: dict[str, Any] | None = None
) -> dict[str, Any]:
    """How the run ended, for results.json and the closing line of ``optimize``.

    ``{"converged", "stopped", "criterion", "step", "relative_change", "advice", "at_bound",
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
    parameters); ``soft_hard_gap``: final soft minus final hard objective; ``stopped``:
    ``"objective undefined at step k: <why>"`` where the loop stopped there
    (:mod:`analysis.optimize.undefined`), else None.
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
        "stopped": getattr(run, "stopped", None),
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
        "relaxation_gap": relaxation_gap(
            soft.get("objective"), hard.get("objective"),
            ((getattr(run, "tracked", None) or {}).get("chosen") or {}).get("uncertainty"),
            widths=soft.get("widths") or [], converged=bool(run.converged),
            factor=cfg.anneal.final_width_factor if cfg.anneal.schedule != "none" else 1.0,
            steps=cfg.steps),
    }


#: relative MC uncertainty of the hard-cut objective above which "more events" applies
MANY_EVENTS = 0.05


def relaxation_gap(soft: float | None, hard: float | None, sigma: float | None, *,
                   widths: Any, converged: bool, factor: float, steps: int
                   ) -> dict[str, Any]:
    """The soft objective (final widths) against the hard-cut one at the reported point.

    ``{"soft", "hard", "gap", "uncertainty", "significant", "remedies"}``: ``gap`` =
    soft - hard, ``uncertainty`` the hard-cut objective's MC standard deviation (the
    bootstrap's; the soft value on the same events moves with it, so it is the scale
    the gap is read against), ``significant`` when ``|gap| > uncertainty`` (never
    where the uncertainty is unknown: ``optimizer.replicas`` below 2). ``remedies`` (those that apply, in order):
    smaller widths where the final widths are not 0, more steps where the run did not
    converge, more events where the MC uncertainty is above :data:`MANY_EVENTS` of the
    objective.
    """
    out: dict[str, Any] = {"soft": soft, "hard": hard, "gap": None, "uncertainty": sigma,
                           "significant": False, "remedies": []}
    if soft is None or hard is None or not (np.isfinite(soft) and np.isfinite(hard)):
        return out
    gap = float(soft) - float(hard)
    out["gap"] = gap
    if sigma is None or not np.isfinite(sigma) or sigma <= 0:  # not measured: not said
        return out
    out["significant"] = bool(abs(gap) > sigma)
    if not out["significant"]:
        return out
    w = np.asarray(list(widths.values()) if isinstance(widths, dict) else widths, float)
    if w.size and np.any(w > 0):
        out["remedies"].append(
            f"smaller widths (optimizer.anneal.final_width_factor, now {factor:g}, or the "
            "cuts' width)")
    if not converged:
        out["remedies"].append(f"more steps (--steps; now {steps})")
    if sigma > MANY_EVENTS * abs(float(hard)):
        out["remedies"].append(
            f"more events (the MC uncertainty is {100 * sigma / abs(float(hard)):.0f} % "
            "of the objective)")
    return out


def validation_gap(train: float | None, held_out: float | None, sigma_train: float | None,
                   sigma_held_out: float | None) -> tuple[float | None, float | None]:
    """``(gap, gap_sigma)``: ``gap = train - held_out`` (hard-cut objective values) and
    ``gap / sqrt(sigma_train^2 + sigma_held_out^2)`` (the parts are disjoint samples,
    so independent); ``None`` where a value it needs is undefined (or the sigma is 0)."""
    gap = gap_sigma = None
    if train is not None and held_out is not None:
        gap = float(train) - float(held_out)
        if sigma_train is not None and sigma_held_out is not None:
            sigma = float(np.hypot(sigma_train, sigma_held_out))
            gap_sigma = gap / sigma if sigma > 0 else None
    return gap, gap_sigma


def validation_report(
    res: dict[str, dict[str, dict[str, Any]]], fraction: float | None, threshold: float
) -> dict[str, Any]:
    """results.json's ``uncertainty`` and ``validation`` from hard-cut evaluations.

    ``res[part][point]``: :meth:`Optimization.hard_on` at ``point`` ("initial",
    "final") on ``part`` ("all"; with the split also "train", "held_out"). Returns
    ``{"uncertainty": {"initial", "final"}, "hard_all": {"initial", "final"},
    "significance_all": {...}, "validation": {...} or None}``: ``uncertainty`` is the MC
    standard deviation of the hard-cut objective over all events; ``validation``:
    ``{"fraction", "train": {"initial", "final"}, "held_out": {"initial", "final"},
    "uncertainty": {"train": {...}, "held_out": {...}}, "gap", "gap_sigma",
    "threshold", "flagged", "message"}`` with ``gap`` = train final - held-out final
    and ``gap_sigma = gap / sqrt(sigma_train^2 + sigma_held_out^2)`` (the parts are
    disjoint samples, so independent); ``flagged`` when ``|gap_sigma| > threshold``.
    A value that is undefined (no background event passes) is ``None``, and so is
    what needs it. A training part undefined at the final cuts while the held-out part
    is defined is flagged as well (the cuts keep a region that is empty in the
    training sample only: the grossest fit to its fluctuations, measured with a
    learned score on 2 x 150 events, docs/guide/optimisation.md).
    """

    def pick(part: str, key: str) -> dict[str, Any]:
        return {p: res[part][p].get(key) for p in ("initial", "final")}

    out: dict[str, Any] = {
        "uncertainty": pick("all", "uncertainty"),
        "hard_all": pick("all", "objective"),
        "significance_all": pick("all", "significance"),
        "validation": None,
    }
    if fraction is None:
        return out
    train, held = pick("train", "objective"), pick("held_out", "objective")
    s_t, s_h = pick("train", "uncertainty"), pick("held_out", "uncertainty")
    gap, gap_sigma = validation_gap(train["final"], held["final"], s_t["final"], s_h["final"])
    flagged = gap_sigma is not None and abs(gap_sigma) > threshold
    emptied = train["final"] is None and held["final"] is not None
    if emptied:
        flagged = True
        message = ("the optimisation fits the simulation's fluctuations: the training part's "
                   "hard-cut objective is undefined at the final cuts (no background event "
                   "of it passes), the held-out part's is defined")
    elif gap_sigma is None:
        message = "train and held-out not compared (an objective or its uncertainty undefined)"
    elif not flagged:
        message = "train and held-out agree within their MC uncertainty"
    elif gap_sigma < 0:  # minimised: better on the events it was tuned on
        message = "the optimisation fits the simulation's fluctuations"
    else:
        message = "the held-out part is better than the training part beyond its uncertainty"
    out["validation"] = {
        "fraction": fraction,
        "train": train,
        "held_out": held,
        "significance": {"train": pick("train", "significance"),
                         "held_out": pick("held_out", "significance")},
        "uncertainty": {"train": s_t, "held_out": s_h},
        "gap": gap,
        "gap_sigma": gap_sigma,
        "threshold": threshold,
        "flagged": bool(flagged),
        "message": message,
    }
    return out
