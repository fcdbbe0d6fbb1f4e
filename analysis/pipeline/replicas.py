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

A bootstrap pass is a :class:`~analysis.pipeline.request.Request` with ``replicas``
(:class:`~analysis.pipeline.request.Replicas`), chosen and prepared like every pass
(:mod:`analysis.pipeline.backend`): the backend that serves it prepares the values
and selected-weights passes of every point once (:func:`point_requests`) and runs
them through :func:`run` with its own :class:`Counter` (the numba backend: loops that
never build the ``(E, K)`` table; the JAX backend: the table, on its device).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.request import Replicas, Request
from analysis.pipeline.split import PARTS, part_factor

__all__ = [
    "Counter", "ReplicaLanes", "ReplicaSums", "ReplicaTotals", "chunk_lanes", "chunk_replicas",
    "chunk_totals", "point_requests", "run", "states",
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


class Counter(Protocol):
    """How a backend sums the replicas (``u``: the events' uid, ``(E,)``; ``count``: K).

    ``selected(u, s, count)``: ``(2, K)``, ``[sum_e P_ek s_e, sum_e P_ek s_e^2]``;
    ``totals(u, weights, count)``: ``(1 + L, K)``, ``[sum_e P_ek, sum_e P_ek w_le ...]``
    for the ``L`` rows of ``weights``; ``lanes(u, rows, count, weights)``: ``selected``
    of every row of ``rows`` ``(L, E)`` (``(L, 2, K)``) and ``totals`` of ``weights``
    (None: None), from one draw of the multiplicities. ``P_ek``:
    :func:`analysis.pipeline.split.poisson_replicas`.
    """

    def selected(self, u: np.ndarray, s: np.ndarray, count: int) -> np.ndarray: ...

    def totals(self, u: np.ndarray, weights: np.ndarray, count: int) -> np.ndarray: ...

    def lanes(self, u: np.ndarray, rows: np.ndarray, count: int,
              weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]: ...


#: one point's passes, prepared: ``(values, selected)``, each ``columns -> output``
Point = tuple[Callable[[ChunkColumns], Any], Callable[[ChunkColumns], Any]]


def point_requests(request: Request) -> list[tuple[Request, Request]]:
    """The values request and the selected-weights request of each parameter point of
    the bootstrap ``request`` (``"totals"``: none; ``"lanes"``: a row of ``theta`` each)."""
    spec = request.replicas
    if spec is None:
        raise ValueError(f"not a bootstrap request: {request.kind}")
    if spec.what == "totals":
        return []
    thetas = np.atleast_2d(request.theta) if spec.what == "lanes" else [request.theta]
    return [(Request(t, request.widths, order=0),
             Request(t, request.widths, order=0, selected=True)) for t in thetas]


def run(cols: ChunkColumns, spec: Replicas, points: Sequence[Point], counter: Counter) -> Any:
    """One chunk's output of the bootstrap pass ``spec``, from its points' prepared
    passes (:func:`point_requests`, in that order) and ``counter``."""
    if spec.what == "totals":
        return chunk_totals(cols, spec.fraction, spec.count, counter)
    if spec.what == "sums":
        values, selected = points[0]
        return chunk_replicas(cols, values, selected, spec.count, counter)
    return chunk_lanes(cols, points, spec.count, counter, parts=spec.parts,
                       fraction=spec.fraction, totals=spec.totals, known=spec.known)


def _uid(cols: ChunkColumns) -> np.ndarray:
    if cols.uid is None:
        raise ValueError("bootstrap replicas need the events' uid (columns from a file)")
    return cols.uid


def _part_weights(cols: ChunkColumns, u: np.ndarray, fraction: float | None) -> np.ndarray:
    """``(len(PARTS), E)``: the weights of each part of the split (None: "all" only)."""
    return np.stack([cols.weight * (part_factor(u, p, fraction) if fraction
                                    else float(p == "all")) for p in PARTS])


def chunk_replicas(cols: ChunkColumns, values: Callable, selected: Callable, count: int,
                   counter: Counter) -> ReplicaSums:
    """The state (``values(cols)``) and the replicas' selected sums (of
    ``selected(cols)``) of one chunk (module docstring)."""
    state = values(cols)
    if not cols.n_events:
        return ReplicaSums(np.zeros((2, count)), state)
    return ReplicaSums(counter.selected(_uid(cols), selected(cols), count), state)


def chunk_totals(cols: ChunkColumns, fraction: float | None, count: int,
                 counter: Counter) -> ReplicaTotals:
    """The replicas' totals of one chunk for every part (``fraction`` None: the split's
    parts get zeros)."""
    if not cols.n_events:
        return ReplicaTotals(np.zeros((1 + len(PARTS), count)))
    u = _uid(cols)
    return ReplicaTotals(counter.totals(u, _part_weights(cols, u, fraction), count))


def chunk_lanes(
    cols: ChunkColumns, points: Sequence[Point], count: int, counter: Counter, *,
    parts: tuple[str, ...], fraction: float | None, totals: bool = False,
    known: frozenset[tuple[int, str]] = frozenset(),
) -> ReplicaLanes:
    """For each parameter point (its prepared passes in ``points``) and part in
    ``parts``: the state and the replicas' selected sums of one chunk with that part's
    weights (as :func:`chunk_replicas` on the chunk weighted by
    :func:`~analysis.pipeline.split.part_factor`); with ``totals``: also
    :func:`chunk_totals`. The replicas' multiplicities are drawn once per event for all
    of them; a part's selected weights are the point's selected weights on all events
    times the part's factor (equal to weighting first up to rounding, ~1e-16). No
    replicas (``count`` 0) and no totals: the states alone (no selected weights, no
    draws; ``(2, 0)`` sums). ``known``: ``(point, part)`` lanes whose state the caller
    has: not computed (None), their sums as the others'."""
    factors = {p: part_factor(cols.uid, p, fraction) if (fraction and p != "all"
                                                          and cols.n_events) else None
               for p in parts}
    states, rows = {}, []
    for i, (values, selected) in enumerate(points):
        for p in parts:
            if (i, p) in known:
                states[i, p] = None
                continue
            c = cols if factors[p] is None else dataclasses.replace(
                cols, weight=cols.weight * factors[p])
            states[i, p] = values(c)
        if cols.n_events and (count or totals):  # values only: no selected weights
            sel = selected(cols)
            rows += [sel if factors[p] is None else sel * factors[p] for p in parts]
    if not cols.n_events or not (count or totals):
        return ReplicaLanes({key: ReplicaSums(np.zeros((2, count)), st)
                             for key, st in states.items()},
                            ReplicaTotals(np.zeros((1 + len(PARTS), count))) if totals
                            else None)
    u = _uid(cols)
    sums, tot = counter.lanes(u, np.stack(rows), count,
                              _part_weights(cols, u, fraction) if totals else None)
    return ReplicaLanes({key: ReplicaSums(sums[j], st) for j, (key, st) in
                         enumerate(states.items())},
                        None if tot is None else ReplicaTotals(tot))


def states(out: Any) -> list:
    """The values states in a bootstrap pass's output (none for totals)."""
    if isinstance(out, ReplicaSums):
        return [out.state]
    if isinstance(out, ReplicaLanes):  # (a known lane's: none)
        return [sums.state for sums in out.lanes.values() if sums.state is not None]
    return []
