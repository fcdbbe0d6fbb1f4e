"""Reverse mode for the YAML pipeline: one chunk's share of ``dL/dtheta``.

For plans with many trainable parameters (a learned score's weights) the forward
Jacobian of every state costs O(P) per entry. Instead (:mod:`analysis.stats.pullback`):
pass 1 computes values only and merges them; the loss's cotangent of the merged
states gives a payload (``(a, T_bar)`` per state, ``(None, S_bar)`` per sum,
:func:`analysis.stats.pullback.pullback_payload`; ``None`` for a state the loss does
not read, :func:`analysis.stats.pullback.prune`); pass 2 computes, per chunk, the
gradient of ``<T_bar, T_c(theta)>`` with respect to the trainable parameters by
``jax.grad`` of the JAX kernel (:func:`analysis.pipeline.backends.jax.passes.chunk_states`),
jit-compiled per bucket shape. The chunk's shares add over chunks
(:class:`analysis.stats.Pullback` ``+``: coffea's ``accumulate``), exactly for any
chunking and executor. The payload is numpy (it pickles to the workers):
:func:`analysis.optimize.reverse.reverse_objective` builds it.

This is the JAX backend's pullback (:class:`analysis.pipeline.backends.jax.backend.JaxBackend`),
the reference; where the numba backend serves the plan and the payload (one that reads
the yields and observables of kinds ``S.f`` and branches), the chooser
(:mod:`analysis.pipeline.backend`) runs its pass instead.

Learned scores are taken apart from the kernel's sweep: each score's column is
computed once per chunk on the chunk's real rows only (objects or events, rounded up to
:data:`~analysis.pipeline.scorecols.SCORE_ROWS_STEP`, not the kernel's power-of-two
padding; :func:`analysis.pipeline.scorecols.score_columns`) with ``jax.vjp``; the
kernel's sweep, for the plan without scores, gives the column's cotangent; the
network's vjp turns it into the weights' gradient (the chain rule ``jax.grad`` applies
too, on fewer rows). Padding entries of the column are 0 (their weight is 0, as the
kernel's own padding). A shift side that scales a score's input reads that side's
column of the score (the network of the shifted inputs, its own vjp:
:func:`analysis.pipeline.scorecols.side_arrays`), as the values pass computes it.
Two jits: the network's per row bucket (small, quick to compile), the kernel's per
bucket shape (as the value pass).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline import scorecols
from analysis.pipeline.backends.jax.passes import _with_trainable, candidate_shapes, chunk_states
from analysis.pipeline.layout import ChunkColumns, Padding, Shapes, pad_columns
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import DatasetState
from analysis.stats.derive import Pullback
from analysis.stats.pullback import pulled_sum

__all__ = ["chunk_pullback"]

@partial(jax.jit, static_argnames=("plan", "shapes"))
def _pullback(theta_full, widths, arrays, columns, payload, plan: Plan, shapes: Shapes):
    """``(states, dL/dt, dL/dcolumns)``: ``columns`` (score name -> padded column) are
    inputs here, the plan has no scores."""
    idx = jnp.asarray(plan.trainable, dtype=jnp.int32)

    def scalar(t, cols):
        full = _with_trainable(theta_full, t, plan)
        states, finite = chunk_states(full, widths, {**arrays, **cols}, plan, shapes,
                                      pulled=True)
        return pulled_sum(finite, payload), states

    (grad, g_cols), states = jax.grad(scalar, argnums=(0, 1), has_aux=True)(
        theta_full[idx], columns)
    return states, grad, g_cols


def _padded(x: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size)
    out[: x.size] = x
    return out


def chunk_pullback(cols: ChunkColumns, plan: Plan, theta, widths, payload, *,
                   padding: Padding | None = None) -> DatasetState:
    """One chunk's states and gradient share by the JAX sweep (module docstring): a
    :class:`DatasetState` whose ``derived`` is a :class:`~analysis.stats.Pullback` over
    ``plan.trainable_names``; ``padding``: the bucket floors
    (:func:`analysis.pipeline.layout.pad_columns`)."""
    with_cols, vjps = scorecols.score_columns(cols, plan, theta, vjp=True)
    run = scorecols.bare(plan)
    arrays, shapes = pad_columns(cols, run, padding=padding)
    columns, sizes = {}, {}
    for entry in vjps:  # the nominal columns and those of the shift sides that move them
        spec, key = entry.spec, entry.key
        name = key.split(":", 1)[1]
        if spec.collection is None:
            col, size = with_cols.events[name], arrays["weight"].shape[0]
        else:
            col = with_cols.collections[spec.collection][1][name]
            size = next(o for c, o, _ in shapes.collections if c == spec.collection)
        columns[key], sizes[key] = jnp.asarray(_padded(col, size)), col.size
    theta_full = jnp.asarray(theta, dtype=jnp.float64)
    w = jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths)
    shapes = candidate_shapes(cols, run, theta_full, w, {**arrays, **columns}, shapes)
    states, grad, g_cols = _pullback(theta_full, w, arrays, columns, payload, run, shapes)
    grad = np.asarray(grad, dtype=np.float64)
    if vjps:
        idx = np.asarray(plan.trainable, dtype=np.int64)
        for entry in vjps:
            key = entry.key
            bar = _padded(np.asarray(g_cols[key])[: sizes[key]], entry.rows)
            grad = grad + np.asarray(scorecols.pull(entry, bar), dtype=np.float64)[idx]
    value = jax.tree_util.tree_map(lambda a: np.array(a, dtype=np.float64), states)
    derived = Pullback(plan.trainable_names, value, grad)
    return DatasetState(events=cols.n_events, sumw=float(np.sum(cols.weight)), chunks=1,
                        derived=derived)

