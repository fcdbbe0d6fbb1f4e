"""Soft selections for hand-written processors: differentiable cuts and object counts.

``soft_cut(x, op, threshold, width)`` is the probability that ``x op threshold``
passes, smoothed by a logistic of scale ``width`` (``width == 0``: the hard step, with
zero gradient). ``count_at_least(p, n, width)`` is the probability that at least ``n``
objects of each event pass, from the objects' pass probabilities ``p`` (the
Poisson-binomial distribution of the number of passing objects). ``pass_weights(p, n)``
gives the weights of the YAML engine's selection meaning: per object P(it passes and at
least ``n`` objects of its event pass), per event P(at least ``n`` pass). Both are JAX code,
so ``threshold``, ``n`` and the data-dependent probabilities may be traced (inside
:func:`analysis.stats.derive`, ``jax.grad``, ``jax.jit``).

These are the YAML pipeline's own cut functions (:mod:`analysis.pipeline.kernel`), so a
hand-written processor selects exactly as a configured one does.
"""

from __future__ import annotations

import math
import numbers
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.limits import check_bytes
from analysis.select.countmodel import Count, CountModel, ObjectSet, required_cap
from analysis.select.objects import event_pass, layout, object_weights, soft_pass
from analysis.select.pbinom import count_distribution, prob_count_at_least
from analysis.stats.jagged import Jagged, _is_awkward, concrete, from_awkward

__all__ = ["count_at_least", "pass_weights", "soft_cut"]

_OPS = {">": (True, False), ">=": (True, True), "<": (False, False), "<=": (False, True)}


def _as_input(x: Any, name: str) -> tuple[Any, Any]:
    """``(flat float64 JAX values, offsets or None)`` of an awkward Array, Jagged or array."""
    if isinstance(x, Jagged):
        return jnp.asarray(x.values, dtype=jnp.float64), x.offsets
    if _is_awkward(x):
        if x.ndim == 1:
            return jnp.asarray(np.asarray(x, dtype=np.float64)), None
        j = from_awkward(x)
        return jnp.asarray(j.values, dtype=jnp.float64), j.offsets
    arr = jnp.asarray(x, dtype=jnp.float64)
    if arr.ndim > 1:
        raise ValueError(
            f"{name}: expected flat values or one level of lists, found shape {arr.shape}"
        )
    return arr, None


def _check_width(width: Any, func: str) -> Any:
    if isinstance(width, (numbers.Real, np.generic)) and not isinstance(width, bool):
        if not (math.isfinite(float(width)) and float(width) >= 0):
            raise ValueError(f"{func}: width: expected a finite number >= 0, found {width!r}")
    return jnp.asarray(width, dtype=jnp.float64)


def soft_cut(x: Any, op: str, threshold: Any, width: Any) -> Any:
    """Pass probability of ``x op threshold`` (``op`` one of ``> >= < <=``).

    ``sigmoid((x - threshold) / width)`` for ``>``/``>=`` (mirrored for ``<``/``<=``);
    ``width == 0`` is the hard step (1 where the cut passes, else 0; the equality
    case decided by ``op``), with zero gradient. ``x``: awkward Array (flat or one
    level of lists), :class:`~analysis.stats.Jagged`, or 1-D numpy/JAX array.
    Returns float64: a :class:`~analysis.stats.Jagged` for lists (usable as a
    ``weight`` of :mod:`analysis.stats` functions and by :func:`count_at_least`),
    otherwise a JAX array of ``x``'s length. Empty input gives empty output.
    """
    if op not in _OPS:
        raise ValueError(f"soft_cut: op: expected one of {', '.join(_OPS)}, found {op!r}")
    greater, inclusive = _OPS[op]
    values, offsets = _as_input(x, "soft_cut: x")
    p = soft_pass(
        values,
        jnp.asarray(threshold, dtype=jnp.float64),
        _check_width(width, "soft_cut"),
        greater=greater,
        inclusive=inclusive,
    )
    return p if offsets is None else Jagged(p, offsets)


