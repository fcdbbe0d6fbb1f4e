"""The numba kernel's general loop for values only (numba, float64): lane 0 of ``select``.

:func:`select_value` is :func:`analysis.pipeline.backends.numba.kernels._numba_dp.select` without tangents: the
same recursions (forward distributions, value functions, per-object weights, event
sums; the steps of :mod:`analysis.pipeline.backends.numba.kernels.walk` for values only),
the same operations in the same order on lane 0, so the same floats (lane 0 of
``select`` adds the tangent terms ``F_j[k] dpi_jp``, which are zeros when nothing is
differentiated: ``x + 0 = x``; its doubled weight sum ``H[p, 0]`` halved is exact).
It runs where nothing is differentiated (``order=0``: the values pass of reverse mode,
hard cuts, :mod:`analysis.pipeline.backends.numba.fastkernel`), the other lanes of ``pe``, ``ow`` and
``sa`` set to zero. Plans with one collection and one set have their own value loop
(:func:`analysis.pipeline.backends.numba.kernels._numba_one.select_one_value`).
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._jit import njit
from analysis.pipeline.backends.numba.kernels._numba_dp import any_slot
from analysis.pipeline.backends.numba.kernels.walk import (
    backward_value,
    clear,
    forward_value,
    sequence,
    sums_backward_value,
    weight_value,
)

__all__ = ["select_value"]


@njit
def select_value(
    coff, base, pv_all, coll_sets, n_coll_sets, pat, n_pat, pat_need, tgt, f,
    set_slot, sum_x, sum_has, binom, max_seq, block, pe, ow, sa, b0, b1,
):
    """Blocks ``b0:b1``; arguments as :func:`analysis.pipeline.backends.numba.kernels._numba_dp.select` without
    the tangents ``pd_all`` and ``df``."""
    n_ev = pe.shape[0]
    lanes = pe.shape[1]
    n_states = f.shape[0]
    n_sums = sum_x.shape[0]
    big_r = binom.shape[0] - 1
    p_max = pat.shape[1]
    need_fwd = any_slot(set_slot)
    for b in range(b0, b1):
        seq_c = np.empty(max_seq, np.int64)
        seq_g = np.empty(max_seq, np.int64)
        F = np.zeros((max_seq + 1 if need_fwd else 1, n_states))
        G = np.empty(n_states)
        Gn = np.empty(n_states)
        H = np.empty(p_max)
        Gm = np.empty((n_sums, big_r + 1, n_states))
        Gmn = np.empty((n_sums, big_r + 1, n_states))
        xp = np.empty(p_max)
        states = np.arange(n_states)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            n = sequence(coff, base, e, seq_c, seq_g)
            if need_fwd:
                for k in range(n_states):
                    F[0, k] = 0.0
                F[0, 0] = 1.0
                for j in range(n):
                    c = seq_c[j]
                    g = seq_g[j]
                    clear(F[j + 1], states, n_states)
                    for p in range(n_pat[c]):
                        forward_value(F[j + 1], F[j], pv_all[g, p], tgt[c, p], states, n_states)
            for k in range(n_states):
                G[k] = f[k]
            for o in range(n_sums):
                for m in range(big_r + 1):
                    for k in range(n_states):
                        Gm[o, m, k] = G[k] if m == 0 else 0.0
            for j in range(n - 1, -1, -1):
                c = seq_c[j]
                g = seq_g[j]
                if need_fwd:
                    for p in range(n_pat[c]):
                        if not pat_need[c, p]:
                            continue
                        H[p] = weight_value(F[j], G, tgt[c, p], states, n_states)
                    for ls in range(n_coll_sets[c]):
                        slot = set_slot[coll_sets[c, ls]]
                        if slot < 0:
                            continue
                        jj = g - base[c]
                        acc = 0.0
                        for p in range(n_pat[c]):
                            if pat[c, p, ls] != 1:
                                continue
                            acc += pv_all[g, p] * H[p]
                        ow[slot, jj, 0] = acc
                        for r in range(1, lanes):
                            ow[slot, jj, r] = 0.0
                for o in range(n_sums):
                    for p in range(n_pat[c]):
                        xp[p] = sum_x[o, g] * sum_has[o, c, p]
                    for m in range(big_r + 1):
                        for k in range(n_states):
                            Gmn[o, m, k] = 0.0
                    for p in range(n_pat[c]):
                        pv = pv_all[g, p]
                        if pv == 0.0:  # adds nothing (its powers of x may overflow: 0 x inf)
                            continue
                        sums_backward_value(Gmn[o], Gm[o], pv, xp[p], binom, tgt[c, p], states,
                                            n_states)
                    for m in range(big_r + 1):
                        for k in range(n_states):
                            Gm[o, m, k] = Gmn[o, m, k]
                clear(Gn, states, n_states)
                for p in range(n_pat[c]):
                    backward_value(Gn, G, pv_all[g, p], tgt[c, p], states, n_states)
                for k in range(n_states):
                    G[k] = Gn[k]
            pe[e, 0] = G[0]
            for r in range(1, lanes):
                pe[e, r] = 0.0
            for o in range(n_sums):
                for m in range(big_r + 1):
                    sa[o, e, m, 0] = Gm[o, m, 0]
                    for r in range(1, lanes):
                        sa[o, e, m, r] = 0.0
