"""The backward steps of :mod:`analysis.pipeline.backends.numba.kernels._numba_esum` (numba, float64): the value
functions pulled back over an object's patterns, the live-state dot products of meet in
the middle (4 lanes by the product rule), and the per-event checks (an event's bin, the
fewest objects that can pass, whether every probability is a number).
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._jit import inline, njit
from analysis.pipeline.backends.numba.kernels._numba_esum_forward import _times_into

__all__: list[str] = []


@njit
def _pull(G, Gn, tgt, c, n_pat, pv, pd, g, n_states, nl, which, has):
    """``Gn[k] = sum_p pi_p G[tgt(p, k)]`` over the patterns with ``has[p] == which``."""
    for k in range(n_states):
        for r in range(nl):
            Gn[k, r] = 0.0
    for p in range(n_pat[c]):
        if has[p] != which:
            continue
        v = pv[g, p, 0]
        d = pd[g, p]
        for k in range(n_states):
            _times_into(Gn[k], v, d, G[tgt[c, p, k]], nl)


@inline
def _pull4(G, a, H, b, tgt, c, n_pat, pv, pd, g, n_states, which, has):
    """``H[b, k] = sum_p pi_p G[a, tgt(p, k)]`` over the patterns of object ``g`` with
    ``has[p] == which``, 4 lanes by the product rule (:func:`_pull`, written out)."""
    for k in range(n_states):
        H[b, k, 0] = H[b, k, 1] = H[b, k, 2] = H[b, k, 3] = 0.0
    for p in range(n_pat[c]):
        if has[p] != which:
            continue
        v = pv[g, p, 0]
        d1, d2, d3 = pd[g, p, 1], pd[g, p, 2], pd[g, p, 3]
        for k in range(n_states):
            t = tgt[c, p, k]
            x0 = G[a, t, 0]
            H[b, k, 0] += v * x0
            H[b, k, 1] += v * G[a, t, 1] + x0 * d1
            H[b, k, 2] += v * G[a, t, 2] + x0 * d2
            H[b, k, 3] += v * G[a, t, 3] + x0 * d3


@inline
def _dot4(S, a, L, na, G, i, out):
    """``out = <S[a], G[i]>`` over the live states ``L[a, :na]`` of ``S[a]``, 4 lanes."""
    t0 = t1 = t2 = t3 = 0.0
    for q in range(na):
        k = L[a, q]
        a0, b0 = S[a, k, 0], G[i, k, 0]
        t0 += a0 * b0
        t1 += a0 * G[i, k, 1] + b0 * S[a, k, 1]
        t2 += a0 * G[i, k, 2] + b0 * S[a, k, 2]
        t3 += a0 * G[i, k, 3] + b0 * S[a, k, 3]
    out[0], out[1], out[2], out[3] = t0, t1, t2, t3


@inline
def _scale4(t, W, a):
    """``t = W[a] t`` over 4 lanes by the product rule."""
    w0, w1, w2, w3 = W[a, 0], W[a, 1], W[a, 2], W[a, 3]
    t0 = t[0]
    t[0], t[1], t[2], t[3] = (w0 * t0, w0 * t[1] + t0 * w1, w0 * t[2] + t0 * w2,
                              w0 * t[3] + t0 * w3)


@inline
def _live_dot(S, a, L, na, G):
    """``<S[a], G>`` over the live states ``L[a, :na]`` of ``S[a]`` (``G``: ``(states,
    >= 4)``), 4 lanes by the product rule, as a tuple."""
    t0 = t1 = t2 = t3 = 0.0
    for q in range(na):
        k = L[a, q]
        a0, b0 = S[a, k, 0], G[k, 0]
        t0 += a0 * b0
        t1 += a0 * G[k, 1] + b0 * S[a, k, 1]
        t2 += a0 * G[k, 2] + b0 * S[a, k, 2]
        t3 += a0 * G[k, 3] + b0 * S[a, k, 3]
    return t0, t1, t2, t3


@inline
def _add_times(o, b, w0, w1, w2, w3, t0, t1, t2, t3):
    """``o[b] += w t`` over 4 lanes by the product rule (``w``, ``t``: 4 lanes each)."""
    o[b, 0] += w0 * t0
    o[b, 1] += w0 * t1 + t0 * w1
    o[b, 2] += w0 * t2 + t0 * w2
    o[b, 3] += w0 * t3 + t0 * w3


@inline
def _bin(edges, x):
    """Bin of ``x``: the number of edges ``<= x`` (NaN: the overflow)."""
    n_edges = edges.shape[0]
    if x != x:
        return n_edges
    b = 0
    for k in range(n_edges):
        b += edges[k] <= x
    return b


@inline
def _fewest(tgt, n_pat, G0, nl):
    """The fewest objects (steps of any pattern of any collection, breadth first from
    the empty state 0 over ``tgt``) that reach a state of nonzero ``f`` or tangent
    (``G0``'s first ``nl`` lanes; NaN counts as nonzero); ``2**62`` when none is
    reached. An event of fewer objects ends in a state of zero ``f`` and tangents
    whatever their patterns and probabilities."""
    n_states = tgt.shape[2]
    dist = np.full(n_states, -1, np.int64)
    queue = np.zeros(n_states, np.int64)
    dist[0] = 0
    head, size = 0, 1
    while head < size:
        k = queue[head]
        head += 1
        for c in range(tgt.shape[0]):
            for p in range(n_pat[c]):
                t = tgt[c, p, k]
                if dist[t] < 0:
                    dist[t] = dist[k] + 1
                    queue[size] = t
                    size += 1
    need = np.int64(1) << 62
    for k in range(n_states):
        if dist[k] >= 0 and dist[k] < need:
            for r in range(nl):
                if G0[k, r] != 0.0:
                    need = dist[k]
    return need


@inline
def _numbers(coff, base, pv_all, n_pat, e):
    """Whether every pattern probability of event ``e`` is a number (no NaN)."""
    for c in range(coff.shape[0]):
        for g in range(base[c] + coff[c, e], base[c] + coff[c, e + 1]):
            for p in range(n_pat[c]):
                if pv_all[g, p, 0] != pv_all[g, p, 0]:
                    return False
    return True
