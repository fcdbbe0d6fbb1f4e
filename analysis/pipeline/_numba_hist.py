"""The compiled walk of :mod:`analysis.pipeline.fasthist` (numba, float64).

One walk per event over the objects of every collection (each collection in the rank
order of its indexed set, if it has one: the count state does not depend on the order
objects are added in), for several pass tables ``f_r`` at once (the selection and the
channels' regions on one joint count state space: they share the objects' pattern
probabilities and the forward distributions, and differ only in ``f``). With
``tgt[c, p, k]`` the count state after adding an object of pattern ``p`` to state ``k``
(:mod:`analysis.pipeline._numba_dp`'s notation):

- forward distributions ``F_{j+1}[tgt(p, k)] += pi_jp F_j[k]`` (``F_0 = delta_0``);
- for a leading target ``(s, d)`` (``s[d]``), ``L_j[t, k]``: the distribution of the
  objects before ``j`` with exactly ``t <= d`` members of ``s`` among the earlier
  objects of ``s``'s collection (higher ranked); a pattern holding ``s`` moves ``t`` to
  ``t + 1`` (dropped beyond ``d``), any other keeps it;
- value functions per table ``G^r_N = f_r``, ``G^r_j[k] = sum_p pi_jp G^r_{j+1}[tgt(p, k)]``,
  ``P_r(pass) = G^r_0[0]``;
- ``P(j in s and region r passes) = sum_{p holds s} pi_jp sum_k F_j[k] G^r_{j+1}[tgt(p, k)]``;
- ``P(j is s[d] and region r passes) = sum_{p holds s} pi_jp sum_k L_j[d, k]
  G^r_{j+1}[tgt(p, k)]`` (the weight of :func:`analysis.select.objects.leading` for one
  indexed set: the ``d`` members ranked above ``j`` and ``j`` in ``s``).

Every quantity in lanes (lane 0 the value, lanes ``1..nl-1`` its tangents; the product
rule ``(a b)' = a' b + a b'``); only sums of non-negative products. Outputs are per event
or per object (no sums), so the result does not depend on how blocks are split.
"""

from __future__ import annotations

import numba
import numpy as np

from analysis.pipeline._numba_dp import LANES

__all__ = ["walk"]


