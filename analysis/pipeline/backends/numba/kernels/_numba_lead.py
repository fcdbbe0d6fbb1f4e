"""The compiled candidate walk of :mod:`analysis.pipeline.backends.numba._fastleading` and its
transpose (numba, float64).

The weights of :func:`analysis.select.objects.leading` for one indexed set ``s`` of
collection ``c`` at depth ``r``: per event, every increasing ``(r + 1)``-tuple ``a`` of
rank positions of ``c``'s objects (:func:`itertools.combinations` order) with

``w(a) = P(the members of s ranked at or above a_r are exactly a, and the event passes)``

from the count tables of :mod:`analysis.select.lanes.steps` (``tgt[c, p, k]``, the pass
table ``f``): ``G`` the value function of every other collection's objects from ``f``
backward; ``B_m`` that of ``c``'s rank positions ``m, m + 1, ...`` (every pattern), then
``G`` (``B_n = G``); from ``delta_0``, a member's step keeps the patterns holding ``s``
(``I``), any other position above ``a_r`` those without it (``O``):
``w(a) = < I_{a_r} O ... I_{a_0} O ... delta_0, B_{a_r + 1} >``. The tuples are walked
depth first from one enumeration (:func:`_tuples`, a tape), each prefix's distribution
kept per depth, so a prefix is stepped once for all of its extensions: ``O(sum_{j <= r}
C(k, j + 1) P S + n P S)`` per event (``k`` of the ``n`` objects can be in the set, ``P``
patterns, ``S`` count states), only sums of non-negative products, in lanes (value, then
tangents). Outputs are per candidate: blocks change no bit.

Two indexed sets (``s2`` of ``c2`` at depth ``r2``, in its own rank order): a candidate
is a pair ``(a, b)`` of their tuples. The outer set (the one with fewer tuples) is
walked once per outer tuple ``b``: ``G_2(b) = X_0 ... X_{n_2 - 1} G`` over ``c2``'s
objects (``X_m = I`` on ``s2``'s patterns for ``b``'s members, ``O`` for the others
ranked above ``b_{r2}``, every pattern after), then the one-set walk with ``G_2(b)`` in
place of ``G``. Of one collection (``c2 = c``), "``b`` leads ``s2``" restricts each
object's patterns alone, ``pi'_{jp} = pi_{jp} [p agrees with b at j]``, so ``G_2(b) =
G`` and the one-set walk runs on ``pi'`` (written over the event's rows of ``pv_all``
and ``pd_all`` and restored bit for bit; blocks hold disjoint events: a second
restriction tested in each step measured 2-3x slower). The same sums of products as
the reference (:func:`analysis.select.leading.leading`; derivation there).

Reverse mode (``wbar`` given: values only): ``L = sum_a wbar_a w(a)`` is linear in each
step, so per event the same walk runs (each tape step's input kept) and then its
transpose in reverse order: a tuple's end ``dL/dpi_{a_r p} += wbar_a <V, B_{a_r +
1}[tgt(p, .)]>`` (``p`` holding ``s``), ``Vbar += wbar_a I^T B_{a_r + 1}``, ``Bbar_{a_r
+ 1} += wbar_a I V``; a step ``V' = X V``: ``dL/dpi_{jp} += <V, Vbar'[tgt(p, .)]>``,
``Vbar += X^T Vbar'``; the chains of ``B``, ``G_2(b)`` (summed over ``b``) and ``G``
likewise, ``dL/df = Gbar`` at the end. One collection's second set: ``dL/dpi = [p agrees
with b] dL/dpi'``. A transposed forward step is the backward step (:func:`_step`) and
the reverse; about three value walks, whatever the number of parameters.

The steps of the tuples' walk (:func:`_step`, :func:`_grad`) are inlined; those run once
per block, event, outer tuple or object of a chain (:func:`_sizes`, :func:`_tuples`,
:func:`_sides`, :func:`_restrict`, :func:`_push`) are compiled once as functions of their
own (inlined, each was typed and compiled again at each of its calls), and arrays are
copied by loops (:func:`~._numba_esum_steps._copy`: numba's array assignment compiles a
shape check's error path): a cold build of both modes 60-61 -> 40-47 s of CPU, the same
bits, the same speed within noise.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._numba_esum_steps import _add, _copy
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
def _grad(gp, g, scale, F, G, c, pat, n_pat, tgt, ls, side, states):
    """``gp[g, p] += scale sum_k F[k] G[tgt(p, k)]`` over the patterns ``side`` takes
    (:func:`_step`'s): a transposed step's pattern derivatives."""
    ns = states.shape[0]
    for p in range(n_pat[c]):
        if _take(pat, c, p, ls, side):
            gp[g, p] += scale * weight(0.0, F, G, tgt[c, p], states, ns, 0, states, False)


@njit
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


@njit
def _tuples(kc, depth, pos, tape):
    """The depth-first walk of the increasing ``(depth + 1)``-tuples of rank positions
    ``0 .. kc - 1`` (:func:`itertools.combinations` order) as a tape: ``tape[i] = (kind,
    level, position)``, ``IN`` the position joins the prefix (one level down), ``LEAF``
    it ends a tuple, ``OUT`` it leaves its level for good (recorded only where a next
    position at that level can still start a tuple); returns the tape's length."""
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


@njit
def _sides(side2, order2, lo2, n2, pos2, depth2):
    """``side2[j]`` of the outer tuple ``pos2`` (rank positions in ``order2``) for the
    ``n2`` objects of an event from ``lo2`` (flat ``lo2 + j``): 1 its members, 0 the other
    objects ranked above its last, 2 the rest (:func:`_take`'s ``side``)."""
    for m in range(n2):
        side2[order2[lo2 + m] - lo2] = 0 if m < pos2[depth2] else 2
    for j in range(depth2 + 1):
        side2[order2[lo2 + pos2[j]] - lo2] = 1


@njit
def _restrict(x, keep, g0, side2, n, pat, c, n_pat, ls2):
    """The rows ``g0 .. g0 + n - 1`` of ``x`` (``pv_all`` or ``pd_all`` of the walked
    collection ``c``, a second set ``ls2`` of it): the saved ``keep`` on the patterns that
    agree with ``side2`` (:func:`_sides`, :func:`_take`), 0 on the others."""
    for j in range(n):
        for p in range(n_pat[c]):
            if _take(pat, c, p, ls2, side2[j]):  # a number, or lanes: one copy for both
                _copy(x[g0 + j, p:p + 1], keep[j, p:p + 1])
            else:
                x[g0 + j, p] = 0.0


@inline
def _any(wbar, q0, q1):
    """Whether a cotangent of ``wbar[q0:q1]`` is not 0 (the others' transposes add 0)."""
    for q in range(q0, q1):
        if wbar[q] != 0.0:
            return True
    return False


@njit
def _push(gst, h, chain, g, c, side, pv_all, pd, pat, n_pat, tgt, ls, states):
    """``gst[h + 1]``: ``gst[h]`` stepped back over object ``g`` of collection ``c``
    (:func:`_step`), the step kept in ``chain[h]`` for the transpose; returns ``h + 1``."""
    clear(gst[h + 1], states, states.shape[0])
    _step(gst[h + 1], gst[h], 1.0, g, c, pv_all, pd, pat, n_pat, tgt, ls, side, states, True)
    chain[h, 0] = g
    chain[h, 1] = c
    chain[h, 2] = side
    return h + 1


@njit
def candidates(coff, base, order, n_cand, lc, ls, depth, order2, n_cand2, lc2, ls2, depth2,
               pv_all, pd_all, pat, n_pat, tgt, f, df, cand_off, block, w_out, obj_out, wbar,
               gp, dfs, b0, b1):
    """Blocks ``b0:b1`` of events: the walk of candidates ``q`` in ``cand_off[e]:cand_off[e
    + 1]`` of event ``e`` (``C(k_e, depth + 1)``, ``k_e = n_cand[e]``), or its transpose.

    ``order[coff[lc, e] + i]``: the object at rank position ``i``, the ``k_e`` objects
    that can be in the set first (in rank order), then those that cannot (probability
    and tangents exactly 0 on every pattern holding it: walked last, never enumerated);
    ``ls``: the set's position in ``lc``'s patterns; ``pv_all``: pattern probabilities
    per global object (``base[c] + i``); ``f``: the pass table. A second indexed set
    (``lc2 >= 0``: its collection, ``lc`` itself or another; ``ls2``, ``depth2``,
    ``order2``, ``n_cand2`` as the first set's; ``lc2 = -1``: one set, the others
    unread): the candidates are the pairs, the outer tuple's first.

    The walk (``wbar`` None; ``gp``, ``dfs`` None): ``pd_all`` ``(N, P, LANES)`` and
    ``df`` ``(S, LANES)`` the tangents (lane 0 zero); outputs ``w_out[q]`` (lanes) and
    ``obj_out[q]`` (the tuple's objects, indices into ``lc``'s flat arrays, highest
    ranked first; two sets: the first set's ``depth + 1``, then the second's).

    The transpose (``w_out``, ``obj_out`` None; ``pd_all`` 0.0: values only): ``wbar[q]``
    the cotangent of candidate ``q``'s weight, ``df`` ``(S, K)``; added to: ``gp[g, p] =
    dL/dpi_gp``, ``dfs[e, r] = sum_k dL/df[k] df[k, r]``.

    Each mode's own code is pruned at compile time (numba drops the branches ``x is not
    None`` of an argument typed None). ``pv_all`` and ``pd_all`` are written and restored
    (a second set of ``lc``)."""
    n_states = f.shape[0]
    # every pattern (the other collections' objects in G) as an int64 value, not a
    # literal: one compilation of _push, not one per constant
    every = np.int64(2)
    for b in range(b0, b1):
        e0, e1 = b * block, min(coff.shape[1] - 1, (b + 1) * block)
        max_n, max_ops = _sizes(coff, n_cand, depth, e0, e1)
        max_ops2 = _sizes(coff, n_cand2, depth2, e0, e1)[1] if lc2 >= 0 else 1
        pos, pos2 = np.empty(depth + 1, np.int64), np.empty(depth2 + 1, np.int64)
        tape, tape2 = np.empty((max_ops, 3), np.int64), np.empty((max_ops2, 3), np.int64)
        side2, chain = np.empty(max_n, np.int64), np.empty((max_n, 3), np.int64)
        keep, states = np.empty((max_n, pv_all.shape[1])), np.arange(n_states)
        if w_out is not None:  # the walk: lanes
            lanes = (LANES,)
            keepd = np.empty((max_n, pv_all.shape[1], LANES))
            H = np.empty(LANES)
            acc = np.empty(LANES)
        if wbar is not None:  # the transpose: values, each step's input kept
            lanes = ()
            Gbar = np.empty(n_states)
            Bbar = np.empty((max_n + 1, n_states))
            Vbar = np.empty((depth + 1, n_states))
            T2 = np.empty(n_states)
            tape_v = np.empty((max_ops, n_states))
            gkeep = np.empty((max_n, pv_all.shape[1]))
        gst = np.empty((max_n + 1, n_states) + lanes)
        B = np.empty((max_n + 1, n_states) + lanes)
        V = np.empty((depth + 1, n_states) + lanes)
        T = np.empty((n_states,) + lanes)
        for e in range(e0, e1):
            if n_cand[e] < depth + 1 or (lc2 >= 0 and n_cand2[e] < depth2 + 1):
                continue  # a set has fewer objects than a tuple
            if wbar is not None:
                if not _any(wbar, cand_off[e], cand_off[e + 1]):
                    continue
            n_outer = 1 if lc2 < 0 else _tuples(n_cand2[e], depth2, pos2, tape2)
            lo = coff[lc, e]
            n = coff[lc, e + 1] - lo
            if w_out is not None:
                _copy(gst[0], df)
                _copy(gst[0, :, 0], f)
            if wbar is not None:
                _copy(gst[0], f)
                Gbar[:] = 0.0  # two sets: the outer tuples' shares summed
            # G (module docstring): every object of the other collections, last first (t an
            # int64, not the literal 0: one compilation of _push)
            t = np.int64(0)
            for c in range(coff.shape[0] - 1, -1, -1):
                if c != lc and c != lc2:
                    for i in range(coff[c, e + 1] - 1, coff[c, e] - 1, -1):
                        t = _push(gst, t, chain, base[c] + i, c, every, pv_all, pd_all, pat,
                                  n_pat, tgt, ls, states)
            lo2 = coff[max(lc2, 0), e]
            g0 = base[lc] + lo
            if lc2 == lc:
                _copy(keep[:n], pv_all[g0:g0 + n])
                if w_out is not None:
                    _copy(keepd[:n], pd_all[g0:g0 + n])
            nops = _tuples(n_cand[e], depth, pos, tape)
            n_in = 0  # the inner tuples per outer one
            for i in range(nops):
                n_in += tape[i, 0] == LEAF
            qs = cand_off[e]
            for o in range(n_outer):
                h = t  # gst[h]: the value function after the outer tuple's collection
                if lc2 >= 0:
                    kind, lv, m2 = tape2[o, 0], tape2[o, 1], tape2[o, 2]
                    pos2[lv] = m2
                    if kind != LEAF:
                        continue
                    if wbar is not None:
                        if not _any(wbar, qs, qs + n_in):
                            qs += n_in
                            continue
                    n2 = coff[lc2, e + 1] - lo2
                    _sides(side2, order2, lo2, n2, pos2, depth2)
                    if lc2 == lc:  # its restriction on the walked objects themselves, G_2 = G
                        _restrict(pv_all, keep, g0, side2, n, pat, lc, n_pat, ls2)
                        if w_out is not None:
                            _restrict(pd_all, keepd, g0, side2, n, pat, lc, n_pat, ls2)
                        if wbar is not None:
                            _copy(gkeep[:n], gp[g0:g0 + n])  # dL/dpi' before b's
                        n2 = 0
                    # G_2(b): written out here (a helper measured 1.03-1.05x slower)
                    for m in range(n2 - 1, -1, -1):
                        j = order2[lo2 + m]
                        h = _push(gst, h, chain, base[lc2] + j, lc2, side2[j - lo2], pv_all,
                                  pd_all, pat, n_pat, tgt, ls2, states)
                # B, then the tuples' steps: written out here (as inlined helpers they
                # measured 1.25-1.4x slower)
                _copy(B[n], gst[h])
                for m in range(n - 1, -1, -1):
                    clear(B[m], states, n_states)
                    _step(B[m], B[m + 1], 1.0, base[lc] + order[lo + m], lc, pv_all, pd_all, pat,
                          n_pat, tgt, ls, 2, states, True)
                V[0] = 0.0
                if w_out is not None:
                    V[0, 0, 0] = 1.0
                if wbar is not None:
                    V[0, 0] = 1.0
                q = qs
                for i in range(nops):
                    kind, lv, m = tape[i, 0], tape[i, 1], tape[i, 2]
                    g = base[lc] + order[lo + m]
                    pos[lv] = m  # the member at this level (an OUT's is replaced before a LEAF)
                    if wbar is not None:
                        _copy(tape_v[i], V[lv])
                    if kind == IN:  # (a helper of these two steps, inlined: measured 2x slower)
                        clear(V[lv + 1], states, n_states)
                        _step(V[lv + 1], V[lv], 1.0, g, lc, pv_all, pd_all, pat, n_pat, tgt, ls,
                              1, states, False)
                        continue
                    if kind == OUT:
                        clear(T, states, n_states)
                        _step(T, V[lv], 1.0, g, lc, pv_all, pd_all, pat, n_pat, tgt, ls, 0,
                              states, False)
                        _copy(V[lv], T)
                        continue
                    if w_out is not None:  # w = sum_{p holds s} < pi_p V, B_{m+1}[tgt(p, .)] >
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
                if wbar is not None:  # the transpose, in reverse order (the last tuple first)
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
                                _grad(gp, g, wq, vin, B[m + 1], lc, pat, n_pat, tgt, ls, 1,
                                      states)
                                _step(Vbar[lv], B[m + 1], wq, g, lc, pv_all, 0.0, pat, n_pat,
                                      tgt, ls, 1, states, True)
                                _step(Bbar[m + 1], vin, wq, g, lc, pv_all, 0.0, pat, n_pat, tgt,
                                      ls, 1, states, False)
                        elif kind == OUT:
                            _grad(gp, g, 1.0, vin, Vbar[lv], lc, pat, n_pat, tgt, ls, 0, states)
                            T[:] = 0.0
                            _step(T, Vbar[lv], 1.0, g, lc, pv_all, 0.0, pat, n_pat, tgt, ls, 0,
                                  states, True)
                            _copy(Vbar[lv], T)
                        else:
                            _grad(gp, g, 1.0, vin, Vbar[lv + 1], lc, pat, n_pat, tgt, ls, 1,
                                  states)
                            _step(Vbar[lv], Vbar[lv + 1], 1.0, g, lc, pv_all, 0.0, pat, n_pat,
                                  tgt, ls, 1, states, True)
                            Vbar[lv + 1] = 0.0
                    for m in range(n):  # the chain of B transposed
                        g = base[lc] + order[lo + m]
                        _grad(gp, g, 1.0, Bbar[m], B[m + 1], lc, pat, n_pat, tgt, ls, 2, states)
                        _step(Bbar[m + 1], Bbar[m], 1.0, g, lc, pv_all, 0.0, pat, n_pat, tgt, ls,
                              2, states, False)
                    if lc2 < 0:
                        _copy(Gbar, Bbar[n])
                    else:
                        if lc2 == lc:  # dL/dpi = [p agrees with b] dL/dpi'
                            for j in range(n):
                                for p in range(n_pat[lc]):
                                    if not _take(pat, lc, p, ls2, side2[j]):
                                        gp[g0 + j, p] = gkeep[j, p]
                        # G_2(b)'s chain transposed, into G's cotangent (this loop and G's
                        # below as one helper measured 1.03-1.07x slower)
                        _copy(T, Bbar[n])
                        for i in range(h - 1, t - 1, -1):
                            g, c, side = chain[i, 0], chain[i, 1], chain[i, 2]
                            _grad(gp, g, 1.0, T, gst[i], c, pat, n_pat, tgt, ls2, side, states)
                            T2[:] = 0.0
                            _step(T2, T, 1.0, g, c, pv_all, 0.0, pat, n_pat, tgt, ls2, side,
                                  states, False)
                            _copy(T, T2)
                        _add(Gbar, Gbar, T)
                qs += n_in
            if lc2 == lc:  # the rows restored
                _copy(pv_all[g0:g0 + n], keep[:n])
                if w_out is not None:
                    _copy(pd_all[g0:g0 + n], keepd[:n])
            if wbar is not None:
                _copy(T, Gbar)  # G's chain transposed
                for i in range(t - 1, -1, -1):
                    g, c, side = chain[i, 0], chain[i, 1], chain[i, 2]
                    _grad(gp, g, 1.0, T, gst[i], c, pat, n_pat, tgt, ls, side, states)
                    T2[:] = 0.0
                    _step(T2, T, 1.0, g, c, pv_all, 0.0, pat, n_pat, tgt, ls, side, states, False)
                    _copy(T, T2)
                for r in range(df.shape[1]):
                    s = 0.0
                    for k in range(n_states):
                        s += T[k] * df[k, r]
                    dfs[e, r] += s
