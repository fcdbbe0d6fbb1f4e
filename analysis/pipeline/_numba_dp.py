"""The compiled loops of :mod:`analysis.pipeline.fastkernel` (numba, float64).

Per event, the objects of every collection of the plan are taken in the count model's
collection order (:class:`analysis.select.objects.CountModel`), each with its
pattern probabilities ``pi_p`` (which sets hold it) and their tangents (forward mode,
one per trainable parameter). With ``tgt[c, p, k]`` the joint count state after
adding an object of pattern ``p`` to state ``k`` and ``f`` the pass table:

- forward distributions ``F_0 = delta_0``, ``F_{j+1}[tgt(p, k)] += pi_jp F_j[k]``;
- value functions ``G_N = f``, ``G_j[k] = sum_p pi_jp G_{j+1}[tgt(p, k)]``; the
  event's pass probability is ``P = G_0[0]``;
- the weight of object ``j`` in set ``s``: ``P(j in s and the event passes) =
  sum_{p contains s} pi_jp sum_k F_j[k] G_{j+1}[tgt(p, k)]``;
- event sums ``X = sum_{j in s} x_j``: ``E[X^r 1_pass]`` by the backward recursion
  ``G_r(k) <- sum_p pi_p sum_{i <= r} C(r, i) x_p^i G_{r-i}(tgt_p(k))`` from
  ``G_0 = f`` (:func:`analysis.select.objects.sum_moments`).

These are the recursions of :mod:`analysis.select.objects` (same tables), written
as loops; tests check them piece by piece against it and against enumeration.
Events are processed in blocks; per-block partial sums are added in block order.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["accumulate", "cut_into", "patterns", "select", "soft", "soft_array"]


@numba.njit(cache=True)
def soft(v, t, width, greater, inclusive):
    """``(s, ds/dt)`` of :func:`analysis.select.objects.soft_pass` (``ds/dv = -ds/dt``)."""
    z = v - t if greater else t - v
    if width > 0.0:
        s = 1.0 / (1.0 + math.exp(-(z / width)))
        ds = s * (1.0 - s) / width
        return s, (-ds if greater else ds)
    if inclusive:
        return (1.0 if z >= 0.0 else 0.0), 0.0
    return (1.0 if z > 0.0 else 0.0), 0.0


@numba.njit(cache=True, nogil=True)
def soft_array(v, t, width, greater, inclusive, s_out, ds_out):
    """:func:`soft` over an array ``v`` (values and ``ds/dt`` into the outputs)."""
    for i in range(v.shape[0]):
        s_out[i], ds_out[i] = soft(v[i], t, width, greater, inclusive)


@numba.njit(cache=True, nogil=True)
def cut_into(v, t, width, greater, inclusive, absolute, par, q):
    """Multiply the soft cut of values ``v`` into ``q`` (``(N, 1 + P)``: probability
    and tangents; product rule; ``par``: the threshold's parameter, or -1)."""
    np1 = q.shape[1]
    for j in range(v.shape[0]):
        x = abs(v[j]) if absolute else v[j]
        sv, ds = soft(x, t, width, greater, inclusive)
        q0 = q[j, 0]
        for r in range(1, np1):
            q[j, r] *= sv
        if par >= 0:
            q[j, 1 + par] += q0 * ds
        q[j, 0] = q0 * sv


@numba.njit(cache=True, nogil=True)
def patterns(q, codes, n_pat, pi):
    """Pattern probabilities ``pi`` (``(N, P, 1 + P')``) of objects with own set
    probabilities ``q`` (``(n_sets, N, 1 + P')``): ``codes[p, s]`` 1 in the set (``q``),
    0 out of it with its parent in (``1 - q``), -1 unreachable (factor 1)."""
    n_sets, n_obj, np1 = q.shape
    for j in range(n_obj):
        for p in range(n_pat):
            v = 1.0
            for r in range(1, np1):
                pi[j, p, r] = 0.0
            for ls in range(n_sets):
                code = codes[p, ls]
                if code < 0:
                    continue
                fac = q[ls, j, 0] if code == 1 else 1.0 - q[ls, j, 0]
                sign = 1.0 if code == 1 else -1.0
                for r in range(1, np1):
                    pi[j, p, r] = pi[j, p, r] * fac + v * sign * q[ls, j, r]
                v *= fac
            pi[j, p, 0] = v


@numba.njit(cache=True, nogil=True)
def select(
    coff, base, pi_all, coll_sets, n_coll_sets, pat, n_pat, tgt, f, df, set_slot,
    sum_x, sum_has, binom, max_seq, block, pe, ow, sa, b0, b1,
):
    """Blocks ``b0:b1``: ``pe[e] = (P, dP)``; ``ow[slot, j] = (w, dw)`` for every object
    ``j`` of a set with a slot; ``sa[o, e, r] = (E[X_o^r 1], d...)`` per event sum ``o``
    (``sum_x[o, g]``: the value of object ``g``; ``sum_has[o, c, p]``: 1 where pattern
    ``p`` of collection ``c`` holds the summed set). ``pi_all[base[c] + i]``: pattern
    probabilities of object ``i`` of collection ``c``."""
    n_ev = pe.shape[0]
    np1 = pe.shape[1]
    n_coll = coff.shape[0]
    n_states = f.shape[0]
    n_sums = sum_x.shape[0]
    big_r = binom.shape[0] - 1
    p_max = pat.shape[1]
    need_fwd = False
    for s in range(set_slot.shape[0]):
        if set_slot[s] >= 0:
            need_fwd = True
    for b in range(b0, b1):
        seq_c = np.empty(max_seq, np.int64)
        seq_i = np.empty(max_seq, np.int64)
        F = np.zeros((max_seq + 1 if need_fwd else 1, n_states, np1))
        G = np.empty((n_states, np1))
        Gn = np.empty((n_states, np1))
        H = np.empty((p_max, np1))
        Gm = np.empty((n_sums, big_r + 1, n_states, np1))
        Gmn = np.empty((n_sums, big_r + 1, n_states, np1))
        xp = np.empty(p_max)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            n = 0
            for c in range(n_coll):
                for i in range(coff[c, e], coff[c, e + 1]):
                    seq_c[n] = c
                    seq_i[n] = i
                    n += 1
            # forward distributions (only for per-object weights)
            if need_fwd:
                for k in range(n_states):
                    for r in range(np1):
                        F[0, k, r] = 0.0
                F[0, 0, 0] = 1.0
                for j in range(n):
                    c = seq_c[j]
                    g = base[c] + seq_i[j]
                    for k in range(n_states):
                        for r in range(np1):
                            F[j + 1, k, r] = 0.0
                    for p in range(n_pat[c]):
                        pv = pi_all[g, p, 0]
                        for k in range(n_states):
                            t = tgt[c, p, k]
                            fk = F[j, k, 0]
                            F[j + 1, t, 0] += pv * fk
                            for r in range(1, np1):
                                F[j + 1, t, r] += pi_all[g, p, r] * fk + pv * F[j, k, r]
            # backward value functions, object weights, event sums
            for k in range(n_states):
                G[k, 0] = f[k]
                for r in range(1, np1):
                    G[k, r] = df[k, r - 1]
            for o in range(n_sums):
                for m in range(big_r + 1):
                    for k in range(n_states):
                        for r in range(np1):
                            Gm[o, m, k, r] = G[k, r] if m == 0 else 0.0
            for j in range(n - 1, -1, -1):
                c = seq_c[j]
                g = base[c] + seq_i[j]
                if need_fwd:
                    for p in range(n_pat[c]):
                        for r in range(np1):
                            H[p, r] = 0.0
                        for k in range(n_states):
                            t = tgt[c, p, k]
                            fk = F[j, k, 0]
                            H[p, 0] += fk * G[t, 0]
                            for r in range(1, np1):
                                H[p, r] += F[j, k, r] * G[t, 0] + fk * G[t, r]
                    for ls in range(n_coll_sets[c]):
                        slot = set_slot[coll_sets[c, ls]]
                        if slot < 0:
                            continue
                        jj = seq_i[j]
                        for r in range(np1):
                            ow[slot, jj, r] = 0.0
                        for p in range(n_pat[c]):
                            if pat[c, p, ls] != 1:
                                continue
                            pv = pi_all[g, p, 0]
                            ow[slot, jj, 0] += pv * H[p, 0]
                            for r in range(1, np1):
                                ow[slot, jj, r] += pi_all[g, p, r] * H[p, 0] + pv * H[p, r]
                for o in range(n_sums):
                    for p in range(n_pat[c]):
                        xp[p] = sum_x[o, g] * sum_has[o, c, p]
                    for m in range(big_r + 1):
                        for k in range(n_states):
                            for r in range(np1):
                                Gmn[o, m, k, r] = 0.0
                    for p in range(n_pat[c]):
                        pv = pi_all[g, p, 0]
                        for m in range(big_r + 1):
                            for k in range(n_states):
                                t = tgt[c, p, k]
                                acc0 = 0.0
                                xpow = 1.0
                                for ii in range(m + 1):
                                    acc0 += binom[m, ii] * xpow * Gm[o, m - ii, t, 0]
                                    xpow *= xp[p]
                                Gmn[o, m, k, 0] += pv * acc0
                                for r in range(1, np1):
                                    accr = 0.0
                                    xpow = 1.0
                                    for ii in range(m + 1):
                                        accr += binom[m, ii] * xpow * Gm[o, m - ii, t, r]
                                        xpow *= xp[p]
                                    Gmn[o, m, k, r] += pi_all[g, p, r] * acc0 + pv * accr
                    for m in range(big_r + 1):
                        for k in range(n_states):
                            for r in range(np1):
                                Gm[o, m, k, r] = Gmn[o, m, k, r]
                for k in range(n_states):
                    for r in range(np1):
                        Gn[k, r] = 0.0
                for p in range(n_pat[c]):
                    pv = pi_all[g, p, 0]
                    for k in range(n_states):
                        t = tgt[c, p, k]
                        Gn[k, 0] += pv * G[t, 0]
                        for r in range(1, np1):
                            Gn[k, r] += pi_all[g, p, r] * G[t, 0] + pv * G[t, r]
                for k in range(n_states):
                    for r in range(np1):
                        G[k, r] = Gn[k, r]
            for r in range(np1):
                pe[e, r] = G[0, r]
            for o in range(n_sums):
                for m in range(big_r + 1):
                    for r in range(np1):
                        sa[o, e, m, r] = Gm[o, m, 0, r]


@numba.njit(cache=True, nogil=True)
def accumulate(eoff, x, y, has_y, wo, ev, cx, cy, block, out, b0, b1):
    """Blocks ``b0:b1`` of one observable's power sums about ``(cx, cy)``: entries
    ``eoff[e]:eoff[e + 1]`` of event ``e`` with values ``x`` (``y``) and weight
    ``ev[e] wo[j]`` (with tangents). ``out[b]``: ``(8, 1 + P)`` = W, sum w d, d^2, d^3,
    d^4, sum w e, e^2, d e (``d = x - cx``, ``e = y - cy``)."""
    n_ev = ev.shape[0]
    np1 = ev.shape[1]
    t = np.empty(8)
    for b in range(b0, b1):
        acc = out[b]
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            we = ev[e, 0]
            for j in range(eoff[e], eoff[e + 1]):
                w = we * wo[j, 0]
                if w == 0.0 and we == 0.0:
                    continue
                d = x[j] - cx
                d2 = d * d
                t[0] = 1.0
                t[1] = d
                t[2] = d2
                t[3] = d2 * d
                t[4] = d2 * d2
                if has_y:
                    g = y[j] - cy
                    t[5] = g
                    t[6] = g * g
                    t[7] = d * g
                else:
                    t[5] = t[6] = t[7] = 0.0
                for k in range(8):
                    acc[k, 0] += w * t[k]
                for r in range(1, np1):
                    dw = ev[e, r] * wo[j, 0] + we * wo[j, r]
                    if dw != 0.0:
                        for k in range(8):
                            acc[k, r] += dw * t[k]
