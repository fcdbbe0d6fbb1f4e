"""The compiled loops of :mod:`analysis.pipeline.backends.numba.fastkernel` (numba, float64).

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
as loops (the steps of the first three: :mod:`analysis.select.lanes.steps`,
shared by every kernel that walks the count states); tests check them piece by piece
against it and against enumeration.
Events are processed in blocks; per-block partial sums are added in block order.
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.arith import (
    LANES,
    axpy,
    lin,
    vec_zero,
    zero_at,
)
from analysis.select.lanes.buffers import (
    keep_sum,
    lane_buffer,
    lane_buffer4,
    no_tangent,
    set_value,
    set_vec,
    store_row,
    table_init,
    tangents,
    vec_mul_add,
)
from analysis.select.lanes.policy import (
    compiled,
    elementwise,
    host_args,
    inline,
    njit,
    vectorised,
    writes,
)
from analysis.select.lanes.steps import (
    backward,
    clear,
    forward,
    sequence,
    sums_backward,
    weight,
)

__all__ = [
    "LANES", "accumulate", "any_slot", "centre_sums", "compiled", "select",
    "soft_array", "soft_values", "vectorised",
]


def soft_values(v: np.ndarray, t: float, width: float, greater: bool, inclusive: bool,
                absolute: bool, out: np.ndarray | None = None) -> np.ndarray:
    """The soft cut's probabilities ``s`` (numpy, float64), as
    :func:`analysis.select.objects.soft_pass`: ``z = v - t`` (``>``, ``>=``) or ``t - v``
    (``<``, ``<=``), of ``|v|`` for a cut on ``abs``; ``s = 1 / (1 + exp(-z / width))``
    with numpy's vectorised ``exp`` (several times faster than the scalar ``exp`` of a
    compiled loop; within an ulp of it), ``s = [z > 0]`` (``[z >= 0]`` if ``inclusive``)
    for ``width = 0``; NaN gives NaN (0 at ``width = 0``). Into ``out`` if given (numpy
    and the loops release the GIL: slices may be filled on threads). The element-wise
    steps around ``exp`` run as two compiled loops (:func:`soft_argument`,
    :func:`soft_finish`: the same operations per element as numpy's ``abs``,
    ``subtract``, ``divide`` and ``add``, ``divide``, so the same floats, in two passes
    over memory instead of up to six). The loops take the slope from ``s``
    (:func:`analysis.select.lanes.cuts.soft_slope`)."""
    v = np.asarray(v, dtype=np.float64)
    out = np.empty_like(v) if out is None else out
    hard = not width > 0.0  # NaN fails the step, as in soft_pass
    soft_argument(*host_args(soft_argument, (v, float(t), float(width), greater, inclusive,
                                            absolute, hard, out)))
    if hard:
        return out
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    soft_finish(out)
    return out


@elementwise
def soft_argument(v, t, width, greater, inclusive, absolute, hard, out):
    """``out = -z / width`` of :func:`soft_values` (``z = x - t`` or ``t - x``, ``x = v``
    or ``|v|``), or, for a hard cut, the step ``[z > 0]`` (``[z >= 0]`` if
    ``inclusive``; NaN fails), as 1.0 / 0.0. LLVM unswitches the loop on the cases and
    vectorises each (as fast as a loop written per case: 0.80 ms per 1.2M values;
    ``width > 0`` here: no division by zero)."""
    n = v.shape[0]
    if hard:
        for i in range(n):
            x = abs(v[i]) if absolute else v[i]
            z = x - t if greater else t - x
            out[i] = 1.0 if (z >= 0.0 if inclusive else z > 0.0) else 0.0
        return
    w = -width
    for i in range(n):
        x = abs(v[i]) if absolute else v[i]
        out[i] = (x - t if greater else t - x) / w




writes(soft_argument, "out")
@elementwise
def soft_finish(e):
    """``e = 1 / (1 + e)`` in place (``e = exp(-z / width) >= 0`` or NaN:
    :func:`soft_values`; no division by zero)."""
    for i in range(e.shape[0]):
        e[i] = 1.0 / (e[i] + 1.0)


def soft_array(v: np.ndarray, t: float, width: float, greater: bool, inclusive: bool,
               absolute: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(s, ds/dt)`` of the soft cut over an array (numpy: :func:`soft_values`, and the
    slope of :func:`analysis.select.lanes.cuts.soft_slope`)."""
    s = soft_values(v, t, width, greater, inclusive, absolute)
    iw = 1.0 / width if width > 0.0 else 0.0
    ds = s * (1.0 - s) * iw
    return s, (-ds if greater else ds)


