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
the same operations in the same order, so the two loops agree to the last bits. What the
fusion saves: the soft cuts are evaluated inside the event loop from the cut fields
(no per-object tangent arrays written and read back between passes), and the weighted
first sums of the observables' centres come out of the same loop.
"""

from __future__ import annotations

import numba
import numpy as np

from analysis.pipeline._numba_dp import LANES, lin, lin_add, soft

__all__ = ["select_one"]


@numba.njit(cache=True, nogil=True)
def select_one(
    coff, vals, cut_t, cut_w, cut_g, cut_inc, cut_abs, cut_par, tgt, f, df, want_w,
    max_seq, block, pe, ow, b0, b1,
):
    """Blocks ``b0:b1`` of events. ``coff``: ``(E + 1,)`` object offsets; ``vals``:
    ``(C, N)`` the cut fields per object; per cut ``c``: threshold ``cut_t[c]``, width
    ``cut_w[c]``, ``cut_g[c]`` (``>``/``>=``), ``cut_inc[c]``, ``cut_abs[c]`` (on
    ``|value|``), ``cut_par[c]`` (its threshold's lane - 1, or -1); ``tgt``: ``(S,)``
    the count state after adding an object of the set; ``f``, ``df``: the pass table
    and its tangents in lanes (lane 0 zero). Outputs in lanes: ``pe[e] = (P, dP)``
    and, if ``want_w``, ``ow[j] = (w_j, dw_j)``."""
    n_ev = pe.shape[0]
    n_states = f.shape[0]
    n_cuts = vals.shape[0]
    for b in range(b0, b1):
        q = np.empty(max_seq)
        dq = np.empty((max_seq, LANES))
        F = np.zeros((max_seq + 1 if want_w else 1, n_states, LANES))
        G = np.empty((n_states, LANES))
        Gn = np.empty((n_states, LANES))
        H = np.empty(LANES)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            o = coff[e]
            n = coff[e + 1] - o
            # the soft cuts (as cut_into: the product in cut order, product rule)
            for j in range(n):
                q0 = 1.0
                dqj = dq[j]
                for r in range(LANES):
                    dqj[r] = 0.0
                for c in range(n_cuts):
                    x = vals[c, o + j]
                    if cut_abs[c]:
                        x = abs(x)
                    sv, ds = soft(x, cut_t[c], cut_w[c], cut_g[c], cut_inc[c])
                    for r in range(LANES):
                        dqj[r] *= sv
                    if cut_par[c] >= 0:
                        dqj[1 + cut_par[c]] += q0 * ds
                    q0 *= sv
                q[j] = q0
            if want_w:  # forward distributions
                for k in range(n_states):
                    for r in range(LANES):
                        F[0, k, r] = 0.0
                F[0, 0, 0] = 1.0
                for j in range(n):
                    pv = 1.0 - q[j]
                    for k in range(n_states):
                        lin(F[j + 1, k], pv, F[j, k], -F[j, k, 0], dq[j])
                    pv = q[j]
                    for k in range(n_states):
                        lin_add(F[j + 1, tgt[k]], pv, F[j, k], F[j, k, 0], dq[j])
            # backward value functions and object weights
            for k in range(n_states):
                for r in range(LANES):
                    G[k, r] = df[k, r]
                G[k, 0] = f[k]
            for j in range(n - 1, -1, -1):
                if want_w:
                    for r in range(LANES):
                        H[r] = 0.0
                    for k in range(n_states):
                        t = tgt[k]
                        lin_add(H, G[t, 0], F[j, k], F[j, k, 0], G[t])
                    H[0] *= 0.5  # lane 0 summed F G twice (exact)
                    row = ow[o + j]
                    for r in range(LANES):
                        row[r] = 0.0
                    lin_add(row, q[j], H, H[0], dq[j])
                pv = 1.0 - q[j]
                for k in range(n_states):
                    lin(Gn[k], pv, G[k], -G[k, 0], dq[j])
                pv = q[j]
                for k in range(n_states):
                    t = tgt[k]
                    lin_add(Gn[k], pv, G[t], G[t, 0], dq[j])
                G, Gn = Gn, G
            for r in range(LANES):
                pe[e, r] = G[0, r]
