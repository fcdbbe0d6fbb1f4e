"""The hard-cut evaluations of an optimisation run: after the loop (the validation on
all events, the training and the held-out part, with bootstrap uncertainties; the
hard-cut history and keep-best) and the final soft and hard objective.

:class:`HardEvaluations` is a mixin of :class:`analysis.optimize.loop.Optimization`
(it uses that class's state: the evaluator, the objective, the parameters).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis.optimize.bootstrap import bootstrap_uncertainty, bootstrap_values, spread
from analysis.optimize.keepbest import track_hard, validation_entries
from analysis.optimize.looptools import annealed_widths
from analysis.optimize.objectives import objective_from_states, step_observables

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
        the same pass (:func:`analysis.optimize.bootstrap.bootstrap_uncertainty`; the
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
        one values pass on the cached columns (:meth:`_validation_lanes`; none after
        :meth:`validation_history`, whose pass kept these lanes; with fewer than 2
        replicas a pass per point and part). Sets
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
        The lanes keep-best's pass kept at both points, where it did (:meth:`_kept_lanes`:
        no pass). ``None`` where the replicas do not run (fewer than 2)."""
        parts = ("all",) if self.fraction is None else ("all", "train", "held_out")
        # uncertainties as hard_on gives them: all events at both points, each part at the end
        wanted = {(0, "all"), (1, "all"), (1, "train"), (1, "held_out")}
        lanes = self._kept_lanes([initial, final], parts, wanted)
        if lanes is None:  # not in keep-best's pass (track_hard): a pass of its own
            lanes = self._hard_lanes([initial, final], parts, wanted)
        if lanes is None:
            return None
        res: dict[str, dict[str, Any]] = {p: {} for p in parts}
        for (i, part), out in lanes.items():
            res[part]["initial" if i == 0 else "final"] = out
        if initial_hard is not None and "train" in res:  # the value the run reported
            res["train"]["initial"] = {**initial_hard, "uncertainty": None}
        return res

    def hard_observables(self) -> tuple[str, ...] | None:
        """The observables the hard-cut passes after the loop compute: those the
        objective reads, as the steps (:func:`~analysis.optimize.objectives.step_observables`;
        the report's statistics come from the final soft pass); None: all."""
        return None if self.reverse else step_observables(self.objective, self.plan, 0)

    def point_key(self, params: dict[str, float]) -> bytes:
        """The hard-cut pass's parameter vector at ``params`` (integers rounded, the
        others' configured values filled in), as bytes: two points with the same key
        are one point to every pass."""
        hard = self.hard_params(params)
        return self.ev.theta_and_widths(hard, np.zeros_like(self.w0))[0].tobytes()

    def _kept_lanes(self, points: list[dict[str, float]], parts: tuple[str, ...],
                    wanted: set[tuple[int, str]]) -> dict[tuple[int, str], dict[str, Any]] | None:
        """What :meth:`_hard_lanes` gives for ``points``, ``parts`` and ``wanted``, from
        the lanes an earlier pass kept (``keep=True``: keep-best's uncertainties pass,
        :func:`analysis.optimize.keepbest.track_hard`, which the validation then needs
        no pass of its own for): the same values bit for bit (a lane's sums do not
        depend on the pass's other lanes), :attr:`last_states` and :attr:`all_sumw` left
        as that method leaves them. ``None`` unless every lane was kept (with its
        uncertainty where wanted)."""
        keys = [self.point_key(p) for p in points]
        found = {(i, part): self._kept.get((key, part)) for i, key in enumerate(keys)
                 for part in parts}
        if any(v is None or (v[2] is False and (i, part) in wanted)
               for (i, part), v in found.items()):
            return None
        res: dict[tuple[int, str], dict[str, Any]] = {}
        for (i, part), (out, _, _) in found.items():
            if (i, part) in wanted:
                res[i, part] = dict(out)
            else:  # as a lane without its uncertainty
                res[i, part] = {**{k: v for k, v in out.items() if k != "replicas"},
                                "uncertainty": None}
        self._last = None
        if "all" in parts:
            self.last_states = states = found[len(points) - 1, "all"][1]
            self.all_sumw = {n: st.sumw for n, st in states.items()}
        return res

    def _hard_lanes(self, points: list[dict[str, float]], parts: tuple[str, ...],
                    wanted: set[tuple[int, str]] | None = None, *, values_only: bool = False,
                    keep: bool = False) -> dict[tuple[int, str], dict[str, Any]] | None:
        """The hard-cut objective at each of ``points`` on each of ``parts`` from ONE
        values pass (weight lanes, :meth:`analysis.driver.runner.Evaluator.run_replica_lanes`):
        ``{(point index, part): objective_from_states(...) + {"uncertainty"}}``, the
        bootstrap uncertainty where ``(i, part)`` is in ``wanted`` (None: everywhere).
        Leaves :attr:`last_states` and :attr:`all_sumw` at the last point on all events
        where "all" is a part. ``None`` where the replicas do not run (fewer than 2).
        ``values_only``: no uncertainty anywhere, and no replicas in the pass (their cost
        grows with the points: ~1 s a point with 50 on the demo's events), nor the
        selected weights they are drawn on. ``keep``: the lanes are kept for
        :meth:`_kept_lanes`, and their states for a later pass at the same points
        (their lanes' states are not computed again: keep-best's values pass, then its
        uncertainties pass)."""
        k = 0 if values_only else self.config.optimizer.replicas
        if values_only:
            wanted = set()
        elif k < 2:
            return None
        hard = [self.hard_params(p) for p in points]
        keys = [self.point_key(p) for p in hard]
        # the states a kept lane has (the same pass's plan and weights: the same floats)
        known = {(i, part): self._kept[key, part][1] for i, key in enumerate(keys)
                 for part in parts if (key, part) in self._kept}
        need_totals = self._replica_totals is None and not values_only
        lanes = self.ev.run_replica_lanes(hard, widths=np.zeros_like(self.w0), parts=parts,
                                          fraction=self.fraction, replicas=k,
                                          totals=need_totals, observables=self.hard_observables(),
                                          known=frozenset(known))
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
                states = known[i, part] if (i, part) in known else {
                    n: r.lanes[i, part].state for n, r in lanes.items()}
                self._use_part(part)
                out = objective_from_states(self.objective, states, order=0, strict=False)
                out["uncertainty"] = None
                if wanted is None or (i, part) in wanted:
                    sums = {n: np.vstack([totals[n].part(part), r.lanes[i, part].sums])
                            for n, r in lanes.items()}
                    out["replicas"] = bootstrap_values(self.objective, states, sums)
                    out["uncertainty"] = spread(out["replicas"])
                res[i, part] = out
                if keep:
                    sigma = wanted is None or (i, part) in wanted
                    self._kept[keys[i], part] = (out, states, sigma)
        finally:
            self._use_part(kept)
        if "all" in parts:
            last = len(points) - 1
            states = known[last, "all"] if (last, "all") in known else {
                n: r.lanes[last, "all"].state for n, r in lanes.items()}
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

    def _kept_final(self, hard_p: dict[str, float]) -> dict[str, Any] | None:
        """:meth:`final`'s hard-cut objective at ``hard_p`` on the loop's events from the
        lane keep-best's uncertainties pass kept there (:func:`~analysis.optimize.keepbest.track_hard`:
        the chosen point and the end are among its points), where the report reads no
        more of the states than that lane computed (the observables the objective
        reads; a likelihood or a ``histograms`` section reads the final hard states'
        templates and histograms: a pass of its own). The same numbers bit for bit as
        :meth:`evaluate`'s values pass (the same selection, yields and program); None
        where no such lane was kept."""
        if self.config.likelihood is not None or self.config.histograms:
            return None
        part = "all" if self.ev.part is None else self.ev.part[0]
        kept = self._kept.get((self.point_key(hard_p), part))
        if kept is None:
            return None
        out, states, _ = kept
        self._last = None
        self.last_states = states
        return {k: v for k, v in out.items() if k not in ("uncertainty", "replicas")}

    def final_params(self) -> dict[str, float]:
        """The parameters :meth:`final` reports (its soft point; :meth:`hard_params` of
        them its hard one): with keep-best the chosen step's, else the current ones."""
        return self.params() if self.best_params is None else dict(self.best_params)

    def final(self) -> dict[str, Any]:
        """Soft (final widths) and hard (width 0, integers rounded) objective at the final parameters.

        At most two passes: the soft one reuses the last step's states when the last
        update left the parameters unchanged; the hard one needs values only. The
        Hessian of the soft objective (how sharp the optimum is, per parameter, in
        parameter units) is computed only when asked for (``output.hessian``) or
        already part of every step (``method: newton``): a second-order pass runs on
        the JAX reference and costs hundreds of first-order ones (docs/guide/optimisation.md).
        The hard one is keep-best's lane at that point on the loop's events where the
        report reads nothing more of its states (:meth:`_kept_final`): no pass.
        """
        params = self.final_params()
        widths = annealed_widths(
            self.w0, max(self.step - 1, 0), self.config, steps=self.anneal_steps
        )
        passes = self.passes
        order = 2 if self.config.output.hessian or self.order >= 2 else 1
        soft = self.evaluate(params, widths, order=order, strict=False)
        self.final_states = self.last_states
        hard_p = self.hard_params(params)
        hard = self._kept_final(hard_p)
        if hard is None:
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
