"""The one-set walk in numba, written once: the YAML engine's and own processors' kernels.

One collection, one object set, a count condition on it (the common selection): per
event, objects ``j < n`` pass with probability ``q_j``; on the chain of count states
``0 .. L`` (``tgt k = min(k + 1, L)``, the top state absorbing) and the pass table ``f``:

- ``F_0 = delta_0``, ``F_{j+1}[k] = (1 - q_j) F_j[k] + q_j F_j[k - 1]`` (:func:`forward`);
- ``G_n = f``, ``G_j[k] = (1 - q_j) G_{j+1}[k] + q_j G_{j+1}[tgt k]`` (:func:`backward`),
  the event's pass probability ``P = G_0[0]``;
- ``w_j = P(j in the set and the event passes) = q_j sum_k F_j[k] G_{j+1}[tgt k]``.

Forward-mode tangents ride along in *lanes* (own processors' kernels with at most 3
tangents four): the walk's steps, the lane arithmetic, its buffers and the compilation
policy are those of every numba kernel (:mod:`analysis.select.lanes`: the steps
:func:`~analysis.select.lanes.steps.chain_forward`,
:func:`~analysis.select.lanes.steps.chain_backward`, the weights' inner sums
:func:`~analysis.select.lanes.steps.weight` with the chain's target), specialised at
compile time on their arguments' types: rows of lanes give the variant with tangents,
numbers (tangents ``0.0``) the one for values only, the same floats as lane 0 of the
first. The YAML engine touches
only the states the objects so far can reach (``0 .. min(j, L)``: the others are zeros
the general walk would add); own processors' kernels, ``L`` a constant, every state (the
same floats: loops of a fixed count that LLVM unrolls; values 2x faster at ``L = 2``).

:func:`walk_events` is the walk over a range of events, inlined once per kernel: the
YAML engine's pass :func:`cut_walk` (the objects' probabilities the soft cuts' product,
formed in the event loop cut by cut: a tangent lane stored and multiplied again at once
waits on its store, 2.4x slower; the chains of ``F`` and ``G`` advance in one loop: two
independent chains keep the core busy) and own processors' XLA FFI kernels
(:mod:`analysis.select.singlekernels`: ``q`` and its tangents given, in blocks of
``LANES - 1``). Not inlined per event: its array arguments then cost reference counts
per event (measured: values 15 -> 30 ms per 200k events).
:func:`sens_walk`: the YAML engine's reverse mode (``P``'s exact sensitivities).
"""

from __future__ import annotations

import numpy as np
from numba import types

from analysis.select.lanes import policy
from analysis.select.lanes.arith import LANES, QUAD, _lanes
from analysis.select.lanes.buffers import (
    _boxed,
    lane_buffer,
    lanes_of,
    row,
    rows,
    start,
    store_row,
    store_weight,
    table_init,
)
from analysis.select.lanes.cuts import cut_times, inverse_width
from analysis.select.lanes.policy import inline, njit, specialise, specialise_on
from analysis.select.lanes.steps import chain_backward, chain_forward, weight

__all__ = ["LANES", "SOURCES", "cut_walk", "sens_walk", "walk_events"]

#: The source files the walk's compiled code inlines (its own and
#: :mod:`analysis.select.lanes`'): numba keys a kernel's cache by its own file alone, so
#: a kernel elsewhere that inlines the walk is keyed by these too
#: (:func:`analysis._compat.numba.cached_cfunc`'s ``depends``); the walks here are keyed by
#: :data:`~analysis.select.lanes.policy.SHARED` (their decorators').
SOURCES = (__file__, *policy.SHARED)


# --- the objects' probabilities: the soft cuts' product, in the event loop ----------------

