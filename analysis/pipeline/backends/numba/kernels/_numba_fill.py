"""The compiled host-side loops of :mod:`analysis.pipeline.backends.numba.fasthist` (numba, float64).

Two pieces around the walk of :mod:`analysis.pipeline.backends.numba.kernels._numba_hist`, both per object or
per histogram (no sums across blocks), so that neither the block size nor the number of
threads changes a bit:

- :func:`cut_patterns`: the objects' soft cuts and pattern probabilities, the
  arithmetic of :func:`analysis.select.lanes.cuts.cut_times` followed by
  the pattern products (``pi_p = prod_s (q_s or 1 - q_s)`` over the sets in set order;
  ``reference_patterns`` of ``tests/pipeline/backends/numba/test_numba_fill.py``, numpy) fused into one loop over blocks of objects, written straight
  into the walk's layout (``pv_all[g, p, :]``, ``pd_all[g, p, :]``), for one variant;
  :func:`cut_patterns_pair` for the two sides of a shift at once (the cuts it does not
  move once, then each side's moved cuts).
- :func:`fill`: the histogram sums of one set of entries for several weight variations,
  over the lanes that carry the value and the tangents only (``sumw.shape[2]``: 4 or 8;
  the other lanes of the walk are zero), hard bins or soft (each entry spread over the
  bins, the trainable edges' tangents: the bins of an entry,
  :mod:`analysis.pipeline.backends.numba.kernels._numba_softbins`). One call
  per histogram group; the calls run side by side on threads, each a sequential sum in
  entry order.

Cuts are given as arrays over the cuts ``m`` in their order: ``c_ls[m]`` the set
(position in its collection), ``c_col[m]`` the row of ``cols`` (``(M, N)``: the cuts'
probabilities per object, :func:`analysis.pipeline.backends.numba.kernels._numba_dp.soft_values`), width
``c_w``, ``c_gt`` (``>``), ``c_par`` (the threshold's parameter: its lane - 1, or -1);
the slopes come from the probabilities (:func:`analysis.select.lanes.cuts.soft_slope`).
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._numba_dp import LANES
from analysis.pipeline.backends.numba.kernels._numba_softbins import bin_probabilities, hard_bin
from analysis.select.lanes.cuts import inverse_width, soft_slope
from analysis.select.lanes.policy import inline, njit, writes

__all__ = ["cut_patterns", "cut_patterns4", "cut_patterns_pair", "fill"]


# Objects per sub-block: the cuts run cut by cut over a sub-block (their parameters
# hoisted out of the loop over objects, as in cut_times), then the patterns object by object.
SUB = 256


@inline
def _cuts(j0, nj, cols, c_ls, c_col, c_w, c_gt, c_par, qv, qd, n_l):
    """Multiply the cuts into the own set probabilities ``qv[ls, i]`` and tangents
    ``qd[ls, i]`` (their first ``n_l`` lanes) of objects ``j0 + i``, ``i < nj``, cut
    after cut, as :func:`analysis.select.lanes.cuts.cut_times`
    (the same operations on each lane). ``n_l`` a constant after inlining (4: the value
    and at most 3 tangents, or ``LANES``): a bound read from ``qd.shape[1]`` made
    ``cut_patterns`` 31 ns per object against 19 and ``cut_patterns4`` 28 against 19."""
    for m in range(c_ls.shape[0]):
        ls = c_ls[m]
        s = cols[c_col[m]]
        iw = inverse_width(c_w[m])
        greater = c_gt[m]
        par = c_par[m]
        for i in range(nj):
            sv = s[j0 + i]
            q0 = qv[ls, i]
            for r in range(n_l):
                qd[ls, i, r] *= sv
            if par >= 0:
                qd[ls, i, 1 + par] += q0 * soft_slope(sv, iw, greater)
            qv[ls, i] = q0 * sv


@inline
def _cut_patterns(cols, cols_hi, c_ls, c_col, c_w, c_gt, c_par, r_cols, r_ls, r_col, r_w,
                  r_gt, r_par, codes, n_sets, n_pat, g0, pv_all, pd_all, page, two, wide, block,
                  b0, b1):
    """The loop of the three kernels below, ``two`` and ``wide`` constants after inlining
    (each kernel compiles only its own branches): :func:`cut_patterns` (``wide``: one
    variant, 8 lanes), :func:`cut_patterns4` (neither: the cuts over lanes 0-3, lanes
    4-7 written 0) or :func:`cut_patterns_pair`
    (``two``: the second side, ``cols_hi``, in lanes 4-7). The patterns' ``pd[r] = pd[r]
    fac + sign qd[ls, r]`` with the lanes in registers, written out here once, not
    through an inline helper: with one (a function returning x and 4 lanes per side)
    the pair kernel took 35 ns per object against 19, and cut_patterns 32 against 19."""
    n_obj = cols.shape[1]
    n_s = max(n_sets, 1)
    v0, l0 = 2 * page, 8 * page  # the page's variants and lanes
    qv = np.empty((n_s, SUB))
    qd = np.empty((n_s, SUB, LANES if wide else 4))
    uv = np.empty((n_s, SUB) if two else (0, 0))
    ud = np.empty((n_s, SUB, 4) if two else (0, 0, 0))
    for b in range(b0, b1):
        end = min(n_obj, (b + 1) * block)
        for j0 in range(b * block, end, SUB):
            nj = min(SUB, end - j0)
            qv[:, :nj] = 1.0
            qd[:, :nj] = 0.0
            if wide:
                _cuts(j0, nj, r_cols, r_ls, r_col, r_w, r_gt, r_par, qv, qd, LANES)
                _cuts(j0, nj, cols, c_ls, c_col, c_w, c_gt, c_par, qv, qd, LANES)
            else:
                _cuts(j0, nj, r_cols, r_ls, r_col, r_w, r_gt, r_par, qv, qd, 4)
            if two:
                for ls in range(n_s):
                    for i in range(nj):
                        uv[ls, i] = qv[ls, i]
                        for r in range(4):
                            ud[ls, i, r] = qd[ls, i, r]
                _cuts(j0, nj, cols_hi, c_ls, c_col, c_w, c_gt, c_par, uv, ud, 4)
            if not wide:
                _cuts(j0, nj, cols, c_ls, c_col, c_w, c_gt, c_par, qv, qd, 4)
            for i in range(nj):
                g = g0 + j0 + i
                for p in range(n_pat):
                    x = 1.0
                    y = 1.0
                    d0 = d1 = d2 = d3 = d4 = d5 = d6 = d7 = 0.0
                    for ls in range(n_sets):
                        code = codes[p, ls]
                        if code < 0:
                            continue
                        fa = qv[ls, i] if code == 1 else 1.0 - qv[ls, i]
                        sa = x if code == 1 else -x
                        q = qd[ls, i]
                        d0, d1, d2, d3 = (d0 * fa + sa * q[0], d1 * fa + sa * q[1],
                                          d2 * fa + sa * q[2], d3 * fa + sa * q[3])
                        if wide:
                            d4, d5, d6, d7 = (d4 * fa + sa * q[4], d5 * fa + sa * q[5],
                                              d6 * fa + sa * q[6], d7 * fa + sa * q[7])
                        if two:
                            fb = uv[ls, i] if code == 1 else 1.0 - uv[ls, i]
                            sb = y if code == 1 else -y
                            u = ud[ls, i]
                            d4, d5, d6, d7 = (d4 * fb + sb * u[0], d5 * fb + sb * u[1],
                                              d6 * fb + sb * u[2], d7 * fb + sb * u[3])
                            y *= fb
                        x *= fa
                    out = pd_all[g, p]
                    pv_all[g, p, v0] = x
                    pv_all[g, p, v0 + 1] = y if two else x
                    out[l0], out[l0 + 1], out[l0 + 2], out[l0 + 3] = d0, d1, d2, d3
                    out[l0 + 4], out[l0 + 5], out[l0 + 6], out[l0 + 7] = d4, d5, d6, d7


@njit
def cut_patterns(cols, c_ls, c_col, c_w, c_gt, c_par, r_cols, r_ls, r_col, r_w, r_gt, r_par,
                 codes, n_sets, n_pat, g0, pv_all, pd_all, block, b0, b1):
    """Object blocks ``b0:b1`` of one collection (``N = cols.shape[1]`` objects, global
    index ``g0 + j``) for one variant: own set probabilities from 1 times the cuts
    ``r_*`` (a shift's cuts that it does not move, their probabilities those of the
    nominal columns: none for the nominal variant) and then the cuts ``c_*`` (on the
    variant's columns ``cols``), then the pattern probabilities (``codes[p, ls]``, the
    products in set order) into ``pv_all[g, p, 0]`` and ``[1]``
    (the same) and their tangents into ``pd_all[g, p]`` (all lanes; the layout of
    :mod:`analysis.pipeline.backends.numba.kernels._numba_hist`)."""
    _cut_patterns(cols, cols, c_ls, c_col, c_w, c_gt, c_par, r_cols, r_ls, r_col, r_w, r_gt,
                  r_par, codes, n_sets, n_pat, g0, pv_all, pd_all, 0, False, True, block, b0, b1)


@njit
def cut_patterns4(cols, c_ls, c_col, c_w, c_gt, c_par, r_cols, r_ls, r_col, r_w, r_gt, r_par,
                  codes, n_sets, n_pat, g0, pv_all, pd_all, block, b0, b1):
    """:func:`cut_patterns` with at most 3 tangents: the cuts over lanes 0-3 only
    (:func:`_cuts`) and the patterns' lanes 0-3 from them, lanes 4-7 of ``pd_all``
    written 0 (what :func:`cut_patterns` gives there: no tangent). Lanes 0-3 are the
    floats of :func:`cut_patterns` (the same operations in the same order); half the
    arithmetic (24 ns per object against 37 on the event-sum benchmark's jets). The loop
    of :func:`cut_patterns_pair` for one side (:func:`_cut_patterns`)."""
    _cut_patterns(cols, cols, c_ls, c_col, c_w, c_gt, c_par, r_cols, r_ls, r_col, r_w, r_gt,
                  r_par, codes, n_sets, n_pat, g0, pv_all, pd_all, 0, False, False, block, b0,
                  b1)


@njit
def cut_patterns_pair(cols, cols_hi, c_ls, c_col, c_w, c_gt, c_par, r_cols, r_ls, r_col, r_w,
                      r_gt, r_par, codes, n_sets, n_pat, g0, pv_all, pd_all, page, block, b0, b1):
    """:func:`cut_patterns` for the two sides of a shift at once (at most 3 tangents: 4
    lanes each): the cuts ``r_*`` that it does not move once, their product then copied
    to both sides (4 lanes: 5 floats per set and object, in L1), the moved cuts ``c_*``
    on each side's columns (``cols``, ``cols_hi``), and one pass over the patterns writing the first side's lanes 0-3 into
    lanes 0-3 of ``pd_all[g, p]`` and the second's into lanes 4-7, the probabilities into
    ``pv_all[g, p, 0]`` and ``[1]`` (the walk's pair layout; ``page`` 1: into lanes 8-15
    and ``pv_all[g, p, 2]``, ``[3]``, the second pair of the walk's paged layout, ``pd_all``
    ``(N, P, 16)``, :mod:`analysis.pipeline.backends.numba.kernels._numba_hist`). Each side's floats are
    those of :func:`cut_patterns` on its own columns (the same operations on lanes 0-3,
    in the same order); the work is about 0.7 of two such calls (one store of each
    object's lanes, 4-lane cuts, the unmoved cuts once)."""
    _cut_patterns(cols, cols_hi, c_ls, c_col, c_w, c_gt, c_par, r_cols, r_ls, r_col, r_w, r_gt,
                  r_par, codes, n_sets, n_pat, g0, pv_all, pd_all, page, True, False, block, b0,
                  b1)


@inline
def _lanes_of(p, i, ev, e, w, n_l):
    """Entry ``i``'s weight lanes ``w = p[i, 0] ev[e] + ev[e, 0] p[i]`` (the product
    rule; lane 0 ``ev p`` twice: halved) over ``n_l`` lanes."""
    p0, ev0 = p[i, 0], ev[e, 0]
    w[0] = (p0 * ev0 + ev0 * p[i, 0]) * 0.5
    for r in range(1, n_l):
        w[r] = p0 * ev[e, r] + ev0 * p[i, r]


@inline
def _fill(off, x, p, ev, factors, weight, edges, width, elane, sumw, sumw2, n_l, soft):
    """The loop of :func:`fill` over ``n_l`` lanes, soft bins or hard (``soft``, and
    ``n_l`` for hard bins: constants after inlining; with both kinds in one loop the hard
    fill took 1.4 times as long). The running sums ``sumw[v, b]`` and ``sumw2[v, b]`` side
    by side in an array of the loop's own, which no other array can alias, so that LLVM
    keeps an entry's loads and stores together (in place, a 4-lane hard fill took 0.82 ms
    for 75k entries and one variation against 0.61, 2.5 against 1.3 for nine; a 4-lane
    soft fill of nine 1.37 times as long); each event's ``f`` and ``f^2 weight[e]`` made once.
    The same additions in the same order: the same floats."""
    n_v, n_b, n_e = sumw.shape[0], sumw.shape[1], edges.shape[0]
    acc = np.empty((n_v, n_b, 2 * n_l))
    for v in range(n_v):
        for b in range(n_b):
            for r in range(n_l):
                acc[v, b, r] = sumw[v, b, r]
                acc[v, b, n_l + r] = sumw2[v, b, r]
    w = np.empty(n_l)
    q = np.empty(n_b)
    ds = np.empty(n_e)
    fe = np.empty(n_v)
    f2e = np.empty(n_v)
    for e in range(off.shape[0] - 1):
        if off[e] == off[e + 1]:
            continue
        for v in range(n_v):
            f = factors[v, e]
            fe[v] = f
            f2e[v] = f * f * weight[e]
        for i in range(off[e], off[e + 1]):
            _lanes_of(p, i, ev, e, w, n_l)
            # an entry of probability 0 at x = 0: its value may be garbage (as the JAX kernel's)
            xi = x[i] if w[0] != 0.0 else 0.0
            if soft:  # whether the trainable edges move the entry's bins
                moves = bin_probabilities(edges, xi, width, q, ds)
            else:
                hb = hard_bin(edges, xi)
            for v in range(n_v):
                f, f2 = fe[v], f2e[v]
                if not soft:  # its hard bin alone (a NaN weight NaN there only)
                    a = acc[v, hb]
                    for r in range(n_l):
                        a[r] += f * w[r]
                        a[n_l + r] += f2 * w[r]
                    continue
                for b in range(n_b):
                    a = acc[v, b]
                    qb = q[b]
                    for r in range(n_l):
                        a[r] += f * (w[r] * qb)
                        a[n_l + r] += f2 * (w[r] * qb)
                if not moves:
                    continue
                for j in range(n_e):
                    r = elane[j]
                    if r < 1 or r >= n_l:
                        continue
                    d = w[0] * ds[j]
                    acc[v, j, r] += f * d
                    acc[v, j, n_l + r] += f2 * d
                    acc[v, j + 1, r] -= f * d
                    acc[v, j + 1, n_l + r] -= f2 * d
    for v in range(n_v):
        for b in range(n_b):
            for r in range(n_l):
                sumw[v, b, r] = acc[v, b, r]
                sumw2[v, b, r] = acc[v, b, n_l + r]


@njit
def fill(off, x, p, ev, factors, weight, edges, width, elane, sumw, sumw2):
    """Histogram sums of the entries of event ``e``, ``off[e]:off[e + 1]`` (values
    ``x[i]``, probability lanes ``p[i]``) with the event weights ``ev[e]`` (lanes) times
    each variation's factor ``factors[v, e]``: ``sumw[v, b] += f w q_b``, ``sumw2[v, b]
    += f^2 weight[e] w q_b`` with ``w = ev[e] p[i]`` (the product rule in lanes) over the
    first ``sumw.shape[2]`` lanes (4 or 8: the value and the tangents), ``q_b`` the
    entry's bins (:mod:`~analysis.pipeline.backends.numba.kernels._numba_softbins`: the
    hard bin for ``width = 0``; an entry of probability 0 at ``x = 0``); soft bins add ``f
    w_0 dq_b`` and ``f^2 weight[e] w_0 dq_b`` in the lane of each trainable edge
    (``elane[j]``: its lane, below 1 a fixed edge). Entries in order: one sequential sum
    per bin and variation."""
    n_l = sumw.shape[2]
    if width > 0.0:  # the lanes read at run time: as constants, 8 lanes took 1.3x
        _fill(off, x, p, ev, factors, weight, edges, width, elane, sumw, sumw2, n_l, True)
    elif n_l <= 4:  # the value and at most 3 tangents
        _fill(off, x, p, ev, factors, weight, edges, width, elane, sumw, sumw2, 4, False)
    else:
        _fill(off, x, p, ev, factors, weight, edges, width, elane, sumw, sumw2, LANES, False)


writes(fill, "sumw", "sumw2")
