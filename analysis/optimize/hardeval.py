"""The hard-cut evaluations of an optimisation run: after the loop (the validation on
all events, the training and the held-out part, with bootstrap uncertainties; the
hard-cut history and keep-best) and the final soft and hard objective.

:class:`HardEvaluations` is a mixin of :class:`analysis.optimize.loop.Optimization`
(it uses that class's state: the evaluator, the objective, the parameters).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis.optimize.keepbest import track_hard, validation_entries
from analysis.optimize.looptools import annealed_widths
from analysis.optimize.objectives import (
    bootstrap_uncertainty,
    bootstrap_values,
    objective_from_states,
    step_observables,
)

__all__ = ["HardEvaluations"]


class HardEvaluations:
    """Hard-cut and final evaluations of :class:`analysis.optimize.loop.Optimization`."""

    def hard(self, params: dict[str, float]) -> dict[str, Any]:
        """The hard-cut objective (width 0, integers rounded) at ``params``: one values-only pass."""
        return self.evaluate(self.hard_params(params), np.zeros_like(self.w0), order=0, strict=False)

    def hard_on(self, params: dict[str, float], part: str, *,
                uncertainty: bool = True) -> dict[str, Any]:
        """The hard-cut objective at ``params`` on the events of ``part`` ("all",
        "train", "held_out"; one values-only pass), with ``"uncertainty"``: its MC
        standard deviation over ``optimizer.replicas`` Poisson-bootstrap replicas from
        the same pass (:func:`analysis.optimize.objectives.bootstrap_uncertainty`; the
        replicas' totals come from one pass per run, :meth:`replica_totals`)."""
        kept = "all" if self.ev.part is None else self.ev.part[0]
        self._use_part(part)
        k = self.config.optimizer.replicas
        try:
            hp = self.hard_params(params)
            reps = None
            if k >= 2 and uncertainty:
                reps = self.ev.run_replicas(hp, widths=np.zeros_like(self.w0), replicas=k)
            if reps is None:
                res = self.hard(params)
                res["uncertainty"] = None
                if part == "all":
                    self.all_sumw = {n: st.sumw for n, st in self.last_states.items()}
                return res
            self.passes += 1
            self._last = None
            self.last_states = states = {n: r.state for n, r in reps.items()}
            if part == "all":  # every event's sum of weights (the plots' normalisation)
                self.all_sumw = {n: st.sumw for n, st in states.items()}
            res = objective_from_states(self.objective, states, order=0, strict=False)
            totals = self.replica_totals()
            sums = {n: np.vstack([totals[n].part(part), r.sums]) for n, r in reps.items()}
            res["uncertainty"] = bootstrap_uncertainty(self.objective, states, sums)
        finally:
            self._use_part(kept)
        return res

    def replica_totals(self) -> dict[str, Any]:
        """The bootstrap replicas' totals of every part (one pass, run once)."""
        if self._replica_totals is None:
            self._replica_totals = self.ev.run_replica_totals(
                self.fraction, replicas=self.config.optimizer.replicas)
            self.passes += 1
        return self._replica_totals

    def validation(self, initial: dict[str, float], final: dict[str, float],
                   initial_hard: dict[str, Any] | None = None) -> dict[str, Any]:
        """Hard-cut objective values at ``initial`` and ``final`` on all events, on the
        training and on the held-out part, and what they say (see
        :func:`analysis.optimize.status.validation_report`), with bootstrap replicas on
        all events at both points and on each part at the end (the gap's uncertainty):
        one values pass on the cached columns (:meth:`_validation_lanes`; with fewer
        than 2 replicas a pass per point and part). Sets
        :attr:`start_hard`. ``initial_hard``: :meth:`hard` at ``initial`` if already run
        (it is the training part's value with the split)."""
        from analysis.optimize.status import validation_report

        threshold = self.config.optimizer.validation.threshold if self.fraction else 2.0
        res = self._validation_lanes(initial, final, initial_hard)
        if res is None:
            res = self._validation_passes(initial, final, initial_hard)
        # the hard-cut value at the start on the loop's events: :meth:`hard`'s (same sums)
        start = res["train" if self.fraction is not None else "all"]["initial"]
        self.start_hard = {k: v for k, v in start.items() if k != "uncertainty"}
        return validation_report(res, self.fraction, threshold)

    def _validation_passes(self, initial: dict[str, float], final: dict[str, float],
                           initial_hard: dict[str, Any] | None) -> dict[str, Any]:
        """:meth:`validation`'s ``res`` from a pass per (point, part) (:meth:`hard_on`)."""
        res: dict[str, dict[str, Any]] = {
            "all": {"initial": self.hard_on(initial, "all"), "final": self.hard_on(final, "all")}}
        if self.fraction is not None:
            train0 = initial_hard if initial_hard is not None else self.hard_on(
                initial, "train", uncertainty=False)
            res["train"] = {"initial": {**train0, "uncertainty": None},
                            "final": self.hard_on(final, "train")}
            res["held_out"] = {"initial": self.hard_on(initial, "held_out", uncertainty=False),
                               "final": self.hard_on(final, "held_out")}
        return res

    def _validation_lanes(self, initial: dict[str, float], final: dict[str, float],
                          initial_hard: dict[str, Any] | None) -> dict[str, Any] | None:
        """:meth:`validation`'s ``res`` from ONE values pass: both points and every part
        are weight lanes of it, and so are the bootstrap replicas (and their totals if
        not yet run; :meth:`analysis.driver.runner.Evaluator.run_replica_lanes`). The
        same values as :meth:`hard_on` at each (point, part) up to rounding (~1e-16).
        ``None`` where the replicas do not run (fewer than 2)."""
        parts = ("all",) if self.fraction is None else ("all", "train", "held_out")
        # uncertainties as hard_on gives them: all events at both points, each part at the end
        wanted = {(0, "all"), (1, "all"), (1, "train"), (1, "held_out")}
        lanes = self._hard_lanes([initial, final], parts, wanted)
        if lanes is None:
            return None
        res: dict[str, dict[str, Any]] = {p: {} for p in parts}
        for (i, part), out in lanes.items():
            res[part]["initial" if i == 0 else "final"] = out
        if initial_hard is not None and "train" in res:  # the value the run reported
            res["train"]["initial"] = {**initial_hard, "uncertainty": None}
        return res

    def _hard_lanes(self, points: list[dict[str, float]], parts: tuple[str, ...],
                    wanted: set[tuple[int, str]] | None = None, *, values_only: bool = False
                    ) -> dict[tuple[int, str], dict[str, Any]] | None:
        """The hard-cut objective at each of ``points`` on each of ``parts`` from ONE
        values pass (weight lanes, :meth:`analysis.driver.runner.Evaluator.run_replica_lanes`):
        ``{(point index, part): objective_from_states(...) + {"uncertainty"}}``, the
        bootstrap uncertainty where ``(i, part)`` is in ``wanted`` (None: everywhere).
        Leaves :attr:`last_states` and :attr:`all_sumw` at the last point on all events
        where "all" is a part. ``None`` where the replicas do not run (fewer than 2).
        ``values_only``: no uncertainty anywhere, the fewest replicas the pass takes (2;
        their cost grows with the points: ~1 s a point with 50 on the demo's events)."""
        k = 2 if values_only else self.config.optimizer.replicas
        if k < 2:
            return None
        if values_only:
            wanted = set()
        hard = [self.hard_params(p) for p in points]
        need_totals = self._replica_totals is None and not values_only
        # only the observables the objective reads, as the steps (the report's
        # statistics come from the final pass)
        reads = None if self.reverse else step_observables(self.objective, self.plan, 0)
        lanes = self.ev.run_replica_lanes(hard, widths=np.zeros_like(self.w0), parts=parts,
                                          fraction=self.fraction, replicas=k,
                                          totals=need_totals, observables=reads)
        if lanes is None:
            return None
        self.passes += 1
        self._last = None
        if need_totals:
            self._replica_totals = {n: r.totals for n, r in lanes.items()}
        totals = self._replica_totals
        kept = "all" if self.ev.part is None else self.ev.part[0]
        res: dict[tuple[int, str], dict[str, Any]] = {}
        try:
            for (i, part) in lanes[next(iter(lanes))].lanes:
                states = {n: r.lanes[i, part].state for n, r in lanes.items()}
                self._use_part(part)
                out = objective_from_states(self.objective, states, order=0, strict=False)
                out["uncertainty"] = None
                if wanted is None or (i, part) in wanted:
                    sums = {n: np.vstack([totals[n].part(part), r.lanes[i, part].sums])
                            for n, r in lanes.items()}
                    out["replicas"] = bootstrap_values(self.objective, states, sums)
                    out["uncertainty"] = bootstrap_uncertainty(self.objective, states, sums)
                res[i, part] = out
        finally:
            self._use_part(kept)
        if "all" in parts:
            last = len(points) - 1
            states = {n: r.lanes[last, "all"].state for n, r in lanes.items()}
            self.last_states = states
            self.all_sumw = {n: st.sumw for n, st in states.items()}
        return res

    def validation_history(self) -> list[dict[str, Any]] | None:
        """The hard-cut objective at every step and at the end, in one values pass
        (:func:`analysis.optimize.keepbest.track_hard`: kept in :attr:`tracked`; with
        keep-best the parameters move to the best hard-cut point, which :meth:`final`
        then reports). Returns results.json's ``validation.history`` with
        ``optimizer.validation.every: N`` (or ``validation.keep_best``): steps 0, N,
        2N, ... and the end, on the training and the held-out part (see
        :func:`analysis.optimize.keepbest.validation_entries`); else None."""
        self.tracked = track_hard(self)
        val = self.config.optimizer.validation
        if val is None or (val.every is None and not val.keep_best):
            return None
        return validation_entries(self.tracked, val.every or 1)

    def final(self) -> dict[str, Any]:
        """Soft (final widths) and hard (width 0, integers rounded) objective at the final parameters.

        At most two passes: the soft one reuses the last step's states when the last
        update left the parameters unchanged; the hard one needs values only. The
        Hessian of the soft objective (how sharp the optimum is, per parameter, in
        parameter units) is computed only when asked for (``output.hessian``) or
        already part of every step (``method: newton``): a second-order pass costs
        about ten first-order ones.
        """
        # with keep_best the chosen step's parameters (at the final widths)
        params = self.params() if self.best_params is None else dict(self.best_params)
        widths = annealed_widths(
            self.w0, max(self.step - 1, 0), self.config, steps=self.anneal_steps
        )
        passes = self.passes
        order = 2 if self.config.output.hessian or self.order >= 2 else 1
        soft = self.evaluate(params, widths, order=order, strict=False)
        self.final_states = self.last_states
        hard_p = self.hard_params(params)
        hard = self.evaluate(hard_p, np.zeros_like(self.w0), order=0, strict=False)
        self.final_hard_states = self.last_states
        #: passes the final evaluations ran (1 or 2)
        self.final_passes = self.passes - passes

        def pack(r, p, w):
            out = {
                "parameters": p,
                "widths": [float(x) for x in w],
                "objective": r["objective"],
                "significance": r["significance"],
                "yields": r["yields"],
            }
            if "error" in r:
                out["error"] = r["error"]
            return out

        soft_out = pack(soft, params, widths)
        names = self.coords.names
        if soft["grad"] is not None:
            soft_out["gradient"] = {n: float(g) for n, g in zip(names, soft["grad"])}
        if soft["hess"] is not None:
            soft_out["hessian"] = {
                a: {b: float(soft["hess"][i, j]) for j, b in enumerate(names)}
                for i, a in enumerate(names)
            }
        return {
            "soft": soft_out,
            "hard": pack(hard, hard_p, np.zeros_like(self.w0)),
        }
