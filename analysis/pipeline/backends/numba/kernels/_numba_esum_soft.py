"""Soft bins of event sums on the numba kernel (float64): per event ``P(pass, X + eps in
bin b)``, ``eps`` logistic of the histogram's width (:mod:`analysis.stats.softbins`).

The meaning of :func:`analysis.select.subsets.sum_bins` with ``width`` (the JAX
reference): for ``X = sum_{j in S} v_j``,

    P(pass, X + eps in b) = sum_A P(S holds exactly the uncertain objects A, pass) q_b(X_A)

over every subset ``A`` of the event's uncertain objects of ``S``'s collection, ``q_b``
the soft-bin probabilities of :func:`analysis.pipeline.backends.numba.kernels._numba_softbins.bin_probabilities`
(the one soft-bin source of the numba fills). The certain objects (the one definition,
``cert``, ``ins``) fold into ``F`` and ``x0`` as in
:mod:`analysis.pipeline.backends.numba.kernels._numba_esum`; the ``U`` uncertain ones
meet in the middle over every state and lane
(:func:`~analysis.pipeline.backends.numba.kernels._numba_esum_steps._halves`): each pair
``(alpha, beta)`` is one subset, ``P_A = <F_alpha, G_beta>`` at ``X_A = X_alpha +
X_beta`` spread over every bin (soft bins have no prefix sums: every subset reaches
every bin). Memory ``O(2^(U/2) S L)``, time ``O(2^U (S + n_b) L)`` per event (``S``
count states, ``n_b`` bins, ``L`` lanes).

Tangents in lanes (lane 0 the value; the product rule): ``P_A``'s from the pattern
probabilities and the pass table, and the trainable edges' ``P_A d q_b / d e_j`` in the
lane of edge ``j``'s parameter (``elane[j]``; below 1 a fixed edge). ``X_A`` carries no
tangent (a shifted field is a shift side of its own). Outputs per event (no sums), so
blocks and threads change no bit. An event with more than :data:`MAX_UNCERTAIN` uncertain
objects gets NaN and its count in ``n_unc`` (the host refuses it).
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._numba_dp import LANES
from analysis.pipeline.backends.numba.kernels._numba_esum import MAX_UNCERTAIN
from analysis.pipeline.backends.numba.kernels._numba_esum_steps import (
    _dense,
    _halves,
    _partition,
    _partition_buffers,
)
from analysis.pipeline.backends.numba.kernels._numba_softbins import bin_probabilities
from analysis.select.lanes.policy import inline, njit
from analysis.select.lanes.steps import weight

__all__ = ["MAX_UNCERTAIN", "event_sum_soft_bins"]


@inline
def _spread(o, t, x, nl, edges, width, elane, q, ds):
    """``o[b, r] += t[r] q_b(x)`` over the first ``nl`` lanes and, for each trainable
    edge ``j`` (``elane[j]``: its lane), ``t[0] d q_b / d e_j`` into its lane."""
    soft = bin_probabilities(edges, x, width, q, ds)
    for b in range(o.shape[0]):
        qb = q[b]
        for r in range(nl):
            o[b, r] += t[r] * qb
    if soft:
        for j in range(edges.shape[0]):
            r = elane[j]
            if r < 1 or r >= nl:
                continue
            d = t[0] * ds[j]
            o[j, r] += d
            o[j + 1, r] -= d


@njit
def event_sum_soft_bins(coff, base, pv_all, pd_all, n_pat, tgt, f, df, cs, has, cert, ins,
                        vals, edges, width, elane, nl, block, out, n_unc, b0, b1):
    """Events of blocks ``b0:b1`` (module docstring): ``out[e, b, :nl]`` = ``P(pass, X +
    eps in bin b)`` and its tangents (underflow first, overflow last), ``n_unc[e]`` the
    event's uncertain objects of collection ``cs``; the arguments of
    :func:`analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins` and the
    soft bins' ``width > 0`` and ``elane`` (per edge its parameter's lane, 0: fixed)."""
    n_ev = out.shape[0]
    n_states = f.shape[0]
    n_e = edges.shape[0]
    states = np.arange(n_states)
    G0 = np.zeros((n_states, LANES))
    for k in range(n_states):
        G0[k, 0] = f[k]
        for r in range(1, nl):
            G0[k, r] = df[k, r]
    unc, fold, fcol = _partition_buffers(coff, b0 * block, min(n_ev, b1 * block))
    F = np.zeros((n_states, LANES))
    Fn = np.zeros((n_states, LANES))
    FA = np.zeros((1, n_states, LANES))  # grown for an event that needs more
    GB = np.zeros((1, n_states, LANES))
    XA = np.zeros(1)
    XB = np.zeros(1)
    inner = np.zeros(LANES)
    q = np.zeros(n_e + 1)
    ds = np.zeros(n_e)
    for e in range(b0 * block, min(n_ev, b1 * block)):
        # every object but the uncertain ones of cs: one forward step each, in order
        n, m, x0 = _partition(coff, base, cs, cert, ins, vals, e, unc, fold, fcol)
        F[:, :] = 0.0
        F[0, 0] = 1.0
        for j in range(m):
            _dense(Fn, F, tgt, fcol[j], n_pat, pv_all, pd_all, fold[j], -1, has, states, False)
            F, Fn = Fn, F
        n_unc[e] = n
        o = out[e]
        o[:, :] = 0.0
        if n > MAX_UNCERTAIN:
            o[:, :] = np.nan
            continue
        # the first half forward from F, the second backward from the pass table (the
        # last object first)
        m, mb = 1 << (n // 2), 1 << (n - n // 2)
        FA, XA, GB, XB = _halves(FA, XA, GB, XB, F, Fn, G0, x0, unc, n, tgt, cs, n_pat, pv_all,
                                 pd_all, base[cs], vals, states, has)
        for a in range(m):
            for b in range(mb):
                weight(inner, FA[a], GB[b], states, states, n_states, 0, states, False)
                live = False
                for r in range(nl):
                    live = live or inner[r] != 0.0
                if live:  # a subset of probability and tangents 0 adds exact zeros
                    _spread(o, inner, XA[a] + XB[b], nl, edges, width, elane, q, ds)
