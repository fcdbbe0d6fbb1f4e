"""The JAX backend's passes: soft selection, then mergeable states, with derivatives.

``chunk_states(theta, widths, arrays, plan, shapes)`` is a pure JAX function of
the full parameter vector ``theta`` and the cut ``widths``
(:func:`analysis.pipeline.backends.jax.setkernel.chunk_states`: every soft state is the exact
expectation of the hard-cut state). It returns a pytree of mergeable states (yields,
:class:`~analysis.stats.Moments`, :class:`~analysis.stats.CoMoments`).
:func:`evaluate_chunk` jit-compiles it together with its Jacobian (forward mode: few
parameters, many outputs; the tangents in blocks whose size follows the chunk's, so a
pass's memory does not grow with the number of parameters) and optionally Hessian with respect to the trainable
parameters; it is defined at module level so that each worker compiles it once per
bucket shape, not once per chunk. :func:`chunk_state`, :func:`grid_state`,
:func:`observable_entries` and :func:`selected_weights` are the passes of
:class:`analysis.pipeline.backends.jax.backend.JaxBackend` on one chunk's columns
(padded to bucket shapes: :func:`analysis.pipeline.layout.pad_columns`).

Widths are traced inputs, so annealing them to zero does not recompile.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.backends.jax import histkernel, setkernel
from analysis.pipeline.histplan import event_sum_collections, too_many_uncertain
from analysis.pipeline.layout import ChunkColumns, Padding, Shapes, bucket, pad_columns
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import DatasetState, enumeration_counts
from analysis.select.subsets import MAX_UNCERTAIN
from analysis.stats.derive import Derived, value_and_derivatives

__all__ = [
    "MIN_GROUP",
    "WIDTH_STEP",
    "candidate_shapes",
    "chunk_state",
    "chunk_states",
    "enumeration_shapes",
    "evaluate_chunk",
    "evaluate_chunk_grid",
    "grid_state",
    "observable_entries",
    "selected_weights",
    "uncertain_per_event",
]


def chunk_states(theta, widths, arrays, plan: Plan, shapes: Shapes, *, pulled: bool = False):
    """Mergeable states of one (padded) chunk as a pytree of float64 arrays; ``pulled``:
    with the states the reverse sweep's pulled sum reads
    (:func:`analysis.pipeline.backends.jax.setkernel.chunk_states`)."""
    return setkernel.chunk_states(theta, widths, arrays, plan, shapes, pulled=pulled)


@partial(jax.jit, static_argnames=("plan", "shapes", "index"))
def _entries(theta, widths, arrays, plan: Plan, shapes: Shapes, index: int):
    return setkernel.observable_entries(theta, widths, arrays, plan, shapes, index)


def observable_entries(cols: ChunkColumns, plan: Plan, theta, widths, index: int, *,
                       padding: Padding | None = None):
    """Values and soft weights of observable ``index`` in one chunk (numpy; for
    histograms), entries of weight 0 (padding, fully rejected) left out; ``padding``:
    the bucket floors (:func:`analysis.pipeline.layout.pad_columns`)."""
    arrays, shapes = pad_columns(cols, plan, padding=padding)
    shapes = candidate_shapes(cols, plan, theta, widths, arrays, shapes)
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


@partial(jax.jit, static_argnames=("plan", "shapes"))
def _selected(theta, widths, arrays, plan: Plan, shapes: Shapes):
    return setkernel.selected_weights(theta, widths, arrays, plan, shapes)


def selected_weights(cols: ChunkColumns, plan: Plan, theta, widths, *,
                     padding: Padding | None = None) -> np.ndarray:
    """``(E,)`` float64: each event's weight times its probability to pass the selection
    (their sum is ``selected_sumw``); ``padding``: the bucket floors."""
    arrays, shapes = pad_columns(cols, plan, padding=padding)
    w = _selected(jnp.asarray(theta, dtype=jnp.float64),
                  jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths),
                  arrays, plan, shapes)
    return np.asarray(w, dtype=np.float64)[: int(cols.n_events)]


def _with_trainable(theta_full, t, plan: Plan):
    return (
        theta_full.at[jnp.asarray(plan.trainable, dtype=jnp.int32)].set(t)
        if plan.trainable
        else theta_full
    )


@partial(jax.jit, static_argnames=("plan", "shapes", "order", "block"))
def _evaluate(theta_full, widths, arrays, plan: Plan, shapes: Shapes, order: int,
              block: int | None = None):
    t0 = (
        theta_full[jnp.asarray(plan.trainable, dtype=jnp.int32)]
        if plan.trainable
        else theta_full[:0]
    )

    def f(t):
        return chunk_states(_with_trainable(theta_full, t, plan), widths, arrays, plan, shapes)

    return value_and_derivatives(f, t0, order=order, block=block)


def evaluate_chunk(theta_full, widths, arrays, plan: Plan, shapes: Shapes, *, order: int = 1,
                   block: int | None = None):
    """States of one chunk with their Jacobian (``order=1``) and Hessian (``order=2``)
    with respect to the trainable parameters, as numpy float64 pytrees; ``block``: the
    tangents per block (:func:`analysis.stats.taylor.value_and_derivatives`; None: from
    the chunk's size)."""
    theta_full = jnp.asarray(theta_full, dtype=jnp.float64)
    widths = jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths)
    value, jac, hess = _evaluate(theta_full, widths, arrays, plan, shapes, order, block)
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
        lambda th: chunk_states(th, widths, arrays, plan, shapes),
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


