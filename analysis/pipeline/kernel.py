"""The per-chunk maths: soft selection, then mergeable states, with derivatives.

``chunk_states(theta, widths, arrays, plan, shapes)`` is a pure JAX function of
the full parameter vector ``theta`` and the cut ``widths``
(:func:`analysis.pipeline.backends.jax.setkernel.chunk_states`: every soft state is the exact
expectation of the hard-cut state). It returns a pytree of mergeable states (yields,
:class:`~analysis.stats.Moments`, :class:`~analysis.stats.CoMoments`).
:func:`evaluate_chunk` jit-compiles it together with its Jacobian (``jacfwd``: few
parameters, many outputs) and optionally Hessian with respect to the trainable
parameters; it is defined at module level so that each worker compiles it once per
bucket shape, not once per chunk.

:func:`chunk_state` (what the processor and the driver call) runs the numba kernel
:mod:`analysis.pipeline.backends.numba.fastkernel` instead wherever it applies
(:func:`analysis.pipeline.backends.numba.fastkernel.why_not` says where not: Hessians, expressions
of several indexed sets such as ``mass(jets[0] + bjets[0])``; plans with histograms: :mod:`analysis.pipeline.backends.numba.fasthist`, whose
``why_not`` also refuses 4-vector histograms and per-object scale factors; it computes
event-sum histograms with :mod:`analysis.pipeline.backends.numba.kernels._numba_esum`); this module's JAX kernel is the reference and computes everything else,
grid scans and histogram entries. Both compute one plan; the
choice depends on what the plan needs, never on which YAML form was written.

Widths are traced inputs, so annealing them to zero does not recompile.
"""

from __future__ import annotations

import dataclasses
import logging
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline import scorecols
from analysis.pipeline.backends.jax import histkernel, setkernel
from analysis.pipeline.backends.numba import fasthist, fastkernel
from analysis.pipeline.layout import ChunkColumns, Shapes, bucket, pad_columns
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import DatasetState
from analysis.select.subsets import EXPENSIVE_ABOVE, MAX_UNCERTAIN
from analysis.stats.derive import value_and_derivatives

__all__ = [
    "chunk_state",
    "candidate_shapes",
    "chunk_states",
    "enumeration_counts",
    "enumeration_shapes",
    "evaluate_chunk",
    "evaluate_chunk_grid",
    "grid_state",
    "log_enumeration",
    "numba_why_not",
    "observable_entries",
    "uncertain_per_event",
    "selected_weights",
]

_log = logging.getLogger("analysis.pipeline.kernel")


def chunk_states(theta, widths, arrays, plan: Plan, shapes: Shapes):
    """Mergeable states of one (padded) chunk as a pytree of float64 arrays."""
    return setkernel.chunk_states(theta, widths, arrays, plan, shapes)


@partial(jax.jit, static_argnames=("plan", "shapes", "index"))
def _entries(theta, widths, arrays, plan: Plan, shapes: Shapes, index: int):
    return setkernel.observable_entries(theta, widths, arrays, plan, shapes, index)


def observable_entries(cols: ChunkColumns, plan: Plan, theta, widths, index: int, *,
                       engine: str = "auto", fused: bool = True, value_loop: bool = True):
    """Values and soft weights of observable ``index`` in one chunk (numpy; for histograms):
    from the numba kernel where it serves the plan (value only), else the JAX kernel
    (``engine="jax"``: always the JAX kernel). ``fused``, ``value_loop``: the numba
    kernel's loops (:class:`analysis.pipeline.backend.Backend`; results do not depend on them)."""
    if engine != "jax" and fastkernel.why_not(plan, 0, theta) is None:
        x, w = fastkernel.observable_entries(cols, plan, theta, widths, index, fused=fused,
                                             value_loop=value_loop)
        keep = w != 0  # fully rejected entries
        return x[keep], w[keep]
    arrays, shapes = pad_columns(cols, plan)
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
                     threads: int | None = None) -> np.ndarray:
    """``(E,)`` float64: each event's weight times its probability to pass the selection
    (their sum is ``selected_sumw``): from the numba kernel where it serves the plan,
    else the JAX kernel (learned scores, object sets)."""
    if fastkernel.why_not(plan, 0, theta) is None:
        return fastkernel.selected_weights(cols, plan, theta, widths, threads=threads)
    arrays, shapes = pad_columns(cols, plan)
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
    if not histkernel.event_sum_collections(plan):
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
    colls = histkernel.event_sum_collections(plan)
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
            raise histkernel.too_many_uncertain(spec, c, int(np.argmax(n)), top)
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


def enumeration_counts(uncertain: dict, n_events: int) -> tuple[int, int, int]:
    """:attr:`~analysis.pipeline.results.DatasetState.enumeration` of a chunk of
    ``n_events`` from the uncertain objects per event of each collection (``uncertain``:
    ``{collection: (E,) int}``): ``(events, events with more than EXPENSIVE_ABOVE in a
    collection, the most in an event)``."""
    expensive = np.zeros(n_events, dtype=bool)
    largest = 0
    for n in uncertain.values():
        expensive |= np.asarray(n) > EXPENSIVE_ABOVE
        largest = max(largest, int(np.max(n, initial=0)))
    return n_events, int(expensive.sum()), largest


def log_enumeration(states) -> None:
    """The ``--debug`` line of a pass's event-sum enumeration (``states``: the pass's
    :class:`~analysis.pipeline.results.DatasetState` per dataset; nothing without one)."""
    counts = [s.enumeration for s in states.values()
              if getattr(s, "enumeration", None) is not None]
    if not counts:
        return
    events = sum(c[0] for c in counts)
    expensive = sum(c[1] for c in counts)
    largest = max(c[2] for c in counts)
    _log.debug("event-sum histograms: %d of %d events had more than %d uncertain objects; "
               "at most %d uncertain objects in an event", expensive, events,
               EXPENSIVE_ABOVE, largest)


