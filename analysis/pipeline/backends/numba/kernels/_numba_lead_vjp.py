"""Reverse mode of the candidate walk (:mod:`analysis.pipeline.backends.numba.kernels._numba_lead`).

:func:`lead_vjp` (values only): given the cotangents ``wbar_a = dL/dw(a)``, ``L = sum_a
wbar_a w(a)`` is linear in each step, so per event the value walk runs once more (``G``,
``B``, the tuples' tape replayed, each step's input kept) and then its transpose in
reverse order:

- a tuple's last member: ``dL/dpi_{a_r p} += wbar_a <V, B_{a_r + 1}[tgt(p, .)]>`` for the
  patterns ``p`` holding ``s``, ``Vbar += wbar_a I^T B_{a_r + 1}``,
  ``Bbar_{a_r + 1} += wbar_a I V``;
- a step ``V' = X V`` (``X`` = ``I`` or ``O``): ``dL/dpi_{jp} += <V, Vbar'[tgt(p, .)]>`` over
  its patterns and ``Vbar += X^T Vbar'``;
- the chain ``B_m = A_m B_{m + 1}`` (every pattern), then ``G``'s:
  ``dL/dpi_{jp} += <Bbar_m, B_{m + 1}[tgt(p, .)]>``, ``Bbar_{m + 1} += A_m^T Bbar_m``, from
  ``m = 0`` up; ``dL/df = Gbar`` at the end (the trainable count thresholds).

A second set (its outer tuples ``b``, the walk's ``G_2(b)``): each outer tuple's
transpose ends with ``Bbar_n = dL/dG_2(b)``, transposed through ``G_2(b)``'s chain (each
step on the patterns it took) and summed over ``b`` into ``Gbar``. A second set of the
same collection: ``G_2(b) = G`` and the walk runs on ``pi' = pi [p agrees with b]``
(written over ``pv_all``'s rows as the walk does), so ``dL/dpi = [p agrees with b]
dL/dpi'``: each outer tuple's additions to ``gp`` on the other patterns are undone.

A transposed forward step is the walk's backward step and the reverse (the walk's
``_step``), a pattern's derivative its inner sum
(:func:`~analysis.select.lanes.steps.weight`). Cost: about three value walks of the
candidates, whatever the number of parameters; memory per block, the tape ``(ops, S)``.
Outputs per object and per event (no sums): blocks and threads change no bit.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._numba_lead import (
    IN,
    LEAF,
    OUT,
    _block,
    _chain_g,
    _n_outer,
    _push,
    _restrict,
    _sides,
    _step,
    _take,
    _tuples,
)
from analysis.select.lanes.policy import inline, njit
from analysis.select.lanes.steps import weight

__all__ = ["lead_vjp"]


@inline
def _grad(gp, g, scale, F, G, c, pat, n_pat, tgt, ls, side, states):
    """``gp[g, p] += scale sum_k F[k] G[tgt(p, k)]`` over the patterns ``side`` takes
    (:func:`_step`'s)."""
    ns = states.shape[0]
    for p in range(n_pat[c]):
        if _take(pat, c, p, ls, side):
            gp[g, p] += scale * weight(0.0, F, G, tgt[c, p], states, ns, 0, states, False)


@njit
def lead_vjp(coff, base, order, n_cand, lc, ls, depth, order2, n_cand2, lc2, ls2, depth2,
             pv_all, pat, n_pat, tgt, f, df, cand_off, wbar, block, gp, dfs, b0, b1):
    """Blocks ``b0:b1`` of events (arguments as :func:`candidates`',
    values only: ``pv_all`` ``(N, P)``, ``df`` ``(S, K)``); ``wbar[q]`` the cotangent of
    candidate ``q``'s weight. Outputs (added to): ``gp[g, p] = dL/dpi_gp``, ``dfs[e, r] =
    sum_k dL/df[k] df[k, r]``. A second set: per outer tuple, the walk's transpose gives
    ``Bbar_0 = dL/dG_2(b)``, transposed through ``G_2(b)``'s chain and summed into ``G``'s
    cotangent."""
    n_states = f.shape[0]
    for b in range(b0, b1):
        e0, e1, max_n, pos, tape, pos2, tape2, side2, chain, keep, states = _block(
            coff, n_cand, depth, n_cand2, lc2, depth2, n_states, pv_all.shape[1], block, b)
        gst = np.empty((max_n + 1, n_states))
        Gbar = np.empty(n_states)
        B = np.empty((max_n + 1, n_states))
        Bbar = np.empty((max_n + 1, n_states))
        V = np.empty((depth + 1, n_states))
        Vbar = np.empty((depth + 1, n_states))
        T = np.empty(n_states)
        T2 = np.empty(n_states)
        tape_v = np.empty((tape.shape[0], n_states))
        gkeep = np.empty((max_n, pv_all.shape[1]))
        for e in range(e0, e1):
            n_outer = _n_outer(n_cand, depth, n_cand2, lc2, depth2, e, pos2, tape2)
            if n_outer == 0:
                continue
            live = False
            for q in range(cand_off[e], cand_off[e + 1]):
                live = live or wbar[q] != 0.0
            if not live:
                continue
            lo = coff[lc, e]
            n = coff[lc, e + 1] - lo
            # the value functions: G over the other collections (kept), B over c's positions
            gst[0] = f
            t = _chain_g(gst, chain, coff, base, e, lc, lc2, pv_all, 0.0, pat, n_pat, tgt,
                         states)
            lo2 = coff[max(lc2, 0), e]
            g0 = base[lc] + lo
            if lc2 == lc:
                keep[:n] = pv_all[g0:g0 + n]
            nops = _tuples(n_cand[e], depth, pos, tape)
            n_in = 0  # the inner tuples per outer one
            for i in range(nops):
                n_in += tape[i, 0] == LEAF
            qs = cand_off[e]
            Gbar[:] = 0.0  # two sets: the outer tuples' shares summed (one set: assigned)
            for o in range(n_outer):
                h = t
                if lc2 >= 0:
                    kind, lv, m2 = tape2[o, 0], tape2[o, 1], tape2[o, 2]
                    pos2[lv] = m2
                    if kind != LEAF:
                        continue
                    live = False
                    for q in range(qs, qs + n_in):
                        live = live or wbar[q] != 0.0
                    if not live:
                        qs += n_in
                        continue
                    n2 = coff[lc2, e + 1] - lo2
                    _sides(side2, order2, lo2, n2, pos2, depth2)
                    if lc2 == lc:  # candidates' restriction, G_2 = G; dL/dpi' before b's
                        _restrict(pv_all, keep, g0, side2, n, pat, lc, n_pat, ls2)
                        gkeep[:n] = gp[g0:g0 + n]
                        n2 = 0
                    for m in range(n2 - 1, -1, -1):  # G_2(b), as candidates' (steps kept)
                        j = order2[lo2 + m]
                        h = _push(gst, h, chain, base[lc2] + j, lc2, side2[j - lo2], pv_all, 0.0,
                                  pat, n_pat, tgt, ls2, states)
                B[n] = gst[h]
                for m in range(n - 1, -1, -1):
                    B[m] = 0.0
                    _step(B[m], B[m + 1], 1.0, base[lc] + order[lo + m], lc, pv_all, 0.0, pat,
                          n_pat, tgt, ls, 2, states, True)
                # the tuples' tape replayed (the value walk's order), each step's input kept
                V[0] = 0.0
                V[0, 0] = 1.0
                for i in range(nops):
                    kind, lv = tape[i, 0], tape[i, 1]
                    g = base[lc] + order[lo + tape[i, 2]]
                    tape_v[i] = V[lv]
                    if kind == IN:  # candidates' steps
                        V[lv + 1] = 0.0
                        _step(V[lv + 1], V[lv], 1.0, g, lc, pv_all, 0.0, pat, n_pat, tgt, ls, 1,
                              states, False)
                    elif kind == OUT:
                        T[:] = 0.0
                        _step(T, V[lv], 1.0, g, lc, pv_all, 0.0, pat, n_pat, tgt, ls, 0, states,
                              False)
                        V[lv] = T
                # the transpose, in reverse order (the candidates too: the last one first)
                Vbar[:] = 0.0
                Bbar[:] = 0.0
                q = qs + n_in
                for i in range(nops - 1, -1, -1):
                    kind, lv, m = tape[i, 0], tape[i, 1], tape[i, 2]
                    g = base[lc] + order[lo + m]
                    vin = tape_v[i]
                    if kind == LEAF:
                        q -= 1
                        wq = wbar[q]
                        if wq != 0.0:
                            _grad(gp, g, wq, vin, B[m + 1], lc, pat, n_pat, tgt, ls, 1, states)
                            _step(Vbar[lv], B[m + 1], wq, g, lc, pv_all, 0.0, pat, n_pat, tgt,
                                  ls, 1, states, True)
                            _step(Bbar[m + 1], vin, wq, g, lc, pv_all, 0.0, pat, n_pat, tgt, ls,
                                  1, states, False)
                    elif kind == OUT:
                        _grad(gp, g, 1.0, vin, Vbar[lv], lc, pat, n_pat, tgt, ls, 0, states)
                        T[:] = 0.0
                        _step(T, Vbar[lv], 1.0, g, lc, pv_all, 0.0, pat, n_pat, tgt, ls, 0,
                              states, True)
                        Vbar[lv] = T
                    else:
                        _grad(gp, g, 1.0, vin, Vbar[lv + 1], lc, pat, n_pat, tgt, ls, 1, states)
                        _step(Vbar[lv], Vbar[lv + 1], 1.0, g, lc, pv_all, 0.0, pat, n_pat, tgt,
                              ls, 1, states, True)
                        Vbar[lv + 1] = 0.0
                qs += n_in
                for m in range(n):  # the chain of B transposed
                    g = base[lc] + order[lo + m]
                    _grad(gp, g, 1.0, Bbar[m], B[m + 1], lc, pat, n_pat, tgt, ls, 2, states)
                    _step(Bbar[m + 1], Bbar[m], 1.0, g, lc, pv_all, 0.0, pat, n_pat, tgt, ls, 2,
                          states, False)
                if lc2 < 0:
                    Gbar[:] = Bbar[n]
                    continue
                if lc2 == lc:  # dL/dpi = [p agrees with b] dL/dpi'
                    for j in range(n):
                        for p in range(n_pat[lc]):
                            if not _take(pat, lc, p, ls2, side2[j]):
                                gp[g0 + j, p] = gkeep[j, p]
                # G_2(b)'s chain transposed, into G's cotangent (this loop and G's below as
                # one helper measured 1.03-1.04x slower)
                T[:] = Bbar[n]
                for i in range(h - 1, t - 1, -1):
                    g, c, side = chain[i, 0], chain[i, 1], chain[i, 2]
                    _grad(gp, g, 1.0, T, gst[i], c, pat, n_pat, tgt, ls2, side, states)
                    T2[:] = 0.0
                    _step(T2, T, 1.0, g, c, pv_all, 0.0, pat, n_pat, tgt, ls2, side, states, False)
                    T[:] = T2
                Gbar += T
            if lc2 == lc:  # the rows restored
                pv_all[g0:g0 + n] = keep[:n]
            T[:] = Gbar  # G's chain transposed
            for i in range(t - 1, -1, -1):
                g, c, side = chain[i, 0], chain[i, 1], chain[i, 2]
                _grad(gp, g, 1.0, T, gst[i], c, pat, n_pat, tgt, ls, side, states)
                T2[:] = 0.0
                _step(T2, T, 1.0, g, c, pv_all, 0.0, pat, n_pat, tgt, ls, side, states, False)
                T[:] = T2
            for r in range(df.shape[1]):
                acc = 0.0
                for k in range(n_states):
                    acc += T[k] * df[k, r]
                dfs[e, r] += acc
