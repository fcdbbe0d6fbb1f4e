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
``(spec, rows, vjp)``: ``vjp({key: cotangent of the rows})[0]`` is ``dL/dtheta``
(``key``: :func:`column_key`). Padding rows have inputs 0 (their cotangent is 0).
A chunk of no events gives empty columns.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.score import ScoreSpec, with_scores

__all__ = ["SCORE_ROWS_STEP", "apply_vjp", "apply_vjps", "bare", "column_key", "score_columns"]

#: a score's rows (the chunk's objects or events) are rounded up to a multiple of this
#: for its network's jit (few compilations; at most this many padding rows evaluated)
SCORE_ROWS_STEP = 4096


def column_key(spec: ScoreSpec) -> str:
    """``"C:score.NAME"`` (object-level, collection ``C``) or ``"event:score.NAME"``."""
    return f"{'event' if spec.collection is None else spec.collection}:{spec.column}"


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
    """``cols`` with every score's column added (module docstring); with ``vjp=True``
    ``(cols, [(spec, rows, vjp), ...])``."""
    theta_full = jnp.asarray(np.asarray(theta, dtype=np.float64).reshape(-1))
    events = dict(cols.events)
    collections = {c: (counts, dict(flat)) for c, (counts, flat) in cols.collections.items()}
    vjps = []
    for spec in plan.scores:
        prefix = column_key(spec).split(":", 1)[0]
        n, source = _source(cols, spec)
        rows = -(-max(n, 1) // SCORE_ROWS_STEP) * SCORE_ROWS_STEP
        inputs = {}
        for key, _ in spec.inputs:
            x = np.zeros(rows)
            x[:n] = source.get(key, np.zeros(0))[:n]
            inputs[f"{prefix}:{key}"] = x
        if vjp:
            out, back = _vjp(theta_full, inputs, (spec,))
            vjps.append((spec, rows, back))
        else:
            out = _values(theta_full, inputs, (spec,))
        col = np.asarray(out[column_key(spec)], dtype=np.float64)[:n]
        if spec.collection is None:
            events[spec.column] = col
        else:
            # a collection absent from the columns (a chunk of no events) has no objects
            fields = dict(plan.sets.fields).get(spec.collection, ())
            counts, flat = collections.get(spec.collection, (
                np.zeros(cols.n_events, np.int64), {f: np.zeros(0) for f in fields}))
            collections[spec.collection] = (counts, {**flat, spec.column: col})
    out_cols = dataclasses.replace(cols, events=events, collections=collections)
    return (out_cols, vjps) if vjp else out_cols
