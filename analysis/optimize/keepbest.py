"""Keep-best: the hard-cut objective along the path, and the best hard-cut point as the result.

The soft objective a step climbs is not the hard-cut one (the widths smooth it), and a
step size that suits the soft objective can leave the hard cuts worse than where they
started. So after the loop the hard-cut objective (width 0, integers rounded) is
evaluated at the start, at the end (the parameters after the last update; a run stopped
where its objective became undefined has its last step's,
:mod:`analysis.optimize.undefined`), at the steps ``validation.every`` records and at
evenly spaced steps between, as many as :func:`points_budget` allows for the events
(8 on the demo's 400k, every step on a few hundred; :func:`checked_points`; results.json's
``keep_best.checked`` lists them) on the events the optimiser trained on and, with ``optimizer.validation``,
on the held-out part: one values pass with every (point, part) a weight lane of it
(no replicas in it), then one with the Poisson-bootstrap replicas as weight lanes (the
states the first pass computed at its points are not computed again)
(:meth:`analysis.optimize.loop.Optimization._hard_lanes`) for the MC uncertainty at the
start, the chosen point and the end (and the steps ``validation.every`` records), on
all events too: the validation after the final evaluations reads its lanes from it
(:meth:`~analysis.optimize.hardeval.HardEvaluations.validation`, no pass of its own).
Where the replicas do not run (``optimizer.replicas`` below 2), or the objective has a
term they do not replicate (:func:`analysis.optimize.bootstrap.replicated`: ``target``,
``python``, ``cls_upper_limit``), the values stand without an uncertainty.

The result is the point with the lowest (best: the objective is minimised) hard-cut
objective: on the held-out part when there is one (the training part's value is then
what the optimiser fitted, biased by the fit), else on the training events; ties go to
the earliest step, undefined values never win. Unless the end point (where the
optimiser settled) is no worse than the start and no worse than the best by more than
``sqrt(2 ln n)`` times the MC uncertainty of their difference (``n``: the points
checked; the uncertainty: the standard deviation of the difference over the paired
bootstrap replicas, both points on the same events): then the end is reported. The
best of ``n`` noisy values is biased up (the winner's curse: the largest of ``n``
values that differ by noise alone lies about ``sqrt(2 ln n)`` standard deviations
above their mean), the end's is not chosen on the data it is measured on; a
difference within that is no evidence for the best. On the demo (8 of its 49 points
checked) the end is reported. Step 0 is the initial point, so the reported hard-cut
objective is never worse than the start's on that part.
``optimizer.keep_best: false`` (and no ``validation.keep_best``) reports the last point.

Every checked step's history entry gets ``hard`` (``{"objective", "significance",
"uncertainty"}`` on the training events) and, with the split, ``hard_held_out``; the
others keep their soft values only. ``run`` is typed ``Any``:
naming ``Optimization`` here would import the loop back (an import cycle).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis.optimize.status import validation_gap

__all__ = ["EVENT_POINTS", "POINTS", "checked_points", "keep_best_on", "keep_best_report",
           "points_budget", "track_hard", "validation_entries"]

#: the fewest points keep-best checks where there are more (:func:`points_budget`):
#: the start, the end and about every seventh step of 50
POINTS = 8
#: events x points the values pass covers before the points are thinned (its cost
#: grows with both: about 1.2 steps' time a point on the demo's 400k events, whose 49
#: points were 6 s of the README main job's 16, benchmarks/bench_demo.py --main-job):
#: the demo gets POINTS, 10^5 events 32, a few hundred events every step (a small
#: sample's path passes its best hard-cut point between single events: the real v12
#: files' best steps, 13 and 21 of 60, fell between 8 evenly spaced points)
EVENT_POINTS = 3_200_000


def points_budget(events: int | None) -> int:
    """How many points keep-best checks on ``events`` events (the loop's passes read):
    :data:`EVENT_POINTS` over the events, at least :data:`POINTS`; :data:`POINTS`
    where the count is unknown.

    Parameters
    ----------
    events : int or None
        The events a pass reads (all datasets).

    Returns
    -------
    int
        The budget for :func:`checked_points`.
    """
    if not events:
        return POINTS
    return max(POINTS, EVENT_POINTS // int(events))


def keep_best_on(config: Any) -> bool:
    """Whether the run reports its best hard-cut point (``optimizer.keep_best``, or the
    older ``optimizer.validation.keep_best``) rather than its last."""
    val = config.optimizer.validation
    return bool(config.optimizer.keep_best or (val is not None and val.keep_best))


def _pick(values: list[float | None]) -> int | None:
    """Index of the lowest defined value (ties: the earliest); None if none is defined."""
    defined = [(v, j) for j, v in enumerate(values) if v is not None and np.isfinite(v)]
    return min(defined)[1] if defined else None


def _entry(out: dict[str, Any]) -> dict[str, Any]:
    return {"objective": out["objective"], "significance": out["significance"],
            "uncertainty": out["uncertainty"]}


def _settled(lanes: dict, j: int, last: int, by: str) -> dict[str, Any] | None:
    """Whether the end point stands in for the best one (module docstring): ``{"difference",
    "sigma", "threshold", "kept_last"}`` (end minus best on ``by``, the paired bootstrap
    replicas' standard deviation of it, the multiple of it allowed); None where there is
    nothing to decide (the end is the best) or no replicas to decide with."""
    end, best, start = lanes[last, by], lanes[j, by], lanes[0, by]
    if j == last or end["objective"] is None or start["objective"] is None:
        return None
    a, b = end.get("replicas"), best.get("replicas")
    if a is None or b is None:
        return None
    d = np.asarray(a) - np.asarray(b)
    d = d[np.isfinite(d)]
    if d.size < max(2, len(a) // 2):
        return None
    diff, sigma = end["objective"] - best["objective"], float(np.std(d, ddof=1))
    # the largest of n values that differ by noise alone lies ~sqrt(2 ln n) standard
    # deviations above their mean: a best point within that of the end is no evidence
    factor = max(1.0, float(np.sqrt(2.0 * np.log(last + 1))))
    # minimised: the end no worse than the start, and within the noise of the best
    kept = end["objective"] <= start["objective"] and diff <= factor * sigma
    return {"difference": float(diff), "sigma": sigma, "threshold": factor,
            "kept_last": bool(kept)}


def checked_points(steps: list[int], *, every: int | None = None,
                   budget: int = POINTS) -> list[int]:
    """Which of a run's points (``steps``: the step of each, the end last) keep-best
    evaluates: all of them where there are at most ``budget``; else the start, the end,
    every ``every``-th step (results.json's ``validation.history`` reports them) and
    evenly spaced steps between, ``budget`` points in all (more where ``every`` asks for
    more).

    Parameters
    ----------
    steps : list of int
        The step of each point, in order; the first is the start, the last the end.
    every : int, optional
        ``optimizer.validation.every``: these steps are always checked.
    budget : int
        The most points checked besides the ``every``-th steps.

    Returns
    -------
    list of int
        Indices into ``steps``, ascending.
    """
    n = len(steps)
    if n <= budget:
        return list(range(n))
    kept = {0, n - 1} | {int(round(x)) for x in np.linspace(0, n - 1, max(budget, 2))}
    if every:
        kept |= {i for i, k in enumerate(steps) if k % every == 0}
    return sorted(kept)


def track_hard(run: Any, *, budget: int | None = None) -> dict[str, Any]:
    """The hard-cut objective at the checked points (:func:`checked_points`), and the
    chosen point.

    The values at every checked point and part: one lanes pass without uncertainties. The MC
    uncertainties (bootstrap replicas: their cost grows with the number of points, ~1 s
    a point on the demo's 2 x 200k events, so not at every step) at the start, the
    chosen point, the end and the steps ``validation.every`` records: one lanes pass.

    Parameters
    ----------
    run : analysis.optimize.loop.Optimization
        After its last step. Its history entries get ``hard`` (and ``hard_held_out``);
        with keep-best on, its :attr:`u`, :attr:`best_step` and :attr:`best_params`
        move to the chosen point (:meth:`~analysis.optimize.loop.Optimization.final`
        then reports it).
    budget : int, optional
        The most points checked (:func:`checked_points`); default
        :func:`points_budget` of the events the last step's pass read.

    Returns
    -------
    dict
        ``{"on": bool, "by": "held_out" | "train" | "all", "step", "steps": [...],
        "points": [...], "lanes": {(i, part): result}, "chosen", "end", "initial",
        "passes"}``: ``steps`` and ``points`` the checked ones, ``step`` the chosen
        step (``len(history)``: the end point; None where no point has a defined
        value), ``chosen``/``end``/``initial`` the
        hard-cut values with their MC uncertainty on the loop's events and
        (``..._held_out``) on the held-out part.
    """
    steps = list(range(len(run.history)))
    points = [run.history[k]["parameters"] for k in steps]
    # the end: the parameters after the last update (a stopped run's: its last step's)
    if not getattr(run, "stopped", None) and (not steps or steps[-1] != run.step):
        steps.append(run.step)
        points.append(run.params())
    split = run.fraction is not None
    val = run.config.optimizer.validation
    every = (val.every or 1) if split and (val.every or val.keep_best) else None
    if budget is None:
        states = getattr(run, "last_states", None) or {}
        budget = points_budget(sum(getattr(st, "events", 0) for st in states.values()))
    kept = checked_points(steps, every=every, budget=budget)
    steps, points = [steps[i] for i in kept], [points[i] for i in kept]
    parts = ("train", "held_out") if split else ("all",)
    passes = run.passes
    lanes = run._hard_lanes(points, parts, values_only=True, keep=True)
    if lanes is None:  # no lanes (columns without the events' uid): a pass per point
        lanes = {(i, part): run.hard_on(p, part, uncertainty=False)
                 for i, p in enumerate(points) for part in parts}
    train, by = parts[0], parts[-1]
    on = keep_best_on(run.config)
    last = len(points) - 1
    j = _pick([lanes[i, by]["objective"] for i in range(len(points))]) if on else None
    shown = last if j is None else j
    # the uncertainties where they are reported
    wanted = sorted({0, shown, last} | ({i for i, k in enumerate(steps) if k % every == 0}
                                        if every else set()))
    # the same pass gives what the validation after the final evaluations reports (all
    # events and each part at the start and at the reported point, with their MC
    # uncertainties; Optimization.validation then runs no pass of its own): the lanes
    # on all events too, and the configured start where the history's step 0 differs
    # from it (the unit coordinates' round trip)
    at = [points[i] for i in wanted]
    start = run.config.initial_params()
    if run.point_key(start) != run.point_key(points[0]):
        at.append(start)
    sigma = run._hard_lanes(at, parts if "all" in parts else (*parts, "all"), keep=True)
    if sigma is not None:
        for n, i in enumerate(wanted):
            for part in parts:  # the same values up to rounding (~1e-16), with sigma
                lanes[i, part] = sigma[n, part]
    settled = _settled(lanes, j, last, by) if j is not None else None
    if settled is not None and settled["kept_last"]:
        j = shown = last
    for i, k in enumerate(steps):
        if k >= len(run.history):  # the end point: no history entry of its own
            continue
        run.history[k]["hard"] = _entry(lanes[i, train])
        if split:
            run.history[k]["hard_held_out"] = _entry(lanes[i, "held_out"])
    run.best_step = run.best_params = None
    if j is not None:
        run.best_step = steps[j]
        run.best_params = dict(points[j])
        run.u = run.coords.clip(run.coords.to_u([points[j][n] for n in run.coords.names]))
    out = {"on": on, "by": by, "step": None if j is None else steps[j], "steps": steps,
           "points": points, "lanes": lanes, "passes": run.passes - passes,
           "chosen": _entry(lanes[shown, train]), "end": _entry(lanes[last, train]),
           "initial": _entry(lanes[0, train]), "settled": settled}
    if split:
        out.update(chosen_held_out=_entry(lanes[shown, "held_out"]),
                   end_held_out=_entry(lanes[last, "held_out"]),
                   initial_held_out=_entry(lanes[0, "held_out"]))
    return out


def validation_entries(tracked: dict[str, Any], every: int) -> list[dict[str, Any]]:
    """results.json's ``validation.history`` from :func:`track_hard` (split on): the
    training and held-out values at steps 0, ``every``, 2 ``every``, ... and the end,
    with their MC uncertainties and the gap between them."""
    out = []
    last = len(tracked["steps"]) - 1
    for i, k in enumerate(tracked["steps"]):
        if k % every and i != last:
            continue
        tr, ho = tracked["lanes"][i, "train"], tracked["lanes"][i, "held_out"]
        gap, gap_sigma = validation_gap(tr["objective"], ho["objective"],
                                        tr["uncertainty"], ho["uncertainty"])
        out.append({
            "step": k, "train": tr["objective"], "held_out": ho["objective"],
            "significance": {"train": tr["significance"], "held_out": ho["significance"]},
            "uncertainty": {"train": tr["uncertainty"], "held_out": ho["uncertainty"]},
            "gap": gap, "gap_sigma": gap_sigma,
        })
    return out


def keep_best_report(tracked: dict[str, Any]) -> dict[str, Any]:
    """results.json's ``keep_best``: whether it is on, the part it chose by, the chosen
    step and its hard-cut values (with MC uncertainty) beside the start's and the end's."""
    out = {k: tracked[k] for k in ("on", "by", "step", "chosen", "initial", "end", "passes",
                                   "settled")}
    out["steps_checked"] = len(tracked["steps"])
    out["checked"] = list(tracked["steps"])
    for k in ("chosen_held_out", "initial_held_out", "end_held_out"):
        if k in tracked:
            out[k] = tracked[k]
    return out
