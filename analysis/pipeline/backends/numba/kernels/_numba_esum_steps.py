"""The steps of :mod:`analysis.pipeline.backends.numba.kernels._numba_esum` (numba, float64)
on the count-state walk's steps (:mod:`~analysis.select.lanes.steps`): an object's step
of a count distribution over its live states or over every state, the enumeration of
every subset of the uncertain objects (with scalar weights where the out patterns move
no count), and the per-event checks and partition shared with the adjoint
(:mod:`~analysis.pipeline.backends.numba.kernels._numba_esum_adj`).

Four lanes (value and at most 3 tangents: the tangents ``_d4`` as 4 numbers, and a
dot product's ``inner`` a tuple of 4, select the walk's four-lane form at compile time,
:mod:`~analysis.select.lanes.arith`); the same operations in the same order as the
recursions, so the same floats.

An object's step and the dot products run in the kernels' inner loops and are inlined
(:data:`~analysis.select.lanes.policy.inline`); the steps run once per event are compiled
once as functions of their own (:data:`~analysis.select.lanes.policy.njit`): inlined at
each call they were typed and compiled again in every caller (the kernel's cold build:
:mod:`._numba_esum`'s docstring).
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.arith import registers, row_mul_add
from analysis.select.lanes.policy import inline, njit, specialise_on
from analysis.select.lanes.steps import clear, forward_live, weight

__all__: list[str] = []

#: a dot product's ``inner`` in four lanes (:func:`walk.weight` returns the 4 lanes)
FOUR = (0.0, 0.0, 0.0, 0.0)


def _copy1(dst, src):
    for i in range(dst.shape[0]):
        dst[i] = src[i]


def _copy2(dst, src):
    for i in range(dst.shape[0]):
        for j in range(dst.shape[1]):
            dst[i, j] = src[i, j]


def _copy3(dst, src):
    for i in range(dst.shape[0]):
        for j in range(dst.shape[1]):
            for k in range(dst.shape[2]):
                dst[i, j, k] = src[i, j, k]


@specialise_on("dst", (lambda t: t.ndim == 1, _copy1), (lambda t: t.ndim == 2, _copy2), _copy3)
def _copy(dst, src):
    """``dst[...] = src`` (1 to 3 dimensions, the same shape) as loops: numba's array
    assignment checks the shapes with an error path (its message formatting) that cost
    ~5 s of :mod:`._numba_esum`'s cold compile."""


@inline
def _add(dst, a, b):
    """``dst[i] = a[i] + b[i]`` (1-D; ``dst`` may be ``a``: ``+=``) as a loop, as
    :func:`_copy`."""
    for i in range(dst.shape[0]):
        dst[i] = a[i] + b[i]


@inline
def _d4(pd, g, p):
    """Object ``g``'s pattern ``p`` tangents, 4 lanes, in registers."""
    return pd[g, p, 0], pd[g, p, 1], pd[g, p, 2], pd[g, p, 3]


@inline
def _live_step(A, la, na, B, lb, mark, tgt, c, n_pat, pv, pd, g, nl, which, has):
    """``B = sum_p pi_p shift_p(A)`` over object ``g``'s patterns of collection ``c`` with
    ``has[p] == which`` (``which = -1``: every pattern), from ``A``'s live states
    ``la[:na]`` (every state that may be nonzero; the others exact zeros, left out) by
    :func:`walk.forward_live` in four lanes: ``B``'s live states into
    ``lb`` (each cleared when first reached), their number returned (``mark``: all
    False, left so). A pattern of probability 0 without tangents adds exact zeros: left
    out. For events whose probabilities are all numbers."""
    cnt = 0
    for p in range(n_pat[c]):
        nil = pv[g, p, 0] == 0.0
        for r in range(1, nl):  # no return inside the loop: measured 7x slower inlined
            if pd[g, p, r] != 0.0:
                nil = False
        if (which >= 0 and has[p] != which) or nil:
            continue
        v = pv[g, p, 0]
        cnt = forward_live(B, A, v, _d4(pd, g, p), tgt[c, p], la, na, mark, lb, cnt)
    for i in range(cnt):
        mark[lb[i]] = False
    return cnt