def objects(src, o, n, q, dq):  # noqa: ANN001, ANN201
    """The probabilities ``q[j]`` (tangent lanes ``dq[j]``) of objects ``o .. o + n - 1``
    from ``src``: the soft cuts ``(ss, iw, cut_g, cut_par)``, ``q = prod_c ss[c]`` (cuts
    in order; with lanes multiplied in cut by cut,
    :func:`~analysis.select.lanes.cuts.cut_times`, from 1 and zero
    tangents; values object by object, the same floats as lane 0), or given ``(q,)``
    (values) / ``(q, dq, b0)`` (``dq``: ``(B, N)``, lanes ``b0 ..`` into lanes ``1 ..``)."""
    raise NotImplementedError("compiled only (numba)")


@specialise(objects)
def _objects(src, o, n, q, dq):  # noqa: ANN001, ANN202
    if len(src) == 4 and _lanes(dq):
        def cuts(src, o, n, q, dq):  # noqa: ANN001, ANN202
            ss, iw, cut_g, cut_par = src
            for j in range(n):
                q[j] = 1.0
                for r in range(LANES):
                    dq[j, r] = 0.0
            for c in range(ss.shape[0]):
                cut_times(ss[c], o, n, iw[c], cut_g[c], cut_par[c], q, dq)
        return cuts
    if len(src) == 4 and _boxed(dq):
        raise TypeError("soft cuts carry LANES tangent lanes, not QUAD")
    if len(src) == 4:
        def cut_values(src, o, n, q, dq):  # noqa: ANN001, ANN202
            ss = src[0]
            for j in range(n):
                q0 = 1.0
                for c in range(ss.shape[0]):
                    q0 *= ss[c, o + j]
                q[j] = q0
        return cut_values
    if _lanes(dq) or _boxed(dq):
        width = LANES if _lanes(dq) else QUAD

        def given(src, o, n, q, dq):  # noqa: ANN001, ANN202
            qs, ds, b0 = src
            a = lanes_of(dq)
            nb = min(width - 1, ds.shape[0] - b0)
            for j in range(n):
                q[j] = qs[o + j]
                for r in range(width):
                    a[j, r] = ds[b0 + r - 1, o + j] if 0 < r <= nb else 0.0
        return given

    def values(src, o, n, q, dq):  # noqa: ANN001, ANN202
        qs = src[0]
        for j in range(n):
            q[j] = qs[o + j]
    return values


@specialise_on("df", (_lanes, lambda df: np.empty(LANES)),
               (_boxed, lambda df: (0.0, 0.0, 0.0, 0.0)), lambda df: 0.0)
def _inner(df):
    """What :func:`~analysis.select.lanes.steps.weight` sums the tangents into for the pass
    table's tangent lanes ``df``: a row of lanes, a tuple of 4 (four lanes: returned), or
    ``0.0`` (values: the sum returned)."""


@specialise_on("inner", (lambda t: isinstance(t, types.BaseTuple),
                         lambda out, q, H, inner, d: store_weight(out, q, inner, inner[0], d)),
               lambda out, q, H, inner, d: store_weight(out, q, H, inner, d))
def _store(out, q, H, inner, d):
    """The weight row ``out`` of ``q`` and the inner sum ``weight`` returned (``inner``: its
    value, its lanes in ``H``; four lanes: all of them)."""


