"""The passes of :class:`analysis.driver.runner.Evaluator` beyond the plain one
(:meth:`~analysis.driver.runner.Evaluator.run`): reverse mode's pullback, the yields'
gradients, one histogram, the Poisson-bootstrap replicas (per point and part, their
totals) and the hard-cut grid; and the state of a dataset with no events.

:class:`PassKinds` is a mixin of the evaluator: each pass builds its
:class:`analysis.pipeline.job.Job` and runs it with the evaluator's ``process`` (the
processor itself is made by the evaluator, the only place that imports ``processors``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from analysis.pipeline.backend import chunk_state
from analysis.pipeline.bounds import check_sizes
from analysis.pipeline.job import Job
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.request import Replicas, Request
from analysis.pipeline.results import DatasetState

__all__ = ["PassKinds", "empty_columns", "empty_state"]


def empty_columns(plan: Plan) -> ChunkColumns:
    """Columns of a chunk with no events."""
    return ChunkColumns(
        n_events=0,
        weight=np.zeros(0),
        events={k: np.zeros(0) for k in plan.event_keys},
    )


def empty_state(plan: Plan, theta: np.ndarray, widths: np.ndarray, order: int) -> DatasetState:
    """The state of a dataset with no events (zero yields, undefined statistics)."""
    return chunk_state(empty_columns(plan), plan, theta, widths, order=order)


class PassKinds:
    """Pass kinds of :class:`analysis.driver.runner.Evaluator` (a mixin: it uses the
    evaluator's plan, parameters, processor and ``process``)."""

    def run_pullback(
        self,
        params: dict[str, float] | None,
        payloads: dict[str, Any],
        *,
        widths: Any = None,
        chunks: list | None = None,
    ) -> dict[str, DatasetState]:
        """Reverse mode's second pass (:mod:`analysis.pipeline.backends.jax.reverse`): per dataset the
        merged states and ``dL/dtheta`` (``derived``: a :class:`analysis.stats.Pullback`
        over the trainable parameters) for the payloads of the first pass's merged
        states (:func:`analysis.pipeline.backends.jax.reverse.payload_arrays`)."""

        theta, w = self.theta_and_widths(params, widths)
        proc = self._processor(Job(
            self.plan, Request(theta, w, order=0), self.weight_branches, part=self.part,
            datasets={name: Request(theta, w, order=0, pullback=payload)
                      for name, payload in payloads.items()}, backend=self.backend))
        return self.process(proc, self._empty_pullback(theta, w, ()), chunks=chunks)

    def _empty_pullback(self, theta: np.ndarray, w: np.ndarray, rows: tuple[int, ...]):
        """The ``empty()`` of a pass whose states carry a :class:`analysis.stats.Pullback`
        (gradient zeros of shape ``rows + (P,)``)."""
        from analysis.stats.derive import Pullback

        def empty() -> DatasetState:
            st = empty_state(self.plan, theta, w, 0)
            zero = np.zeros(rows + (len(self.plan.trainable),))
            return DatasetState(events=0, sumw=0.0, chunks=0,
                                derived=Pullback(self.plan.trainable_names, st.derived.value, zero))

        return empty

    def run_yield_gradients(
        self,
        params: dict[str, float] | None = None,
        *,
        widths: Any = None,
        chunks: list | None = None,
        rows: dict[str, tuple[bool, bool]] | None = None,
    ) -> dict[str, DatasetState]:
        """One values pass that also gives, per dataset, the gradients of the selected
        yield and of its sum of squared weights (``derived``: a
        :class:`analysis.stats.Pullback` with ``grad`` ``(2, P)`` over the trainable
        parameters; :func:`analysis.pipeline.backends.numba.fastreverse.chunk_yield_gradients`: plans
        the numba backend's rules serve, :mod:`analysis.pipeline.backends.numba.rules`). ``rows``: per dataset,
        which of the two to compute (default both; a row left out is zeros)."""

        theta, w = self.theta_and_widths(params, widths)
        proc = self._processor(Job(
            self.plan, Request(theta, w, order=0, yield_rows=(True, True)), self.weight_branches,
            part=self.part, backend=self.backend,
            datasets={name: Request(theta, w, order=0, yield_rows=(bool(a), bool(b)))
                      for name, (a, b) in (rows or {}).items()}))
        return self.process(proc, self._empty_pullback(theta, w, (2,)), chunks=chunks)

    def run_histograms(
        self,
        index: int,
        bins: int,
        low: float,
        high: float,
        params: dict[str, float] | None = None,
        *,
        widths: Any = None,
    ) -> dict[str, Any]:
        """``{dataset: hist.Hist}`` of observable ``index`` with the soft selection weights."""
        spec = {"index": index, "bins": bins, "low": low, "high": high}
        return self.fill_histograms([{**spec, "params": params, "widths": widths}])[0]

    def run_replicas(
        self,
        params: dict[str, float] | None = None,
        *,
        widths: Any = None,
        replicas: int = 50,
    ):
        """One values pass giving ``{dataset: ReplicaSums}``: the state (as
        :meth:`run` at ``order=0``) and the Poisson-bootstrap replicas' selected sums
        (:mod:`analysis.pipeline.replicas`; weighted like every pass, :attr:`part`
        included)."""
        from analysis.pipeline.replicas import ReplicaSums

        theta, w = self.theta_and_widths(params, widths)
        proc = self._processor(Job(self.plan, Request(
            theta, w, order=0, replicas=Replicas("sums", int(replicas))),
            self.weight_branches, part=self.part, backend=self.backend))
        return self.process(proc, lambda: ReplicaSums(
            np.zeros((2, replicas)), empty_state(self.plan, theta, w, 0)))

    def run_replica_lanes(
        self,
        points: list[dict[str, float]],
        *,
        widths: Any = None,
        parts: tuple[str, ...] = ("all",),
        fraction: float | None = None,
        replicas: int = 50,
        totals: bool = False,
        observables: Collection[str] | None = None,
        known: frozenset[tuple[int, str]] = frozenset(),
    ):
        """One values pass giving ``{dataset: ReplicaLanes}``: for every parameter point
        of ``points`` and part of ``parts`` (of the validation split with ``fraction``)
        what :meth:`run_replicas` gives with :attr:`part` set to it, and with ``totals``
        what :meth:`run_replica_totals` gives (:func:`analysis.pipeline.replicas.chunk_lanes`;
        :attr:`part` is not used). ``observables``: compute only these (as for
        :meth:`run`; default all). ``known``: ``(point index, part)`` lanes whose state
        the caller has: their sums only (state None)."""
        from analysis.pipeline.replicas import ReplicaLanes, ReplicaSums, ReplicaTotals
        from analysis.pipeline.split import PARTS

        tw = [self.theta_and_widths(p, widths) for p in points]
        thetas, w = np.stack([t for t, _ in tw]), tw[0][1]
        plan = self.plan if observables is None else self._plan_with(observables)
        spec = Replicas("lanes", int(replicas), fraction, tuple(parts), bool(totals),
                        frozenset(known))
        proc = self._processor(Job(plan, Request(thetas, w, order=0, replicas=spec),
                                   self.weight_branches, backend=self.backend))

        def empty():
            lanes = {(i, p): ReplicaSums(np.zeros((2, replicas)), None if (i, p) in known
                                         else empty_state(plan, t, w, 0))
                     for i, t in enumerate(thetas) for p in parts}
            return ReplicaLanes(lanes, ReplicaTotals(np.zeros((1 + len(PARTS), replicas)))
                                if totals else None)

        return self.process(proc, empty)

    def run_replica_totals(self, fraction: float | None, *, replicas: int = 50):
        """One pass giving ``{dataset: ReplicaTotals}``: per bootstrap replica the
        number of events and the sum of weights of every part of the validation split
        (``fraction``; None: all events only). They do not depend on the cuts."""
        from analysis.pipeline.replicas import ReplicaTotals
        from analysis.pipeline.split import PARTS

        theta, w = self.theta_and_widths()
        proc = self._processor(Job(self.plan, Request(
            theta, w, order=0, replicas=Replicas("totals", int(replicas), fraction)),
            self.weight_branches, backend=self.backend))
        return self.process(proc, lambda: ReplicaTotals(np.zeros((1 + len(PARTS), replicas))))

    def run_grid(self, thetas: Any) -> dict[str, DatasetState]:
        """One pass with hard cuts at every row of ``thetas`` (``(G, n_params)``: full
        parameter vectors): ``{dataset: DatasetState}`` whose leaves have a leading
        axis ``G`` (values only, no derivatives)."""

        thetas = np.asarray(thetas, dtype=np.float64)
        check_sizes(self.config, self.plan, events=self.largest_chunk, grid_points=len(thetas))
        zeros = np.zeros(self.plan.n_widths)
        grid = Request(thetas, zeros, order=0, grid=True)
        proc = self._processor(Job(self.plan, grid, self.weight_branches, part=self.part,
                                   backend=self.backend))
        return self.process(proc, lambda: self.backend.chooser.prepare(self.plan, grid).run(
            empty_columns(self.plan)))
