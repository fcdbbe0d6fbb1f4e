"""Histograms of event sums over selected objects, by exact enumeration (pure JAX).

The bin of an event-level sum ``X = sum_{j in S} f_j`` (``sum(S.f)``; ``count(S)``
with ``f = 1``) depends on *which* objects ``S`` holds, not only on how many: the
soft histogram (the exact expectation of the hard-cut one) needs, per event,
``P(S holds exactly the objects A and the event passes)`` for every subset ``A`` of
the collection's objects. :func:`sum_bins` enumerates them: a forward recursion over
the collection's objects that splits each partial distribution of the joint counts
(:mod:`analysis.select.objects`) by whether the object is in ``S``
(``2^(j+1)`` partial distributions after object ``j``, each with its partial sum), the
other collections folded in by the usual forward / backward recursions. Then

    P(pass, X in bin b) = sum_A [X_A in b] sum_k F_A(k) G(k)

with ``F_A`` the joint count distribution of the subset's configurations and ``G`` the
value function of the other collections and the count conditions. Exact for any cut
widths; width 0 is the hard histogram.

Cost per event ``O(2^M P S)`` (``M`` the collection's per-event object axis, ``P``
patterns, ``S`` count states), memory ``2^M S``: :data:`MAX_OBJECTS` bounds ``M`` (the
sum of a subset's values is a subset-sum: no polynomial exact method exists for
arbitrary values). Events run in blocks of :func:`block_events` so that the
partial distributions fit in about 32 MB.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from analysis.select._recursions import _backward, _forward, _nan_where, _prepare
from analysis.select.leading import _step

__all__ = ["MAX_OBJECTS", "block_events", "sum_bins"]

#: the largest per-event object axis :func:`sum_bins` enumerates (4096 subsets)
MAX_OBJECTS = 12


def block_events(n_events: int, m: int, n_states: int) -> int:
    """Events per block: a power of two dividing ``n_events`` (itself a power of two or
    not: then 1), with ``block x 2^m x n_states`` at most ``2^22`` doubles."""
    budget = max(1, (1 << 22) // ((1 << m) * max(n_states, 1)))
    b = 1
    while b * 2 <= budget and n_events % (b * 2) == 0:
        b *= 2
    return b


def sum_bins(probs, layouts, model, thresholds, values, name: str, edges, count_widths=None):
    """``P(all count conditions hold and X in bin b)`` per event, ``(E, nbins + 2)``
    (underflow first, overflow last, bins ``[e_b, e_{b+1})`` as boost-histogram), for
    ``X = sum_{j in S} values_j`` with ``S`` the set ``name`` (``values``: ``(E, M)``
    float64 of the set's collection; ones for ``count(S)``). NaN for overflow events
    and thresholds beyond a cap (gradient 0). ``M`` above :data:`MAX_OBJECTS`:
    ``ValueError``."""
    pis, f, bad = _prepare(model, probs, layouts, thresholds, count_widths)
    c, i = model.set_index(name)
    has = tuple(bool(b) for b in model.patterns[c][:, i])
    lay = layouts[c]
    e, m = lay.valid.shape
    if m > MAX_OBJECTS:
        raise ValueError(f"{m} objects per event (at most {MAX_OBJECTS})")
    S = model.n_states
    cols = model.collections
    at = cols.index(c)
    F = jnp.zeros((e, S), dtype=jnp.float64).at[:, 0].set(1.0)
    for cc in cols[:at]:
        F, _ = _forward(F, pis[cc], model.increments[cc], model.shape)
    G = jnp.broadcast_to(f, (e, S))
    for cc in reversed(cols[at + 1:]):
        G = _backward(G, pis[cc], model.increments[cc], model.shape)
    v = jnp.where(lay.valid, jnp.broadcast_to(jnp.asarray(values, jnp.float64), (e, m)), 0.0)
    d = model.increments[c]
    edges_a = jnp.asarray(np.asarray(edges, dtype=np.float64))
    nb = len(edges) + 1
    blk = block_events(e, m, S)

    def run(xs):
        F0, G0, pi, vv = xs  # one block of events
        FA, XA = F0[:, None, :], jnp.zeros((F0.shape[0], 1))
        for j in range(m):
            inn, out = _step(FA, pi[:, j], d, model.shape, has, pull=False)
            FA = jnp.concatenate([out, inn], axis=1)
            XA = jnp.concatenate([XA, XA + vv[:, j, None]], axis=1)
        P = jnp.sum(FA * G0[:, None, :], axis=-1)  # (B, 2^m)
        idx = jnp.searchsorted(edges_a, XA, side="right")
        return jnp.sum(P[..., None] * (idx[..., None] == jnp.arange(nb)), axis=1)

    def blocks(a):
        return a.reshape((e // blk, blk) + a.shape[1:])

    out = jax.lax.map(run, (blocks(F), blocks(G), blocks(pis[c]), blocks(v)))
    return _nan_where(bad, out.reshape(e, nb))
