"""The objects a hard pre-selection leaves (numpy only).

An object that fails, for every root set of its collection, a cut of width 0 is in no
set: its pass probability is exactly 0 for each of them, with zero derivatives (a
width-0 cut has no slope), in the nominal columns and under every shift of the cut's
field that could let it pass (a jet of 24 GeV under ``pt > 25`` may pass with
``Jet.pt`` shifted up 5%; a cut on a score, under every shift of its inputs). It moves no count, no sum and no candidate, so it can leave
before anything is computed from the objects: :func:`survivors` names the others,
per collection, and :func:`compact` gives the chunk's columns with only them.

Two readings of "width 0": the configured one (``widths=None``: the cuts written with
``width: 0`` and a constant threshold, :attr:`analysis.pipeline.plan.SetPlan.hard`;
annealing keeps a width of 0 at 0, so such an object is out at every parameter point:
what ``max_objects`` counts, :func:`analysis.data.columns.extract_columns`), and the
one of a pass (``widths`` and ``theta`` given: every cut whose width is 0 at this point,
its threshold at this point; the numba kernel's histogram pass drops the others,
:func:`analysis.pipeline.backends.numba.fasthist.evaluate_columns`). The comparisons are
those of the kernels' hard step (:func:`analysis.select.objects.soft_pass` at width 0:
``x - t > 0``, ``>= 0`` when inclusive, the same truth as ``x > t`` for finite floats).
A cut kind without one-sided ``sides`` (:mod:`analysis.select.cuts`) removes nothing
here (exact: its objects stay where they were); one that derives its one-sided
thresholds from its bounds (``edges``) is compared at those.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from analysis.pipeline import scorecols
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import ObjectCut, Plan
from analysis.select.cuts import edges_of, kind_of

__all__ = ["compact", "kept_counts", "survivors"]


def _bound(cut: ObjectCut, param: int | None, value: float | None, theta: Any) -> float | None:
    """The threshold of one bound, or None where it moves with the parameters (the
    configured reading: ``theta`` None)."""
    if param is None:
        return float(value)
    return None if theta is None else float(np.asarray(theta)[param])


def _passes(cut: ObjectCut, x: np.ndarray, theta: Any) -> np.ndarray | None:
    """Where the hard cut ``cut`` can pass the values ``x`` (``|x|`` for an ``abs_``
    cut), or None where this module cannot tell (a moving threshold, a kind without
    ``sides``)."""
    kind = kind_of(cut.kind_op)
    sides = getattr(kind, "sides", None)
    if sides is None:
        return None
    bounds = [_bound(cut, p, v, theta) for p, v in cut.bounds]
    if any(b is None for b in bounds):
        return None
    edges = [float(e) for e in edges_of(kind, cut.kind_op, bounds)]  # derived: c - d, c + d
    x = np.abs(x) if cut.absolute else x
    ok = None
    for t, (greater, inclusive) in zip(edges, sides(cut.kind_op), strict=True):
        # the kernels' step ``x - t > 0`` (``>= 0``): for finite floats the same truth as
        # ``x > t`` (a difference of two floats is 0 only where they are equal), and NaN
        # fails both
        op = (np.greater_equal if inclusive else np.greater) if greater else (
            np.less_equal if inclusive else np.less)
        side = op(x, t)
        ok = side if ok is None else np.logical_and(ok, side, out=ok)
    return np.ones(x.shape, dtype=bool) if ok is None else ok


def survivors(plan: Plan, collection: str, flat: dict[str, np.ndarray], n_objects: int, *,
              theta: Any = None, widths: Any = None) -> np.ndarray | None:
    """``(N,)`` bool: the objects of ``collection`` (``flat``: its fields, ``n_objects``
    of them) that are not out of every root set by a width-0 cut (module docstring;
    ``widths``/``theta`` None: the configured hard cuts with constant thresholds, else
    the cuts of width 0 at this point). None where every object survives (no cut to
    read, or no root set)."""
    if widths is None:
        hard = set(plan.sets.hard)

        def is_hard(cut: ObjectCut) -> bool:
            return cut.width_index in hard
    else:
        w = np.asarray(widths)

        def is_hard(cut: ObjectCut) -> bool:
            return not float(w[cut.width_index]) > 0.0  # the kernels' test of a hard cut

    factors: dict[str, list[float]] = {}
    for sh in plan.shifts:
        head, f = sh.key.split(":", 1)
        if head == collection:
            factors.setdefault(f, []).append(sh.factor)
    roots = [[cut for cut in s.cuts if is_hard(cut)] for s in plan.sets.sets
             if s.collection == collection and s.parent is None]
    if not roots:
        return None
    keep = np.zeros(n_objects, dtype=bool)
    for cuts in roots:
        ok = np.ones(n_objects, dtype=bool)
        for cut in cuts:
            if cut.field not in flat:
                continue
            passes = np.zeros(n_objects, dtype=bool)
            # the nominal column, its shift sides (as the shifted columns are made,
            # analysis.pipeline.backends.numba.fasthist) and, for a score's column, its
            # columns of the shifts of its inputs (analysis.pipeline.scorecols)
            values = [flat[cut.field], *(flat[cut.field] * f for f in factors.get(cut.field, [])),
                      *scorecols.side_columns(flat, cut.field)]
            for x in values:
                p = _passes(cut, x, theta if widths is not None else None)
                if p is None:
                    passes[:] = True
                    break
                passes |= p
            ok &= passes
        keep |= ok
        if keep.all():
            return None
    return keep


def kept_counts(counts: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Per event (``counts``: its objects), how many of its objects ``keep`` holds
    (int64)."""
    upto = np.zeros(keep.size + 1, np.int64)
    np.cumsum(keep, out=upto[1:])
    ends = np.cumsum(counts)
    return upto[ends] - upto[ends - counts]


def compact(cols: ChunkColumns, plan: Plan, theta: Any, widths: Any) -> ChunkColumns:
    """``cols`` with only the objects of each collection of ``plan`` that
    :func:`survivors` keeps at ``(theta, widths)`` (new arrays; the events, their weights
    and branches as they are), or ``cols`` itself where none leaves."""
    out = None
    for name, _ in plan.sets.fields:
        if name not in cols.collections:
            continue
        counts, flat = cols.collections[name]
        keep = survivors(plan, name, flat, int(counts.sum()), theta=theta, widths=widths)
        if keep is None:
            continue
        if out is None:
            out = dataclasses.replace(cols, collections=dict(cols.collections))
        idx = np.flatnonzero(keep)  # once for every field (take: faster than a mask)
        out.collections[name] = (kept_counts(counts, keep),
                                 {f: v.take(idx) for f, v in flat.items()})
    return cols if out is None else out
