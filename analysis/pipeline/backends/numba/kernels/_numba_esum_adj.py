"""The adjoint of the histogram of event sums (hard and soft bins): one backward sweep per event (numba, float64).

The forward kernel (:mod:`analysis.pipeline.backends.numba.kernels._numba_esum`, its
notation) gives per event ``pb_b = P(pass, X in bin b)``; reverse mode reads ``L_e =
sum_b c_b pb_b`` (``c``: the bins' cotangents). With ``F`` the folded objects'
distribution (in the forward kernel's order) and the ``U`` uncertain objects split as
the forward kernel splits them (all forward up to its ``ENUMERATE_UP_TO``, else the
first ``U // 2`` forward and the others backward from the pass table ``f``),

    L_e = sum_{alpha, beta} c_{b(alpha, beta)} <F_alpha, G_beta>

over the subsets ``alpha`` of the first part (``F`` stepped by each object's in or out
patterns: a binary tree kept level by level) and ``beta`` of the second (``f`` stepped
back likewise; ``f`` alone when every object is forward), each pair in the forward
kernel's bin (the same floats compared). ``L`` is linear in every step, so:

- ``dL/dF_alpha = sum_k c_k (PG[i_k] - PG[i_{k-1}])`` (``PG`` the prefix sums of the
  sorted ``G_beta``, ``i_k`` the ``beta`` below edge ``k``) and ``dL/dG_beta`` from a
  difference array over the sorted ``beta``;
- each tree back to its root by the transposed steps (:func:`_step_t`), each pattern's
  ``dL/dpi_p`` the product of its step's input with its output's cotangent, the
  ``alpha`` root's ``dL/dF`` back through the folded objects (``F_j`` kept per object)
  and the ``beta`` root's ``dL/df`` per event (the count thresholds: ``dL/df . df`` on
  the host).

Soft bins (``width > 0``): the same trees, each pair at ``X_A = X_alpha + X_beta``
weighted by ``s(X_A) = sum_b c_b q_b(X_A)`` in place of its bin's cotangent, and the
trainable edges' ``dL/de_j = sum_A P_A (c_j - c_{j+1}) dq_j/de_j`` (``ebar[e, j]``).

Cost per event ``O((M + 2^(U - U/2) + 2^(U/2)) P S + 2^(U/2) n_b S)`` (soft bins: ``2^U
(S + n_b)`` for the pairs), whatever the number of parameters. An event with a NaN
among its probabilities takes the same sweep (the NaN reaches what it touches, as in the
JAX sweep); an event of numbers with fewer objects than any state of nonzero ``f`` or
``df`` needs has every derivative 0. Outputs per object and per event (no sums): blocks
and threads change no bit; the forward tangents' sums in another order (the tests: 1e-10
against the JAX sweep).
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._numba_esum import ENUMERATE_UP_TO
from analysis.pipeline.backends.numba.kernels._numba_esum_steps import (
    _add,
    _copy,
    _fewest,
    _numbers,
    _partition,
    _partition_buffers,
)
from analysis.pipeline.backends.numba.kernels._numba_softbins import bin_probabilities, hard_bin
from analysis.select.lanes.policy import inline, njit

__all__ = ["event_sum_vjp"]


@inline
def _step(out, x, tgt, c, n_pat, pv, g, which, has, back):
    """``out = sum_p pi_p shift_p(x)`` (forward) or ``out[k] = sum_p pi_p x[tgt(p, k)]``
    (``back``) over object ``g``'s patterns of collection ``c`` with ``has[p] == which``
    (``-1``: every pattern); one lane."""
    out[:] = 0.0
    for p in range(n_pat[c]):
        if which >= 0 and has[p] != which:
            continue
        v = pv[g, p, 0]
        row = tgt[c, p]
        for k in range(x.shape[0]):
            i, j = (k, row[k]) if back else (row[k], k)  # out[i] += pi x[j]
            out[i] += v * x[j]


@inline
def _step_t(xbar, x, obar, tgt, c, n_pat, pv, g, which, has, back, gp):
    """The transpose of :func:`_step` for its output's cotangent ``obar``: ``xbar +=``
    the input's, ``gp[g, p] +=`` each pattern's ``dL/dpi_p`` (``x``: the step's input)."""
    for p in range(n_pat[c]):
        if which >= 0 and has[p] != which:
            continue
        v = pv[g, p, 0]
        row = tgt[c, p]
        d = 0.0
        for k in range(x.shape[0]):
            i, j = (k, row[k]) if back else (row[k], k)  # the step's out[i] += pi x[j]
            d += obar[i] * x[j]
            xbar[j] += v * obar[i]
        gp[g, p] += d


@inline
def _grow(FT, XT, GT, XB, unc, n, na, tgt, cs, n_pat, pv, has, vals, base_cs):
    """The two subset trees, the objects ``unc[:na]`` forward from the root ``FT[1]``,
    ``XT[1]`` (``F``) and ``unc[na:n]`` backward (the last first) from ``GT[1]``,
    ``XB[1]`` (``f``): node ``2^t + a`` of level ``t`` has children ``2^(t+1) + a``
    (object ``t`` out of ``S``) and ``2^(t+1) + 2^t + a`` (in it, its value added to
    ``X``). One loop over the trees and the sides: the step is compiled once."""
    for tree in range(2):
        back = tree == 1
        T, X = (GT, XB) if back else (FT, XT)
        for t in range(n - na if back else na):
            g = unc[n - 1 - t if back else t]
            v = vals[g - base_cs]
            lo = 1 << t
            for a in range(lo):
                for side in range(2):  # out of S, then in it
                    _step(T[(2 + side) * lo + a], T[lo + a], tgt, cs, n_pat, pv, g, side, has,
                          back)
                X[2 * lo + a] = X[lo + a]
                X[3 * lo + a] = X[lo + a] + v


@inline
def _shrink(FTb, FT, GTb, GT, unc, n, na, tgt, cs, n_pat, pv, has, gp):
    """:func:`_grow`'s trees back to their roots (the ``beta`` tree first): ``FTb``,
    ``GTb`` the nodes' cotangents (the leaves' given), each level from its children's by
    :func:`_step_t` (``gp`` the patterns')."""
    for tree in range(2):
        back = tree == 0
        Tb, T = (GTb, GT) if back else (FTb, FT)
        for t in range((n - na if back else na) - 1, -1, -1):
            g = unc[n - 1 - t if back else t]
            lo = 1 << t
            for a in range(lo):
                Tb[lo + a, :] = 0.0
                for side in range(2):
                    _step_t(Tb[lo + a], T[lo + a], Tb[(2 + side) * lo + a], tgt, cs, n_pat, pv, g,
                            side, has, back, gp)


@inline
def _soft_pairs(FT, XT, ma, GT, XB, mb, FTb, GTb, cb, edges, width, q, ds, eb):
    """Soft bins: every pair ``(alpha, beta)`` (the leaves ``ma + a``, ``mb + b``) weighted
    by ``s(X_A)`` into ``FTb`` and ``GTb``, the edges' ``dL/de_j`` into ``eb``."""
    n_states = FT.shape[1]
    n_e = edges.shape[0]
    for a in range(ma):
        for b in range(mb):
            moves = bin_probabilities(edges, XT[ma + a] + XB[mb + b], width, q, ds)
            s = 0.0
            for k in range(n_e + 1):
                s += cb[k] * q[k]
            if moves:  # a finite sum: its edges' derivatives
                p = 0.0
                for k in range(n_states):
                    p += FT[ma + a, k] * GT[mb + b, k]
                for j in range(n_e):
                    eb[j] += p * (cb[j] - cb[j + 1]) * ds[j]
            for k in range(n_states):
                FTb[ma + a, k] += s * GT[mb + b, k]
                GTb[mb + b, k] += s * FT[ma + a, k]


@njit
def event_sum_vjp(coff, base, pv, n_pat, tgt, f, G0, cs, has, cert, ins, vals, edges, width,
                  cbar, block, gp, fbar, ebar, b0, b1):
    """Events of blocks ``b0:b1`` (module docstring): ``gp[g, p] = dL/dpi_gp`` per global
    object, ``fbar[e] = dL/df`` per event and, with soft bins (``width > 0``), ``ebar[e,
    j] = dL/de_j`` per event and edge. The arguments of
    :func:`analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins` (``pv``
    ``(N, P, 1)``: values only) and ``G0`` ``(S, 1 + K)`` the pass table and its tangents
    (which states can matter), ``cbar`` ``(E, bins)`` the bins' cotangents."""
    n_ev = cbar.shape[0]
    n_states = f.shape[0]
    n_e = edges.shape[0]
    need = _fewest(tgt, n_pat, G0, G0.shape[1])
    unc, fold, fcol = _partition_buffers(coff, b0 * block, min(n_ev, b1 * block))
    FS = np.zeros((fold.shape[0] + 1, n_states))  # F after each folded object
    Fb = np.zeros(n_states)
    Fb2 = np.zeros(n_states)
    FT = np.zeros((2, n_states))  # the alpha tree, node 2^t + a at level t (grown)
    FTb = np.zeros((2, n_states))
    XT = np.zeros(2)
    GT = np.zeros((2, n_states))  # the beta tree
    GTb = np.zeros((2, n_states))
    XB = np.zeros(2)
    PG = np.zeros((2, n_states))  # prefix sums of the sorted beta leaves
    D = np.zeros((2, n_states))  # the beta leaves' difference array
    idx = np.zeros(n_e + 1, np.int64)
    acc = np.zeros(n_states)
    q = np.zeros(n_e + 1)  # an entry's soft-bin probabilities
    ds = np.zeros(n_e)  # ... and their derivatives in the edges
    for e in range(b0 * block, min(n_ev, b1 * block)):
        fbar[e, :] = 0.0
        if width > 0.0:
            ebar[e, :] = 0.0
        n, m, x0 = _partition(coff, base, cs, cert, ins, vals, e, unc, fold, fcol)
        if n + m < need and _numbers(coff, base, pv, n_pat, e):
            continue  # every derivative 0 (gp stays as it is: 0)
        # fold, in the forward kernel's order
        FS[0, :] = 0.0
        FS[0, 0] = 1.0
        for j in range(m):
            _step(FS[j + 1], FS[j], tgt, fcol[j], n_pat, pv, fold[j], -1, has, False)
        na = n if n <= ENUMERATE_UP_TO else n // 2
        nb = n - na
        if FT.shape[0] < (2 << na):
            FT = np.zeros((2 << na, n_states))
            FTb = np.zeros((2 << na, n_states))
            XT = np.zeros(2 << na)
        if GT.shape[0] < (2 << nb):
            GT = np.zeros((2 << nb, n_states))
            GTb = np.zeros((2 << nb, n_states))
            XB = np.zeros(2 << nb)
            PG = np.zeros((1 + (1 << nb), n_states))
            D = np.zeros((1 + (1 << nb), n_states))
        # the trees: subset a + 2^t holds object t (in S), a does not (the forward's bits)
        _copy(FT[1], FS[m])
        XT[1] = x0
        _copy(GT[1], f)
        XB[1] = 0.0
        _grow(FT, XT, GT, XB, unc, n, na, tgt, cs, n_pat, pv, has, vals, base[cs])
        ma, mb = 1 << na, 1 << nb
        FTb[ma: 2 * ma, :] = 0.0
        GTb[mb: 2 * mb, :] = 0.0
        cb = cbar[e]
        if width > 0.0:
            _soft_pairs(FT, XT, ma, GT, XB, mb, FTb, GTb, cb, edges, width, q, ds, ebar[e])
        elif nb == 0:  # every subset forward: its bin is x0 + X_alpha's
            for a in range(ma):
                w = cb[hard_bin(edges, XT[ma + a])]
                for k in range(n_states):
                    FTb[ma + a, k] = w * f[k]
                    GTb[1, k] += w * FT[ma + a, k]
        else:
            order = np.argsort(XB[mb: 2 * mb], kind="mergesort")
            xs = XB[mb: 2 * mb][order]
            PG[0, :] = 0.0
            for i in range(mb):
                _add(PG[i + 1], PG[i], GT[mb + order[i]])
            D[: mb + 1, :] = 0.0
            for a in range(ma):
                xa = XT[ma + a]
                for k in range(n_e):  # the forward kernel's comparisons
                    t = edges[k] - xa
                    idx[k] = mb
                    if t <= xs[0]:
                        idx[k] = 0
                    elif t <= xs[mb - 1]:
                        idx[k] = np.searchsorted(xs, t, side="left")
                idx[n_e] = mb
                prev = 0
                for k in range(n_e + 1):
                    w = cb[k]
                    i = idx[k]
                    if i > prev:
                        for s in range(n_states):
                            FTb[ma + a, s] += w * (PG[i, s] - PG[prev, s])
                            D[prev, s] += w * FT[ma + a, s]
                            D[i, s] -= w * FT[ma + a, s]
                    prev = i
            acc[:] = 0.0
            for i in range(mb):
                _add(acc, acc, D[i])
                _copy(GTb[mb + order[i]], acc)
        # the trees back to their roots, level by level
        _shrink(FTb, FT, GTb, GT, unc, n, na, tgt, cs, n_pat, pv, has, gp)
        _copy(fbar[e], GTb[1])
        # the folded objects, last first
        _copy(Fb, FTb[1])
        for j in range(m - 1, -1, -1):
            Fb2[:] = 0.0
            _step_t(Fb2, FS[j], Fb, tgt, fcol[j], n_pat, pv, fold[j], -1, has, False, gp)
            Fb, Fb2 = Fb2, Fb
