"""Reverse mode for the YAML pipeline: one chunk's share of ``dL/dtheta``.

For plans with many trainable parameters (a learned score's weights) the forward
Jacobian of every state costs O(P) per entry. Instead (:mod:`analysis.stats.pullback`):
pass 1 computes values only and merges them; the loss's cotangent of the merged
states gives a payload (``(a, T_bar)`` per state, ``(None, S_bar)`` per sum,
:func:`analysis.stats.pullback.pullback_payload`; ``None`` for a state the loss does
not read, :func:`analysis.stats.pullback.prune`); pass 2 computes, per chunk, the
gradient of ``<T_bar, T_c(theta)>`` with respect to the trainable parameters by
``jax.grad`` of the JAX kernel (:func:`analysis.pipeline.kernel.chunk_states`),
jit-compiled per bucket shape. The chunk's shares add over chunks
(:class:`analysis.stats.Pullback` ``+``: coffea's ``accumulate``), exactly for any
chunking and executor. The payload is numpy (it pickles to the workers):
:func:`analysis.optimize.reverse.reverse_objective` builds it.

Learned scores are taken apart from the kernel's sweep: each score's column is
computed once per chunk on the chunk's real rows only (objects or events, rounded up to
:data:`SCORE_ROWS_STEP`, not the kernel's power-of-two padding) with ``jax.vjp``; the
kernel's sweep, for the plan without scores, gives the column's cotangent; the
network's vjp turns it into the weights' gradient (the chain rule ``jax.grad`` applies
too, on fewer rows). Padding entries of the column are 0 (their weight is 0, as the
kernel's own padding). Two jits: the network's per row bucket (small, quick to
compile), the kernel's per bucket shape (as the value pass).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.kernel import _with_trainable, chunk_states
from analysis.pipeline.layout import ChunkColumns, Shapes, pad_columns
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import DatasetState
from analysis.pipeline.score import ScoreSpec, with_scores
from analysis.stats.derive import Pullback
from analysis.stats.pullback import pulled_sum

__all__ = ["SCORE_ROWS_STEP", "chunk_pullback"]

#: a score's rows (the chunk's objects or events) are rounded up to a multiple of this
#: for its network's jit (few compilations; at most this many padding rows evaluated)
SCORE_ROWS_STEP = 4096


@partial(jax.jit, static_argnames=("plan", "shapes"))
def _pullback(theta_full, widths, arrays, columns, payload, plan: Plan, shapes: Shapes):
    """``(states, dL/dt, dL/dcolumns)``: ``columns`` (score name -> padded column) are
    inputs here, the plan has no scores."""
    idx = jnp.asarray(plan.trainable, dtype=jnp.int32)

    def scalar(t, cols):
        full = _with_trainable(theta_full, t, plan)
        states = chunk_states(full, widths, {**arrays, **cols}, plan, shapes)
        return pulled_sum(states, payload), states

    (grad, g_cols), states = jax.grad(scalar, argnums=(0, 1), has_aux=True)(
        theta_full[idx], columns)
    return states, grad, g_cols


def _key(spec: ScoreSpec) -> str:
    return f"{'event' if spec.collection is None else spec.collection}:{spec.column}"


@partial(jax.jit, static_argnames=("scores",))
def _scores_vjp(theta_full, inputs, scores: tuple[ScoreSpec, ...]):
    """The score columns on ``inputs`` (the real rows) and their vjp in ``theta_full``."""
    keys = [_key(s) for s in scores]
    return jax.vjp(lambda th: {k: with_scores(th, inputs, scores)[k] for k in keys}, theta_full)


_apply = jax.jit(lambda vjp, ct: vjp(ct)[0])


@lru_cache(maxsize=64)
def _bare(plan: Plan) -> Plan:
    """``plan`` without its scores (their columns are inputs of :func:`_pullback`)."""
    return dataclasses.replace(plan, scores=())


def _rows(cols: ChunkColumns, spec: ScoreSpec, size: int) -> int:
    if spec.collection is None:
        n = cols.n_events
    else:
        n = int(np.sum(cols.collections.get(spec.collection, (np.zeros(0, np.int64), {}))[0]))
    return min(size, -(-max(n, 1) // SCORE_ROWS_STEP) * SCORE_ROWS_STEP)


def chunk_pullback(cols: ChunkColumns, plan: Plan, theta, widths, payload) -> DatasetState:
    """One chunk's states and gradient share: a :class:`DatasetState` whose ``derived``
    is a :class:`~analysis.stats.Pullback` over ``plan.trainable_names``."""
    arrays, shapes = pad_columns(cols, plan)
    theta_full = jnp.asarray(theta, dtype=jnp.float64)
    w = jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths)
    columns, vjps = {}, []
    for spec in plan.scores:
        prefix = _key(spec).split(":", 1)[0]
        size = arrays["weight"].shape[0] if spec.collection is None else next(
            o for c, o, _ in shapes.collections if c == spec.collection)
        rows = _rows(cols, spec, size)
        inputs = {f"{prefix}:{k}": arrays[f"{prefix}:{k}"][:rows] for k, _ in spec.inputs}
        col, vjp = _scores_vjp(theta_full, inputs, (spec,))
        columns[_key(spec)] = jnp.pad(col[_key(spec)], (0, size - rows))
        vjps.append((spec, rows, vjp))
    states, grad, g_cols = _pullback(theta_full, w, arrays, columns, payload, _bare(plan), shapes)
    if vjps:
        idx = np.asarray(plan.trainable, dtype=np.int64)
        grad = np.asarray(grad, dtype=np.float64)
        for spec, rows, vjp in vjps:
            g_theta = _apply(vjp, {_key(spec): g_cols[_key(spec)][:rows]})
            grad = grad + np.asarray(g_theta, dtype=np.float64)[idx]
    value = jax.tree_util.tree_map(lambda a: np.array(a, dtype=np.float64), states)
    derived = Pullback(plan.trainable_names, value, np.asarray(grad, dtype=np.float64))
    return DatasetState(events=cols.n_events, sumw=float(np.sum(cols.weight)), chunks=1,
                        derived=derived)
