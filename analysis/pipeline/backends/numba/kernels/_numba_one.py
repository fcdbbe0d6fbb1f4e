"""The numba kernel's fused loop for one collection with one object set (numba, float64).

The common selection (the README's demo, most configs): the objects of one collection,
one set of threshold cuts on them, count conditions on that set only. Its patterns are
"out" (probability ``1 - q_j``, adds nothing to any count) and "in" (``q_j``, moves
count state ``k`` to ``tgt[k]``), so :func:`analysis.pipeline.backends.numba.kernels._numba_dp.select`'s
recursions reduce to

- ``F_0 = delta_0``, ``F_{j+1}[k] = (1 - q_j) F_j[k]``, ``F_{j+1}[tgt[k]] += q_j F_j[k]``;
- ``G_n = f``, ``G_j[k] = (1 - q_j) G_{j+1}[k] + q_j G_{j+1}[tgt[k]]``, ``P = G_0[0]``;
- ``w_j = P(j in the set and the event passes) = q_j sum_k F_j[k] G_{j+1}[tgt[k]]``,

with the same forward-mode lanes (value, then one tangent per trainable parameter) and
the same operations in the same order, so the two loops agree to the last bits. Only the
chain of states ``0, tgt[0], tgt[tgt[0]], ...`` is ever reached (one pattern adds to
the counts), so the loop runs on that chain, ``tgt[i] = min(i + 1, L)``, and ``F_j``
(``G_j``, as far as it is read) on its first ``j + 1`` states only: the entries left
out are zeros that the general loop adds (the same floats). What the fusion saves: the
soft cuts' products and tangents are formed inside the event loop from their
probabilities (computed vectorised on the host; no per-object tangent arrays written and
read back between passes).

Why the loops are laid out as they are (each the same floats as the plain recursion,
measured on the demo's 100k-event chunks, one thread): the cuts are multiplied in cut
by cut over the event's objects (:func:`analysis.pipeline.backends.numba.kernels._numba_dp.cut_times`), not
object by object (a tangent lane stored and read back at once waits on the store:
2.4x slower); a state's two terms are summed in registers before one store
(:func:`lin2`); with weights, the forward chain of ``F`` and the backward chain of ``G``
advance in the same loop (two independent chains keep the core busy: each alone waits
on its own previous step), ``G_j`` is kept for every ``j``, and the weights follow in
a loop of their own.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._jit import inline, njit
from analysis.pipeline.backends.numba.kernels._numba_dp import (
    LANES,
    cut_times,
    inverse_width,
    lin,
    lin_add,
)

__all__ = ["select_one", "select_one_value"]


@inline
def lin2(out, a, x, b, y, c, u, d, v):
    """``out[r] = (a x[r] + b y[r]) + (c u[r] + d v[r])`` over the lanes: :func:`lin` and
    then :func:`~analysis.pipeline.backends.numba.kernels._numba_dp.lin_add` (the same floats), in registers
    with one store."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    y0, y1, y2, y3, y4, y5, y6, y7 = y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]
    u0, u1, u2, u3, u4, u5, u6, u7 = u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7]
    v0, v1, v2, v3, v4, v5, v6, v7 = v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
    out[0], out[1], out[2], out[3] = (
        (a * x0 + b * y0) + (c * u0 + d * v0), (a * x1 + b * y1) + (c * u1 + d * v1),
        (a * x2 + b * y2) + (c * u2 + d * v2), (a * x3 + b * y3) + (c * u3 + d * v3))
    out[4], out[5], out[6], out[7] = (
        (a * x4 + b * y4) + (c * u4 + d * v4), (a * x5 + b * y5) + (c * u5 + d * v5),
        (a * x6 + b * y6) + (c * u6 + d * v6), (a * x7 + b * y7) + (c * u7 + d * v7))


@inline
def _forward(Fa, Fb, j, top, q, dq):
    """``F_{j+1}`` (``Fb``) from ``F_j`` (``Fa``) on states ``0 .. min(j + 1, top)``."""
    last = min(j, top)
    pv = 1.0 - q[j]
    pq = q[j]
    dqj = dq[j]
    lin(Fb[0], pv, Fa[0], -Fa[0, 0], dqj)
    for k in range(1, last + 1):
        lin2(Fb[k], pv, Fa[k], -Fa[k, 0], dqj, pq, Fa[k - 1], Fa[k - 1, 0], dqj)
    if last < top:  # a state first reached: 0 + the "in" term, as the general loop adds
        for r in range(LANES):
            Fb[last + 1, r] = 0.0
    lin_add(Fb[min(last + 1, top)], pq, Fa[last], Fa[last, 0], dqj)


@inline
def _backward(G, Gn, j, top, q, dq):
    """``G_j`` (``Gn``) from ``G_{j+1}`` (``G``) on states ``0 .. min(j, top)``."""
    pv = 1.0 - q[j]
    pq = q[j]
    dqj = dq[j]
    for i in range(min(j, top) + 1):
        t = min(i + 1, top)
        lin2(Gn[i], pv, G[i], -G[i, 0], dqj, pq, G[t], G[t, 0], dqj)