@inline
def any_slot(set_slot):
    """Whether a set has a slot (per-object weights asked for: forward distributions)."""
    for s in range(set_slot.shape[0]):
        if set_slot[s] >= 0:
            return True
    return False


@njit
def select(
    coff, base, pv_all, pd_all, coll_sets, n_coll_sets, pat, n_pat, pat_need, tgt, f, df,
    set_slot, sum_x, sum_has, binom, max_seq, block, pe, ow, sa, b0, b1,
):
    """Blocks ``b0:b1``: ``pe[e] = (P, dP)``; ``ow[slot, g] = (w, dw)`` for every object
    ``g`` (global index) of a set with a slot; ``sa[o, e, r] = (E[X_o^r 1], d...)`` per
    event sum ``o`` (``sum_x[o, g]``: the value of object ``g``; ``sum_has[o, c, p]``: 1 where pattern
    ``p`` of collection ``c`` holds the summed set). ``pv_all[base[c] + i]``,
    ``pd_all[...]``: pattern probabilities and tangents of object ``i`` of collection
    ``c``; ``f``, ``df``: the pass table, ``df`` in lanes (lane 0 zero); ``pat_need[c,
    p]``: pattern ``p`` holds a set with a slot. Pattern 0 (in no set) adds nothing to
    any count (``tgt[c, 0, k] = k``). All outputs in lanes: value, then tangents.

    One source for two variants, chosen at compile time by the tangent arguments
    (:mod:`~analysis.select.lanes.arith`): ``pd_all`` ``(N, P,
    LANES)`` and ``df`` ``(S, LANES)`` give the loop with tangents; ``pd_all = df = 0.0``
    the loop for values only (buffers of one lane, the outputs' lane 0, their other
    lanes set to zero: the same floats as lane 0 of the first; ``value_loop`` of
    :class:`analysis.pipeline.backend.Backend`). Only the second runs: with tangents
    the kernel runs :func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk`
    (the same floats, several times faster)."""
    n_ev = pe.shape[0]
    n_states = f.shape[0]
    n_sums = sum_x.shape[0]
    big_r = binom.shape[0] - 1
    p_max = pat.shape[1]
    need_fwd = any_slot(set_slot)
    for b in range(b0, b1):
        seq_c = np.empty(max_seq, np.int64)
        seq_g = np.empty(max_seq, np.int64)
        F = lane_buffer(max_seq + 1 if need_fwd else 1, n_states, df)
        G = lane_buffer(1, n_states, df)[0]
        Gn = lane_buffer(1, n_states, df)[0]
        H = lane_buffer(1, p_max, df)[0]
        Gm = lane_buffer4(n_sums, big_r + 1, n_states, df)
        Gmn = lane_buffer4(n_sums, big_r + 1, n_states, df)
        buf = np.empty(LANES)
        xp = np.empty(p_max)
        states = np.arange(n_states)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            n = sequence(coff, base, e, seq_c, seq_g)
            # forward distributions (only for per-object weights)
            if need_fwd:
                for k in range(n_states):
                    zero_at(F[0], k)
                set_value(F[0], 0, 1.0)
                for j in range(n):
                    c = seq_c[j]
                    g = seq_g[j]
                    clear(F[j + 1], states, n_states)
                    for p in range(n_pat[c]):
                        pv = pv_all[g, p]
                        forward(F[j + 1], F[j], pv, pv, tangents(pd_all, g, p), tgt[c, p],
                                states, n_states, 0, states, False)
            # backward value functions, object weights, event sums
            for k in range(n_states):
                table_init(G, k, f, df)
            for o in range(n_sums):
                for m in range(big_r + 1):
                    for k in range(n_states):
                        if m == 0:
                            set_vec(Gm[o, m], k, G[k])
                        else:
                            zero_at(Gm[o, m], k)
            for j in range(n - 1, -1, -1):
                c = seq_c[j]
                g = seq_g[j]
                if need_fwd:
                    for p in range(n_pat[c]):
                        if pat_need[c, p]:
                            keep_sum(H, p, weight(H[p], F[j], G, tgt[c, p], states, n_states,
                                                  0, states, False))
                    for ls in range(n_coll_sets[c]):
                        slot = set_slot[coll_sets[c, ls]]
                        if slot < 0:
                            continue
                        acc = vec_zero(H[0], buf)
                        for p in range(n_pat[c]):
                            if pat[c, p, ls] != 1:
                                continue
                            acc = vec_mul_add(acc, pv_all[g, p], H[p], tangents(pd_all, g, p))
                        store_row(ow[slot, g], acc)
                for o in range(n_sums):
                    for p in range(n_pat[c]):
                        xp[p] = sum_x[o, g] * sum_has[o, c, p]
                    for m in range(big_r + 1):
                        clear(Gmn[o, m], states, n_states)
                    for p in range(n_pat[c]):
                        pv = pv_all[g, p]
                        # a pattern of probability exactly 0 adds nothing: skip it (its
                        # powers of x may overflow: 0 x inf)
                        if pv == 0.0 and no_tangent(pd_all, g, p):
                            continue
                        sums_backward(Gmn[o], Gm[o], pv, tangents(pd_all, g, p), xp[p], binom,
                                      tgt[c, p], states, n_states, buf)
                    for m in range(big_r + 1):
                        for k in range(n_states):
                            set_vec(Gm[o, m], k, Gmn[o, m, k])
                clear(Gn, states, n_states)
                for p in range(n_pat[c]):
                    pv = pv_all[g, p]
                    backward(Gn, G, pv, pv, tangents(pd_all, g, p), tgt[c, p], states,
                             n_states, 0)
                for k in range(n_states):
                    set_vec(G, k, Gn[k])
            store_row(pe[e], G[0])
            for o in range(n_sums):
                for m in range(big_r + 1):
                    store_row(sa[o, e, m], Gm[o, m, 0])


