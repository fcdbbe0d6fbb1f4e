"""The compiled walk of :mod:`analysis.pipeline.backends.numba.fasthist` and of the
selection's general plans in :mod:`analysis.pipeline.backends.numba.fastkernel` (numba,
float64).

One walk per event over the objects of every collection (each collection in the rank
order of its indexed set, if it has one: the count state does not depend on the order
objects are added in), for several pass tables ``f_r`` at once (the selection and the
channels' regions on one joint count state space: they share the objects' pattern
probabilities and the forward distributions, and differ only in ``f``). With
``tgt[c, p, k]`` the count state after adding an object of pattern ``p`` to state ``k``
(:mod:`analysis.select.lanes.steps`' notation):

- forward distributions ``F_{j+1}[tgt(p, k)] += pi_jp F_j[k]`` (``F_0 = delta_0``);
- for a leading target ``(s, d)`` (``s[d]``), ``L_j[t, k]``: the distribution of the
  objects before ``j`` with exactly ``t <= d`` members of ``s`` among the earlier
  objects of ``s``'s collection (higher ranked); a pattern holding ``s`` moves ``t`` to
  ``t + 1`` (dropped beyond ``d``), any other keeps it;
- value functions per table ``G^r_N = f_r``, ``G^r_j[k] = sum_p pi_jp G^r_{j+1}[tgt(p, k)]``,
  ``P_r(pass) = G^r_0[0]``;
- ``P(j in s and region r passes) = sum_{p holds s} pi_jp sum_k F_j[k] G^r_{j+1}[tgt(p, k)]``;
- ``P(j is s[d] and region r passes) = sum_{p holds s} pi_jp sum_k L_j[d, k]
  G^r_{j+1}[tgt(p, k)]`` (the weight of :func:`analysis.select.objects.leading` for one
  indexed set: the ``d`` members ranked above ``j`` and ``j`` in ``s``).

The steps are those of :mod:`analysis.select.lanes.steps`, over the
states reachable so far. Every quantity in lanes (lane 0 the value, then its tangents;
the product rule ``(a b)' = a' b + a b'``); only sums of non-negative products. Outputs are per event
or per object (no sums), so the result does not depend on how blocks are split.

Values alone (``pd_all = dfs = 0.0``: order 0) compile the same source without
tangents: every lane vector a number (:mod:`~analysis.select.lanes.arith`'s primitives
and :mod:`~analysis.pipeline.backends.numba.kernels.lane_layouts` specialised on it), the
operations of lane 0 without the tangent terms (which add exact zeros there: the same
floats); the outputs' lane 0, their other lanes zero.

Two variants per walk. With at most 3 tangents (4 lanes), the 8 lanes hold two
variants of the same walk (two shift sides: their own pattern probabilities, the same
tables and walk order): lanes 0-3 the first, 4-7 the second, each with its value in its
first lane (``h = 4``; ``h = 0``: one variant in all 8 lanes).
:func:`analysis.select.lanes.arith.lin_add2` is ``lin_add`` with one coefficient per half, so two
variants cost one walk; each variant's arithmetic is the one-variant arithmetic.

Four variants (two shifts of one column: two pairs, the same tables and walk order) in
pages: ``pd_all`` ``(N, P, 2, LANES)``, ``pv_all`` ``(N, P, 4)``, every lane vector of the
walk ``(2, LANES)``, page ``q`` the pair of variants ``2 q`` and ``2 q + 1`` as above
(``h = 4``); the steps of :mod:`~analysis.select.lanes.steps` take
either layout (the primitives of :mod:`~analysis.select.lanes.arith`
are specialised on it), so each page's floats are those of its pair's walk. One pass over
the events and states for four sides: about 1.8 times a pair's walk (the lanes' loads and
stores grow with the pages; the states, the objects' patterns and the indices do not).
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels.lane_layouts import (
    coefficients,
    first_page,
    lane_shape,
    no_tangents,
    summed,
    table_pair,
    unit,
)
from analysis.select.lanes.arith import LANES, _lanes, _pages, mul_add, zero_at
from analysis.select.lanes.buffers import lane_buffer4, set_vec, store_row, tangents
from analysis.select.lanes.policy import inline, njit, specialise_on
from analysis.select.lanes.steps import (
    backward,
    clear,
    forward,
    sequence,
    sums_backward,
    weight,
)

__all__ = [
    "leading_support", "rank_order", "store", "store_sides", "walk",
]


def _store_lanes(out, out_hi, acc, h):
    if h:
        for r in range(h):
            out[r] = acc[r]
            out_hi[r] = acc[h + r]
    else:
        for r in range(out.shape[0]):
            out[r] = acc[r]


@specialise_on("acc", (_lanes, _store_lanes), lambda out, out_hi, acc, h: store_row(out, acc))
def store(out, out_hi, acc, h):
    """``out = acc[:len(out)]`` (one variant, ``h = 0``: the outputs may keep only the
    lanes that carry something), or ``out[:h] = acc[:h]`` and ``out_hi[:h] = acc[h:]``
    (two: each variant's lanes from 0); a number (values alone) into ``out[0]``, its
    other lanes zero."""


def _store_pages(out, i, j, acc, h):
    store(out[0, i, j], out[1, i, j], acc[0], h)
    store(out[2, i, j], out[3, i, j], acc[1], h)


def _store_pair(out, i, j, acc, h):
    store(out[0, i, j], out[-1, i, j], acc, h)


@specialise_on("acc", (_pages, _store_pages), _store_pair)
def store_sides(out, i, j, acc, h):
    """The variants' outputs ``out[v, i, j]`` from the lane vector ``acc``: one or a pair
    (:func:`store` into ``out[0]`` and ``out[-1]``), or two pairs in pages (page ``q``
    into ``out[2 q]`` and ``out[2 q + 1]``)."""


@njit
def rank_order(off, key, out, block, b0, b1):
    """``out[off[e]:off[e + 1]]``: the objects of event ``e`` by descending ``key``, ties
    (and NaN, last) in their original order (``argsort(-key, stable)``, NaN-last as
    numpy and JAX sort), for the events of blocks ``b0:b1``."""
    for e in range(b0 * block, min(off.shape[0] - 1, b1 * block)):
        lo, hi = off[e], off[e + 1]
        for i in range(lo, hi):
            out[i] = i
        for i in range(lo + 1, hi):  # insertion sort: a few objects per event, stable
            g = out[i]
            v = -key[g]
            m = i
            while m > lo:
                u = -key[out[m - 1]]
                if u > v or (u != u and v == v):  # NaN sorts after every number
                    out[m] = out[m - 1]
                    m -= 1
                else:
                    break
            out[m] = g


@inline
def _within(states, ns, keep, out):
    """``out[:m]``: the states of ``states[:ns]`` where ``keep`` is true, in their order;
    returns ``m``."""
    m = 0
    for i in range(ns):
        if keep[states[i]]:
            out[m] = states[i]
            m += 1
    return m


@inline
def _reach(tgt, c, n_pat, rs, nr, j, mark):
    """``rs[j + 1, :nr[j + 1]]``: the states reachable from ``rs[j, :nr[j]]`` by adding
    one object of collection ``c`` (any pattern), ascending (so that the loops over them
    add in the order of a loop over every state)."""
    n_states = mark.shape[0]
    for k in range(n_states):
        mark[k] = False
    for p in range(n_pat[c]):
        for i in range(nr[j]):
            mark[tgt[c, p, rs[j, i]]] = True
    m = 0
    for k in range(n_states):
        if mark[k]:
            rs[j + 1, m] = k
            m += 1
    nr[j + 1] = m


@njit
def walk(
    coff, base, rankidx, pv_all, pd_all, h, pat, n_pat, tgt, fs, dfs,
    ow_r, ow_c, ow_ls, ld_c, ld_ls, ld_d, lw_r, lw_l, ld_mask, sum_x, sum_has, binom, max_seq,
    max_d, block, pe, ow, lw, sa, b0, b1,
):
    """Blocks ``b0:b1`` of the walk (module docstring). ``rankidx[base[c] + i]``: the
    global index of the object at position ``i`` of collection ``c`` in walk order;
    ``pv_all`` ``(N, P, 2)``: pattern probabilities per global object of the two variants
    (the same twice for one), ``pd_all`` ``(N, P, LANES)`` their tangents (value lanes 0
    and ``h`` zero); ``h``: the second variant's value lane (4), or 0 for one variant;
    ``fs``/``dfs``: ``(R, S)`` pass tables and ``(R, S, LANES)`` tangents (value lanes
    zero); ``pd_all = dfs = 0.0``: values alone (one variant, module docstring).
    Object-weight slots ``o``: region ``ow_r[o]``, set ``ow_ls[o]`` (its position in
    collection ``ow_c[o]``'s patterns) into ``ow[o, g]``; leading targets ``l``: set
    ``ld_ls[l]`` of collection ``ld_c[l]`` at depth ``ld_d[l]``, ``ld_mask[l, t, k]``
    the states ``L[t]`` can hold (:func:`leading_support`); leading slots ``o``:
    region ``lw_r[o]``, target ``lw_l[o]`` into ``lw[o, g]``; ``pe[r, e]``: ``P_r``
    (outputs of ``h`` lanes for two variants, of ``h`` or ``LANES`` lanes for one: its
    first lanes; every entry of an object of the slot's collection, and of every event,
    written). Event sums ``o`` of the first table (one variant only, ``h = 0``: the
    observables of the selection, region 0): ``sa[o, e, m] = E[X_o^m 1_pass]`` in all
    lanes for ``m <= binom.shape[0] - 1`` (``sum_x[o, g]``: object ``g``'s value,
    ``sum_has[o, c, p]``: 1 where pattern ``p`` holds the summed set), the recursion of
    :func:`~analysis.select.lanes.steps.sums_backward` (a pattern of
    probability exactly 0 without tangents skipped in every event: its powers of ``x``
    may overflow).
    Products of two lane vectors ``a x`` are ``lin_add2(out, a_0, a_h, x, x_0, x_h, a)``
    (value lanes doubled, halved once at the end: exact).
    The forward recursions stop at ``F_{n-1}``, ``L_{n-1}`` (object ``j``'s weight reads
    ``F_j``, ``L_j``: ``F_n`` would be read by nobody).
    Every loop over states runs over the states reachable after the objects so far
    (``rs[j]``: ``F_j``, ``L_j`` are zero elsewhere, and ``G_j`` is read nowhere else),
    those of ``L[t]`` also within ``ld_mask``: the terms left out are exact zeros
    (``+0.0``, added to sums that start at ``+0.0``), so the floats are those of the
    loops over every state. (Skipping also, per region, the reachable states it cannot
    pass from saved no measurable time on the AGC systematics pass: 40 lines.)"""
    n_ev = pe.shape[2]
    n_coll = coff.shape[0]
    n_reg, n_states = fs.shape
    n_ow = ow_r.shape[0]
    n_ld = ld_c.shape[0]
    n_lw = lw_r.shape[0]
    n_sums = sum_x.shape[0]
    big_r = binom.shape[0] - 1
    for b in range(b0, b1):
        seq_c = np.empty(max_seq, np.int64)
        seq_g = np.empty(max_seq, np.int64)
        rs = np.empty((max_seq + 1, n_states), np.int64)
        nr = np.empty(max_seq + 1, np.int64)
        mark = np.empty(n_states, np.bool_)
        # lane vectors of LANES, (2, LANES) in the paged layout, numbers for values alone
        # (constants: LLVM folds the strides; pd_all's shape would leave them to be read
        # at run time)
        lv = lane_shape(pd_all)
        F = np.zeros((max_seq + 1 if n_ow else 1, n_states) + lv)
        L = np.zeros((max(n_ld, 1), max_seq + 1 if n_ld else 1, max_d + 1, n_states) + lv)
        G = np.zeros((n_reg, n_states) + lv)
        Gn = np.zeros((n_reg, n_states) + lv)
        rl = np.empty((max(n_ld, 1), max_d + 1, max_seq + 1, n_states), np.int64)
        nl = np.empty((max(n_ld, 1), max_d + 1, max_seq + 1), np.int64)
        inner = np.empty((1,) + lv)[0]  # a weight's inner sum (unused for values)
        acc_of = np.empty((1,) + lv)  # a weight's sum (mul_add adds into a row)
        one = np.empty(LANES)  # the event sums' buffer (one variant)
        Gm = lane_buffer4(n_sums, big_r + 1, n_states, pd_all)  # (.., LANES): one variant
        Gmn = lane_buffer4(n_sums, big_r + 1, n_states, pd_all)
        xp = np.empty(pat.shape[1])
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            n = sequence(coff, base, e, seq_c, seq_g)
            for j in range(n):  # each collection in its walk order
                seq_g[j] = rankidx[seq_g[j]]
            if n_coll > 1 or e == b * block:  # one collection: the same states for all
                rs[0, 0] = 0
                nr[0] = 1
                for j in range(n if n_coll > 1 else max_seq):
                    _reach(tgt, seq_c[j] if n_coll > 1 else 0, n_pat, rs, nr, j, mark)
                for lt in range(n_ld):  # the reachable states where L[lt, t] can be nonzero
                    for m in range(ld_d[lt] + 1):
                        for j in range((n if n_coll > 1 else max_seq) + 1):
                            nl[lt, m, j] = _within(rs[j], nr[j], ld_mask[lt, m], rl[lt, m, j])
            if n_ow:
                unit(F[0], 0, h)
                for j in range(n - 1):  # F_n: read by no weight (they read F_0 .. F_{n-1})
                    c = seq_c[j]
                    g = seq_g[j]
                    clear(F[j + 1], rs[j + 1], nr[j + 1])
                    for p in range(n_pat[c]):
                        a, a_hi = coefficients(pv_all, pd_all, g, p)
                        forward(F[j + 1], F[j], a, a_hi, tangents(pd_all, g, p), tgt[c, p],
                                rs[j], nr[j], h, mark, False)
            for lt in range(n_ld):
                dmax = ld_d[lt]
                for m in range(dmax + 1):
                    L[lt, 0, m, 0] = 0.0
                unit(L[lt, 0, 0], 0, h)
                for j in range(n - 1):  # L_n: read by no weight, as F_n
                    c = seq_c[j]
                    g = seq_g[j]
                    for m in range(dmax + 1):
                        clear(L[lt, j + 1, m], rl[lt, m, j + 1], nl[lt, m, j + 1])
                    for p in range(n_pat[c]):
                        step = 1 if (c == ld_c[lt] and pat[c, p, ld_ls[lt]] == 1) else 0
                        a, a_hi = coefficients(pv_all, pd_all, g, p)
                        for m in range(dmax + 1 - step):
                            forward(L[lt, j + 1, m + step], L[lt, j, m], a, a_hi,
                                    tangents(pd_all, g, p), tgt[c, p], rl[lt, m, j],
                                    nl[lt, m, j], h, mark, False)
            for q in range(n_reg):
                for i in range(nr[n]):
                    k = rs[n, i]
                    table_pair(G[q], k, fs[q, k], tangents(dfs, q, k), h)
            for o in range(n_sums):
                for i in range(nr[n]):
                    k = rs[n, i]
                    set_vec(Gm[o, 0], k, first_page(G[0, k]))  # one variant: one page
                    for m in range(1, big_r + 1):
                        zero_at(Gm[o, m], k)
            for j in range(n - 1, -1, -1):
                c = seq_c[j]
                g = seq_g[j]
                for o in range(n_ow + n_lw):
                    if o < n_ow:
                        if ow_c[o] != c:
                            continue
                        q, ls, Fj, ks, nk = ow_r[o], ow_ls[o], F[j], rs[j], nr[j]
                    else:
                        lt = lw_l[o - n_ow]
                        if ld_c[lt] != c:
                            continue
                        dm = ld_d[lt]
                        q, ls, Fj = lw_r[o - n_ow], ld_ls[lt], L[lt, j, dm]
                        ks, nk = rl[lt, dm, j], nl[lt, dm, j]
                    acc_of[0] = 0.0
                    for p in range(n_pat[c]):
                        if pat[c, p, ls] != 1:
                            continue
                        v = weight(inner, Fj, G[q], tgt[c, p], ks, nk, h, mark, False)
                        a, a_hi = coefficients(pv_all, pd_all, g, p)
                        mul_add(acc_of, 0, a, a_hi, summed(inner, v), h, tangents(pd_all, g, p))
                    if o < n_ow:
                        store_sides(ow, o, g, acc_of[0], h)
                    else:
                        store_sides(lw, o - n_ow, g, acc_of[0], h)
                for o in range(n_sums):
                    for p in range(n_pat[c]):
                        xp[p] = sum_x[o, g] * sum_has[o, c, p]
                    for m in range(big_r + 1):
                        clear(Gmn[o, m], rs[j], nr[j])
                    for p in range(n_pat[c]):
                        d0 = first_page(tangents(pd_all, g, p))  # one variant: one page
                        if pv_all[g, p, 0] == 0.0 and no_tangents(d0):  # nothing to add
                            continue  # (and 0 x inf)
                        sums_backward(Gmn[o], Gm[o], pv_all[g, p, 0], d0, xp[p],
                                      binom, tgt[c, p], rs[j], nr[j], one)
                if n_sums:
                    Gm, Gmn = Gmn, Gm
                for q in range(n_reg):
                    clear(Gn[q], rs[j], nr[j])
                    for p in range(n_pat[c]):
                        a, a_hi = coefficients(pv_all, pd_all, g, p)
                        backward(Gn[q], G[q], a, a_hi, tangents(pd_all, g, p), tgt[c, p], rs[j],
                                 nr[j], h)
                G, Gn = Gn, G  # the new value functions; the old buffer is reused
            for q in range(n_reg):
                store_sides(pe, q, e, G[q, 0], h)
            for o in range(n_sums):
                for m in range(big_r + 1):
                    store_row(sa[o, e, m], Gm[o, m, 0])


def leading_support(tgt: np.ndarray, n_pat: np.ndarray, pat: np.ndarray, ld_c: np.ndarray,
                    ld_ls: np.ndarray, ld_d: np.ndarray, n_states: int) -> np.ndarray:
    """``(T, max_d + 1, S)`` booleans: the states ``L[t]`` of each leading target can be
    nonzero in (from state 0 with ``t = 0``, every pattern of every collection; ``t``
    moved by the patterns holding the target's set, paths beyond its depth dropped: the
    walk's recursion), so that the walk skips the others (exact zeros)."""
    n_ld = ld_c.shape[0]
    out = np.zeros((max(n_ld, 1), int(ld_d.max(initial=0)) + 1, n_states), np.bool_)
    for lt in range(n_ld):
        todo = [(0, 0)]
        out[lt, 0, 0] = True
        while todo:
            m, k = todo.pop()
            for c in range(tgt.shape[0]):
                for p in range(int(n_pat[c])):
                    step = int(c == ld_c[lt] and pat[c, p, ld_ls[lt]] == 1)
                    m2, k2 = m + step, int(tgt[c, p, k])
                    if m2 <= ld_d[lt] and not out[lt, m2, k2]:
                        out[lt, m2, k2] = True
                        todo.append((m2, k2))
    return out