@njit
def select_one(
    coff, ss, cut_w, cut_g, cut_par, f, df, want_w, max_seq, block, pe, ow, b0, b1,
):
    """Blocks ``b0:b1`` of events. ``coff``: ``(E + 1,)`` object offsets; ``ss``:
    ``(C, N)`` the cuts' probabilities per object
    (:func:`analysis.pipeline.backends.numba.kernels._numba_dp.soft_values`); per cut ``c``: width ``cut_w[c]``,
    ``cut_g[c]`` (``>``/``>=``), ``cut_par[c]`` (its threshold's lane - 1, or -1); ``f``,
    ``df``: the
    pass table and its tangents in lanes (lane 0 zero) on the chain of count states
    (``tgt[i] = min(i + 1, L)``, ``L + 1`` states). Outputs in lanes: ``pe[e] = (P, dP)``
    and, if ``want_w``, ``ow[j] = (w_j, dw_j)``."""
    n_ev = pe.shape[0]
    top = f.shape[0] - 1
    n_cuts = ss.shape[0]
    iw = np.empty(n_cuts)
    for c in range(n_cuts):
        iw[c] = inverse_width(cut_w[c])
    for b in range(b0, b1):
        q = np.empty(max_seq)
        dq = np.empty((max_seq, LANES))
        F = np.zeros((max_seq + 1 if want_w else 1, top + 1, LANES))
        G = np.empty((max_seq + 1 if want_w else 2, top + 1, LANES))
        H = np.empty(LANES)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            o = coff[e]
            n = coff[e + 1] - o
            for j in range(n):
                q[j] = 1.0
                for r in range(LANES):
                    dq[j, r] = 0.0
            for c in range(n_cuts):
                cut_times(ss[c], o, n, iw[c], cut_g[c], cut_par[c], q, dq)
            g = G[n] if want_w else G[0]
            for i in range(top + 1):
                for r in range(LANES):
                    g[i, r] = df[i, r]
                g[i, 0] = f[i]
            if not want_w:
                Ga, Gb = G[0], G[1]
                for j in range(n - 1, -1, -1):
                    _backward(Ga, Gb, j, top, q, dq)
                    Ga, Gb = Gb, Ga
                for r in range(LANES):
                    pe[e, r] = Ga[0, r]
                continue
            for r in range(LANES):
                F[0, 0, r] = 0.0
            F[0, 0, 0] = 1.0
            for s in range(n):  # two independent chains, one loop
                _forward(F[s], F[s + 1], s, top, q, dq)
                _backward(G[n - s], G[n - 1 - s], n - 1 - s, top, q, dq)
            for j in range(n):
                Gt = G[j + 1]
                Fj = F[j]
                for r in range(LANES):
                    H[r] = 0.0
                for i in range(min(j, top) + 1):
                    t = min(i + 1, top)
                    lin_add(H, Gt[t, 0], Fj[i], Fj[i, 0], Gt[t])
                H[0] *= 0.5
                row = ow[o + j]
                for r in range(LANES):
                    row[r] = 0.0
                lin_add(row, q[j], H, H[0], dq[j])
            for r in range(LANES):
                pe[e, r] = G[0, 0, r]


@njit
def select_one_value(coff, ss, f, want_w, max_seq, block, pe, ow, b0, b1):
    """:func:`select_one` for values only (no trainable parameter: ``order=0``, hard
    cuts, histograms): lane 0 alone, the same floats as lane 0 of :func:`select_one`
    (its tangent lanes are zeros there, and its weight sum ``H[0]`` is twice this one's,
    halved: exact), laid out as it is (module docstring: a state's terms summed before
    one store; with weights, the two chains in one loop); the other lanes of ``pe`` and
    ``ow`` are set to zero."""
    n_ev = pe.shape[0]
    top = f.shape[0] - 1
    n_cuts = ss.shape[0]
    lanes = pe.shape[1]
    for b in range(b0, b1):
        q = np.empty(max_seq)
        F = np.zeros((max_seq + 1 if want_w else 1, top + 1))
        G = np.empty((max_seq + 1 if want_w else 2, top + 1))
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            o = coff[e]
            n = coff[e + 1] - o
            for j in range(n):
                q0 = 1.0
                for c in range(n_cuts):
                    q0 *= ss[c, o + j]
                q[j] = q0
            g = G[n] if want_w else G[0]
            for i in range(top + 1):
                g[i] = f[i]
            if not want_w:
                Ga, Gb = G[0], G[1]
                for j in range(n - 1, -1, -1):
                    pv, pq = 1.0 - q[j], q[j]
                    for i in range(min(j, top) + 1):
                        Gb[i] = pv * Ga[i] + pq * Ga[min(i + 1, top)]
                    Ga, Gb = Gb, Ga
                pe[e, 0] = Ga[0]
                for r in range(1, lanes):
                    pe[e, r] = 0.0
                continue
            F[0, 0] = 1.0
            for s in range(n):  # two independent chains, one loop
                last = min(s, top)
                pv, pq = 1.0 - q[s], q[s]
                Fa, Fb = F[s], F[s + 1]
                Fb[0] = pv * Fa[0]
                for k in range(1, last + 1):
                    Fb[k] = pv * Fa[k] + pq * Fa[k - 1]
                if last < top:  # a state first reached: 0 + the "in" term
                    Fb[last + 1] = 0.0 + pq * Fa[last]
                else:
                    Fb[top] += pq * Fa[top]
                j = n - 1 - s
                pv, pq = 1.0 - q[j], q[j]
                Gt, Gj = G[j + 1], G[j]
                for i in range(min(j, top) + 1):
                    Gj[i] = pv * Gt[i] + pq * Gt[min(i + 1, top)]
            for j in range(n):
                Gt = G[j + 1]
                h = 0.0
                for i in range(min(j, top) + 1):
                    h += F[j, i] * Gt[min(i + 1, top)]
                row = ow[o + j]
                row[0] = q[j] * h
                for r in range(1, lanes):
                    row[r] = 0.0
            pe[e, 0] = G[0, 0]
            for r in range(1, lanes):
                pe[e, r] = 0.0