@njit
def accumulate(eoff, x, y, has_y, wo, ev, cx, cy, block, out, b0, b1):
    """Blocks ``b0:b1`` of one observable's power sums about ``(cx, cy)``: entries
    ``eoff[e]:eoff[e + 1]`` of event ``e`` with values ``x`` (``y``) and weight
    ``ev[e] wo[j]`` (lanes: value, tangents). ``out[b]``: ``(8, LANES)`` = W, sum w d,
    d^2, d^3, d^4, sum w e, e^2, d e (``d = x - cx``, ``e = y - cy``)."""
    n_ev = ev.shape[0]
    t = np.empty(8)
    dw = np.empty(LANES)
    for b in range(b0, b1):
        acc = out[b]
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            we = ev[e, 0]
            if we == 0.0:
                nonzero = False
                for r in range(LANES):
                    if ev[e, r] != 0.0:
                        nonzero = True
                if not nonzero:
                    continue
            for j in range(eoff[e], eoff[e + 1]):
                lin(dw, wo[j, 0], ev[e], we, wo[j])
                dw[0] *= 0.5  # lane 0 is w = we wj, counted twice (exact)
                nil = True  # an entry of weight exactly 0 (and no tangent) adds nothing:
                for r in range(LANES):  # skip it (its powers may overflow: 0 x inf)
                    if dw[r] != 0.0:
                        nil = False
                if nil:
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
                for k in range(8 if has_y else 5):
                    axpy(acc[k], t[k], dw)




writes(accumulate, "out")
@njit
def centre_sums(eoff, x, y, wo, ev, block, out, b0, b1):
    """Blocks ``b0:b1``: ``out[b] = (W, sum w x, sum w y)`` of one observable's entries
    (values only: the centre has no gradient)."""
    n_ev = ev.shape[0]
    for b in range(b0, b1):
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            we = ev[e, 0]
            if we == 0.0:
                continue
            for j in range(eoff[e], eoff[e + 1]):
                w = we * wo[j, 0]
                out[b, 0] += w
                out[b, 1] += w * x[j]
                out[b, 2] += w * y[j]


writes(centre_sums, "out")
