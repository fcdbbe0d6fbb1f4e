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
step restricted to the patterns with or without ``s``, :func:`_step`). The tuples are
walked depth first (one enumeration, :func:`_tuples`, a tape that the value walk and its
transpose replay), each prefix's distribution kept per depth and carried by ``O`` along
the scan, so a prefix is stepped once for all of its
extensions: ``O(sum_{j <= r} C(k, j + 1) P S + n P S)`` per event (``n`` objects, ``k``
of them can be in the set, ``P`` patterns, ``S`` count states), only sums of non-negative products. Every quantity in
lanes (lane 0 the value, then its tangents; the product rule). Outputs are per
candidate (no sums): the result does not depend on how blocks are split.

Two indexed sets of two collections (``s`` of ``c`` at depth ``r``, ``s2`` of ``c2 != c``
at depth ``r2``, each in its own rank order): a candidate is a pair ``(a, b)``,

``w(a, b) = P(the members of s ranked at or above a_r are exactly a, those of s2 ranked
at or above b_{r2} exactly b, and the event passes)``.

The objects pass independently and the count state does not depend on the order they
are added in, so ``c2``'s objects are walked right after ``G`` (which now leaves out
``c`` and ``c2``), backward in ``s2``'s rank order with ``b``'s constraints:
``G_2(b) = X_0 X_1 ... X_{n_2 - 1} G`` with ``X_m = I`` (on ``s2``'s patterns) for
``b``'s members, ``O`` for the other positions above ``b_{r2}``, every pattern after
it; then ``w(a, b)`` is the one-set walk of ``s`` above with ``G_2(b)`` in place of
``G``. The outer set ``s2`` is the one with fewer tuples (the walk runs once per outer
tuple): ``O(T_2 (n_2 P S + the one-set walk))`` per event. The same weights as the JAX
reference's two collections (:func:`analysis.select.leading.leading`: the set with fewer
candidates constrained per candidate, the other walked in rank order on each). Two sets
of one collection share objects (the reference's Cartesian product lets one object be
both sets' member, on the patterns holding both).

Two indexed sets of one collection (``s2`` of ``c2 = c``, each in its own rank order):
``w(a, b)`` sums the probabilities of the pattern configurations of ``c``'s objects
consistent with both tuples and with the pass table. "``b`` leads ``s2``" constrains each
object alone (``b``'s members hold ``s2``, the other objects ranked above ``b_{r2}`` in
``s2``'s order do not, the rest are free), and the objects are independent, so it is a
per-object restriction of the pattern probabilities, ``pi'_{jp} = pi_{jp} [p agrees with
b at j]``, whatever order the objects are walked in. The one-set walk of ``s`` above on
``pi'`` is then, term by term, the sum over the configurations consistent with ``a``
too: ``w(a, b)`` for every ``a``, an object holding both sets on the patterns with both
bits. So the outer loop is the two-collection one with ``G_2(b) = G`` and ``pi'`` in
place of ``pi`` for the walked objects, ``O(T_2 (one-set walk))`` per event; the
reference's two sets of one collection (:func:`analysis.select.leading.leading`: each
pair one backward pass, its objects' patterns restricted by both tuples, ``pi ok``) give
the same sums of products. ``pi'`` is written over the event's rows of ``pv_all`` and
``pd_all`` (and restored, bit for bit, after the event; blocks hold disjoint events, so
threads never share a row): the steps read ``pi`` as before (a second restriction
tested in each step measured 2-3x slower on the one-set walk).

Reverse mode: :mod:`analysis.pipeline.backends.numba.kernels._numba_lead_vjp`.
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.arith import LANES, lin_add
from analysis.select.lanes.policy import inline, njit, specialise_on
from analysis.select.lanes.steps import backward, clear, forward, weight

__all__ = ["candidates"]

IN, OUT, LEAF = 0, 1, 2  # the tuples' walk's steps: a member, a position left out, a tuple's end


@specialise_on("pd", (lambda t: getattr(t, "ndim", 0) == 3, lambda pd, g, p: pd[g, p]),
               lambda pd, g, p: 0.0)
def _tangent(pd, g, p):
    """Object ``g``'s pattern ``p`` tangents: ``pd[g, p]`` of an ``(N, P, LANES)`` array,
    or ``0.0`` where ``pd`` is a number (values only)."""


@inline
def _take(pat, c, p, ls, side):
    """Whether pattern ``p`` takes part: ``side`` 1 those holding set ``ls``, 0 those
    without it, 2 every pattern."""
    return side == 2 or (pat[c, p, ls] == 1) == (side == 1)


@inline
def _step(dst, src, scale, g, c, pv_all, pd, pat, n_pat, tgt, ls, side, states, back):
    """``dst[tgt(p, k)] += scale pi_gp src[k]`` (forward: ``I``, ``O`` or every pattern by
    ``side``, :func:`_take`) or, with ``back``, ``dst[k] += scale pi_gp src[tgt(p, k)]``
    over object ``g``'s patterns; in lanes with the tangents ``pd`` (``scale`` 1: the
    product rule), values only where ``pd`` is ``0.0`` (:func:`_tangent`)."""
    ns = states.shape[0]
    for p in range(n_pat[c]):
        if _take(pat, c, p, ls, side):
            a = scale * pv_all[g, p]
            if back:
                backward(dst, src, a, a, _tangent(pd, g, p), tgt[c, p], states, ns, 0)
            else:
                forward(dst, src, a, a, _tangent(pd, g, p), tgt[c, p], states, ns, 0, states,
                        False)


@inline
def _sizes(coff, n_cand, depth, e0, e1):
    """``(max_n, max_ops)`` over events ``e0:e1``: the most objects of an event (bounds
    each collection's) and the tape's length of :func:`_tuples` (at most two steps per
    tuple and prefix, and its end)."""
    max_n, k_top, ops, comb = 1, 0, 1, 1
    for e in range(e0, e1):
        max_n = max(max_n, np.sum(coff[:, e + 1]) - np.sum(coff[:, e]))
        k_top = max(k_top, n_cand[e])
    for r in range(depth + 1):  # C(k_top, r + 1), each step an exact division
        comb = comb * (k_top - r) // (r + 1)
        ops += 2 * max(comb, 0)
    return max_n, ops


@inline
def _tuples(kc, depth, pos, tape):
    """The depth-first walk of the increasing ``(depth + 1)``-tuples of rank positions
    ``0 .. kc - 1`` (:func:`itertools.combinations` order) as a tape: ``tape[i] = (kind,
    level, position)``, ``IN`` the position joins the prefix (one level down), ``LEAF``
    it ends a tuple, ``OUT`` it leaves its level for good (recorded only where a next
    position at that level can still start a tuple); returns the tape's length. The
    value walk (:func:`candidates`) and its transpose (:func:`lead_vjp`) replay it."""
    lv = 0
    pos[0] = 0
    nops = 0
    while True:
        m = pos[lv]
        if m > kc - 1 - (depth - lv):  # too few positions left: one level up
            if lv == 0:
                break
            lv -= 1
            m = pos[lv]
        else:
            tape[nops, 1] = lv
            tape[nops, 2] = m
            nops += 1
            if lv < depth:
                tape[nops - 1, 0] = IN
                lv += 1
                pos[lv] = m + 1
                continue
            tape[nops - 1, 0] = LEAF
        if m + 1 <= kc - 1 - (depth - lv):
            tape[nops, 0] = OUT
            tape[nops, 1] = lv
            tape[nops, 2] = m
            nops += 1
        pos[lv] = m + 1
    return nops


@inline
def _sides(side2, order2, lo2, n2, pos2, depth2):
    """``side2[j]`` of the outer tuple ``pos2`` (rank positions in ``order2``) for the
    ``n2`` objects of an event from ``lo2`` (flat ``lo2 + j``): 1 its members, 0 the other
    objects ranked above its last, 2 the rest (module docstring; :func:`_take`'s ``side``
    of each object's step)."""
    for m in range(n2):
        side2[order2[lo2 + m] - lo2] = 0 if m < pos2[depth2] else 2
    for j in range(depth2 + 1):
        side2[order2[lo2 + pos2[j]] - lo2] = 1


@inline
def _restrict(pv_all, keep, g0, side2, n, pat, c, n_pat, ls2):
    """The rows ``g0 .. g0 + n - 1`` of ``pv_all`` (a second set ``ls2`` of the walked
    collection ``c``): the saved ``keep`` on the patterns that agree with ``side2``
    (:func:`_sides`, :func:`_take`), 0 on the others (module docstring)."""
    for j in range(n):
        for p in range(n_pat[c]):
            pv_all[g0 + j, p] = keep[j, p] if _take(pat, c, p, ls2, side2[j]) else 0.0


@inline
def _block(coff, n_cand, depth, n_cand2, lc2, depth2, n_states, n_cols, block, b):
    """Block ``b``'s events ``e0:e1``, ``max_n`` (:func:`_sizes`) and the buffers both
    walks take: ``pos``, ``tape``, ``pos2``, ``tape2`` (:func:`_tuples`), ``side2``,
    ``chain`` (:func:`_push`), ``keep`` (``n_cols`` patterns) and the states."""
    e0, e1 = b * block, min(coff.shape[1] - 1, (b + 1) * block)
    max_n, max_ops = _sizes(coff, n_cand, depth, e0, e1)
    max_ops2 = _sizes(coff, n_cand2, depth2, e0, e1)[1] if lc2 >= 0 else 1
    return (e0, e1, max_n, np.empty(depth + 1, np.int64), np.empty((max_ops, 3), np.int64),
            np.empty(depth2 + 1, np.int64), np.empty((max_ops2, 3), np.int64),
            np.empty(max_n, np.int64), np.empty((max_n, 3), np.int64),
            np.empty((max_n, n_cols)), np.arange(n_states))


@inline
def _n_outer(n_cand, depth, n_cand2, lc2, depth2, e, pos2, tape2):
    """Event ``e``'s passes of the walk: 0 where a set has fewer objects than a tuple,
    1 for one set, else the length of the outer set's tape (into ``pos2``, ``tape2``)."""
    if n_cand[e] < depth + 1 or (lc2 >= 0 and n_cand2[e] < depth2 + 1):
        return 0
    return 1 if lc2 < 0 else _tuples(n_cand2[e], depth2, pos2, tape2)


@inline
def _push(gst, h, chain, g, c, side, pv_all, pd, pat, n_pat, tgt, ls, states):
    """``gst[h + 1]``: ``gst[h]`` stepped back over object ``g`` of collection ``c``
    (:func:`_step`), the step kept in ``chain[h]`` for the transpose; returns ``h + 1``."""
    clear(gst[h + 1], states, states.shape[0])
    _step(gst[h + 1], gst[h], 1.0, g, c, pv_all, pd, pat, n_pat, tgt, ls, side, states, True)
    chain[h, 0] = g
    chain[h, 1] = c
    chain[h, 2] = side
    return h + 1


@inline
def _chain_g(gst, chain, coff, base, e, lc, lc2, pv_all, pd, pat, n_pat, tgt, states):
    """``G`` (module docstring): from the pass table in ``gst[0]``, every object of the
    collections other than ``lc`` and ``lc2``, last first (:func:`_push`); returns its
    steps' count ``t`` (``G = gst[t]``)."""
    t = 0
    for c in range(coff.shape[0] - 1, -1, -1):
        if c == lc or c == lc2:
            continue
        for i in range(coff[c, e + 1] - 1, coff[c, e] - 1, -1):
            t = _push(gst, t, chain, base[c] + i, c, 2, pv_all, pd, pat, n_pat, tgt, 0, states)
    return t


@njit
def candidates(coff, base, order, n_cand, lc, ls, depth, order2, n_cand2, lc2, ls2, depth2,
               pv_all, pd_all, pat, n_pat, tgt, f, df, cand_off, block, w_out, obj_out, b0, b1):
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
    the pass table and its tangents in lanes (lane 0 zero). A second indexed set
    (``lc2 >= 0``: its collection, another than ``lc``; ``ls2``, ``depth2``, ``order2``,
    ``n_cand2`` as the first set's; ``lc2 = -1``: one set, the others unread; ``lc2 = lc``:
    a second set of the same collection, module docstring): the candidates are the pairs
    (its tuple, the first set's), the outer tuple's first, each row of ``obj_out`` the
    first set's ``depth + 1`` objects then its ``depth2 + 1``. ``pv_all`` and ``pd_all``
    are written and restored (a second set of ``lc``)."""
    n_states = f.shape[0]
    for b in range(b0, b1):
        e0, e1, max_n, pos, tape, pos2, tape2, side2, chain, keep, states = _block(
            coff, n_cand, depth, n_cand2, lc2, depth2, n_states, pv_all.shape[1], block, b)
        gst = np.empty((max_n + 1, n_states, LANES))
        B = np.empty((max_n + 1, n_states, LANES))
        V = np.empty((depth + 1, n_states, LANES))
        T = np.empty((n_states, LANES))
        H = np.empty(LANES)
        acc = np.empty(LANES)
        keepd = np.empty((max_n, pv_all.shape[1], LANES))
        for e in range(e0, e1):
            n_outer = _n_outer(n_cand, depth, n_cand2, lc2, depth2, e, pos2, tape2)
            if n_outer == 0:
                continue
            lo = coff[lc, e]
            n = coff[lc, e + 1] - lo
            for k in range(n_states):
                for r in range(LANES):
                    gst[0, k, r] = df[k, r]
                gst[0, k, 0] = f[k]
            t = _chain_g(gst, chain, coff, base, e, lc, lc2, pv_all, pd_all, pat, n_pat, tgt,
                         states)
            lo2 = coff[max(lc2, 0), e]
            g0 = base[lc] + lo
            if lc2 == lc:
                keep[:n] = pv_all[g0:g0 + n]
                keepd[:n] = pd_all[g0:g0 + n]
            nops = _tuples(n_cand[e], depth, pos, tape)
            q = cand_off[e]
            for o in range(n_outer):
                h = t  # gst[h]: the value function after the outer tuple's collection
                if lc2 >= 0:
                    kind, lv, m2 = tape2[o, 0], tape2[o, 1], tape2[o, 2]
                    pos2[lv] = m2
                    if kind != LEAF:
                        continue
                    n2 = coff[lc2, e + 1] - lo2
                    _sides(side2, order2, lo2, n2, pos2, depth2)
                    if lc2 == lc:  # its restriction on the walked objects themselves, G_2 = G
                        _restrict(pv_all, keep, g0, side2, n, pat, lc, n_pat, ls2)
                        for j in range(n):
                            for p in range(n_pat[lc]):
                                ok = _take(pat, lc, p, ls2, side2[j])
                                for r in range(LANES):
                                    pd_all[g0 + j, p, r] = keepd[j, p, r] if ok else 0.0
                        n2 = 0
                    # G_2(b): written out in each walk (a helper shared with lead_vjp measured
                    # 1.03-1.05x slower, both walks)
                    for m in range(n2 - 1, -1, -1):
                        j = order2[lo2 + m]
                        h = _push(gst, h, chain, base[lc2] + j, lc2, side2[j - lo2], pv_all,
                                  pd_all, pat, n_pat, tgt, ls2, states)
                # B, then the tuples' steps: written out in each walk (as inlined helpers
                # shared with lead_vjp they measured 1.25-1.4x slower, both walks)
                B[n] = gst[h]
                for m in range(n - 1, -1, -1):
                    clear(B[m], states, n_states)
                    _step(B[m], B[m + 1], 1.0, base[lc] + order[lo + m], lc, pv_all, pd_all, pat,
                          n_pat, tgt, ls, 2, states, True)
                V[0] = 0.0
                V[0, 0, 0] = 1.0
                for i in range(nops):
                    kind, lv, m = tape[i, 0], tape[i, 1], tape[i, 2]
                    g = base[lc] + order[lo + m]
                    pos[lv] = m  # the member at this level (an OUT's is replaced before a LEAF)
                    if kind == IN:  # (a helper of these two steps, inlined: measured 2x slower)
                        clear(V[lv + 1], states, n_states)
                        _step(V[lv + 1], V[lv], 1.0, g, lc, pv_all, pd_all, pat, n_pat, tgt, ls,
                              1, states, False)
                        continue
                    if kind == OUT:
                        clear(T, states, n_states)
                        _step(T, V[lv], 1.0, g, lc, pv_all, pd_all, pat, n_pat, tgt, ls, 0,
                              states, False)
                        V[lv] = T
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
                    for j in range(depth + 1):
                        obj_out[q, j] = order[lo + pos[j]]
                    if lc2 >= 0:
                        for j in range(depth2 + 1):
                            obj_out[q, depth + 1 + j] = order2[lo2 + pos2[j]]
                    q += 1
            if lc2 == lc:  # the rows restored
                pv_all[g0:g0 + n] = keep[:n]
                pd_all[g0:g0 + n] = keepd[:n]
