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

Every kernel that walks the count states (the selection loops of ``_numba_dp``,
``_numba_value`` and ``_numba_one``, the histogram walk of ``_numba_hist``, the leading
candidates of ``_numba_lead``, the sensitivities of ``_numba_sens``) calls these steps;
what differs between them is which states a step runs over and what it is given:

- the states: ``states[:ns]`` (every state, or the states reachable after the objects
  so far: the others hold exact zeros), optionally only those where ``mask`` is true
  (``masked``: a compile-time constant after inlining);
- the lanes: with tangents, every quantity is a vector of lanes (value, then tangents,
  or two variants of 4 lanes: ``h = 4``, the second variant's value lane, and ``pv_hi``
  its probability; ``h = 0``, ``pv_hi = pv`` for one variant), the product rule
  ``(pi F)' = pi F' + F_0 pi'`` in :func:`~analysis.pipeline.backends.numba.kernels.lanes.lin_add2`;
  for values only, scalars (:func:`forward_value`, :func:`backward_value`,
  :func:`weight_value`: lane 0's operations without the tangent terms, which add exact
  zeros there: the same floats);
- the chain: one collection with one set (patterns "out", ``1 - q``, state ``k`` kept, and
  "in", ``q``, to ``min(k + 1, L)``), where a state's two terms are summed in registers
  before one store (:func:`chain_forward`, :func:`chain_backward` and their value
  versions: the same operations in the same order as the general step's two terms,
  without storing the first and reading it back; the layout of
  :mod:`~analysis.pipeline.backends.numba.kernels._numba_one`, whose docstring says why).

