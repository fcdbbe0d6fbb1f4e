"""The per-chunk maths: soft selection, then mergeable states, with derivatives.

``chunk_states(theta, widths, arrays, plan, shapes)`` is a pure JAX function of
the full parameter vector ``theta`` and the cut ``widths``. It returns a pytree of
mergeable states (yields, :class:`~analysis.stats.Moments`, :class:`~analysis.stats.CoMoments`).
:func:`evaluate_chunk` jit-compiles it together with its Jacobian (``jacfwd``: few
parameters, many outputs) and optionally Hessian with respect to the trainable
parameters; it is defined at module level so that each worker compiles it once per
bucket shape, not once per chunk.

:func:`chunk_state` (what the processor and the driver call) runs the numba kernel
:mod:`analysis.pipeline.fastkernel` instead wherever it applies (single-collection plans,
``order <= 1``: the optimisation steps); this module's JAX kernel is the reference
and computes Hessians, the object-set form, grid scans and histogram entries.

Soft cuts: an object passes ``value > theta`` with probability
``sigmoid((value - theta) / width)`` (mirrored for ``<``); ``width == 0`` is the
hard step, with zero gradient. Widths are traced inputs, so annealing them to zero
does not recompile.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline import fastkernel, setkernel
from analysis.pipeline.layout import ChunkColumns, Shapes, pad_columns
from analysis.pipeline.plan import Expr, Observable, Plan
from analysis.pipeline.results import DatasetState
from analysis.select import pbinom
from analysis.select.objects import soft_pass  # one soft cut for both kernels
from analysis.stats import _core
from analysis.stats.derive import value_and_derivatives

__all__ = [
    "chunk_state",
    "chunk_states",
    "count_distribution",
    "evaluate_chunk",
    "evaluate_chunk_grid",
    "grid_state",
    "integer_step",
    "observable_entries",
    "prob_count_at_least",
    "soft_pass",
]


def count_distribution(p, starts, counts, cap: int, max_count: int):
    """Poisson-binomial distribution of the number of passing objects per event.

    ``p``: per-object pass probability (flat); returns ``q`` of shape ``(events, cap + 1)``
    with ``q[:, k] = P(K = k)`` for ``k < cap`` and ``q[:, cap] = P(K >= cap)``.
    Delegates to :func:`analysis.select.pbinom.count_distribution` (exact leave-one-out
    derivatives instead of tangents pushed through the recursion).
    """
    return pbinom.count_distribution(p, starts, counts, cap, max_count)


def integer_step(frac, width):
    """Smoothed step from 0 to 1 over ``frac`` in [0, 1]; see :func:`analysis.select.pbinom.integer_step`."""
    return pbinom.integer_step(frac, width)


def prob_count_at_least(q, n, width):
    """``P(K >= n)`` for a real ``n``; see :func:`analysis.select.pbinom.prob_count_at_least`."""
    return pbinom.prob_count_at_least(q, n, width)


def _threshold(theta, param, value):
    return theta[param] if param is not None else jnp.asarray(value, theta.dtype)


def _expr_values(expr: Expr, arrays, obj_w, segment, n_events):
    if expr.kind == "field":
        v = arrays[f"object:{expr.key}"]
    elif expr.kind == "branch":
        v = arrays[f"event:{expr.key}"]
    elif expr.kind == "sum":
        v = jax.ops.segment_sum(obj_w * arrays[f"object:{expr.key}"], segment, n_events)
    else:  # count
        v = jax.ops.segment_sum(obj_w, segment, n_events)
    return jnp.abs(v) if expr.absolute else v


def _selection(theta, widths, arrays, plan: Plan, shapes: Shapes, hard: bool = False):
    """Soft selection of one chunk: ``(event_weight, obj_w, segment)``.

    ``event_weight`` = event weight x soft event selection (per event); ``obj_w`` =
    soft object selection (per object, 0 for padding; ``None`` without a collection).
    ``hard=True`` (all widths known to be 0, as in a grid scan) counts passing
    objects directly instead of running the Poisson-binomial recursion; the result
    is the same, at a fraction of the cost.
    """
    n_events = shapes.events
    ev_w = arrays["weight"]
    ev_sel = jnp.ones_like(ev_w)
    obj_w = segment = None
    if plan.collection is not None:
        segment = arrays["segment"]
        obj_w = arrays["valid"].astype(ev_w.dtype)
        for cut in plan.object_cuts:
            v = arrays[f"object:{cut.field}"]
            v = jnp.abs(v) if cut.absolute else v
            t = _threshold(theta, cut.param, cut.value)
            obj_w = obj_w * soft_pass(
                v, t, widths[cut.width_index], greater=cut.greater, inclusive=cut.inclusive
            )
        if plan.count_cuts:
            # P(K >= n) = sum_k c[k] P(K = k), one weight row c per count cut.
            weights = []
            for cut in plan.count_cuts:
                n = _threshold(theta, cut.param, cut.value)
                n = n + 1.0 if cut.op in (">", "<=") else n
                weights.append(pbinom.tail_weights(n, widths[cut.width_index], plan.count_cap))
            weights = jnp.stack(weights)
            if hard:
                k = jax.ops.segment_sum(obj_w, segment, n_events)
                q = jax.nn.one_hot(
                    jnp.minimum(k, plan.count_cap).astype(jnp.int32),
                    plan.count_cap + 1,
                    dtype=k.dtype,
                )
                at_least = q @ weights.T
            else:
                # One recursion for all count cuts; its derivative costs two recursions
                # whatever the number of parameters (analysis.select.pbinom).
                at_least = pbinom.count_expectation(
                    obj_w,
                    arrays["starts"],
                    arrays["counts"],
                    weights,
                    plan.count_cap,
                    shapes.max_count,
                )
            for i, cut in enumerate(plan.count_cuts):
                p = at_least[:, i]
                ev_sel = ev_sel * (p if cut.op in (">=", ">") else 1.0 - p)
    for cut in plan.event_cuts:
        v = _expr_values(cut.expr, arrays, obj_w, segment, n_events)
        t = _threshold(theta, cut.param, cut.value)
        ev_sel = ev_sel * soft_pass(
            v, t, widths[cut.width_index], greater=cut.greater, inclusive=cut.inclusive
        )
    return ev_w * ev_sel, obj_w, segment


def _observable_entries(obs: Observable, event_weight, obj_w, segment, arrays, n_events):
    """``(x, y or None, weight)`` of one observable: per object or per event."""
    x = _expr_values(obs.x, arrays, obj_w, segment, n_events)
    y = None if obs.y is None else _expr_values(obs.y, arrays, obj_w, segment, n_events)
    w = event_weight[segment] * obj_w if obs.x.level == "object" else event_weight
    return x, y, w


def chunk_states(theta, widths, arrays, plan: Plan, shapes: Shapes, hard: bool = False):
    """Mergeable states of one (padded) chunk as a pytree of float64 arrays."""
    if plan.sets is not None:  # the object-set form (exact at width 0 whatever ``hard``)
        return setkernel.chunk_states(theta, widths, arrays, plan, shapes)
    event_weight, obj_w, segment = _selection(theta, widths, arrays, plan, shapes, hard)
    out = {
        "selected_sumw": jnp.sum(event_weight),
        "selected_sumw2": jnp.sum(event_weight * event_weight),
        "observables": {},
    }
    for obs in plan.observables:
        x, y, w = _observable_entries(obs, event_weight, obj_w, segment, arrays, shapes.events)
        entry = {}
        if obs.univariate:
            entry["moments"] = _core.moments(x, w)
        if obs.bivariate:
            entry["comoments"] = _core.comoments(x, y, w)
        out["observables"][obs.name] = entry
    return out


@partial(jax.jit, static_argnames=("plan", "shapes", "index"))
def _entries(theta, widths, arrays, plan: Plan, shapes: Shapes, index: int):
    if plan.sets is not None:
        return setkernel.observable_entries(theta, widths, arrays, plan, shapes, index)
    event_weight, obj_w, segment = _selection(theta, widths, arrays, plan, shapes)
    x, _, w = _observable_entries(
        plan.observables[index], event_weight, obj_w, segment, arrays, shapes.events
    )
    return x, w


def observable_entries(cols: ChunkColumns, plan: Plan, theta, widths, index: int):
    """Values and soft weights of observable ``index`` in one chunk (numpy; for histograms)."""
    arrays, shapes = pad_columns(cols, plan)
    x, w = _entries(
        jnp.asarray(theta, dtype=jnp.float64),
        jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths),
        arrays,
        plan,
        shapes,
        index,
    )
    x, w = np.asarray(x), np.asarray(w)
    keep = w != 0  # padding and fully rejected entries
    return x[keep], w[keep]


def _with_trainable(theta_full, t, plan: Plan):
    return (
        theta_full.at[jnp.asarray(plan.trainable, dtype=jnp.int32)].set(t)
        if plan.trainable
        else theta_full
    )


@partial(jax.jit, static_argnames=("plan", "shapes", "order"))
def _evaluate(theta_full, widths, arrays, plan: Plan, shapes: Shapes, order: int):
    t0 = (
        theta_full[jnp.asarray(plan.trainable, dtype=jnp.int32)]
        if plan.trainable
        else theta_full[:0]
    )

    def f(t):
        return chunk_states(_with_trainable(theta_full, t, plan), widths, arrays, plan, shapes)

    return value_and_derivatives(f, t0, order=order)


def evaluate_chunk(theta_full, widths, arrays, plan: Plan, shapes: Shapes, *, order: int = 1):
    """States of one chunk with their Jacobian (``order=1``) and Hessian (``order=2``)
    with respect to the trainable parameters, as numpy float64 pytrees."""
    theta_full = jnp.asarray(theta_full, dtype=jnp.float64)
    widths = jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths)
    value, jac, hess = _evaluate(theta_full, widths, arrays, plan, shapes, order)
    to_np = partial(jax.tree_util.tree_map, lambda a: np.array(a, dtype=np.float64))
    return (
        to_np(value),
        (None if jac is None else to_np(jac)),
        (None if hess is None else to_np(hess)),
    )


@partial(jax.jit, static_argnames=("plan", "shapes", "batch"))
def _evaluate_grid(thetas, widths, arrays, plan: Plan, shapes: Shapes, batch: int):
    # lax.map in batches: vmap over thousands of points would hold every point's
    # per-object intermediates at once.
    return jax.lax.map(
        lambda th: chunk_states(th, widths, arrays, plan, shapes, hard=True),
        thetas,
        batch_size=batch,
    )


def evaluate_chunk_grid(thetas, widths, arrays, plan: Plan, shapes: Shapes, *, batch: int = 16):
    """Hard-cut states (all widths 0) for many full parameter vectors at once
    (``thetas``: ``(G, n_params)``), no derivatives."""
    thetas = jnp.asarray(thetas, dtype=jnp.float64)
    out = _evaluate_grid(
        thetas,
        jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths),
        arrays,
        plan,
        shapes,
        min(batch, thetas.shape[0]),
    )
    return jax.tree_util.tree_map(lambda a: np.array(a, dtype=np.float64), out)


def chunk_state(
    cols: ChunkColumns,
    plan: Plan,
    theta,
    widths,
    *,
    order: int = 1,
    engine: str = "auto",
    threads: int | None = None,
) -> DatasetState:
    """Evaluate one chunk's columns into a :class:`DatasetState` (shared with tests and the driver).

    Its states carry their derivatives as a :class:`analysis.stats.Derived` w.r.t. the
    plan's trainable parameters. ``engine="auto"`` runs the numba kernel
    (:func:`analysis.pipeline.fastkernel.evaluate_columns`: unpadded columns, analytic
    derivatives) where it applies (single-collection plans, ``order <= 1``) and the JAX
    kernel otherwise (Hessians, the object-set form); ``engine="jax"`` forces the JAX
    kernel (the reference: ``value_and_derivatives`` inside this module's jit).
    ``threads``: the numba kernel's threads (default: the cores; see
    :func:`analysis.pipeline.fastkernel.evaluate_columns`); the result does not depend on it.
    """
    if engine not in ("auto", "jax"):
        raise ValueError(f"engine must be 'auto' or 'jax', got {engine!r}")
    if engine == "auto" and fastkernel.supports(plan, order):
        value, jac = fastkernel.evaluate_columns(
            cols, plan, theta, widths, order=order, threads=threads
        )
        return DatasetState.from_chunk(
            value, jac, None, events=cols.n_events, sumw=float(np.sum(cols.weight)),
            names=plan.trainable_names,
        )
    arrays, shapes = pad_columns(cols, plan)
    value, jac, hess = evaluate_chunk(theta, widths, arrays, plan, shapes, order=order)
    return DatasetState.from_chunk(
        value,
        jac,
        hess,
        events=cols.n_events,
        sumw=float(np.sum(cols.weight)),
        names=plan.trainable_names,
    )


def grid_state(cols: ChunkColumns, plan: Plan, thetas, widths=None) -> DatasetState:
    """One chunk evaluated at every row of ``thetas``: a :class:`DatasetState` whose
    leaves have a leading grid axis (no derivatives)."""
    arrays, shapes = pad_columns(cols, plan)
    value = evaluate_chunk_grid(thetas, np.zeros(plan.n_widths), arrays, plan, shapes)
    return DatasetState.from_chunk(
        value, None, None, events=cols.n_events, sumw=float(np.sum(cols.weight)), names=()
    )