@partial(jax.jit, static_argnames=("plan", "shapes"))
def _uncertain(theta_full, widths, arrays, plan: Plan, shapes: Shapes):
    return setkernel.uncertain_counts(theta_full, widths, arrays, plan, shapes)


def uncertain_per_event(cols: ChunkColumns, plan: Plan, theta, widths, arrays=None,
                        shapes: Shapes | None = None) -> dict[str, np.ndarray]:
    """Per collection an event-sum histogram of ``plan`` sums over, the uncertain
    objects of each event of ``cols`` (int, ``(n_events,)``; the most over the
    histograms' regions, shifts and scale factors) at ``theta`` and ``widths``
    (:func:`analysis.select.subsets.uncertain_mask`); ``arrays``, ``shapes``: the
    chunk's :func:`analysis.pipeline.layout.pad_columns` (made when None)."""
    if not event_sum_collections(plan):
        return {}
    if arrays is None or shapes is None:
        arrays, shapes = pad_columns(cols, plan)
    counts = _uncertain(jnp.asarray(theta, dtype=jnp.float64),
                        jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths),
                        arrays, plan, shapes)
    return {c: np.asarray(n)[: int(cols.n_events)] for c, n in counts.items()}


@partial(jax.jit, static_argnames=("plan", "shapes"))
def _possible(theta_full, widths, arrays, plan: Plan, shapes: Shapes):
    return setkernel.possible_counts(theta_full, widths, arrays, plan, shapes)


@partial(jax.jit, static_argnames=("plan", "shapes"))
def _possible_grid(thetas, widths, arrays, plan: Plan, shapes: Shapes):
    # the most over the grid's points, one point at a time (lax.map: no (G, E, M) array)
    counts = jax.lax.map(
        lambda th: setkernel.possible_counts(th, widths, arrays, plan, shapes), thetas)
    return {s: jnp.max(n, axis=0) for s, n in counts.items()}


def candidate_shapes(cols: ChunkColumns, plan: Plan, theta, widths, arrays,
                     shapes: Shapes) -> Shapes:
    """``shapes`` with ``possible``: per indexed set of ``plan``, the most objects of an
    event of ``cols`` that can be in it at ``theta`` and ``widths`` (over regions,
    shifts and scale factors; :func:`analysis.select.leading.can_be_in`), so that its
    candidate tuples are ``C(K, i + 1)``: objects certain to fail (a width-0 cut, a
    probability of exactly 0) are never enumerated nor counted toward ``max_tuples``.
    ``theta`` ``(G, n_params)``: the most over the grid's points. ``shapes`` itself
    where ``plan`` indexes no set."""
    if not any(node is not None and node.kind in ("index", "call")
               for pair in plan.sets.nodes for node in pair) and not any(
            h.node.kind in ("index", "call") for h in plan.hists):
        return shapes
    theta = jnp.asarray(theta, dtype=jnp.float64)
    counts = (_possible_grid if theta.ndim == 2 else _possible)(
        theta, jnp.asarray(widths, dtype=jnp.float64).reshape(plan.n_widths), arrays, plan,
        shapes)
    n = int(cols.n_events)
    return dataclasses.replace(shapes, possible=tuple(sorted(
        (s, max(1, int(np.max(np.asarray(k)[:n], initial=0)))) for s, k in counts.items())))


#: the enumeration widths of event-sum histograms are rounded up to a multiple of this
#: (one compilation per set of groups a run meets: widths 0, 4, ..., 24)
WIDTH_STEP = 4
#: the fewest events of an enumeration group (groups are padded to powers of two)
MIN_GROUP = 16


