"""The count-state walk in numba: each step of its recursions, written once.

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

Every kernel that walks the count states (the walk of the selection and the histograms,
``_numba_hist``, the leading candidates of ``_numba_lead``, the patterns' sensitivities
of ``_numba_sens``, the event sums' subsets of ``_numba_esum``) calls these steps;
what differs between them is which states a step runs over and what it is given:

- the states: ``states[:ns]`` (every state, or the states reachable after the objects
  so far: the others hold exact zeros), optionally only those where ``mask`` is true
  (``masked``: a compile-time constant after inlining); or the live states of one
  distribution, those of the next found as they are first reached
  (:func:`forward_live`);
- the targets: ``row`` an array (``tgt[c, p]``), or the chain's top state ``L`` (a
  number: ``tgt k = min(k + 1, L)``, one collection, one set), and ``states`` an array
  or a number (every state in order: ``0 .. ns - 1``), each chosen at compile time
  (:func:`target`, :func:`state`);
- the lanes: each step is written once over lane vectors and specialised at compile
  time by the arrays it is given (:mod:`analysis.select.lanes.arith`'s
  primitives): ``(states, LANES)`` arrays give the variant with tangents (value, then
  tangents, or two variants of 4 lanes: ``h = 4``, the second variant's value lane, and
  ``pv_hi`` its probability; ``h = 0``, ``pv_hi = pv`` for one variant; the product rule
  ``(pi F)' = pi F' + F_0 pi'``), ``(states,)`` arrays the variant for values only (lane
  0's operations without the tangent terms, which add exact zeros there: the same
  floats; the tangent arguments ``d``, ``inner``, ``acc`` are then unused: pass ``0.0``);
  four lanes (one variant, at most 3 tangents) where ``d`` is a tuple of 4 numbers and
  ``inner`` a tuple of 4 (rows read by element);

One collection with one set walks the chain of count states
(:mod:`analysis.select.chainwalk`): its inner sums are :func:`weight`'s with the chain's
target, its forward and backward steps :func:`chain_forward`, :func:`chain_backward`
(below: the same operations in the same order as :func:`forward` and :func:`backward`
over the two patterns, out then in, into a cleared row, but a state's two terms summed
in registers before one store: the general steps add one pattern's term over every
state, so each state's second term waits on the first's store; the chain knows both
targets of a state at once. Measured in one process, alternating, forward and backward
of 100k events of ~5 objects, 8 lanes, 3 states: 96 ms fused, 279 ms as the general
steps on the chain's target. Both shapes give the same floats:
``tests/select/test_chainwalk.py``).

A step adds into its output (the caller clears it, :func:`clear`, or sets it once): the
sums over patterns run in pattern order, those over states in the order of ``states``,
so that every caller adds the same terms in the same order as the recursions above.
"""

from __future__ import annotations

from numba import types

from analysis.select.lanes.arith import (
    clear_at,
    dot_end,
    dot_zero,
    mul_add,
    registers,
    row_both,
    row_dot_add,
    row_mul_add,
    row_out,
    vec_axpy,
    vec_zero,
)
from analysis.select.lanes.policy import inline, specialise_on

__all__ = [
    "backward", "chain_backward", "chain_forward", "clear", "forward", "forward_live",
    "sequence", "state", "sums_backward", "target", "weight",
]


def _array(t) -> bool:
    return isinstance(t, types.Array)


@specialise_on("row", (_array, lambda row, k: row[k]), lambda row, k: min(k + 1, row))
def target(row, k):
    """The state that adding an object takes ``k`` to: ``row[k]`` (``tgt[c, p]``), or on
    the chain of top state ``row`` (a number) ``min(k + 1, row)``."""


@specialise_on("states", (_array, lambda states, i: states[i]), lambda states, i: i)
def state(states, i):
    """The ``i``-th state walked: ``states[i]``, or ``i`` (``states`` a number: all)."""


@specialise_on("mask", (_array, lambda mask, k: mask[k]), lambda mask, k: True)
def _kept(mask, k):
    """``mask[k]``, or true (no mask array)."""


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
        k = state(states, i)
        if masked and not _kept(mask, k):
            continue
        row_mul_add(Fn, target(row, k), pv, pv_hi, F, k, h, dv)


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
        k = state(states, i)
        row_mul_add(Gn, k, pv, pv_hi, G, target(row, k), h, dv)


@inline
def weight(inner, F, G, row, states, ns, h, mask, masked):
    """``sum_k F[k] G[row[k]]`` over ``k`` in ``states[:ns]`` (and ``mask[k]`` if
    ``masked``; the chain's targets, every state: :func:`target`, :func:`state`): one
    pattern's inner sum of an object weight, returned (its value) and,
    with tangents, into ``inner`` (the product rule ``G_0 F + F_0 G``, value lanes summed
    twice and halved: exact; four lanes, ``inner`` a tuple of 4: the four returned).
    Summed in registers (a sum in memory waits on its own store every step)."""
    acc = dot_zero(F[0], inner)
    for i in range(ns):
        k = state(states, i)
        if masked and not _kept(mask, k):
            continue
        acc = row_dot_add(acc, F, k, G, target(row, k), h)
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


# --- the chain k -> min(k + 1, top): both patterns of a state at once ----------------------

@inline
def chain_forward(Fa, Fb, j, top, q, d, full=False):
    """``F_{j+1}`` (``Fb``) from ``F_j`` (``Fa``) on the chain, states ``0 .. min(j + 1,
    top)``: ``Fb[k] = (1 - q) Fa[k] + q Fa[k - 1]`` (tangents ``d = q'``,
    :func:`~analysis.select.lanes.arith.row_both`), the top state absorbing; ``full``:
    every state (``Fa`` zero beyond: the same floats), loops LLVM unrolls."""
    last = top if full else min(j, top)
    row_out(Fb, 0, 1.0 - q, Fa, 0, d)
    for k in range(1, last + 1):
        row_both(Fb, k, 1.0 - q, Fa, k, q, Fa, k - 1, d)
    if last < top:  # a state first reached: 0 + the "in" term, as the general walk adds
        Fb[last + 1] = 0.0
    row_mul_add(Fb, min(last + 1, top), q, q, Fa, last, 0, d)


@inline
def chain_backward(G, Gn, j, top, q, d, full=False):
    """``G_j`` (``Gn``) from ``G_{j+1}`` (``G``) on the chain, ``Gn[k] = (1 - q) G[k] + q
    G[min(k + 1, top)]``, states ``0 .. min(j, top)`` (all: ``full``)."""
    for i in range((top if full else min(j, top)) + 1):
        row_both(Gn, i, 1.0 - q, G, i, q, G, min(i + 1, top), d)