@numba.njit(cache=True, nogil=True)
def walk(
    coff, base, rankidx, pv_all, pd_all, pat, n_pat, tgt, fs, dfs, nl,
    ow_r, ow_c, ow_ls, ld_c, ld_ls, ld_d, lw_r, lw_l, max_seq, max_d, block, pe, ow, lw,
    b0, b1,
):
    """Blocks ``b0:b1`` of the walk (module docstring). ``rankidx[base[c] + i]``: the
    global index of the object at position ``i`` of collection ``c`` in walk order;
    ``pv_all``/``pd_all``: pattern probabilities and tangents per global object;
    ``fs``/``dfs``: ``(R, S)`` pass tables and ``(R, S, LANES)`` tangents; ``nl``: lanes
    used. Object-weight slots ``o``: region ``ow_r[o]``, set ``ow_ls[o]`` (its position in
    collection ``ow_c[o]``'s patterns) into ``ow[o, g]``; leading targets ``l``: set
    ``ld_ls[l]`` of collection ``ld_c[l]`` at depth ``ld_d[l]``; leading slots ``o``:
    region ``lw_r[o]``, target ``lw_l[o]`` into ``lw[o, g]``; ``pe[r, e]``: ``P_r``."""
    n_ev = pe.shape[1]
    n_coll = coff.shape[0]
    n_reg, n_states = fs.shape
    n_ow = ow_r.shape[0]
    n_ld = ld_c.shape[0]
    n_lw = lw_r.shape[0]
    for b in range(b0, b1):
        seq_c = np.empty(max_seq, np.int64)
        seq_g = np.empty(max_seq, np.int64)
        F = np.zeros((max_seq + 1 if n_ow else 1, n_states, LANES))
        L = np.zeros((max(n_ld, 1), max_seq + 1 if n_ld else 1, max_d + 1, n_states, LANES))
        G = np.empty((n_reg, n_states, LANES))
        Gn = np.empty((n_reg, n_states, LANES))
        inner = np.empty(LANES)
        acc = np.empty(LANES)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            n = 0
            for c in range(n_coll):
                for i in range(coff[c, e], coff[c, e + 1]):
                    seq_c[n] = c
                    seq_g[n] = rankidx[base[c] + i]
                    n += 1
            if n_ow:
                for k in range(n_states):
                    for r in range(nl):
                        F[0, k, r] = 0.0
                F[0, 0, 0] = 1.0
                for j in range(n):
                    c = seq_c[j]
                    g = seq_g[j]
                    for k in range(n_states):
                        for r in range(nl):
                            F[j + 1, k, r] = 0.0
                    for p in range(n_pat[c]):
                        pv = pv_all[g, p]
                        for k in range(n_states):
                            t = tgt[c, p, k]
                            fk = F[j, k, 0]
                            F[j + 1, t, 0] += pv * fk
                            for r in range(1, nl):
                                F[j + 1, t, r] += pv * F[j, k, r] + fk * pd_all[g, p, r]
            for lt in range(n_ld):
                dmax = ld_d[lt]
                for m in range(dmax + 1):
                    for k in range(n_states):
                        for r in range(nl):
                            L[lt, 0, m, k, r] = 0.0
                L[lt, 0, 0, 0, 0] = 1.0
                for j in range(n):
                    c = seq_c[j]
                    g = seq_g[j]
                    for m in range(dmax + 1):
                        for k in range(n_states):
                            for r in range(nl):
                                L[lt, j + 1, m, k, r] = 0.0
                    for p in range(n_pat[c]):
                        step = 1 if (c == ld_c[lt] and pat[c, p, ld_ls[lt]] == 1) else 0
                        pv = pv_all[g, p]
                        for m in range(dmax + 1 - step):
                            for k in range(n_states):
                                t = tgt[c, p, k]
                                lk = L[lt, j, m, k, 0]
                                L[lt, j + 1, m + step, t, 0] += pv * lk
                                for r in range(1, nl):
                                    L[lt, j + 1, m + step, t, r] += (
                                        pv * L[lt, j, m, k, r] + lk * pd_all[g, p, r])
            for q in range(n_reg):
                for k in range(n_states):
                    G[q, k, 0] = fs[q, k]
                    for r in range(1, nl):
                        G[q, k, r] = dfs[q, k, r]
            for j in range(n - 1, -1, -1):
                c = seq_c[j]
                g = seq_g[j]
                for o in range(n_ow):
                    if ow_c[o] != c:
                        continue
                    q = ow_r[o]
                    for r in range(nl):
                        acc[r] = 0.0
                    for p in range(n_pat[c]):
                        if pat[c, p, ow_ls[o]] != 1:
                            continue
                        for r in range(nl):
                            inner[r] = 0.0
                        for k in range(n_states):
                            t = tgt[c, p, k]
                            fk = F[j, k, 0]
                            gt = G[q, t, 0]
                            inner[0] += fk * gt
                            for r in range(1, nl):
                                inner[r] += F[j, k, r] * gt + fk * G[q, t, r]
                        pv = pv_all[g, p]
                        acc[0] += pv * inner[0]
                        for r in range(1, nl):
                            acc[r] += pv * inner[r] + inner[0] * pd_all[g, p, r]
                    for r in range(nl):
                        ow[o, g, r] = acc[r]
                for o in range(n_lw):
                    lt = lw_l[o]
                    if ld_c[lt] != c:
                        continue
                    q = lw_r[o]
                    dd = ld_d[lt]
                    for r in range(nl):
                        acc[r] = 0.0
                    for p in range(n_pat[c]):
                        if pat[c, p, ld_ls[lt]] != 1:
                            continue
                        for r in range(nl):
                            inner[r] = 0.0
                        for k in range(n_states):
                            t = tgt[c, p, k]
                            lk = L[lt, j, dd, k, 0]
                            gt = G[q, t, 0]
                            inner[0] += lk * gt
                            for r in range(1, nl):
                                inner[r] += L[lt, j, dd, k, r] * gt + lk * G[q, t, r]
                        pv = pv_all[g, p]
                        acc[0] += pv * inner[0]
                        for r in range(1, nl):
                            acc[r] += pv * inner[r] + inner[0] * pd_all[g, p, r]
                    for r in range(nl):
                        lw[o, g, r] = acc[r]
                for q in range(n_reg):
                    for k in range(n_states):
                        for r in range(nl):
                            Gn[q, k, r] = 0.0
                    for p in range(n_pat[c]):
                        pv = pv_all[g, p]
                        for k in range(n_states):
                            t = tgt[c, p, k]
                            gt = G[q, t, 0]
                            Gn[q, k, 0] += pv * gt
                            for r in range(1, nl):
                                Gn[q, k, r] += pv * G[q, t, r] + gt * pd_all[g, p, r]
                    for k in range(n_states):
                        for r in range(nl):
                            G[q, k, r] = Gn[q, k, r]
            for q in range(n_reg):
                for r in range(nl):
                    pe[q, e, r] = G[q, 0, r]