@inline
def _dense(Gn, G, tgt, c, n_pat, pv, pd, g, which, has, states, back):
    """Every state and every lane (``(states, LANES)``; a NaN among the probabilities, or
    more than 3 tangents): ``Gn = sum_p pi_p shift_p(G)`` (:func:`walk.forward`), or with
    ``back`` ``Gn[k] = sum_p pi_p G[tgt(p, k)]`` (:func:`walk.backward`), over object
    ``g``'s patterns with ``has[p] == which`` (``-1``: every pattern). Both are one
    pattern's ``Gn[i] += pi G[j] + G[j, 0] pi'`` over the states in order, ``(i, j)`` the
    pair ``(tgt(p, k), k)`` or ``(k, tgt(p, k))``: one loop, the same operations in the
    same order as the walk's steps (``states``: every state in order)."""
    clear(Gn, states, states.shape[0])
    for p in range(n_pat[c]):
        if which >= 0 and has[p] != which:
            continue
        v = pv[g, p, 0]
        dv = registers(pd[g, p])
        row = tgt[c, p]
        for k in range(states.shape[0]):
            i, j = (k, row[k]) if back else (row[k], k)
            row_mul_add(Gn, i, v, v, G, j, 0, dv)


@inline
def _dot4(S, la, na, G, states):
    """``<S, G>`` over the live states ``la[:na]`` of ``S`` (``G``: ``(states, >= 4)``),
    four lanes by the product rule, as a tuple (:func:`walk.weight`)."""
    return weight(FOUR, S, G, states, la, na, 0, la, False)


@inline
def _times(w, t):
    """``w t`` over 4 lanes by the product rule (``w``, ``t``: tuples of 4)."""
    return (w[0] * t[0], w[0] * t[1] + t[0] * w[1], w[0] * t[2] + t[0] * w[2],
            w[0] * t[3] + t[0] * w[3])


@inline
def _add4(o, b, t):
    """``o[b, 0:4] += t``."""
    o[b, 0] += t[0]
    o[b, 1] += t[1]
    o[b, 2] += t[2]
    o[b, 3] += t[3]


@njit
def _root(FF, LL, cur, nf, x0, SA, LA, NA, XA, nl):
    """The empty subset: ``SA[0]`` the distribution ``FF[cur]`` over its nonzero live
    states (``LL[cur, :nf]`` of it; into ``LA[0, :NA[0]]``), lanes from ``nl`` to 4 zero,
    ``XA[0] = x0``."""
    cnt = 0
    for i in range(nf):
        k = LL[cur, i]
        nonzero = False
        for r in range(4):
            SA[0, k, r] = FF[cur, k, r] if r < nl else 0.0
            if r < nl and FF[cur, k, r] != 0.0:
                nonzero = True
        if nonzero:
            LA[0, cnt] = k
            cnt += 1
    NA[0] = cnt
    XA[0] = x0


@njit
def _out_factor(pv, pd, g, cs, n_pat, has):
    """Object ``g``'s probability of being out of ``S`` (its patterns of ``cs`` without
    ``S`` summed in order) and its 3 tangents, as a tuple."""
    q0 = q1 = q2 = q3 = 0.0
    for p in range(n_pat[cs]):
        if has[p] == 0:
            q0 += pv[g, p, 0]
            q1 += pd[g, p, 1]
            q2 += pd[g, p, 2]
            q3 += pd[g, p, 3]
    return q0, q1, q2, q3


@njit
def _subsets_w(FF, LL, cur, nf, x0, unc, count, SA, LA, NA, W, XA, mark, tgt, cs, n_pat, pv, pd,
               nl, has, vals, start):
    """:func:`_subsets` when every pattern of ``cs`` outside ``S`` leaves the count
    states as they are: ``F_A`` is then ``W[A]`` (4 lanes, a scalar by the product
    rule: the product of the out objects' probabilities) times the distribution over
    the in objects alone, ``SA[A]`` over its live states ``LA[A, :NA[A]]``; an object
    out of ``S`` multiplies ``W`` and copies nothing. Children in place: subset ``a``
    keeps its slot (out), ``a + m`` takes the in child (one buffer, no swap). Kept apart
    from :func:`_subsets` (a second call of the step): one function choosing its buffers
    at run time compiled ~2.5 s faster but ran the HT kernel ~20% slower (measured)."""
    _root(FF, LL, cur, nf, x0, SA, LA, NA, XA, nl)
    W[0, 0], W[0, 1], W[0, 2], W[0, 3] = 1.0, 0.0, 0.0, 0.0
    w_in = np.int64(1)
    m = 1
    for j in range(count):
        g = unc[j]
        q = _out_factor(pv, pd, g, cs, n_pat, has)
        v = vals[g - start]
        for a in range(m):
            NA[a + m] = _live_step(SA[a], LA[a], NA[a], SA[a + m], LA[a + m], mark, tgt, cs,
                                   n_pat, pv, pd, g, nl, w_in, has)
            XA[a + m] = XA[a] + v
            w = (W[a, 0], W[a, 1], W[a, 2], W[a, 3])
            W[a + m, 0], W[a + m, 1], W[a + m, 2], W[a + m, 3] = w
            W[a, 0], W[a, 1], W[a, 2], W[a, 3] = _times(w, q)
        m *= 2