_WHY_LOGGED: set[tuple[int, str]] = set()


def _numba_host(plan: Plan):
    """The numba kernel's host module for ``plan``: histograms have their own."""
    return fasthist if plan.hists else fastkernel


def numba_why_not(plan: Plan, order: int, theta=None) -> str | None:
    """``None`` when the numba kernel computes ``plan`` at ``order`` (and ``theta``):
    :func:`analysis.pipeline.backends.numba.fasthist.why_not` for plans with histograms (their own numba
    host side), :func:`analysis.pipeline.backends.numba.fastkernel.why_not` otherwise; else the reason.
    (:func:`chunk_state` asks it of the plan without its learned scores at ``order=0``.)"""
    return _numba_host(plan).why_not(plan, order, theta)


def chunk_state(
    cols: ChunkColumns,
    plan: Plan,
    theta,
    widths,
    *,
    order: int = 1,
    engine: str = "auto",
    threads: int | None = None,
    scores_on_numba: bool = True,
    fused: bool = True,
    value_loop: bool = True,
) -> DatasetState:
    """Evaluate one chunk's columns into a :class:`DatasetState` (shared with tests and the driver).

    Its states carry their derivatives as a :class:`analysis.stats.Derived` w.r.t. the
    plan's trainable parameters. ``engine="auto"`` runs the numba kernel
    (:func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns`: unpadded columns, forward-mode
    derivatives) where it applies (:func:`analysis.pipeline.backends.numba.fastkernel.why_not` is
    ``None``; otherwise the reason is logged once at debug level) and the JAX kernel
    otherwise; ``engine="jax"`` forces the JAX kernel (the reference:
    ``value_and_derivatives`` inside this module's jit), ``engine="numba"`` the numba one.
    Plans with histograms run :func:`analysis.pipeline.backends.numba.fasthist.evaluate_columns`
    where :func:`analysis.pipeline.backends.numba.fasthist.why_not` accepts them.
    Plans with learned scores run there too at ``order=0``: each network once on the
    chunk's real rows, its column then a field of the plan without scores
    (:func:`analysis.pipeline.scorecols.score_columns`); their Jacobians (the weights)
    stay on the JAX kernel (reverse mode: :mod:`analysis.pipeline.backends.numba.fastreverse`).
    ``threads``: the numba kernel's threads (default: the cores; see
    :func:`analysis.pipeline.backends.numba.fastkernel.evaluate_columns`); the result does not depend on it.
    ``scores_on_numba``, ``fused``, ``value_loop``: the options of those names of
    :class:`analysis.pipeline.backend.Backend` (which kernel or loop runs; the result
    does not depend on them).
    """
    if engine not in ("auto", "jax", "numba"):
        raise ValueError(f"engine must be 'auto', 'jax' or 'numba', got {engine!r}")
    run = plan
    if plan.scores and order == 0 and engine != "jax" and scores_on_numba:
        # values only: the networks once on the real rows, their columns as fields
        run = scorecols.bare(plan)
    why = numba_why_not(run, order, theta) if engine != "jax" else "engine=jax asked for"
    if why is None:
        if run is not plan:
            cols = scorecols.score_columns(cols, plan, theta)
        extra: dict = {}
        sums = bool(run.hists) and bool(histkernel.event_sum_collections(run))
        if sums:
            extra["uncertain"] = uncertain = {}
        value, jac = _numba_host(run).evaluate_columns(cols, run, theta, widths, order=order,
                                                       threads=threads, fused=fused,
                                                       value_loop=value_loop, **extra)
        return DatasetState.from_chunk(
            value, jac, None, events=cols.n_events, sumw=float(np.sum(cols.weight)),
            names=plan.trainable_names,
            enumeration=enumeration_counts(uncertain, int(cols.n_events)) if sums else None,
        )
    if engine == "numba":
        raise ValueError(f"the numba kernel cannot compute this plan: {why}")
    key = (id(plan), why)
    if engine == "auto" and key not in _WHY_LOGGED:
        _WHY_LOGGED.add(key)
        _log.debug("JAX kernel, not the numba kernel: %s", why)
    arrays, shapes = pad_columns(cols, plan)
    arrays, shapes, enumerated = enumeration_shapes(cols, plan, theta, widths, arrays, shapes)
    shapes = candidate_shapes(cols, plan, theta, widths, arrays, shapes)
    value, jac, hess = evaluate_chunk(theta, widths, arrays, plan, shapes, order=order)
    return DatasetState.from_chunk(
        value,
        jac,
        hess,
        events=cols.n_events,
        sumw=float(np.sum(cols.weight)),
        names=plan.trainable_names,
        enumeration=enumerated,
    )


def grid_state(cols: ChunkColumns, plan: Plan, thetas, widths=None) -> DatasetState:
    """One chunk evaluated at every row of ``thetas``: a :class:`DatasetState` whose
    leaves have a leading grid axis (no derivatives)."""
    arrays, shapes = pad_columns(cols, plan)
    # width 0: every pass probability is 0 or 1, no object of an event sum is uncertain
    shapes = dataclasses.replace(
        shapes, uncertain=tuple((c, 0) for c in histkernel.event_sum_collections(plan)))
    shapes = candidate_shapes(cols, plan, thetas, np.zeros(plan.n_widths), arrays, shapes)
    value = evaluate_chunk_grid(thetas, np.zeros(plan.n_widths), arrays, plan, shapes)
    return DatasetState.from_chunk(
        value, None, None, events=cols.n_events, sumw=float(np.sum(cols.weight)), names=()
    )
