"""The numba backend (:class:`NumbaBackend`): the CPU kernels, for the plans its rules serve.

What it computes is derived from the rules its node kinds register
(:mod:`analysis.pipeline.backends.numba.rules`): ``supports`` walks the plan and the
request and names the first node without a rule. Its passes: states
(:mod:`~analysis.pipeline.backends.numba.fastkernel`, with histograms
:mod:`~analysis.pipeline.backends.numba.fasthist`; learned scores at ``order=0``: each
network once on the chunk's real rows, its column then a field of the plan without
scores, :func:`analysis.pipeline.scorecols.score_columns`), entries for plots and
per-event selected weights (the same loops, values only, on the plan without its
histograms, which they do not read), Poisson-bootstrap replicas (those two passes and
the replica loops, :mod:`~analysis.pipeline.backends.numba.bootstrap`), reverse mode's
pullback and one-pass yield gradients (:mod:`~analysis.pipeline.backends.numba.fastreverse`).
Options (which loop runs; no result depends on them) are constructor arguments.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from analysis.pipeline import replicas, scorecols
from analysis.pipeline.backends.numba import (
    blocks,
    cutedges,
    fasthist,
    fastkernel,
    fastreverse,
    rules,
)
from analysis.pipeline.backends.numba.bootstrap import NumbaCounter
from analysis.pipeline.backends.numba.kernels import _numba_dp
from analysis.pipeline.engine import Prepared
from analysis.pipeline.histplan import event_sum_collections
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.request import Request
from analysis.pipeline.results import DatasetState, enumeration_counts
from analysis.stats.derive import Derived

__all__ = ["NumbaBackend"]


@dataclass(frozen=True)
class NumbaBackend:
    """The numba kernels (module docstring), with the options of
    :class:`analysis.pipeline.backend.Backend` of the same names. ``trace`` (a
    :class:`collections.Counter`, added to; not an option: no result depends on it):
    per ``(shift side, region)`` the walks of the selection that the passes ran
    (side None: the nominal columns, else the shift's ``(column, factor)``; region 0:
    the selection): one per chunk and key."""

    fused: bool = True
    value_loop: bool = True
    scores_on_numba: bool = True
    numba_reverse: bool = True
    name: str = "numba"
    trace: Counter | None = field(default=None, compare=False, repr=False)

    def supports(self, plan: Plan, request: Request) -> str | None:
        """``None``, or the first node of ``plan``/``request`` without a numba rule (or
        outside its rule's limits), named (:func:`analysis.pipeline.backends.numba.rules.refusal`)."""
        return rules.refusal(plan, request, self)

    def prepare(self, plan: Plan, request: Request) -> Prepared:
        """The plan the loops run (values with learned scores: without them, their columns
        fields; entries and selected weights: without histograms); a bootstrap pass: its
        points' passes, prepared (:func:`analysis.pipeline.replicas.point_requests`); a
        plan with cuts that derive their edges: the pass on their pseudo-parameters,
        prepared, and how to chain its derivatives
        (:func:`analysis.pipeline.backends.numba.cutedges.lower`)."""
        kind = request.kind
        if kind == "replicas":
            return Prepared(self, plan, request, data=[
                (self.prepare(plan, v), self.prepare(plan, s))
                for v, s in replicas.point_requests(request)])
        low = cutedges.lower(plan, request)
        if low is not None:  # derived edges: a pass on pseudo-parameters, chained in _run
            return Prepared(self, plan, request, data=dataclasses.replace(
                low, inner=self.prepare(low.plan, low.request)))
        run = plan
        if plan.scores and kind in ("states", "entries", "selected"):
            run = scorecols.bare(plan)
        if kind in ("entries", "selected") and (run.hists or run.regions):
            run = dataclasses.replace(run, hists=(), regions=())  # they read neither
        if kind == "states":  # the sweeps' plans: blocks of tangents (blocks.plans)
            return Prepared(self, plan, request,
                            data=blocks.plans(run, request.order, _numba_dp.LANES - 1))
        return Prepared(self, plan, request, data=run)

    def run(self, prepared: Prepared, columns: ChunkColumns, *,
            threads: int | None = None) -> Any:
        """One chunk's output of ``prepared`` (:mod:`analysis.pipeline.engine`)."""
        import jax

        with jax.default_device(jax.devices("cpu")[0]):  # the host's few JAX calls
            return self._run(prepared, columns, threads)

    def _run(self, prepared: Prepared, cols: ChunkColumns, threads: int | None) -> Any:
        if isinstance(prepared.data, cutedges.Lowered):  # the one place edges are chained
            return prepared.data.chain(self._run(prepared.data.inner, cols, threads))
        plan, req, run = prepared.plan, prepared.request, prepared.data
        theta, widths = req.theta, req.widths
        kind = req.kind
        sweeps = run if kind == "states" else (run,)
        run = sweeps[0]
        if kind == "replicas":
            return replicas.run(cols, req.replicas, [
                (partial(self._run, v, threads=threads), partial(self._run, s, threads=threads))
                for v, s in run], NumbaCounter())
        loops = {"fused": self.fused, "value_loop": self.value_loop}
        if plan.scores and not run.scores and kind in ("states", "entries", "selected"):
            cols = scorecols.score_columns(cols, plan, theta)
            plan = run
        if kind == "states":
            sums = bool(run.hists) and bool(event_sum_collections(run))

            def sweep(sub: Plan) -> tuple[Any, Any, Any]:
                """One sweep of the lanes: ``(value, jac, uncertain)``."""
                extra: dict = {"uncertain": {}} if sums else {}
                kernel, options = ((fasthist.evaluate_columns, extra) if sub.hists
                                   else (fastkernel.evaluate_columns, loops))
                value, jac = kernel(cols, sub, theta, widths, order=req.order, threads=threads,
                                    trace=self.trace, **options)
                return value, jac, extra.get("uncertain")

            value, jac, uncertain = blocks.in_blocks(sweeps, sweep)
            return DatasetState(
                events=cols.n_events, sumw=float(np.sum(cols.weight)),
                derived=Derived(plan.trainable_names, value, jac),
                enumeration=enumeration_counts(uncertain, int(cols.n_events)) if sums else None,
            )
        if kind == "entries":
            x, w = fastkernel.observable_entries(cols, run, theta, widths, req.entries,
                                                 threads=threads, **loops)
            keep = w != 0  # fully rejected entries
            return x[keep], w[keep]
        if kind == "selected":
            return fastkernel.selected_weights(cols, run, theta, widths, threads=threads)
        if kind == "pullback":
            return fastreverse.chunk_pullback(cols, plan, theta, widths, req.pullback,
                                              threads=threads, trace=self.trace)
        if kind == "yield_gradients":
            return fastreverse.chunk_yield_gradients(cols, plan, theta, widths,
                                                     rows=req.yield_rows, threads=threads,
                                                     trace=self.trace)
        raise ValueError(f"the numba backend does not compute {kind}")