def enumeration_shapes(cols: ChunkColumns, plan: Plan, theta, widths, arrays,
                       shapes: Shapes) -> tuple[dict, Shapes, tuple[int, int, int] | None]:
    """``(arrays, shapes, counts)``: per collection an event-sum histogram sums over,
    the chunk's events grouped by the enumeration width they need (their uncertain
    objects, counted at ``theta`` and ``widths`` over every region, shift and scale
    factor, rounded up to :data:`WIDTH_STEP`): ``Shapes.uncertain`` holds the groups'
    ``(width, events)`` (events padded to a power of two, at least :data:`MIN_GROUP`),
    ``arrays`` the events of each group in turn (index ``E`` pads); ``counts`` for
    :attr:`analysis.pipeline.results.DatasetState.enumeration` (None: no such
    histogram). More than :data:`analysis.select.subsets.MAX_UNCERTAIN` in an event:
    :class:`~analysis.errors.InputError` naming the event, the number and what to change."""
    colls = event_sum_collections(plan)
    if not colls:
        return arrays, shapes, None
    counts = uncertain_per_event(cols, plan, theta, widths, arrays, shapes)
    axis = {c: m for c, _, m in shapes.collections}
    n_ev = int(cols.n_events)
    arrays = dict(arrays)
    out = []
    for c in colls:
        n = counts[c]
        top = int(n.max(initial=0))
        if top > MAX_UNCERTAIN:
            spec = next(h for h in plan.hists if h.node.kind in ("sum", "count")
                        and plan.sets.collection_of(h.node.head) == c)
            raise too_many_uncertain(spec, c, int(np.argmax(n)), top)
        need = np.minimum(axis[c], -(-n // WIDTH_STEP) * WIDTH_STEP)
        groups, index = [], []
        for w in np.unique(need):
            members = np.flatnonzero(need == w)
            size = bucket(len(members), MIN_GROUP)
            padded = np.full(size, shapes.events, dtype=np.int32)
            padded[: len(members)] = members
            groups.append((int(w), size))
            index.append(padded)
        arrays[histkernel.ENUM_PREFIX + c] = (np.concatenate(index) if index
                                              else np.zeros(0, np.int32))
        out.append((c, tuple(groups)))
    return (arrays, dataclasses.replace(shapes, uncertain=tuple(out)),
            enumeration_counts(counts, n_ev))


def chunk_state(cols: ChunkColumns, plan: Plan, theta, widths, *,
                order: int = 1, padding: Padding | None = None,
                block: int | None = None) -> DatasetState:
    """One chunk's :class:`DatasetState`: its states with their Jacobian (``order=1``)
    and Hessian (``order=2``) w.r.t. the plan's trainable parameters (the reference:
    ``value_and_derivatives`` inside :func:`evaluate_chunk`'s jit); ``padding``: the
    bucket floors (:func:`analysis.pipeline.layout.pad_columns`); ``block``: the
    tangents per block (None: from the chunk's size)."""
    arrays, shapes = pad_columns(cols, plan, padding=padding)
    arrays, shapes, enumerated = enumeration_shapes(cols, plan, theta, widths, arrays, shapes)
    shapes = candidate_shapes(cols, plan, theta, widths, arrays, shapes)
    value, jac, hess = evaluate_chunk(theta, widths, arrays, plan, shapes, order=order,
                                      block=block)
    return DatasetState(events=cols.n_events, sumw=float(np.sum(cols.weight)),
                        derived=Derived(plan.trainable_names, value, jac, hess),
                        enumeration=enumerated)


def grid_state(cols: ChunkColumns, plan: Plan, thetas, widths=None, *,
               padding: Padding | None = None) -> DatasetState:
    """One chunk evaluated at every row of ``thetas``: a :class:`DatasetState` whose
    leaves have a leading grid axis (no derivatives); ``padding``: the bucket floors."""
    arrays, shapes = pad_columns(cols, plan, padding=padding)
    # width 0: every pass probability is 0 or 1, no object of an event sum is uncertain
    shapes = dataclasses.replace(
        shapes, uncertain=tuple((c, 0) for c in event_sum_collections(plan)))
    shapes = candidate_shapes(cols, plan, thetas, np.zeros(plan.n_widths), arrays, shapes)
    value = evaluate_chunk_grid(thetas, np.zeros(plan.n_widths), arrays, plan, shapes)
    return DatasetState(events=cols.n_events, sumw=float(np.sum(cols.weight)),
                        derived=Derived((), value))
