"""The forward steps of :mod:`analysis.pipeline.backends.numba.kernels._numba_esum` (numba, float64): one object's
step of a count distribution, the enumeration of every subset of the uncertain objects
(each subset over its live states; with scalar weights where the out patterns move no
count) and the forward half of meet in the middle.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._jit import inline, njit

__all__: list[str] = []


@njit
def _times_into(out, pv, pd, x, nl):
    """``out[r] += pv x[r] + x[0] pd[r]`` over the first ``nl`` lanes (``pd[0] = 0``; with
    ``nl <= 4`` over 4: a lane past ``nl`` carries nothing that is read)."""
    x0 = x[0]
    if nl <= 4:  # every load before the first store (SLP-vectorised, as _numba_dp.lin)
        a0, a1, a2, a3 = x[0], x[1], x[2], x[3]
        d0, d1, d2, d3 = pd[0], pd[1], pd[2], pd[3]
        o0, o1, o2, o3 = out[0], out[1], out[2], out[3]
        out[0], out[1], out[2], out[3] = (o0 + (pv * a0 + x0 * d0), o1 + (pv * a1 + x0 * d1),
                                          o2 + (pv * a2 + x0 * d2), o3 + (pv * a3 + x0 * d3))
    else:
        for r in range(nl):
            out[r] += pv * x[r] + x0 * pd[r]


@njit
def _dot(a, b, n_states, nl, out, skip):
    """``out = <a, b>`` over the states, lanes by the product rule (``(n_states, L)`` each;
    ``skip``: as :func:`_forward`)."""
    for r in range(nl):
        out[r] = 0.0
    for k in range(n_states):
        a0, b0 = a[k, 0], b[k, 0]
        if skip and a0 == 0.0 and b0 == 0.0:
            continue  # both values 0: every lane's term is 0
        out[0] += a0 * b0
        for r in range(1, nl):
            out[r] += a0 * b[k, r] + b0 * a[k, r]


@njit
def _forward(F, Fn, tgt, c, n_pat, pv, pd, g, n_states, nl, which, has, skip):
    """``Fn = sum_p pi_p shift_p(F)`` over the patterns ``p`` of object ``g`` (of
    collection ``c``) with ``has[p] == which`` (``which = -1``: every pattern). ``skip``
    (the event's probabilities are all numbers): terms of a zero pattern or a zero state
    are left out (exact zeros; with a NaN in the event they are not, as in the walk)."""
    for k in range(n_states):
        for r in range(nl):
            Fn[k, r] = 0.0
    for p in range(n_pat[c]):
        if which >= 0 and has[p] != which:
            continue
        v = pv[g, p, 0]
        d = pd[g, p]
        if skip and v == 0.0:
            zero = True
            for r in range(1, nl):
                if d[r] != 0.0:
                    zero = False
            if zero:
                continue  # adds exact zeros (F holds numbers: probabilities)
        for k in range(n_states):
            if skip and F[k, 0] == 0.0:
                zero = True
                for r in range(1, nl):
                    if F[k, r] != 0.0:
                        zero = False
                if zero:
                    continue
            _times_into(Fn[tgt[c, p, k]], v, d, F[k], nl)


@inline
def _forward4(F, Fn, tgt, c, n_pat, pv, pd, g, n_states, skip):
    """:func:`_forward` over every pattern with at most 4 lanes, written out (no views:
    the same floats in the same order)."""
    for k in range(n_states):
        Fn[k, 0] = Fn[k, 1] = Fn[k, 2] = Fn[k, 3] = 0.0
    for p in range(n_pat[c]):
        v = pv[g, p, 0]
        d0, d1, d2, d3 = pd[g, p, 0], pd[g, p, 1], pd[g, p, 2], pd[g, p, 3]
        if skip and v == 0.0 and d1 == 0.0 and d2 == 0.0 and d3 == 0.0:
            continue  # adds exact zeros (F holds numbers: probabilities)
        for k in range(n_states):
            a0, a1, a2, a3 = F[k, 0], F[k, 1], F[k, 2], F[k, 3]
            if skip and a0 == 0.0 and a1 == 0.0 and a2 == 0.0 and a3 == 0.0:
                continue
            t = tgt[c, p, k]
            Fn[t, 0] += v * a0 + a0 * d0
            Fn[t, 1] += v * a1 + a0 * d1
            Fn[t, 2] += v * a2 + a0 * d2
            Fn[t, 3] += v * a3 + a0 * d3


@inline
def _forward_live(FF, LL, cur, nf, mark, tgt, c, n_pat, pv, pd, g):
    """:func:`_forward4` over the live states of ``FF[cur]`` only (``LL[cur, :nf]``: every
    state that may be nonzero; the others are exact zeros, left out as :func:`_forward4`
    leaves them), into ``FF[1 - cur]`` with its live states into ``LL[1 - cur]``; returns
    their number (``mark``: all False, left so). For events whose probabilities are all
    numbers. One pair of buffers indexed by ``cur``: no arrays swapped in the loop (each
    swap of two array variables costs numba reference counts, and the compiler cannot
    tell the two apart)."""
    nxt = 1 - cur
    cnt = 0
    for p in range(n_pat[c]):
        v = pv[g, p, 0]
        d0, d1, d2, d3 = pd[g, p, 0], pd[g, p, 1], pd[g, p, 2], pd[g, p, 3]
        if v == 0.0 and d1 == 0.0 and d2 == 0.0 and d3 == 0.0:
            continue  # adds exact zeros
        for i in range(nf):
            k = LL[cur, i]
            a0, a1, a2, a3 = FF[cur, k, 0], FF[cur, k, 1], FF[cur, k, 2], FF[cur, k, 3]
            t = tgt[c, p, k]
            if not mark[t]:
                mark[t] = True
                LL[nxt, cnt] = t
                cnt += 1
                FF[nxt, t, 0] = FF[nxt, t, 1] = FF[nxt, t, 2] = FF[nxt, t, 3] = 0.0
            FF[nxt, t, 0] += v * a0 + a0 * d0
            FF[nxt, t, 1] += v * a1 + a0 * d1
            FF[nxt, t, 2] += v * a2 + a0 * d2
            FF[nxt, t, 3] += v * a3 + a0 * d3
    for i in range(cnt):
        mark[LL[nxt, i]] = False
    return cnt


@inline
def _sparse(A, src, la, na, B, dst, lb, nbn, mark, tgt, c, n_pat, pv, pd, g, nl, which, has):
    """:func:`_forward` from ``A[src]`` over its live states only (``la[src, :na[src]]``: every
    state that may be nonzero), into ``B[dst]`` with its live states into ``lb[dst]``,
    ``nbn[dst]`` (``mark``: all False, left so); for events whose probabilities are all
    numbers (a skipped state or pattern adds exact zeros) and at most 3 tangents (4 lanes:
    the sparse path's)."""
    cnt = 0
    for p in range(n_pat[c]):
        if has[p] != which:
            continue
        v = pv[g, p, 0]
        zero = v == 0.0
        for r in range(1, nl):
            if pd[g, p, r] != 0.0:
                zero = False
        if zero:
            continue
        d1, d2, d3 = pd[g, p, 1], pd[g, p, 2], pd[g, p, 3]
        for i in range(na[src]):
            k = la[src, i]
            t = tgt[c, p, k]
            if not mark[t]:
                mark[t] = True
                lb[dst, cnt] = t
                cnt += 1
                B[dst, t, 0] = B[dst, t, 1] = B[dst, t, 2] = B[dst, t, 3] = 0.0
            x0 = A[src, k, 0]
            B[dst, t, 0] += v * x0
            B[dst, t, 1] += v * A[src, k, 1] + x0 * d1
            B[dst, t, 2] += v * A[src, k, 2] + x0 * d2
            B[dst, t, 3] += v * A[src, k, 3] + x0 * d3

    for i in range(cnt):
        mark[lb[dst, i]] = False
    nbn[dst] = cnt


@inline
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


@inline
def _subsets(FF, LL, cur, nf, x0, unc, count, SA, SN, LA, LN, NA, NN, XA, mark, tgt, cs, n_pat, pv,
             pd, nl, has, vals, start):
    """Every subset ``A`` of the objects ``unc[:count]`` (global indices; ``vals`` local,
    from ``start``) from the distribution ``FF[cur]`` (live states ``LL[cur, :nf]``, the
    others exact zeros): ``F_A`` over its live states
    (:func:`_sparse`) and ``XA[A] = x0 + X_A``, bit ``j`` of ``A`` set when ``unc[j]``
    is in ``S``. Returns ``(SA, SN, LA, LN, NA, NN)``, the two sets of buffers after
    their swaps (the subsets in ``SA``, ``LA``, ``NA``); lanes from ``nl`` to 4 are 0."""
    w_out, w_in = np.int64(0), np.int64(1)
    _root(FF, LL, cur, nf, x0, SA, LA, NA, XA, nl)
    m = 1
    for j in range(count):
        g = unc[j]
        for a in range(m):
            _sparse(SA, a, LA, NA, SN, a, LN, NN, mark, tgt, cs, n_pat, pv, pd, g, nl, w_out,
                    has)
            _sparse(SA, a, LA, NA, SN, a + m, LN, NN, mark, tgt, cs, n_pat, pv, pd, g, nl, w_in,
                    has)
            XA[a + m] = XA[a] + vals[g - start]
        SA, SN = SN, SA
        LA, LN = LN, LA
        NA, NN = NN, NA
        m *= 2
    return SA, SN, LA, LN, NA, NN


@inline
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


@inline
def _subsets_w(FF, LL, cur, nf, x0, unc, count, SA, LA, NA, W, XA, mark, tgt, cs, n_pat, pv, pd,
               nl, has, vals, start):
    """:func:`_subsets` when every pattern of ``cs`` outside ``S`` leaves the count
    states as they are: ``F_A`` is then ``W[A]`` (4 lanes, a scalar by the product
    rule: the product of the out objects' probabilities) times the distribution over
    the in objects alone, ``SA[A]`` over its live states ``LA[A, :NA[A]]``; an object
    out of ``S`` multiplies ``W`` and copies nothing. Children in place: subset ``a``
    keeps its slot (out), ``a + m`` takes the in child (one buffer, no swap)."""
    _root(FF, LL, cur, nf, x0, SA, LA, NA, XA, nl)
    W[0, 0], W[0, 1], W[0, 2], W[0, 3] = 1.0, 0.0, 0.0, 0.0
    w_in = np.int64(1)
    m = 1
    for j in range(count):
        g = unc[j]
        q0, q1, q2, q3 = _out_factor(pv, pd, g, cs, n_pat, has)
        v = vals[g - start]
        for a in range(m):
            _sparse(SA, a, LA, NA, SA, a + m, LA, NA, mark, tgt, cs, n_pat, pv, pd, g, nl,
                    w_in, has)
            XA[a + m] = XA[a] + v
            w0, w1, w2, w3 = W[a, 0], W[a, 1], W[a, 2], W[a, 3]
            W[a + m, 0], W[a + m, 1], W[a + m, 2], W[a + m, 3] = w0, w1, w2, w3
            W[a, 0], W[a, 1], W[a, 2], W[a, 3] = (w0 * q0, w0 * q1 + w1 * q0,
                                                  w0 * q2 + w2 * q0, w0 * q3 + w3 * q0)
        m *= 2
