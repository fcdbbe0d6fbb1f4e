"""The count-state walk of the numba kernels: each step of its recursions, written once.

Per event, the objects are taken in a fixed order (:func:`sequence`), each with its
pattern probabilities ``pi_p`` (which object sets hold it). With ``tgt[c, p, k]`` the
joint count state after adding an object of collection ``c`` and pattern ``p`` to state
``k`` (:class:`analysis.select.objects.CountModel`'s tables) and ``f`` the pass table:

- forward distributions ``F_0 = delta_0``, ``F_{j+1}[tgt(p, k)] += pi_jp F_j[k]``
  (:func:`forward`: one pattern's term);
- value functions ``G_N = f``, ``G_j[k] = sum_p pi_jp G_{j+1}[tgt(p, k)]``, the pass
  probability ``P = G_0[0]`` (:func:`backward`: one pattern's term);
- the weight of object ``j`` in set ``s``: ``P(j in s and the event passes) =
  sum_{p holds s} pi_jp sum_k F_j[k] G_{j+1}[tgt(p, k)]`` (:func:`weight`: the inner sum
  of one pattern);
- event sums ``X = sum_{j in s} x_j``: ``E[X^m 1_pass]`` by the backward recursion
  ``G^m_j[k] = sum_p pi_jp sum_{i <= m} C(m, i) x_jp^i G^{m-i}_{j+1}[tgt(p, k)]`` from
  ``G^0 = f``, ``G^{m>0} = 0`` (:func:`sums_backward`: one pattern's term;
  :func:`analysis.select.objects.sum_moments`).

Every kernel that walks the count states (the selection loops of ``_numba_dp``
and the patterns' sensitivities of ``_numba_sens``, the histogram walk of ``_numba_hist``, the leading
candidates of ``_numba_lead``, the sensitivities of ``_numba_sens``, the event sums'
subsets of ``_numba_esum``) calls these steps;
what differs between them is which states a step runs over and what it is given:

- the states: ``states[:ns]`` (every state, or the states reachable after the objects
  so far: the others hold exact zeros), optionally only those where ``mask`` is true
  (``masked``: a compile-time constant after inlining); or the live states of one
  distribution, those of the next found as they are first reached
  (:func:`forward_live`);
- the lanes: each step is written once over lane vectors and specialised at compile
  time by the arrays it is given (:mod:`~analysis.pipeline.backends.numba.kernels.lanes`'
  primitives): ``(states, LANES)`` arrays give the variant with tangents (value, then
  tangents, or two variants of 4 lanes: ``h = 4``, the second variant's value lane, and
  ``pv_hi`` its probability; ``h = 0``, ``pv_hi = pv`` for one variant; the product rule
  ``(pi F)' = pi F' + F_0 pi'``), ``(states,)`` arrays the variant for values only (lane
  0's operations without the tangent terms, which add exact zeros there: the same
  floats; the tangent arguments ``d``, ``inner``, ``acc`` are then unused: pass ``0.0``);
  four lanes (one variant, at most 3 tangents) where ``d`` is a tuple of 4 numbers and
  ``inner`` a tuple of 4 (rows read by element);

One collection with one set walks the chain of count states in
``analysis.select.chainwalk`` (the same operations in the same order as these steps).

A step adds into its output (the caller clears it, :func:`clear`, or sets it once): the
sums over patterns run in pattern order, those over states in the order of ``states``,
so that every caller adds the same terms in the same order as the recursions above.
"""

from __future__ import annotations

from analysis.pipeline.backends.numba.kernels._jit import inline
from analysis.pipeline.backends.numba.kernels.lane_rows import clear_at, row_dot_add, row_mul_add
from analysis.pipeline.backends.numba.kernels.lanes import (
    dot_end,
    dot_zero,
    mul_add,
    registers,
    vec_axpy,
    vec_zero,
)

__all__ = [
    "backward", "clear", "forward", "forward_live", "sequence",
    "sums_backward", "weight",
]


@inline
def sequence(coff, base, e, seq_c, seq_g):
    """Event ``e``'s objects of every collection in the count model's order into
    ``seq_c`` (collection) and ``seq_g`` (global index ``base[c] + i``); returns their
    number."""
    n = 0
    for c in range(coff.shape[0]):
        for i in range(coff[c, e], coff[c, e + 1]):
            seq_c[n] = c
            seq_g[n] = base[c] + i
            n += 1
    return n