A step adds into its output (the caller clears it, :func:`clear`, or sets it once): the
sums over patterns run in pattern order, those over states in the order of ``states``,
so that every caller adds the same terms in the same order as the recursions above.
"""

from __future__ import annotations

from analysis.pipeline.backends.numba.kernels._jit import inline
from analysis.pipeline.backends.numba.kernels.lanes import LANES, lin, lin2, lin_add, lin_add2

__all__ = [
    "backward", "backward_value", "chain_backward", "chain_backward_value", "chain_forward",
    "chain_forward_value", "clear", "forward", "forward_value", "sequence", "sums_backward",
    "sums_backward_value", "weight", "weight_value",
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
    """One pattern's term of the forward step in lanes: ``Fn[row[k]] += pv F[k] + F[k, 0]
    d`` (``d``: the pattern probability's tangents; lanes 4-7 with ``pv_hi``, ``F[k, h]``
    for two variants) for ``k`` in ``states[:ns]`` (and ``mask[k]`` if ``masked``);
    ``row``: ``tgt[c, p]``."""
    for i in range(ns):
        k = states[i]
        if masked and not mask[k]:
            continue
        fk = F[k]
        lin_add2(Fn[row[k]], pv, pv_hi, fk, fk[0], fk[h], d)


@inline
def backward(Gn, G, pv, pv_hi, d, row, states, ns, h):
    """One pattern's term of the backward step in lanes: ``Gn[k] += pv G[row[k]] +
    G[row[k], 0] d`` (two variants as :func:`forward`) for ``k`` in ``states[:ns]``."""
    for i in range(ns):
        k = states[i]
        gt = G[row[k]]
        lin_add2(Gn[k], pv, pv_hi, gt, gt[0], gt[h], d)


@inline
def weight(inner, F, G, row, states, ns, h, mask, masked):
    """``inner = sum_k F[k] G[row[k]]`` in lanes (the product rule ``G_0 F + F_0 G``, value
    lanes summed twice and halved: exact) over ``k`` in ``states[:ns]`` (and ``mask[k]``
    if ``masked``): one pattern's inner sum of an object weight. Summed in registers (a
    sum in memory waits on its own store every step)."""
    i0 = i1 = i2 = i3 = i4 = i5 = i6 = i7 = 0.0
    for i in range(ns):
        k = states[i]
        if masked and not mask[k]:
            continue
        gt = G[row[k]]
        fk = F[k]
        a, a_hi, b, b_hi = gt[0], gt[h], fk[0], fk[h]
        i0, i1, i2, i3 = (i0 + (a * fk[0] + b * gt[0]), i1 + (a * fk[1] + b * gt[1]),
                          i2 + (a * fk[2] + b * gt[2]), i3 + (a * fk[3] + b * gt[3]))
        i4, i5, i6, i7 = (i4 + (a_hi * fk[4] + b_hi * gt[4]), i5 + (a_hi * fk[5] + b_hi * gt[5]),
                          i6 + (a_hi * fk[6] + b_hi * gt[6]), i7 + (a_hi * fk[7] + b_hi * gt[7]))
    inner[0], inner[1], inner[2], inner[3] = i0, i1, i2, i3
    inner[4], inner[5], inner[6], inner[7] = i4, i5, i6, i7
    inner[0] *= 0.5  # value lanes summed F G twice (exact)
    if h:
        inner[h] *= 0.5


@inline
def sums_backward(Gmn, Gm, pv, d, x, binom, row, states, ns, acc):
    """One pattern's term of the event sums' backward step in lanes: ``Gmn[m, k] += pv A +
    A_0 d`` with ``A = sum_{i <= m} C(m, i) x^i Gm[m - i, row[k]]`` (``binom[m, i] =
    C(m, i)``; ``x``: the object's summed value in this pattern, 0 where the pattern does
    not hold the summed set) for every power ``m`` and ``k`` in ``states[:ns]``; ``acc``:
    a buffer of :data:`LANES`."""
    for m in range(binom.shape[0]):
        for i in range(ns):
            t = row[states[i]]
            for r in range(LANES):
                acc[r] = 0.0
            xpow = 1.0
            for ii in range(m + 1):
                cf = binom[m, ii] * xpow
                for r in range(LANES):
                    acc[r] += cf * Gm[m - ii, t, r]
                xpow *= x
            a0 = acc[0]
            for r in range(LANES):
                Gmn[m, states[i], r] += pv * acc[r] + a0 * d[r]


@inline
def sums_backward_value(Gmn, Gm, pv, x, binom, row, states, ns):
    """:func:`sums_backward` for values only: ``Gmn[m, k] += pv A``."""
    for m in range(binom.shape[0]):
        for i in range(ns):
            t = row[states[i]]
            acc = 0.0
            xpow = 1.0
            for ii in range(m + 1):
                acc += binom[m, ii] * xpow * Gm[m - ii, t]
                xpow *= x
            Gmn[m, states[i]] += pv * acc


@inline
def forward_value(Fn, F, pv, row, states, ns):
    """:func:`forward` for values only: ``Fn[row[k]] += pv F[k]``."""
    for i in range(ns):
        k = states[i]
        Fn[row[k]] += pv * F[k]


@inline
def backward_value(Gn, G, pv, row, states, ns):
    """:func:`backward` for values only: ``Gn[k] += pv G[row[k]]``."""
    for i in range(ns):
        k = states[i]
        Gn[k] += pv * G[row[k]]


@inline
def weight_value(F, G, row, states, ns):
    """:func:`weight` for values only: ``sum_k F[k] G[row[k]]``."""
    s = 0.0
    for i in range(ns):
        k = states[i]
        s += F[k] * G[row[k]]
    return s


@inline
def chain_forward(Fa, Fb, j, top, q, dq):
    """On the chain (module docstring), in lanes: ``F_{j+1}`` (``Fb``) from ``F_j``
    (``Fa``) on states ``0 .. min(j + 1, top)``, object ``j`` in with probability
    ``q[j]`` (tangents ``dq[j]``): the terms of :func:`forward` for "out" then "in"."""
    last = min(j, top)
    pv = 1.0 - q[j]
    pq = q[j]
    dqj = dq[j]
    lin(Fb[0], pv, Fa[0], -Fa[0, 0], dqj)
    for k in range(1, last + 1):
        lin2(Fb[k], pv, Fa[k], -Fa[k, 0], dqj, pq, Fa[k - 1], Fa[k - 1, 0], dqj)
    if last < top:  # a state first reached: 0 + the "in" term, as the general loop adds
        for r in range(LANES):
            Fb[last + 1, r] = 0.0
    lin_add(Fb[min(last + 1, top)], pq, Fa[last], Fa[last, 0], dqj)


@inline
def chain_backward(G, Gn, j, top, q, dq):
    """On the chain, in lanes: ``G_j`` (``Gn``) from ``G_{j+1}`` (``G``) on states ``0 ..
    min(j, top)``: the terms of :func:`backward` for "out" then "in", one store."""
    pv = 1.0 - q[j]
    pq = q[j]
    dqj = dq[j]
    for i in range(min(j, top) + 1):
        t = min(i + 1, top)
        lin2(Gn[i], pv, G[i], -G[i, 0], dqj, pq, G[t], G[t, 0], dqj)


@inline
def chain_forward_value(Fa, Fb, j, top, pv, pq):
    """:func:`chain_forward` for values only, "out" with ``pv``, "in" with ``pq``."""
    last = min(j, top)
    Fb[0] = pv * Fa[0]
    for k in range(1, last + 1):
        Fb[k] = pv * Fa[k] + pq * Fa[k - 1]
    if last < top:  # a state first reached: 0 + the "in" term
        Fb[last + 1] = 0.0 + pq * Fa[last]
    else:
        Fb[top] += pq * Fa[top]


@inline
def chain_backward_value(G, Gn, j, top, pv, pq):
    """:func:`chain_backward` for values only, "out" with ``pv``, "in" with ``pq``."""
    for i in range(min(j, top) + 1):
        Gn[i] = pv * G[i] + pq * G[min(i + 1, top)]
