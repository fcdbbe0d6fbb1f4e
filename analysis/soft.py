"""Soft selections for hand-written processors: differentiable cuts and object counts.

``soft_cut(x, op, threshold, width)`` is the probability that ``x op threshold``
passes, smoothed by a logistic of scale ``width`` (``width == 0``: the hard step, with
zero gradient). ``count_at_least(p, n, width)`` is the probability that at least ``n``
objects of each event pass, from the objects' pass probabilities ``p`` (the
Poisson-binomial distribution of the number of passing objects). Both are JAX code,
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
from analysis.select.objects import soft_pass
from analysis.select.pbinom import count_distribution, prob_count_at_least
from analysis.stats.jagged import Jagged, _is_awkward, concrete, from_awkward

__all__ = ["count_at_least", "soft_cut"]

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

    Parameters
    ----------
    x : awkward Array, Jagged, or 1-D numpy or JAX array
        The values cut on (flat or one level of lists; upcast to float64).
    op : str
        One of ``">"``, ``">="``, ``"<"``, ``"<="`` (else ``ValueError``).
    threshold : float or JAX scalar
        The cut value (differentiable).
    width : float or JAX scalar
        The sigmoid's scale, in the units of ``x``: finite and ``>= 0``; 0 is the hard
        cut.

    Returns
    -------
    Jagged or jax.Array
        The float64 pass probability of every value: a :class:`~analysis.stats.Jagged`
        with ``x``'s lists, else a JAX array of ``x``'s length; empty for empty input.
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

    For ``K`` the number of passing objects of a list (a sum of independent Bernoulli
    variables of probabilities ``p_i``), the result is ``P(K >= n)``, computed by the
    exact recursion over the objects of the count distribution (up to ``cap``).

    Parameters
    ----------
    p : Jagged or awkward Array
        The objects' pass probabilities, one list per event (the offsets must be
        concrete).
    n : float, int or JAX scalar
        The required count (may be real and traced; then give ``cap``).
    width : float or JAX scalar, optional
        Scale of the smoothed step between integer counts (default 0: ``n`` rounded).
    cap : int or None, optional
        Keyword-only. The largest count tracked, above ``n`` (default ``floor(n) + 1``
        for a concrete ``n``).

    Returns
    -------
    jax.Array
        float64 ``(num_lists,)``: ``P(K >= n)`` per list; empty for no lists.
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