@inline
def clear(F, states, ns):
    """``F[k] = 0`` (every lane) for ``k`` in ``states[:ns]``."""
    for i in range(ns):
        F[states[i]] = 0.0


@inline
def forward(Fn, F, pv, pv_hi, d, row, states, ns, h, mask, masked):
    """One pattern's term of the forward step: ``Fn[row[k]] += pv F[k] + F[k, 0] d``
    (``d``: the pattern probability's tangents; lanes 4-7 with ``pv_hi``, ``F[k, h]``
    for two variants; values: ``pv F[k]``) for ``k`` in ``states[:ns]`` (and ``mask[k]``
    if ``masked``); ``row``: ``tgt[c, p]``."""
    dv = registers(d)
    for i in range(ns):
        k = states[i]
        if masked and not mask[k]:
            continue
        row_mul_add(Fn, row[k], pv, pv_hi, F, k, h, dv)


@inline
def forward_live(Fn, F, pv, d, row, states, ns, mark, reached, cnt):
    """:func:`forward` of one variant over live states: ``states[:ns]`` the states of
    ``F`` that may be nonzero (the others exact zeros); a state of ``Fn`` first reached
    (``mark`` false) is cleared (the lanes ``d`` gives), marked and appended to
    ``reached`` before its term (the caller unmarks them); returns their count from
    ``cnt``. One pass (a pass over the targets first, or the marking as a primitive of
    its own, measured several times slower)."""
    dv = registers(d)
    for i in range(ns):
        k = states[i]
        t = row[k]
        if not mark[t]:
            mark[t] = True
            reached[cnt] = t
            cnt += 1
            clear_at(Fn, t, d)
        row_mul_add(Fn, t, pv, pv, F, k, 0, dv)
    return cnt


@inline
def backward(Gn, G, pv, pv_hi, d, row, states, ns, h):
    """One pattern's term of the backward step: ``Gn[k] += pv G[row[k]] + G[row[k], 0] d``
    (two variants as :func:`forward`; values: ``pv G[row[k]]``) for ``k`` in
    ``states[:ns]``."""
    dv = registers(d)
    for i in range(ns):
        k = states[i]
        row_mul_add(Gn, k, pv, pv_hi, G, row[k], h, dv)


@inline
def weight(inner, F, G, row, states, ns, h, mask, masked):
    """``sum_k F[k] G[row[k]]`` over ``k`` in ``states[:ns]`` (and ``mask[k]`` if
    ``masked``): one pattern's inner sum of an object weight, returned (its value) and,
    with tangents, into ``inner`` (the product rule ``G_0 F + F_0 G``, value lanes summed
    twice and halved: exact; four lanes, ``inner`` a tuple of 4: the four returned).
    Summed in registers (a sum in memory waits on its own store every step)."""
    acc = dot_zero(F[0], inner)
    for i in range(ns):
        k = states[i]
        if masked and not mask[k]:
            continue
        acc = row_dot_add(acc, F, k, G, row[k], h)
    return dot_end(inner, acc, h)


@inline
def sums_backward(Gmn, Gm, pv, d, x, binom, row, states, ns, acc):
    """One pattern's term of the event sums' backward step: ``Gmn[m, k] += pv A + A_0 d``
    (values: ``pv A``) with ``A = sum_{i <= m} C(m, i) x^i Gm[m - i, row[k]]``
    (``binom[m, i] = C(m, i)``; ``x``: the object's summed value in this pattern, 0 where
    the pattern does not hold the summed set) for every power ``m`` and ``k`` in
    ``states[:ns]``; ``acc``: a buffer of ``LANES`` (with tangents)."""
    for m in range(binom.shape[0]):
        for i in range(ns):
            t = row[states[i]]
            a = vec_zero(Gm[0, 0], acc)
            xpow = 1.0
            for ii in range(m + 1):
                a = vec_axpy(a, binom[m, ii] * xpow, Gm[m - ii, t])
                xpow *= x
            mul_add(Gmn[m], states[i], pv, pv, a, 0, d)
