"""Histograms of event sums over selected objects, exact (pure JAX).

The bin of an event-level sum ``X = sum_{j in S} f_j`` (``sum(S.f)``; ``count(S)``
with ``f = 1``) depends on *which* objects ``S`` holds, not only on how many: the
soft histogram (the exact expectation of the hard-cut one) needs, per event,
``P(S holds exactly the objects A and the event passes)`` for every subset ``A`` of
the collection's *uncertain* objects:

    P(pass, X in bin b) = sum_A [X_A in b] sum_k F_A(k) G(k)

with ``F_A`` the joint count distribution of the subset's configurations and ``G`` the
value function of the other collections and the count conditions. Exact for any cut
widths; width 0 is the hard histogram.

Deterministic objects leave the enumeration first (:func:`uncertain_mask`, with the
numba kernel's definition: :func:`analysis.select.certain.certain_objects`): an object
with a pattern of probability exactly 1 in float64 (a width-0 cut, a saturated sigmoid),
or whose membership in ``S`` is decided (every pattern on one side of ``S`` exactly 0),
is folded into the count distribution by one forward step (exact for any
probabilities) and, where it is in ``S``, adds its value to every subset's sum. Only the ``U`` uncertain objects are enumerated, in their
original order, and every cap counts only them (``n_uncertain``: the static width of
the enumeration, for every event or per group of events; an event with more is NaN,
never a silent bias: the caller sizes it, :func:`analysis.pipeline.backends.jax.histkernel.uncertain_counts`
and :func:`analysis.pipeline.backends.jax.passes.enumeration_shapes`).

Two exact methods, chosen by ``U`` (static):

- ``U <=`` :data:`ENUMERATE_UP_TO` (6): every subset, a forward recursion that splits each
  partial distribution by whether the object is in ``S`` (``2^U`` partial
  distributions, each with its partial sum);
- up to :data:`MAX_UNCERTAIN`: meet in the middle. The first ``a = U // 2`` objects
  forward from ``F`` (``2^a`` partial distributions ``F_alpha`` and sums ``X_alpha``),
  the other ``b = U - a`` backward from ``G`` (``2^b`` value functions ``G_beta`` and
  sums ``X_beta``); with the ``beta`` sorted by ``X_beta`` and ``PG_i`` the prefix
  sums of their ``G_beta``, ``P(pass, X < e) = sum_alpha <F_alpha, PG_{n(e - X_alpha)}>``
  (``n(t)`` = number of ``X_beta < t``), bins the differences of consecutive edges.
  ``X_alpha + X_beta < e`` is decided as ``X_beta < e - X_alpha``: the two differ only
  within a rounding of an edge.

Cost per event (``P`` patterns, ``S`` count states, ``n_e`` edges): enumeration
``O(2^U P S)``, memory ``2^U S``; meet in the middle ``O(2^(U/2) (P + n_e) S)``; both
plus ``O(M P S)`` for the deterministic objects. No polynomial exact method exists for
arbitrary values (a subset sum). Events run in blocks so that a block's tables fit in
about 32 MB.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from analysis.select._recursions import (
    FACTOR,
    _backward,
    _forward,
    _nan_where,
    _pattern_probs,
    _prepare,
)
from analysis.select.certain import certain_objects
from analysis.select.leading import _step
from analysis.stats.softbins import bin_probabilities

__all__ = [
    "ENUMERATE_UP_TO",
    "EXPENSIVE_ABOVE",
    "MAX_OBJECTS",
    "MAX_UNCERTAIN",
    "block_events",
    "sum_bins",
    "uncertain_mask",
]

#: up to this many uncertain objects :func:`sum_bins` enumerates every subset, above
#: it meets in the middle (measured, 20k events of Poisson(5.5) jets, value + 2-parameter
#: Jacobian: the kernel took 1.67 s CPU with every subset up to 12, 0.89 s with 6: the
#: halves' lookups cost less than the subsets from 8 objects on)
ENUMERATE_UP_TO = 6
#: the most uncertain objects per event :func:`sum_bins` takes (meet in the middle:
#: two halves of 4096 subsets)
MAX_UNCERTAIN = 24
#: events with more uncertain objects than this are counted as the expensive ones
#: (:attr:`analysis.pipeline.results.DatasetState.enumeration`): every subset of 12
#: objects was the former cap
EXPENSIVE_ABOVE = 12
#: kept for callers of the former cap (every subset of up to 12 objects)
MAX_OBJECTS = EXPENSIVE_ABOVE

_BUDGET = 1 << 22  # doubles per block of events (32 MB)


def block_events(n_events: int, m: int, n_states: int, per_event: int | None = None) -> int:
    """Events per block: a power of two dividing ``n_events`` (itself a power of two or
    not: then 1), with ``block x 2^m x n_states`` (or ``block x per_event``) at most
    ``2^22`` doubles."""
    need = per_event if per_event is not None else (1 << m) * max(n_states, 1)
    budget = max(1, _BUDGET // max(need, 1))
    b = 1
    while b * 2 <= budget and n_events % (b * 2) == 0:
        b *= 2
    return b


def uncertain_mask(probs, layouts, model, name: str):
    """``(E, M)`` bool: the objects of set ``name``'s collection that the histogram of a
    sum over ``name`` enumerates (:func:`analysis.select.certain.certain_objects`: not
    one pattern of probability exactly 1 in float64, nor membership in ``name``
    decided; per-object factors left out); padding is certain. Traceable; no gradient."""
    return ~_certain(probs, layouts, model, name)[0]


def _certain(probs, layouts, model, name: str):
    """:func:`analysis.select.certain.certain_objects` of the objects of set ``name``'s
    collection, ``(E, M)`` each (padding: certain, out of the set)."""
    c, i = model.set_index(name)
    raw = {k: v for k, v in probs.items() if not k.startswith(FACTOR)}
    pi = _pattern_probs(model, raw, layouts, c)
    return certain_objects(pi, model.patterns[c][:, i], xp=jnp)


def _enumerate(F0, G0, pi, vv, x0, d, shape, has, edges_a, nb, width=None):
    """Every subset of the ``U`` objects of ``pi`` ``(B, U, P)``: ``(B, nb)``; ``width``:
    soft bins' (:mod:`analysis.stats.softbins`) of each subset's sum, None: hard."""
    FA, XA = F0[:, None, :], x0[:, None]
    for j in range(pi.shape[1]):
        inn, out = _step(FA, pi[:, j], d, shape, has, pull=False)
        FA = jnp.concatenate([out, inn], axis=1)
        XA = jnp.concatenate([XA, XA + vv[:, j, None]], axis=1)
    P = jnp.sum(FA * G0[:, None, :], axis=-1)  # (B, 2^U)
    if width is not None:
        q = bin_probabilities(XA.reshape(-1), edges_a, width).reshape(XA.shape + (nb,))
        return jnp.sum(P[..., None] * q, axis=1)
    idx = jnp.searchsorted(edges_a, XA, side="right")
    return jnp.sum(P[..., None] * (idx[..., None] == jnp.arange(nb)), axis=1)


def _meet(F0, G0, pi, vv, x0, d, shape, has, edges_a, nb):
    """Meet in the middle over the ``U`` objects of ``pi`` (module docstring): ``(B, nb)``."""
    u = pi.shape[1]
    a = u // 2
    FA, XA = F0[:, None, :], x0[:, None]
    for j in range(a):
        inn, out = _step(FA, pi[:, j], d, shape, has, pull=False)
        FA = jnp.concatenate([out, inn], axis=1)
        XA = jnp.concatenate([XA, XA + vv[:, j, None]], axis=1)
    GB, XB = G0[:, None, :], jnp.zeros_like(x0)[:, None]
    for j in reversed(range(a, u)):
        inn, out = _step(GB, pi[:, j], d, shape, has, pull=True)
        GB = jnp.concatenate([out, inn], axis=1)
        XB = jnp.concatenate([XB, XB + vv[:, j, None]], axis=1)
    order = jnp.argsort(XB, axis=1)  # (B, 2^b): beta by its sum
    XBs = jnp.take_along_axis(XB, order, axis=1)
    GBs = jnp.take_along_axis(GB, order[..., None], axis=1)
    PG = jnp.concatenate([jnp.zeros_like(GBs[:, :1]), jnp.cumsum(GBs, axis=1)], axis=1)
    t = edges_a[None, None, :] - XA[..., None]  # (B, 2^a, n_e)
    n = jax.vmap(lambda xs, tt: jnp.searchsorted(xs, tt, side="left"))(XBs, t)
    below = jax.vmap(lambda pg, k: pg[k])(PG, n)  # (B, 2^a, n_e, S)
    C = jnp.einsum("bas,baes->be", FA, below)  # P(pass, X < e)
    T = jnp.sum(jnp.sum(FA, axis=1) * PG[:, -1], axis=-1)  # P(pass)
    cum = jnp.concatenate([jnp.zeros_like(T)[:, None], C, T[:, None]], axis=1)
    return cum[:, 1:] - cum[:, :-1]


def _part(F, G, pi, v, unc, inside, u, d, shape, has, edges, n_states, width=None):
    """``(n, nb)``: the bins of ``n`` events (a power of two, or any with blocks of 1)
    with at most ``u`` uncertain objects each (static); NaN where an event has more;
    ``width``: soft bins' (every subset enumerated), None: hard."""
    n, m = pi.shape[:2]
    x0 = jnp.zeros(n, dtype=jnp.float64)
    over = jnp.zeros(n, dtype=bool)
    if u < m:
        over = jnp.sum(unc, axis=1) > u
        # uncertain first, each group in its own order (a stable sort of the mask)
        order = jnp.argsort(~unc, axis=1, stable=True)
        pi = jnp.take_along_axis(pi, order[..., None], axis=1)
        v = jnp.take_along_axis(v, order, axis=1)
        inside = jnp.take_along_axis(inside, order, axis=1)
        # the deterministic objects: one forward step each (exact for any pi); their
        # values where their pattern holds S (probability exactly 1 there)
        F, _ = _forward(F, pi[:, u:], d, shape)
        x0 = jnp.sum(jnp.where(inside[:, u:], v[:, u:], 0.0), axis=1)
        pi, v = pi[:, :u], v[:, :u]
    edges_a = jnp.asarray(edges, dtype=jnp.float64)  # static, or traced (trainable edges)
    nb = len(edges) + 1
    # soft bins weigh every pair of halves by its own sum (no prefix sums): every subset
    meet = u > ENUMERATE_UP_TO and width is None
    if width is not None:
        blk = block_events(n, u, n_states, (1 << u) * (max(n_states, 1) + nb))
    elif meet:
        a = u // 2
        per_event = ((1 << a) * (len(edges) + 2) + 3 * (1 << (u - a))) * max(n_states, 1)
        blk = block_events(n, u, n_states, per_event)
    else:
        blk = block_events(n, u, n_states)
    def run(xs):
        F0, G0, p, vv, xx = xs  # one block of events
        if meet:
            return _meet(F0, G0, p, vv, xx, d, shape, has, edges_a, nb)
        return _enumerate(F0, G0, p, vv, xx, d, shape, has, edges_a, nb, width)

    def blocks(a):
        return a.reshape((n // blk, blk) + a.shape[1:])

    out = jax.lax.map(run, (blocks(F), blocks(G), blocks(pi), blocks(v), blocks(x0)))
    return _nan_where(over, out.reshape(n, nb))


def sum_bins(probs, layouts, model, thresholds, values, name: str, edges, count_widths=None,
             *, n_uncertain=None, index=None, width=None):
    """``P(all count conditions hold and X in bin b)`` per event, ``(E, nbins + 2)``
    (underflow first, overflow last, bins ``[e_b, e_{b+1})`` as boost-histogram), for
    ``X = sum_{j in S} values_j`` with ``S`` the set ``name`` (``values``: ``(E, M)``
    float64 of the set's collection; ones for ``count(S)``).

    ``n_uncertain`` (static): how many uncertain objects (:func:`uncertain_mask`) per
    event the enumeration holds; the deterministic ones are folded in first (module
    docstring). ``None``: every object of the axis ``M`` is enumerated as it is. Or
    groups of events, ``((width, size), ...)`` with ``index`` (int, the sum of the
    sizes): the events ``index[start:start + size]`` of each group in turn run at its
    width (an index ``>= E`` pads a group; an event in no group gets 0), so that an
    event costs what its own uncertain objects cost, not the chunk's largest.
    NaN (gradient 0) for overflow events, thresholds beyond a cap and events with more
    uncertain objects than their width. More than :data:`MAX_UNCERTAIN`: ``ValueError``.
    ``width`` (may be traced): soft bins (:mod:`analysis.stats.softbins`) of each
    subset's sum, every subset enumerated (``2^U`` per event); None: hard bins."""
    pis, f, bad = _prepare(model, probs, layouts, thresholds, count_widths)
    c, i = model.set_index(name)
    has = tuple(bool(b) for b in model.patterns[c][:, i])
    lay = layouts[c]
    e, m = lay.valid.shape
    if n_uncertain is None or isinstance(n_uncertain, int):
        u = m if n_uncertain is None else min(int(n_uncertain), m)
        groups: tuple = ((u, e),)
    else:
        groups = tuple((min(int(w), m), int(size)) for w, size in n_uncertain)
    for u, _ in groups:
        if u > MAX_UNCERTAIN:
            raise ValueError(f"{u} uncertain objects per event (at most {MAX_UNCERTAIN})")
    S = model.n_states
    cols = model.collections
    at = cols.index(c)
    d = model.increments[c]
    F = jnp.zeros((e, S), dtype=jnp.float64).at[:, 0].set(1.0)
    for cc in cols[:at]:
        F, _ = _forward(F, pis[cc], model.increments[cc], model.shape)
    G = jnp.broadcast_to(f, (e, S))
    for cc in reversed(cols[at + 1:]):
        G = _backward(G, pis[cc], model.increments[cc], model.shape)
    v = jnp.where(lay.valid, jnp.broadcast_to(jnp.asarray(values, jnp.float64), (e, m)), 0.0)
    if any(u < m for u, _ in groups):
        certain, inside = _certain(probs, layouts, model, name)
        unc = ~certain
    else:
        unc = inside = jnp.zeros((e, m), dtype=bool)
    args = (d, model.shape, has, edges, S, width)
    if index is None:
        if len(groups) != 1 or groups[0][1] != e:
            raise ValueError("groups of events need their index")
        out = _part(F, G, pis[c], v, unc, inside, groups[0][0], *args)
    else:
        out = jnp.zeros((e, len(edges) + 1), dtype=jnp.float64)
        start = 0
        for u, size in groups:
            idx = jnp.asarray(index)[start: start + size]
            start += size
            take = jnp.clip(idx, 0, e - 1)
            part = _part(F[take], G[take], pis[c][take], v[take], unc[take], inside[take], u,
                         *args)
            out = out.at[idx].set(part, mode="drop")
    return _nan_where(bad, out)