@njit
def _subsets(FF, LL, cur, nf, x0, unc, count, SA, SN, LA, LN, NA, NN, XA, mark, tgt, cs, n_pat, pv,
             pd, nl, has, vals, start):
    """Every subset ``A`` of the objects ``unc[:count]`` (global indices; ``vals`` local,
    from ``start``) from the distribution ``FF[cur]`` (live states ``LL[cur, :nf]``, the
    others exact zeros): ``F_A`` over its live states (:func:`_live_step`) and ``XA[A] =
    x0 + X_A``, bit ``j`` of ``A`` set when ``unc[j]`` is in ``S``. Returns ``(SA, SN,
    LA, LN, NA, NN)``, the two sets of buffers after their swaps (the subsets in ``SA``,
    ``LA``, ``NA``); lanes from ``nl`` to 4 are 0."""
    _root(FF, LL, cur, nf, x0, SA, LA, NA, XA, nl)
    m = 1
    for j in range(count):
        g = unc[j]
        for a in range(m):
            for side in range(2):  # out of S, then in it
                NN[a + side * m] = _live_step(SA[a], LA[a], NA[a], SN[a + side * m],
                                              LN[a + side * m], mark, tgt, cs, n_pat, pv, pd,
                                              g, nl, side, has)
            XA[a + m] = XA[a] + vals[g - start]
        SA, SN = SN, SA
        LA, LN = LN, LA
        NA, NN = NN, NA
        m *= 2
    return SA, SN, LA, LN, NA, NN


@njit
def _fewest(tgt, n_pat, G0, nl):
    """The fewest objects (steps of any pattern of any collection, breadth first from
    the empty state 0 over ``tgt``) that reach a state of nonzero ``f`` or tangent
    (``G0``'s first ``nl`` lanes; NaN counts as nonzero); ``2**62`` when none is
    reached. An event of fewer objects ends in a state of zero ``f`` and tangents
    whatever their patterns and probabilities."""
    n_states = tgt.shape[2]
    dist = np.full(n_states, -1, np.int64)
    queue = np.zeros(n_states, np.int64)
    dist[0] = 0
    head, size = 0, 1
    while head < size:
        k = queue[head]
        head += 1
        for c in range(tgt.shape[0]):
            for p in range(n_pat[c]):
                t = tgt[c, p, k]
                if dist[t] < 0:
                    dist[t] = dist[k] + 1
                    queue[size] = t
                    size += 1
    need = np.int64(1) << 62
    for k in range(n_states):
        if dist[k] >= 0 and dist[k] < need:
            for r in range(nl):
                if G0[k, r] != 0.0:
                    need = dist[k]
    return need


@njit
def _partition_buffers(coff, lo, hi):
    """``(unc, fold, fcol)`` for :func:`_partition` over the events ``lo:hi``: each as
    long as the most objects of one of them (at least 1)."""
    most = 1
    for e in range(lo, hi):
        m = 0
        for c in range(coff.shape[0]):
            m += coff[c, e + 1] - coff[c, e]
        most = max(most, m)
    return np.zeros(most, np.int64), np.zeros(most, np.int64), np.zeros(most, np.int64)


@njit
def _partition(coff, base, cs, cert, ins, vals, e, unc, fold, fcol):
    """Event ``e``'s objects in the kernels' order (collection by collection): the
    uncertain ones of ``cs`` into ``unc`` (global indices), every other object (the
    other collections', the certain ones of ``cs``) into ``fold`` and ``fcol`` (global
    index, collection); returns ``(n, m, x0)``: how many of each and the sum of the
    certain objects in ``S`` (``cert``, ``ins``, ``vals``: local to ``cs``)."""
    n = 0
    m = 0
    x0 = 0.0
    for c in range(coff.shape[0]):
        for i in range(coff[c, e], coff[c, e + 1]):
            g = base[c] + i
            if c == cs:
                if not cert[i]:
                    unc[n] = g
                    n += 1
                    continue
                if ins[i]:
                    x0 += vals[i]
            fold[m] = g
            fcol[m] = c
            m += 1
    return n, m, x0


@njit
def _numbers(coff, base, pv_all, n_pat, e):
    """Whether every pattern probability of event ``e`` is a number (no NaN)."""
    for c in range(coff.shape[0]):
        for g in range(base[c] + coff[c, e], base[c] + coff[c, e + 1]):
            for p in range(n_pat[c]):
                if pv_all[g, p, 0] != pv_all[g, p, 0]:
                    return False
    return True
