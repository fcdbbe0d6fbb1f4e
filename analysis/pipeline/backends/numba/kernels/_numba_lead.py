"""The compiled candidate walk of :mod:`analysis.pipeline.backends.numba._fastleading` (numba, float64).

The weights of :func:`analysis.select.objects.leading` for one indexed set ``s`` of
collection ``c`` at depth ``r`` (``s[0]`` ... ``s[r]``): per event, every increasing
``(r + 1)``-tuple ``a`` of rank positions of ``c``'s objects (in
:func:`itertools.combinations` order) with

``w(a) = P(the members of s ranked at or above a_r are exactly a, and the event passes)``

from the count recursions of :mod:`analysis.pipeline.backends.numba.kernels._numba_dp` (same tables,
``tgt[c, p, k]`` the count state after adding an object of pattern ``p`` to ``k``):

- ``G``: the value function of every other collection's objects, from the pass table
  ``f`` backward (the count state does not depend on the order objects are added in);
- ``B_m``: the value function of ``c``'s rank positions ``m, m + 1, ...`` (all
  patterns), then ``G``; ``B_n = G``;
- the tuple's forward distribution: from ``delta_0``, a member's step keeps the
  patterns holding ``s`` (``I``), any other position above ``a_r`` the patterns without
  it (``O``), so ``w(a) = < I_{a_r} O ... I_{a_0} O ... delta_0, B_{a_r + 1} >``.

The steps are those of :mod:`analysis.select.lanes.steps` (a forward
step restricted to the patterns with or without ``s``). The tuples are walked depth first, each prefix's distribution kept per depth and
carried by ``O`` along the scan, so a prefix is stepped once for all of its
extensions: ``O(sum_{j <= r} C(k, j + 1) P S + n P S)`` per event (``n`` objects, ``k``
of them can be in the set, ``P`` patterns, ``S`` count states), only sums of non-negative products. Every quantity in
lanes (lane 0 the value, then its tangents; the product rule). Outputs are per
candidate (no sums): the result does not depend on how blocks are split.
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.arith import LANES, lin_add
from analysis.select.lanes.policy import inline, njit
from analysis.select.lanes.steps import backward, clear, forward, weight

__all__ = ["candidates"]


@inline
def _step(dst, src, g, c, pv_all, pd_all, pat, n_pat, tgt, ls, keep, states):
    """``dst = sum_{p: [p holds s] == keep} pi_p src[k] -> tgt(p, k)`` (a forward step
    of object ``g`` restricted to the patterns with (``keep``) or without set ``ls``)."""
    n_states = states.shape[0]
    clear(dst, states, n_states)
    for p in range(n_pat[c]):
        if (pat[c, p, ls] == 1) != keep:
            continue
        pv = pv_all[g, p]
        forward(dst, src, pv, pv, pd_all[g, p], tgt[c, p], states, n_states, 0, states, False)


@inline
def _back(dst, src, g, c, pv_all, pd_all, n_pat, tgt, states):
    """``dst[k] = sum_p pi_p src[tgt(p, k)]``: object ``g``'s backward step."""
    n_states = states.shape[0]
    clear(dst, states, n_states)
    for p in range(n_pat[c]):
        pv = pv_all[g, p]
        backward(dst, src, pv, pv, pd_all[g, p], tgt[c, p], states, n_states, 0)


@njit
def candidates(coff, base, order, n_cand, lc, ls, depth, pv_all, pd_all, pat, n_pat, tgt, f,
               df, max_n, cand_off, block, w_out, obj_out, b0, b1):
    """Blocks ``b0:b1``: ``w_out[q]`` (lanes) and ``obj_out[q]`` (the tuple's objects,
    indices into collection ``lc``'s flat arrays, highest ranked first) of candidate
    ``q`` in ``cand_off[e]:cand_off[e + 1]`` of event ``e`` (``C(k_e, depth + 1)``,
    ``k_e = n_cand[e]``). ``order[coff[lc, e] + i]``: the object at rank position ``i``,
    the ``k_e`` objects that can be in the set first (in rank order), then those that
    cannot (probability and tangents exactly 0 for every pattern holding it: their
    steps are the same in or after the tuple, so they are walked last and never
    enumerated); ``ls``: the set's
    position in ``lc``'s patterns; ``pv_all``/``pd_all``: pattern probabilities and
    tangents per global object (``base[c] + i``; tangents' lane 0 zero); ``f``/``df``:
    the pass table and its tangents in lanes (lane 0 zero); ``max_n``: the largest
    ``n_e``."""
    n_ev = coff.shape[1] - 1
    n_coll = coff.shape[0]
    n_states = f.shape[0]
    for b in range(b0, b1):
        G = np.empty((n_states, LANES))
        Gn = np.empty((n_states, LANES))
        B = np.empty((max_n + 1, n_states, LANES))
        V = np.empty((depth + 1, n_states, LANES))
        T = np.empty((n_states, LANES))
        H = np.empty(LANES)
        acc = np.empty(LANES)
        pos = np.empty(depth + 1, np.int64)
        states = np.arange(n_states)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            lo = coff[lc, e]
            n = coff[lc, e + 1] - lo
            kc = n_cand[e]  # the objects a tuple may hold: rank positions 0 .. kc - 1
            if kc < depth + 1:
                continue
            for k in range(n_states):
                for r in range(LANES):
                    G[k, r] = df[k, r]
                G[k, 0] = f[k]
            for c in range(n_coll - 1, -1, -1):  # every other collection, last object first
                if c == lc:
                    continue
                for i in range(coff[c, e + 1] - 1, coff[c, e] - 1, -1):
                    _back(Gn, G, base[c] + i, c, pv_all, pd_all, n_pat, tgt, states)
                    G, Gn = Gn, G
            B[n] = G
            for m in range(n - 1, -1, -1):
                _back(B[m], B[m + 1], base[lc] + order[lo + m], lc, pv_all, pd_all, n_pat,
                      tgt, states)
            V[0] = 0.0
            V[0, 0, 0] = 1.0
            lv = 0
            pos[0] = 0
            q = cand_off[e]
            while True:
                m = pos[lv]
                if m > kc - 1 - (depth - lv):  # too few positions left: one level up
                    if lv == 0:
                        break
                    lv -= 1
                    m = pos[lv]
                else:
                    g = base[lc] + order[lo + m]
                    if lv < depth:  # m joins the prefix: one level down
                        _step(V[lv + 1], V[lv], g, lc, pv_all, pd_all, pat, n_pat, tgt, ls,
                              True, states)
                        lv += 1
                        pos[lv] = m + 1
                        continue
                    # the last member: w = sum_{p holds s} < pi_p V, B_{m+1}[tgt(p, .)] >
                    for r in range(LANES):
                        acc[r] = 0.0
                    Bn = B[m + 1]
                    for p in range(n_pat[lc]):
                        if pat[lc, p, ls] != 1:
                            continue
                        weight(H, V[lv], Bn, tgt[lc, p], states, n_states, 0, states, False)
                        lin_add(acc, pv_all[g, p], H, H[0], pd_all[g, p])
                    for r in range(LANES):
                        w_out[q, r] = acc[r]
                    for i in range(depth + 1):
                        obj_out[q, i] = order[lo + pos[i]]
                    q += 1
                # m leaves this level: it stays out of the tuple from now on (a step read
                # only if a next position at this level can still start a tuple)
                if m + 1 <= kc - 1 - (depth - lv):
                    _step(T, V[lv], base[lc] + order[lo + m], lc, pv_all, pd_all, pat, n_pat,
                          tgt, ls, False, states)
                    V[lv] = T
                pos[lv] = m + 1
