"""The numba kernel's fused loop for one collection with one object set (numba, float64).

The common selection (the README's demo, most configs): the objects of one collection,
one set of threshold cuts on them, count conditions on that set only. Its patterns are
"out" (probability ``1 - q_j``, adds nothing to any count) and "in" (``q_j``, moves
count state ``k`` to ``tgt[k]``), so :func:`analysis.pipeline._numba_dp.select`'s
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
probabilities (computed vectorised on the host; no per-object tangent arrays written and read back between passes), and the weighted
first sums of the observables' centres come out of the same loop.
"""

from __future__ import annotations

import numba
import numpy as np

from analysis.pipeline._numba_dp import LANES, inverse_width, lin, lin_add, soft_slope

__all__ = ["select_one", "select_one_value"]


@numba.njit(cache=True, nogil=True)
def select_one(
    coff, ss, cut_w, cut_g, cut_par, f, df, want_w, max_seq, block, pe, ow, b0, b1,
):
    """Blocks ``b0:b1`` of events. ``coff``: ``(E + 1,)`` object offsets; ``ss``:
    ``(C, N)`` the cuts' probabilities per object
    (:func:`analysis.pipeline._numba_dp.soft_values`); per cut ``c``: width ``cut_w[c]``,
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
        G = np.empty((top + 1, LANES))
        Gn = np.empty((top + 1, LANES))
        H = np.empty(LANES)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            o = coff[e]
            n = coff[e + 1] - o
            for j in range(n):
                q0 = 1.0
                dqj = dq[j]
                for r in range(LANES):
                    dqj[r] = 0.0
                for c in range(n_cuts):
                    sv = ss[c, o + j]
                    for r in range(LANES):
                        dqj[r] *= sv
                    if cut_par[c] >= 0:
                        dqj[1 + cut_par[c]] += q0 * soft_slope(sv, iw[c], cut_g[c])
                    q0 *= sv
                q[j] = q0
            if want_w:
                for r in range(LANES):
                    F[0, 0, r] = 0.0
                F[0, 0, 0] = 1.0
                for j in range(n):
                    last = min(j, top)
                    pv = 1.0 - q[j]
                    for i in range(last + 1):
                        lin(F[j + 1, i], pv, F[j, i], -F[j, i, 0], dq[j])
                    if j + 1 <= top:
                        for r in range(LANES):
                            F[j + 1, j + 1, r] = 0.0
                    pv = q[j]
                    for i in range(last + 1):
                        lin_add(F[j + 1, min(i + 1, top)], pv, F[j, i], F[j, i, 0], dq[j])
            for i in range(top + 1):
                for r in range(LANES):
                    G[i, r] = df[i, r]
                G[i, 0] = f[i]
            for j in range(n - 1, -1, -1):
                last = min(j, top)
                if want_w:
                    for r in range(LANES):
                        H[r] = 0.0
                    for i in range(last + 1):
                        t = min(i + 1, top)
                        lin_add(H, G[t, 0], F[j, i], F[j, i, 0], G[t])
                    H[0] *= 0.5
                    row = ow[o + j]
                    for r in range(LANES):
                        row[r] = 0.0
                    lin_add(row, q[j], H, H[0], dq[j])
                pv = 1.0 - q[j]
                for i in range(last + 1):
                    lin(Gn[i], pv, G[i], -G[i, 0], dq[j])
                pv = q[j]
                for i in range(last + 1):
                    t = min(i + 1, top)
                    lin_add(Gn[i], pv, G[t], G[t, 0], dq[j])
                G, Gn = Gn, G
            for r in range(LANES):
                pe[e, r] = G[0, r]


@numba.njit(cache=True, nogil=True)
def select_one_value(coff, ss, f, want_w, max_seq, block, pe, ow, b0, b1):
    """:func:`select_one` for values only (no trainable parameter: ``order=0``, hard
    cuts, histograms): lane 0 alone, the same floats as lane 0 of :func:`select_one`
    (its tangent lanes are zeros there, and its weight sum ``H[0]`` is twice this one's,
    halved: exact); the other lanes of ``pe`` and ``ow`` are set to zero."""
    n_ev = pe.shape[0]
    top = f.shape[0] - 1
    n_cuts = ss.shape[0]
    lanes = pe.shape[1]
    for b in range(b0, b1):
        q = np.empty(max_seq)
        F = np.zeros((max_seq + 1 if want_w else 1, top + 1))
        G = np.empty(top + 1)
        Gn = np.empty(top + 1)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            o = coff[e]
            n = coff[e + 1] - o
            for j in range(n):
                q0 = 1.0
                for c in range(n_cuts):
                    q0 *= ss[c, o + j]
                q[j] = q0
            if want_w:
                F[0, 0] = 1.0
                for j in range(n):
                    last = min(j, top)
                    pv = 1.0 - q[j]
                    for i in range(last + 1):
                        F[j + 1, i] = pv * F[j, i]
                    if j + 1 <= top:
                        F[j + 1, j + 1] = 0.0
                    pv = q[j]
                    for i in range(last + 1):
                        F[j + 1, min(i + 1, top)] += pv * F[j, i]
            for i in range(top + 1):
                G[i] = f[i]
            for j in range(n - 1, -1, -1):
                last = min(j, top)
                if want_w:
                    h = 0.0
                    for i in range(last + 1):
                        h += F[j, i] * G[min(i + 1, top)]
                    row = ow[o + j]
                    row[0] = q[j] * h
                    for r in range(1, lanes):
                        row[r] = 0.0
                pv = 1.0 - q[j]
                for i in range(last + 1):
                    Gn[i] = pv * G[i]
                pv = q[j]
                for i in range(last + 1):
                    Gn[i] += pv * G[min(i + 1, top)]
                G, Gn = Gn, G
            pe[e, 0] = G[0]
            for r in range(1, lanes):
                pe[e, r] = 0.0