@inline
def walk_events(src, coff, e0, e1, f, df, want_w, max_seq, pe, ow, top, full):
    """The walk of events ``e0 .. e1 - 1`` (objects ``coff[e] .. coff[e + 1] - 1``, at most
    ``max_seq >= 1``, their probabilities from ``src``: :func:`objects`); the pass table
    ``f`` (tangent lanes ``df``, or ``0.0``: values only) on states ``0 .. top`` (a constant
    or not; ``full``: :func:`~analysis.select.lanes.steps.chain_forward`). Rows of lanes (or fewer numbers for values):
    ``pe[e] = P`` and, if ``want_w``, ``ow[j] = w_j``."""
    q = np.empty(max_seq)
    dq = rows(max_seq, df)
    F = lane_buffer(max_seq + 1 if want_w else 1, top + 1, df)
    G = lane_buffer(max_seq + 1 if want_w else 2, top + 1, df)
    H = _inner(df)
    F[0] = 0.0  # states >= 1 never written: zeros that a full step reads
    for e in range(e0, e1):
        o = coff[e]
        n = coff[e + 1] - o
        objects(src, o, n, q, dq)
        g = G[n] if want_w else G[0]
        for i in range(top + 1):
            table_init(g, i, f, df)
        if not want_w:
            Ga, Gb = G[0], G[1]
            for j in range(n - 1, -1, -1):
                chain_backward(Ga, Gb, j, top, q[j], row(dq, j), full)
                Ga, Gb = Gb, Ga
            store_row(pe[e], Ga[0])
            continue
        start(F[0])
        for s in range(n):  # two independent chains, one loop
            chain_forward(F[s], F[s + 1], s, top, q[s], row(dq, s), full)
            j = n - 1 - s
            chain_backward(G[j + 1], G[j], j, top, q[j], row(dq, j), full)
        for j in range(n):
            d = row(dq, j)
            inner = weight(H, F[j], G[j + 1], top, 0, min(j, top) + 1, 0, 0, False)
            _store(ow[o + j], q[j], H, inner, d)
        store_row(pe[e], G[0, 0])


@njit
def cut_walk(coff, ss, cut_w, cut_g, cut_par, f, df, want_w, max_seq, block, pe, ow, b0, b1):
    """The YAML engine's one-set pass over blocks ``b0:b1`` of events. ``coff``: ``(E + 1,)``
    object offsets; ``ss``: ``(C, N)`` the cuts' probabilities per object; per cut ``c``:
    width ``cut_w[c]``, ``cut_g[c]`` (``>``/``>=``), ``cut_par[c]`` (its threshold's lane
    - 1, or -1); ``f``, ``df``: the pass table on the chain and its tangent lanes (lane 0
    zero), or ``df = 0.0`` for values only (the outputs' other lanes set to zero).
    Outputs in lanes: ``pe[e] = (P, dP)`` and, if ``want_w``, ``ow[j] = (w_j, dw_j)``."""
    n_ev = pe.shape[0]
    iw = np.empty(ss.shape[0])
    for c in range(ss.shape[0]):
        iw[c] = inverse_width(cut_w[c])
    for b in range(b0, b1):
        walk_events((ss, iw, cut_g, cut_par), coff, b * block, min(n_ev, (b + 1) * block), f,
                    df, want_w, max_seq, pe, ow, f.shape[0] - 1, False)


@njit
def sens_walk(coff, q, f, want_w, max_seq, block, pe, dq, fn, ow, b0, b1):
    """Reverse mode's values walk over blocks ``b0:b1``: ``pe[e] = P``, ``dq[j] = dP/dq_j
    = sum_k F_j[k] (G_{j+1}[tgt k] - G_{j+1}[k])`` (exact: ``P`` is affine in ``q_j``),
    ``fn[e] = F_n`` (``dP/df``; ``(E, L + 1)``) and, if ``want_w``, ``ow[j] = w_j``: the
    values of :func:`cut_walk` (the same floats), whatever the number of parameters."""
    n_ev = pe.shape[0]
    top = f.shape[0] - 1
    for b in range(b0, b1):
        F = np.zeros((max_seq + 1, top + 1))
        G = np.empty(top + 1)
        Gn = np.empty(top + 1)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            o = coff[e]
            n = coff[e + 1] - o
            start(F[0])
            for j in range(n):
                chain_forward(F[j], F[j + 1], j, top, q[o + j], 0.0)
            for i in range(top + 1):
                fn[e, i] = F[n, i] if i <= min(n, top) else 0.0
                G[i] = f[i]
            for j in range(n - 1, -1, -1):
                last = min(j, top)
                h = 0.0
                for i in range(last + 1):
                    h += F[j, i] * (G[min(i + 1, top)] - G[i])
                dq[o + j] = h
                if want_w:
                    ow[o + j] = q[o + j] * weight(0.0, F[j], G, top, 0, last + 1, 0, 0, False)
                chain_backward(G, Gn, j, top, q[o + j], 0.0)
                G, Gn = Gn, G
            pe[e] = G[0]
