"""Learned scores as ordinary columns: the network once per chunk, then any kernel.

:func:`score_columns` evaluates each of a plan's scores (:mod:`analysis.pipeline.score`)
on a chunk's real rows (its collection's objects, or its events; rounded up to
:data:`SCORE_ROWS_STEP` for the jit, never the JAX kernel's power-of-two padding) and
returns the chunk's :class:`~analysis.pipeline.layout.ChunkColumns` with one more
column per score: field ``score.NAME`` of the collection (object-level) or branch
``score.NAME`` (event-level). The plan without its scores (:func:`bare`) reads them as
it reads any field or branch, so the numba kernel (:mod:`analysis.pipeline.backends.numba.fastkernel`)
computes the chunk's states from them: the same states as the JAX kernel with the
network inside (``score = MLP((x - mean) / std)``, float64). With ``vjp=True`` each
score's vjp in the full parameter vector comes back too (reverse mode:
:mod:`analysis.pipeline.backends.numba.fastreverse`, :mod:`analysis.pipeline.backends.jax.reverse`), as
:class:`ScoreVjp` ``(spec, rows, vjp, key)``: :func:`pull` of the cotangent of the
column ``key`` is ``dL/dtheta``. Padding rows have inputs 0 (their cotangent is 0).
A chunk of no events gives empty columns.

A shift of a score's input moves the score: the score of a shift side is the network
of the shifted inputs (as the JAX kernel's values, which evaluate the network inside
on the shifted arrays). Where a plan's shift ``(key, factor)`` scales one of a score's
inputs, :func:`score_columns` adds that side's column too, named
:func:`side_name` beside the nominal one (with its own vjp, ``key`` its column key);
:func:`shifted` (the numba kernel's shift sides) and :func:`side_arrays` (the JAX
kernel's, on a plan without scores) put it in the nominal column's place. A shift of
a column that no score reads adds nothing: one network evaluation per score.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache, partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.score import ScoreSpec, with_scores

__all__ = ["SCORE_ROWS_STEP", "ScoreVjp", "apply_vjp", "apply_vjps", "bare", "column_key",
           "moved_columns", "pull", "pull_many", "score_columns", "shifted", "side_arrays",
           "side_columns", "side_name"]

#: a score's rows (the chunk's objects or events) are rounded up to a multiple of this
#: for its network's jit (few compilations; at most this many padding rows evaluated)
SCORE_ROWS_STEP = 4096


def column_key(spec: ScoreSpec) -> str:
    """``"C:score.NAME"`` (object-level, collection ``C``) or ``"event:score.NAME"``."""
    return f"{'event' if spec.collection is None else spec.collection}:{spec.column}"


def side_name(column: str, key: str, factor: float) -> str:
    """The name of a score's ``column`` on the shift side ``(key, factor)`` (``key``:
    ``C:f`` or ``event:K``): ``score.NAME@KEY*FACTOR``."""
    return f"{column}@{key}*{factor!r}"


def _base(name: str, key: str, factor: float | None) -> str | None:
    """The nominal column of ``name`` if it is a side column of ``key`` (at ``factor``;
    None: any), else None."""
    head, at, side = name.partition("@")
    if not at or not side.startswith(f"{key}*"):
        return None
    return head if factor is None or side == f"{key}*{factor!r}" else None


def _sides(plan: Plan, spec: ScoreSpec) -> list[tuple[str, float]]:
    """The plan's shift sides ``(key, factor)`` that scale one of ``spec``'s inputs."""
    prefix = column_key(spec).split(":", 1)[0]
    inputs = {f"{prefix}:{key}" for key, _ in spec.inputs}
    return list(dict.fromkeys((sh.key, sh.factor) for sh in plan.shifts if sh.key in inputs))


def shifted(cols: ChunkColumns, key: str, factor: float) -> ChunkColumns:
    """``cols`` on the shift side ``(key, factor)``: the column ``key`` times ``factor``
    and every score's column of that side (:func:`score_columns`) in place of the
    nominal one (new dicts: the cached columns are not touched)."""
    head, name = key.split(":", 1)

    def side(c: str, flat: dict) -> dict:
        moved = {b: v for n, v in flat.items() if (b := _base(n, key, factor)) is not None}
        if c == head:
            moved[name] = flat[name] * factor
        return {**flat, **moved} if moved else flat  # the others as they are

    if head != "event" and head not in cols.collections:
        raise KeyError(key)
    return cols.replace(
        events=side("event", cols.events),
        collections={c: pair if (f := side(c, pair[1])) is pair[1] else (pair[0], f)
                     for c, pair in cols.collections.items()})


def side_arrays(arrays: dict, key: str, factor: float) -> dict:
    """``arrays`` (``C:f`` and ``event:K`` keys) with every score's column of the shift
    side ``(key, factor)`` in place of the nominal one (the column ``key`` itself as it
    is: the caller scales it)."""
    out = dict(arrays)
    for k, v in arrays.items():
        b = _base(k, key, factor)
        if b is not None:
            out[b] = v
    return out


def side_columns(flat: dict, column: str) -> list:
    """The columns of ``flat`` (one collection's fields or the branches) that are
    ``column``'s on a shift side (:func:`side_name`); none for a column that is not a
    score's, or none of whose inputs a shift scales."""
    return [v for n, v in flat.items() if n.partition("@")[0] == column and "@" in n]


def moved_columns(cols: ChunkColumns, key: str) -> tuple[str, ...]:
    """The columns (``C:f``, ``event:K``) that a shift of ``key`` moves: ``key`` and the
    score columns with a side of it in ``cols``."""
    out = [key]
    for c, flat in [("event", cols.events), *((c, f) for c, (_, f) in cols.collections.items())]:
        out += [f"{c}:{b}" for n in flat if (b := _base(n, key, None)) is not None]
    return tuple(dict.fromkeys(out))


class ScoreVjp(NamedTuple):
    """One score column's vjp (:func:`score_columns` with ``vjp=True``)."""

    spec: ScoreSpec
    rows: int  # the rows the network ran on (its cotangent's length)
    vjp: Any
    key: str  # the column's key (``C:f``, ``event:K``): the nominal one or a side's


def pull(entry: ScoreVjp, bar) -> Any:
    """``dL/dtheta`` (full parameter vector) of the cotangent ``bar`` (``(rows,)``) of
    ``entry``'s column."""
    return apply_vjp(entry.vjp, {column_key(entry.spec): jnp.asarray(bar)})


def pull_many(entry: ScoreVjp, bars) -> Any:
    """:func:`pull` of several cotangents ``(R, rows)``: ``(R, P)``."""
    return apply_vjps(entry.vjp, {column_key(entry.spec): jnp.asarray(bars)})


@lru_cache(maxsize=64)
def bare(plan: Plan) -> Plan:
    """``plan`` without its scores (their columns are inputs, :func:`score_columns`)."""
    return dataclasses.replace(plan, scores=())


def _network(theta_full, inputs, scores: tuple[ScoreSpec, ...]):
    keys = [column_key(s) for s in scores]
    return {k: with_scores(theta_full, inputs, scores)[k] for k in keys}


_values = jax.jit(_network, static_argnames=("scores",))


@partial(jax.jit, static_argnames=("scores",))
def _vjp(theta_full, inputs, scores: tuple[ScoreSpec, ...]):
    return jax.vjp(lambda th: _network(th, inputs, scores), theta_full)


#: ``vjp(cotangent)[0]``, jitted once per structure
apply_vjp = jax.jit(lambda vjp, ct: vjp(ct)[0])
#: :data:`apply_vjp` of several cotangents at once (a leading axis on every leaf of ``ct``)
apply_vjps = jax.jit(lambda vjp, ct: jax.vmap(vjp)(ct)[0])


def _source(cols: ChunkColumns, spec: ScoreSpec) -> tuple[int, dict]:
    """The rows and the input columns of ``spec`` (unpadded, float64)."""
    if spec.collection is None:
        return int(cols.n_events), cols.events
    counts, flat = cols.collections.get(spec.collection, (np.zeros(0, np.int64), {}))
    return int(np.sum(counts)), flat


def score_columns(cols: ChunkColumns, plan: Plan, theta, *, vjp: bool = False):
    """``cols`` with every score's column added, and its columns of the shift sides
    that scale its inputs (module docstring); with ``vjp=True`` ``(cols, [ScoreVjp,
    ...])``."""
    theta_full = jnp.asarray(np.asarray(theta, dtype=np.float64).reshape(-1))
    events = dict(cols.events)
    collections = {c: (counts, dict(flat)) for c, (counts, flat) in cols.collections.items()}
    vjps = []
    for spec in plan.scores:
        prefix = column_key(spec).split(":", 1)[0]
        n, source = _source(cols, spec)
        rows = -(-max(n, 1) // SCORE_ROWS_STEP) * SCORE_ROWS_STEP
        nominal = {}
        for key, _ in spec.inputs:
            x = np.zeros(rows)
            x[:n] = source.get(key, np.zeros(0))[:n]
            nominal[f"{prefix}:{key}"] = x
        # the nominal inputs, then each shift side that scales one of them (as the JAX
        # kernel scales its arrays: the same floats)
        for side in [None, *_sides(plan, spec)]:
            inputs, name = nominal, spec.column
            if side is not None:
                inputs = {**nominal, side[0]: nominal[side[0]] * side[1]}
                name = side_name(spec.column, *side)
            if vjp:
                out, back = _vjp(theta_full, inputs, (spec,))
                vjps.append(ScoreVjp(spec, rows, back, f"{prefix}:{name}"))
            else:
                out = _values(theta_full, inputs, (spec,))
            col = np.asarray(out[column_key(spec)], dtype=np.float64)[:n]
            if spec.collection is None:
                events[name] = col
            else:
                # a collection absent from the columns (a chunk of no events) has no objects
                fields = dict(plan.sets.fields).get(spec.collection, ())
                counts, flat = collections.get(spec.collection, (
                    np.zeros(cols.n_events, np.int64), {f: np.zeros(0) for f in fields}))
                collections[spec.collection] = (counts, {**flat, name: col})
    out_cols = cols.replace(events=events, collections=collections)
    return (out_cols, vjps) if vjp else out_cols
