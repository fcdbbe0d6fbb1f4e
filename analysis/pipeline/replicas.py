"""Poisson-bootstrap replicas of a chunk's yield sums, in the same pass as the values.

Replica ``k`` weighs event ``e`` by ``P_ek ~ Poisson(1)``, drawn from the event's own
number (:func:`analysis.pipeline.split.poisson_replicas`): the same for every chunking and
executor. A pass at given cuts gives, per dataset, the usual state and per replica
``[sum P s, sum P s^2]`` (``s``: weight x pass probability: the replica's
``selected_sumw`` and ``selected_sumw2``); a totals pass gives per replica ``[sum P,
sum P w]`` for each part of the validation split (they do not depend on the cuts, so
an optimisation runs it once). A lanes pass gives both for several parameter points
and parts of the split at once (:func:`chunk_lanes`: the parts are per-event weight
factors, the replicas per-event multiplicities, so all of them ride one pass over the
columns). All add with ``+`` (coffea's ``accumulate``). The
spread of a function of these sums over the replicas is its Monte Carlo (finite
simulation) uncertainty (Efron's bootstrap; the Poisson form makes the replicas of
independent chunks independent, so they merge by addition).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.pipeline.backend import Backend
from analysis.pipeline.backends.numba.kernels._numba_replicas import (
    replica_lanes,
    replica_selected,
    replica_totals,
)
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.request import Request
from analysis.pipeline.split import _POISSON1_CDF, PARTS, part_factor

__all__ = [
    "ReplicaLanes", "ReplicaSums", "ReplicaTotals", "chunk_lanes", "chunk_replicas",
    "chunk_totals",
]


@dataclass
class ReplicaSums:
    """``sums``: ``(2, K)`` float64, rows ``selected_sumw, selected_sumw2`` of each
    replica; ``state``: the pass's :class:`~analysis.pipeline.results.DatasetState`
    (values only)."""

    sums: np.ndarray
    state: Any = None

    def __add__(self, other: ReplicaSums) -> ReplicaSums:
        if self.state is None or other.state is None:
            state = self.state if other.state is None else other.state
        else:
            state = self.state + other.state
        return ReplicaSums(self.sums + other.sums, state)


@dataclass
class ReplicaTotals:
    """``sums``: ``(1 + len(PARTS), K)`` float64: per replica the number of events, then
    the sum of weights of each part of :data:`analysis.pipeline.split.PARTS` (all, train,
    held_out; each part's weights with its factor)."""

    sums: np.ndarray

    def __add__(self, other: ReplicaTotals) -> ReplicaTotals:
        return ReplicaTotals(self.sums + other.sums)

    def part(self, name: str) -> np.ndarray:
        """``(2, K)``: the events and the sums of weights of part ``name``."""
        return self.sums[[0, 1 + PARTS.index(name)]]


@dataclass
class ReplicaLanes:
    """``lanes``: ``{(point, part): ReplicaSums}`` (``point``: the index of a parameter
    point, ``part``: one of :data:`~analysis.pipeline.split.PARTS`); ``totals``: the
    :class:`ReplicaTotals` of the same pass, or None."""

    lanes: dict
    totals: ReplicaTotals | None = None

    def __add__(self, other: ReplicaLanes) -> ReplicaLanes:
        lanes = {key: self.lanes[key] + other.lanes[key] for key in self.lanes}
        if self.totals is None or other.totals is None:
            totals = self.totals if other.totals is None else other.totals
        else:
            totals = self.totals + other.totals
        return ReplicaLanes(lanes, totals)


def _uid(cols: ChunkColumns) -> np.ndarray:
    if cols.uid is None:
        raise ValueError("bootstrap replicas need the events' uid (columns from a file)")
    return cols.uid


def _passes(plan: Plan, theta: Any, widths: Any, backend: Backend | None):
    """The prepared values pass and selected-weights pass at ``theta`` (``backend``'s
    chooser; default ``Backend()``)."""
    chooser = (backend or Backend()).chooser
    return (chooser.prepare(plan, Request(theta, widths, order=0)),
            chooser.prepare(plan, Request(theta, widths, order=0, selected=True)))


def chunk_replicas(
    cols: ChunkColumns, plan: Plan, theta: Any, widths: Any, replicas: int, *,
    threads: int | None = None, backend: Backend | None = None,
) -> ReplicaSums:
    """The state and the replicas' selected sums of one chunk (module docstring);
    ``backend``: which backends compute them (default ``Backend()``)."""
    values, selected = _passes(plan, theta, widths, backend)
    state = values.run(cols, threads=threads)
    if not cols.n_events:
        return ReplicaSums(np.zeros((2, replicas)), state)
    sel = selected.run(cols, threads=threads)
    return ReplicaSums(replica_selected(_uid(cols), sel, replicas, cdf=_POISSON1_CDF), state)


def chunk_totals(cols: ChunkColumns, fraction: float | None, replicas: int) -> ReplicaTotals:
    """The replicas' totals of one chunk for every part (``fraction`` None: the split's
    parts get zeros)."""
    if not cols.n_events:
        return ReplicaTotals(np.zeros((1 + len(PARTS), replicas)))
    u = _uid(cols)
    rows = [cols.weight * (part_factor(u, p, fraction) if fraction else float(p == "all"))
            for p in PARTS]
    return ReplicaTotals(replica_totals(u, np.stack(rows), replicas, cdf=_POISSON1_CDF))


def chunk_lanes(
    cols: ChunkColumns, plan: Plan, thetas: Any, widths: Any, replicas: int, *,
    parts: tuple[str, ...], fraction: float | None, totals: bool = False,
    threads: int | None = None, backend: Backend | None = None,
) -> ReplicaLanes:
    """For each parameter point (row of ``thetas``) and part in ``parts``: the state
    and the replicas' selected sums of one chunk with that part's weights (as
    :func:`chunk_replicas` on the chunk weighted by
    :func:`~analysis.pipeline.split.part_factor`); with ``totals``: also
    :func:`chunk_totals`. The replicas' multiplicities are drawn once per event for all
    of them; a part's selected weights are the point's selected weights on all events
    times the part's factor (equal to weighting first up to rounding, ~1e-16)."""
    thetas = np.atleast_2d(np.asarray(thetas, dtype=np.float64))
    factors = {p: part_factor(cols.uid, p, fraction) if (fraction and p != "all"
                                                          and cols.n_events) else None
               for p in parts}
    states, rows = {}, []
    for i, theta in enumerate(thetas):
        values, selected = _passes(plan, theta, widths, backend)
        for p in parts:
            c = cols if factors[p] is None else dataclasses.replace(
                cols, weight=cols.weight * factors[p])
            states[i, p] = values.run(c, threads=threads)
        if cols.n_events:
            sel = selected.run(cols, threads=threads)
            rows += [sel if factors[p] is None else sel * factors[p] for p in parts]
    if not cols.n_events:
        return ReplicaLanes({key: ReplicaSums(np.zeros((2, replicas)), st)
                             for key, st in states.items()},
                            ReplicaTotals(np.zeros((1 + len(PARTS), replicas))) if totals
                            else None)
    u = _uid(cols)
    weights = None
    if totals:
        weights = np.stack([cols.weight * (part_factor(u, p, fraction) if fraction
                                           else float(p == "all")) for p in PARTS])
    sums, tot = replica_lanes(u, np.stack(rows), replicas, weights, cdf=_POISSON1_CDF)
    return ReplicaLanes({key: ReplicaSums(sums[j], st) for j, (key, st) in
                         enumerate(states.items())},
                        None if tot is None else ReplicaTotals(tot))