def count_at_least(p: Any, n: Any, width: Any = 0.0, *, cap: int | None = None) -> Any:
    """Probability that at least ``n`` objects of each list pass, given their pass
    probabilities ``p`` (independent objects: the Poisson-binomial tail).

    ``p``: per-object probabilities with one list per event (a
    :class:`~analysis.stats.Jagged` from :func:`soft_cut`, or an awkward Array).
    ``n`` may be a real number (and traced): between integers the tail is blended
    from ``floor(n)`` to ``floor(n) + 1`` by a smoothed step of scale ``width``
    (``width == 0``: rounds ``n``; integer ``n`` is exact for any width).
    ``cap``: largest count tracked (``P(K >= cap)`` is kept as one bin); it must
    exceed ``n``, and defaults to ``floor(n) + 1`` when ``n`` is a concrete number.
    Returns a float64 JAX array with one probability per list; lists with no
    objects give 1 for ``n <= 0`` and 0 otherwise. Exact with hard 0/1 ``p``.
    """
    values, offsets = _as_input(p, "count_at_least: p")
    if offsets is None:
        raise ValueError("count_at_least: p: expected one list of probabilities per event")
    off = concrete(offsets)
    if off is None:
        raise ValueError("count_at_least: p: the list offsets must be concrete (not traced)")
    given_cap = cap
    if cap is None:
        n_value = concrete(n) if isinstance(n, jax.Array) else np.asarray(n)
        if n_value is None:
            raise ValueError("count_at_least: n is traced; pass cap= (an int above n)")
        n_value = np.asarray(n_value)
        if n_value.size != 1 or not math.isfinite(float(n_value)):
            raise ValueError(f"count_at_least: n: expected a finite number, found {n!r}")
        cap = int(math.floor(float(n_value))) + 1
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1:
        raise ValueError(f"count_at_least: cap: expected an integer >= 1, found {cap!r}")
    counts = np.diff(off).astype(np.int32)
    n_events = counts.shape[0]
    max_count = int(counts.max()) if n_events else 0
    # Padded to size buckets (empty extra events, zero extra objects) so that chunks of
    # similar sizes share one compiled recursion instead of compiling one per chunk.
    ev_size, obj_size = _bucket(n_events), _bucket(values.shape[0])
    # The recursion holds (events, cap + 1) probabilities: refuse an n of 1e9 here, in
    # one line, rather than in the allocator (or the out-of-memory killer).
    check_bytes(
        "count_at_least: n" if given_cap is None else "count_at_least: cap",
        8.0 * ev_size * (cap + 1), f"{cap + 1} count states x {ev_size} events",
    )
    starts = np.zeros(ev_size, dtype=np.int32)
    starts[:n_events] = off[:-1]
    padded_counts = np.zeros(ev_size, dtype=np.int32)
    padded_counts[:n_events] = counts
    values = jnp.concatenate([values, jnp.zeros(obj_size - values.shape[0], values.dtype)])
    tail = _tail(
        values,
        starts,
        padded_counts,
        jnp.asarray(n, dtype=jnp.float64),
        _check_width(width, "count_at_least"),
        cap=int(cap),
        max_count=_bucket(max_count),
    )
    return tail[:n_events]


def _bucket(n: int) -> int:
    """Smallest power of two >= n (at least 8)."""
    return max(8, 1 << max(n - 1, 0).bit_length())


@partial(jax.jit, static_argnames=("cap", "max_count"))
def _tail(values, starts, counts, n, width, *, cap: int, max_count: int):
    q = count_distribution(values, starts, counts, cap, max_count)
    return prob_count_at_least(q, n, width)


