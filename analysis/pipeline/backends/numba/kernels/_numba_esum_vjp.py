"""The event sums' vector-Jacobian product: reverse mode for ``E[X^m 1_pass]`` (numba, float64).

An event sum ``X = sum_{j in s} x_j`` has the moments ``A[m] = E[X^m 1_pass] = G^m_0[0]``
of the walk's backward recursion (:func:`analysis.pipeline.backends.numba.kernels.walk.sums_backward`,
:func:`analysis.select.objects.sum_moments`, the reference)

    G^m_j[k] = sum_p pi_jp sum_{i <= m} C(m, i) x_jp^i G^{m-i}_{j+1}[tgt(p, k)],
    G^0_n = f, G^{m>0}_n = 0

(``x_jp``: object ``j``'s value where pattern ``p`` holds ``s``, else 0). Given the
cotangents ``c_m = dL/dA[m]`` of one event, ``L`` is linear in each step, so with the
adjoint distributions (the transposed steps, forward from the first object)

    Lam_0[m, k] = c_m [k = 0],
    Lam_{j+1}[m', tgt(p, k)] += pi_jp sum_i C(m' + i, i) x_jp^i Lam_j[m' + i, k]

(:func:`sums_forward_t`; ``Lam_j[m'] = sum_m c_m C(m, m') E[X_{<j}^{m - m'}; state]``), the
derivatives are

    dL/dpi_jp = sum_{m, k} Lam_j[m, k] sum_i C(m, i) x_jp^i G^{m-i}_{j+1}[tgt(p, k)],
    dL/df[k]  = Lam_n[0, k]

(:func:`sums_cotangent`): one forward sweep of ``Lam`` (stored per object) and one backward
sweep of ``G`` (the walk's own step), per event and event sum, whatever the number of
parameters. A pattern of probability exactly 0 adds nothing to ``Lam`` nor ``G`` and
reads ``x = 0`` in its derivative (as the reference, where its powers of ``x`` could be
``0 x inf``). Outputs per object and per event (no sums): blocks and threads change no bit.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._jit import inline, njit
from analysis.pipeline.backends.numba.kernels.walk import sequence, sums_backward

__all__ = ["sums_cotangent", "sums_forward_t", "sums_vjp"]


@inline
def _powers(xp, x):
    """``xp[i] = x^i``."""
    v = 1.0
    for i in range(xp.shape[0]):
        xp[i] = v
        v *= x


@inline
def sums_forward_t(Ln, L, pv, xp, binom, row, states, ns):
    """One pattern's term of the transposed event-sum step (module docstring):
    ``Ln[m', row[k]] += pv sum_i C(m' + i, i) x^i L[m' + i, k]`` for every power ``m'``
    and ``k`` in ``states[:ns]`` (``xp[i] = x^i``); a state where ``L`` is 0 in every
    power (not reached yet) adds nothing and is skipped."""
    r1 = binom.shape[0]
    for s in range(ns):
        k = states[s]
        live = False
        for m in range(r1):
            live = live or L[m, k] != 0.0
        if not live:
            continue
        t = row[k]
        for mp in range(r1):
            a = 0.0
            for i in range(r1 - mp):
                a += binom[mp + i, i] * xp[i] * L[mp + i, k]
            Ln[mp, t] += pv * a


@inline
def sums_cotangent(L, Gm, xp, binom, row, states, ns):
    """``dL/dpi`` of one object's pattern (module docstring): ``L`` its ``Lam_j``, ``Gm``
    the moments' value functions after it, ``row`` ``tgt(p, .)``, ``xp[i] = x^i``."""
    dpi = 0.0
    for s in range(ns):
        k = states[s]
        t = row[k]
        for m in range(binom.shape[0]):
            lk = L[m, k]
            if lk == 0.0:
                continue
            a = 0.0
            for i in range(m + 1):
                a += binom[m, i] * xp[i] * Gm[m - i, t]
            dpi += lk * a
    return dpi


@njit
def sums_vjp(coff, base, pv_all, n_pat, tgt, f, df, sum_x, sum_has, binom, cm, max_seq, block,
             gp, dfs, b0, b1):
    """Blocks ``b0:b1`` of events. ``coff`` ``(C, E + 1)`` object offsets per collection,
    ``base`` each collection's first global index, ``pv_all`` ``(N, P)`` pattern
    probabilities, ``tgt`` ``(C, P, S)``, ``f`` the pass table ``(S,)`` and ``df``
    ``(S, K)`` its derivatives in the trainable count thresholds; per event sum ``o``:
    ``sum_x[o, g]`` object ``g``'s value, ``sum_has[o, c, p]`` 1 where pattern ``p`` holds
    the summed set, ``cm[o, e, m] = dL/dE[X^m 1_pass]`` (``binom[m, i] = C(m, i)``).
    Outputs (added to): ``gp[g, p] = dL/dpi_gp``, ``dfs[e, r] = sum_k dL/df[k] df[k, r]``
    (the summed values are data: their cotangents are not formed)."""
    n_ev = cm.shape[1]
    n_sums = cm.shape[0]
    n_states = f.shape[0]
    r1 = binom.shape[0]
    for b in range(b0, b1):
        seq_c = np.empty(max_seq, np.int64)
        seq_g = np.empty(max_seq, np.int64)
        lam = np.empty((max_seq + 1, r1, n_states))
        G = np.empty((r1, n_states))
        Gn = np.empty((r1, n_states))
        xp = np.empty(r1)
        states = np.arange(n_states)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            n = sequence(coff, base, e, seq_c, seq_g)
            for o in range(n_sums):
                live = False
                for m in range(r1):
                    live = live or cm[o, e, m] != 0.0
                if not live:
                    continue
                lam[0] = 0.0
                for m in range(r1):
                    lam[0, m, 0] = cm[o, e, m]
                for j in range(n):
                    c = seq_c[j]
                    g = seq_g[j]
                    lam[j + 1] = 0.0
                    for p in range(n_pat[c]):
                        pv = pv_all[g, p]
                        if pv == 0.0:
                            continue
                        _powers(xp, sum_x[o, g] * sum_has[o, c, p])
                        sums_forward_t(lam[j + 1], lam[j], pv, xp, binom, tgt[c, p], states,
                                       n_states)
                for r in range(df.shape[1]):
                    acc = 0.0
                    for k in range(n_states):
                        acc += lam[n, 0, k] * df[k, r]
                    dfs[e, r] += acc
                G[:] = 0.0
                for k in range(n_states):
                    G[0, k] = f[k]
                for j in range(n - 1, -1, -1):
                    c = seq_c[j]
                    g = seq_g[j]
                    Gn[:] = 0.0
                    for p in range(n_pat[c]):
                        pv = pv_all[g, p]
                        x = sum_x[o, g] * sum_has[o, c, p] if pv != 0.0 else 0.0
                        _powers(xp, x)
                        gp[g, p] += sums_cotangent(lam[j], G, xp, binom, tgt[c, p], states,
                                                   n_states)
                        if pv != 0.0:
                            sums_backward(Gn, G, pv, 0.0, x, binom, tgt[c, p], states, n_states,
                                          0.0)
                    G, Gn = Gn, G
