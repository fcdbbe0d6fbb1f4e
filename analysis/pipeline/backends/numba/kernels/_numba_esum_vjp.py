"""The event sums' vector-Jacobian product: reverse mode for ``E[X^m 1_pass]`` (numba, float64).

An event sum's moments ``A[m] = E[X^m 1_pass] = G^m_0[0]`` come from the walk's backward
recursion over the objects ``j`` (:func:`analysis.select.lanes.steps.sums_backward`; the
reference and its recursion: :func:`analysis.select.objects.sum_moments`; ``x_jp``
object ``j``'s value where pattern ``p`` holds ``s``, else 0). Given ``c_m = dL/dA[m]``
of one event, ``L`` is linear in each step, so with the adjoint distributions (the
transposed steps, forward from the first object, :func:`sums_forward_t`)

    Lam_0[m, k] = c_m [k = 0],
    Lam_{j+1}[m', tgt(p, k)] += pi_jp sum_i C(m' + i, i) x_jp^i Lam_j[m' + i, k]

the derivatives are ``dL/dpi_jp = sum_{m', k} a_p[m', k] G^{m'}_{j+1}[tgt(p, k)]`` (``a_p``
the term ``Lam``'s step scatters: one product per term) and ``dL/df[k] = Lam_n[0, k]``:
one backward sweep of ``G`` (kept per object), then one forward sweep of ``Lam``, per
event and event sum, whatever the number of parameters. A pattern of probability
exactly 0 adds nothing and reads ``x = 0`` in its derivative (as the reference, where its
powers of ``x`` could be ``0 x inf``). Outputs per object and per event (no sums): blocks
and threads change no bit.
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.policy import inline, njit
from analysis.select.lanes.steps import sequence, sums_backward

__all__ = ["sums_forward_t", "sums_vjp"]


@inline
def sums_forward_t(Ln, L, pv, xp, binom, row, states, ns, Gm):
    """One pattern's term of the transposed event-sum step (module docstring):
    ``Ln[m', row[k]] += pv a[m', k]``, ``a[m', k] = sum_i C(m' + i, i) x^i L[m' + i, k]``
    for every power ``m'`` and ``k`` in ``states[:ns]`` (``xp[i] = x^i``); returns the
    pattern's derivative ``sum_{m', k} a[m', k] Gm[m', row[k]]`` (``Gm``: the moments'
    value functions after the object). A state where ``L`` is 0 in every power (not
    reached yet) adds nothing and is skipped."""
    r1 = binom.shape[0]
    dpi = 0.0
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
            dpi += a * Gm[mp, t]
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
        G = np.empty((max_seq + 1, r1, n_states))
        L = np.empty((r1, n_states))
        Ln = np.empty((r1, n_states))
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
                # the moments' value functions after each object, backward (kept)
                G[n] = 0.0
                for k in range(n_states):
                    G[n, 0, k] = f[k]
                for j in range(n - 1, -1, -1):
                    c = seq_c[j]
                    g = seq_g[j]
                    G[j] = 0.0
                    for p in range(n_pat[c]):
                        pv = pv_all[g, p]
                        if pv != 0.0:
                            sums_backward(G[j], G[j + 1], pv, 0.0, sum_x[o, g] * sum_has[o, c, p],
                                          binom, tgt[c, p], states, n_states, 0.0)
                # the adjoint forward, each pattern's derivative on the way
                L[:] = 0.0
                for m in range(r1):
                    L[m, 0] = cm[o, e, m]
                for j in range(n):
                    c = seq_c[j]
                    g = seq_g[j]
                    Ln[:] = 0.0
                    for p in range(n_pat[c]):
                        pv = pv_all[g, p]
                        x = sum_x[o, g] * sum_has[o, c, p] if pv != 0.0 else 0.0
                        v = 1.0
                        for i in range(r1):  # xp[i] = x^i
                            xp[i] = v
                            v *= x
                        gp[g, p] += sums_forward_t(Ln, L, pv, xp, binom, tgt[c, p], states,
                                                   n_states, G[j + 1])
                    L, Ln = Ln, L
                for r in range(df.shape[1]):
                    acc = 0.0
                    for k in range(n_states):
                        acc += L[0, k] * df[k, r]
                    dfs[e, r] += acc
