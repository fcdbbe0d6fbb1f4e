"""Reverse mode for the YAML pipeline: one chunk's share of ``dL/dtheta``.

For plans with many trainable parameters (a learned score's weights) the forward
Jacobian of every state costs O(P) per entry. Instead (:mod:`analysis.stats.pullback`):
pass 1 computes values only and merges them; the loss's cotangent of the merged
states gives a payload (``(a, T_bar)`` per state, ``(None, S_bar)`` per sum,
:func:`analysis.stats.pullback.pullback_payload`); pass 2 computes, per chunk, the
gradient of ``<T_bar, T_c(theta)>`` with respect to the trainable parameters by
``jax.grad`` of the JAX kernel (:func:`analysis.pipeline.kernel.chunk_states`),
jit-compiled per bucket shape. The chunk's shares add over chunks
(:class:`analysis.stats.Pullback` ``+``: coffea's ``accumulate``), exactly for any
chunking and executor. The payload is numpy (it pickles to the workers):
:func:`analysis.optimize.reverse.reverse_objective` builds it.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.kernel import _with_trainable, chunk_states
from analysis.pipeline.layout import ChunkColumns, Shapes, pad_columns
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import DatasetState
from analysis.stats.derive import Pullback
from analysis.stats.pullback import pulled_sum

__all__ = ["chunk_pullback"]


@partial(jax.jit, static_argnames=("plan", "shapes"))
def _pullback(theta_full, widths, arrays, payload, plan: Plan, shapes: Shapes):
    idx = jnp.asarray(plan.trainable, dtype=jnp.int32)

    def scalar(t):
        states = chunk_states(_with_trainable(theta_full, t, plan), widths, arrays, plan, shapes)
        return pulled_sum(states, payload), states

    grad, states = jax.grad(scalar, has_aux=True)(theta_full[idx])
    return states, grad


def chunk_pullback(cols: ChunkColumns, plan: Plan, theta, widths, payload) -> DatasetState:
    """One chunk's states and gradient share: a :class:`DatasetState` whose ``derived``
    is a :class:`~analysis.stats.Pullback` over ``plan.trainable_names``."""
    arrays, shapes = pad_columns(cols, plan)
    states, grad = _pullback(
        jnp.asarray(theta, dtype=jnp.float64),
        jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths),
        arrays, payload, plan, shapes,
    )
    value = jax.tree_util.tree_map(lambda a: np.array(a, dtype=np.float64), states)
    derived = Pullback(plan.trainable_names, value, np.asarray(grad, dtype=np.float64))
    return DatasetState(events=cols.n_events, sumw=float(np.sum(cols.weight)), chunks=1,
                        derived=derived)