def _object_bucket(n: int) -> int:
    """The per-event object axis: the largest multiplicity rounded up to a multiple of 4
    (at least 4), so that chunks share a few compiled recursions."""
    return max(4, -(-n // 4) * 4)


def pass_weights(p: Any, n: Any, *, width: Any = 0.0, cap: int | None = None) -> tuple[Any, Any]:
    """Selection weights of "at least ``n`` objects pass": per object and per event.

    The YAML engine's meaning of an object selection with a count requirement, for a
    hand-written processor: an object is weighted by the probability that it passes
    *and* its event passes, an event by the probability that it passes.

    Parameters
    ----------
    p : Jagged or awkward Array
        Per-object pass probabilities in [0, 1], one list per event (e.g.
        ``soft_cut(pt, ">", a, 5.0) * soft_cut(abs(eta), "<", b, 0.1)``); may be traced
        (inside :func:`analysis.stats.derive`, ``jax.grad``); its list offsets must be
        concrete.
    n : number or JAX scalar
        Required count, ``K >= n`` with ``K`` the number of passing objects. A real
        ``n`` between integers is the engine's soft count requirement: the expectation
        of ``(1 - s) [K >= floor n] + s [K >= floor n + 1]``, ``s =
        integer_step(n - floor n, width)``; integer ``n`` is exact for every width,
        ``width == 0`` rounds a non-integer ``n``. May be traced (a parameter).
    width : float, keyword-only
        Width of the soft integer step of ``n`` (0: none).
    cap : int, keyword-only
        Largest ``n`` the results must be exact for (the upper bound of a trainable
        ``n``). Default: ``ceil(n)`` for a concrete ``n``, the chunk's largest
        multiplicity + 1 for a traced one (exact for every ``n``; more count states).
        A traced ``n`` above ``cap`` gives NaN (as the engine), unless ``cap`` exceeds
        every event's multiplicity (then the weights are 0, exactly).

    Returns
    -------
    objects : Jagged
        ``P(object j passes and K >= n) = p_j P(K_{-j} >= n - 1)`` (``K_{-j}``: the
        other objects of its event), float64, the lists of ``p``.
    events : jax.Array
        ``P(K >= n)`` per event, float64, shape ``(num_lists,)``.

    Both are the exact expectations of the hard-cut weights ``[j passes] [K >= n]`` and
    ``[K >= n]`` under independent object passes (Poisson-binomial ``K``), computed by
    the engine's own recursions (:func:`analysis.select.objects.object_weights` and
    :func:`~analysis.select.objects.event_pass` on a one-set
    :class:`~analysis.select.countmodel.CountModel`): sums of non-negative products,
    no division, exact at ``p`` in {0, 1}; differentiable in ``p`` and ``n`` (forward
    and reverse, every order). ``n <= 0``: ``objects == p``, ``events == 1``; ``n``
    above an event's multiplicity: zeros there. Events without objects: ``events`` is
    1 for ``n <= 0``, else 0. Empty input (no events) gives empty outputs.
    """
    values, offsets = _as_input(p, "pass_weights: p")
    if offsets is None:
        raise ValueError("pass_weights: p: expected one list of probabilities per event")
    off = concrete(offsets)
    if off is None:
        raise ValueError("pass_weights: p: the list offsets must be concrete (not traced)")
    counts = np.diff(off).astype(np.int32)
    n_events, n_objects = counts.shape[0], values.shape[0]
    m = _object_bucket(int(counts.max()) if n_events else 0)
    n_value = concrete(n) if isinstance(n, jax.Array) else np.asarray(n)
    if n_value is not None:
        n_value = np.asarray(n_value)
        if n_value.size != 1 or not math.isfinite(float(n_value)):
            raise ValueError(f"pass_weights: n: expected a finite number, found {n!r}")
    if cap is not None and (
        isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 0
    ):
        raise ValueError(f"pass_weights: cap: expected an integer >= 0, found {cap!r}")
    if cap is None:
        cap = m + 1 if n_value is None else required_cap(">=", math.ceil(float(n_value)))
    # Above every multiplicity the requirement fails for all events: the count states
    # stop one above the largest multiplicity and n is clipped there (exactly 0, zero
    # gradient) instead of tracking states no event reaches.
    clip = int(cap) >= m + 1
    cap = min(int(cap), m + 1)
    ev_size, obj_size = _bucket(n_events), _bucket(n_objects)
    check_bytes("pass_weights: n", 8.0 * ev_size * m * (cap + 1),
                f"{cap + 1} count states x {m} objects x {ev_size} events")
    starts = np.zeros(ev_size, dtype=np.int32)
    starts[:n_events] = off[:-1]
    padded_counts = np.zeros(ev_size, dtype=np.int32)
    padded_counts[:n_events] = counts
    values = jnp.concatenate([values, jnp.zeros(obj_size - n_objects, values.dtype)])
    model = CountModel((ObjectSet("objects", "objects"),),
                       (Count(("objects",), ">=", cap),))
    n_arr = jnp.asarray(n, dtype=jnp.float64)
    if clip:
        n_arr = jnp.minimum(n_arr, float(cap))
    obj, ev = _pass_weights(values, starts, padded_counts, n_arr,
                            _check_width(width, "pass_weights"), model=model, max_objects=m)
    return Jagged(obj[:n_objects], offsets), ev[:n_events]


@partial(jax.jit, static_argnames=("model", "max_objects"))
def _pass_weights(values, starts, counts, n, width, *, model: CountModel, max_objects: int):
    lay = layout(starts, counts, max_objects)
    lays = {"objects": lay}
    probs = {"objects": lay.dense(values)}
    th, cw = jnp.reshape(n, (1,)), jnp.reshape(width, (1,))
    weights = object_weights(probs, lays, model, th, cw)["objects"]
    return lay.flat(weights, values.shape[0]), event_pass(probs, lays, model, th, cw)
