"""Reverse mode's walk (numba, float64): the pass probability's sensitivities to every
object's pattern probabilities, any count model (several sets per collection, several
collections, joint counts; one collection with one set walks the chain instead,
:func:`analysis.select.chainwalk.sens_walk`). ``P`` is affine in object ``j``'s pattern
probabilities ``pi_jp`` together (``F_j`` and ``G_{j+1}`` do not depend on them), ``P =
sum_p pi_jp H_jp`` with

    dP/dpi_jp = H_jp = sum_k F_j[k] G_{j+1}[tgt(p, k)]            (exact)

(the inner sum of an object weight, :func:`~analysis.select.lanes.steps.weight`); the
host chains ``H`` to the sets and forms the objects' weights
(:mod:`analysis.pipeline.backends.numba._fastsens`).
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.policy import njit
from analysis.select.lanes.steps import (
    backward,
    clear,
    forward,
    sequence,
    weight,
)

__all__ = ["pattern_sensitivities"]


@njit
def pattern_sensitivities(coff, base, pv_all, n_pat, tgt, f, df, cw, adjoint, max_seq, block,
                          pe, hp, dfe, gp, dfw, b0, b1):
    """Blocks ``b0:b1`` of events, any count model (module docstring): ``coff`` ``(C, E +
    1)`` object offsets per collection, ``base`` each collection's first global index,
    ``pv_all`` ``(N, P)`` pattern probabilities, ``tgt`` ``(C, P, S)`` the count state
    after an object of each pattern, ``f`` the pass table ``(S,)`` and ``df`` ``(S, K)``
    its tangents in the trainable count thresholds. Outputs: ``pe[e] = P``, ``hp[g, p] =
    dP/dpi_gp``, ``dfe[e] = sum_k F_n[k] df[k]`` (``dP/dthreshold``).

    With ``adjoint``, also the vector-Jacobian product of the walk (one more sweep each
    way) for the objects' weights, ``L = sum_j sum_p cw_jp pi_jp H_jp`` (``cw_jp``: the
    cotangents of object ``j``'s weights summed over the sets pattern ``p`` holds):
    ``gp[g, p] = dL/dpi_gp`` and ``dfw[e] = sum_k mu_n[k] df[k]`` (``dL/dthreshold``); a
    cotangent ``pbar_e`` of ``P_e`` adds ``pbar_e hp`` and ``pbar_e dfe`` (linear: the
    host adds it, once ``P_e`` is known). The adjoints of the recursions ``F_{j+1} = A_j
    F_j`` and ``G_j = A_j^T G_{j+1}``: ``mu_0 = 0``, ``mu_{j+1} = A_j mu_j + (F_j's step
    with ``pi cw``)`` (forward, stored), ``lam_n = 0``, ``lam_j = A_j^T lam_{j+1} +
    (G_{j+1}'s step with ``pi cw``)`` (backward), and ``dL/dpi_jp = sum_k (F_j[k]
    lam_{j+1}[tgt(p, k)] + mu_j[k] G_{j+1}[tgt(p, k)]) + cw_jp H_jp``: the steps of
    :mod:`~analysis.select.lanes.steps`. The steps of
    :func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk` for values (the
    same order of terms: the same ``P``)."""
    n_ev = pe.shape[0]
    n_states = f.shape[0]
    for b in range(b0, b1):
        seq_c = np.empty(max_seq, np.int64)
        seq_g = np.empty(max_seq, np.int64)
        F = np.empty((max_seq + 1, n_states))
        M = np.empty((max_seq + 1 if adjoint else 1, n_states))
        G = np.empty(n_states)
        Gn = np.empty(n_states)
        L = np.zeros(n_states)
        Ln = np.empty(n_states)
        states = np.arange(n_states)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            n = sequence(coff, base, e, seq_c, seq_g)
            for k in range(n_states):
                F[0, k] = 0.0
                M[0, k] = 0.0
            F[0, 0] = 1.0
            for j in range(n):
                c = seq_c[j]
                g = seq_g[j]
                clear(F[j + 1], states, n_states)
                if adjoint:
                    clear(M[j + 1], states, n_states)
                for p in range(n_pat[c]):
                    pv = pv_all[g, p]
                    forward(F[j + 1], F[j], pv, pv, 0.0, tgt[c, p], states, n_states, 0,
                            states, False)
                    if adjoint:
                        forward(M[j + 1], M[j], pv, pv, 0.0, tgt[c, p], states, n_states, 0,
                                states, False)
                        if cw[g, p] != 0.0:
                            forward(M[j + 1], F[j], pv * cw[g, p], pv * cw[g, p], 0.0,
                                    tgt[c, p], states, n_states, 0, states, False)
            for r in range(dfe.shape[1]):
                acc = 0.0
                acw = 0.0
                for k in range(n_states):
                    acc += F[n, k] * df[k, r]
                    if adjoint:
                        acw += M[n, k] * df[k, r]
                dfe[e, r] = acc
                if adjoint:
                    dfw[e, r] = acw
            for k in range(n_states):
                G[k] = f[k]
                L[k] = 0.0
            for j in range(n - 1, -1, -1):
                c = seq_c[j]
                g = seq_g[j]
                clear(Gn, states, n_states)
                if adjoint:
                    clear(Ln, states, n_states)
                for p in range(n_pat[c]):
                    pv = pv_all[g, p]
                    h = weight(0.0, F[j], G, tgt[c, p], states, n_states, 0, states, False)
                    hp[g, p] = h
                    if adjoint:
                        gp[g, p] = (weight(0.0, F[j], L, tgt[c, p], states, n_states, 0, states,
                                           False)
                                    + weight(0.0, M[j], G, tgt[c, p], states, n_states, 0,
                                             states, False)
                                    + cw[g, p] * h)
                        backward(Ln, L, pv, pv, 0.0, tgt[c, p], states, n_states, 0)
                        if cw[g, p] != 0.0:
                            backward(Ln, G, pv * cw[g, p], pv * cw[g, p], 0.0, tgt[c, p],
                                     states, n_states, 0)
                    backward(Gn, G, pv, pv, 0.0, tgt[c, p], states, n_states, 0)
                if adjoint:
                    L, Ln = Ln, L
                G, Gn = Gn, G
            pe[e] = G[0]
