"""The one-set walk in numba, written once: the YAML engine's one-set pass and own
processors' :func:`analysis.soft.pass_weights` kernels run these loops.

One collection, one object set, a count condition on it (the common selection): per
event, objects ``j < n`` pass with probability ``q_j``; on the chain of count states
``0 .. L`` (``tgt k = min(k + 1, L)``, the top state absorbing) and the pass table ``f``:

- ``F_0 = delta_0``, ``F_{j+1}[k] = (1 - q_j) F_j[k] + q_j F_j[k - 1]`` (:func:`forward`);
- ``G_n = f``, ``G_j[k] = (1 - q_j) G_{j+1}[k] + q_j G_{j+1}[tgt k]`` (:func:`backward`),
  the event's pass probability ``P = G_0[0]``;
- ``w_j = P(j in the set and the event passes) = q_j sum_k F_j[k] G_{j+1}[tgt k]``.

Forward-mode tangents ride along in *lanes*: a quantity with tangents is a row of
:data:`LANES` (lane 0 the value, lanes 1.. its tangents, padded with zeros), the product
rule ``(q x)' = q x' + x_0 q'``; every step is written once and specialised at compile
time on its arguments' types (``numba.extending.overload``): rows of lanes give the
variant with tangents, numbers (tangents ``0.0``) the one for values only, the same
floats as lane 0 of the first. Each step loads every lane before its one store, so
LLVM's SLP vectorizer packs it (the callers compile with it on). Only the states the
objects so far can reach are touched (``F_j``, ``G_j`` on ``0 .. min(j, L)``: the others
are zeros the general walk would add).

:func:`walk_events` is the walk over a range of events, inlined once per kernel: the
YAML engine's pass :func:`cut_walk` (the objects' probabilities the soft cuts' product,
formed in the event loop cut by cut: a tangent lane stored and multiplied again at once
waits on its store, 2.4x slower; with weights, the chains of ``F`` and ``G`` advance in
one loop: two independent chains keep the core busy) and own processors' XLA FFI kernels
(:mod:`analysis.select.singlekernels`: ``q`` and its tangents given, any number in
blocks of ``LANES - 1``). Not a function inlined per event: its array arguments then
cost reference counts per event (measured: values 15 -> 30 ms per 200k events).
:func:`sens_walk`: the YAML engine's reverse mode (``P``'s exact sensitivities).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba import types
from numba.extending import overload

__all__ = ["LANES", "cut_times", "cut_walk", "forward", "sens_walk", "walk_events"]

#: Lanes of a quantity with tangents: the value and up to ``LANES - 1`` tangents.
LANES = 8

_POLICY = {"cache": True, "nogil": True, "fastmath": False}
njit = nb.njit(**_POLICY)
inline = nb.njit(inline="always", **_POLICY)


def _spec(stub):  # noqa: ANN001, ANN202
    return overload(stub, inline="always", jit_options=_POLICY)


def _lanes(t) -> bool:  # noqa: ANN001
    return isinstance(t, types.Array)


# --- the steps, specialised: rows of lanes (tangents) or numbers (values) -----------------

def step_both(out, t, pv, x, pq, y, d):  # noqa: ANN001, ANN201
    """``out[t] = (pv x - x_0 d) + (pq y + y_0 d)`` (object out with ``pv = 1 - q``, in
    with ``pq = q``, tangents ``d = q'``), one store; values ``pv x + pq y``."""
    raise NotImplementedError("compiled only (numba)")


@_spec(step_both)
def _step_both(out, t, pv, x, pq, y, d):  # noqa: ANN001, ANN202
    if _lanes(x):
        def lanes(out, t, pv, x, pq, y, d):  # noqa: ANN001, ANN202
            b, c = -x[0], y[0]
            x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
            y0, y1, y2, y3, y4, y5, y6, y7 = y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]
            d0, d1, d2, d3, d4, d5, d6, d7 = d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
            o = out[t]
            o[0], o[1], o[2], o[3] = (
                (pv * x0 + b * d0) + (pq * y0 + c * d0), (pv * x1 + b * d1) + (pq * y1 + c * d1),
                (pv * x2 + b * d2) + (pq * y2 + c * d2), (pv * x3 + b * d3) + (pq * y3 + c * d3))
            o[4], o[5], o[6], o[7] = (
                (pv * x4 + b * d4) + (pq * y4 + c * d4), (pv * x5 + b * d5) + (pq * y5 + c * d5),
                (pv * x6 + b * d6) + (pq * y6 + c * d6), (pv * x7 + b * d7) + (pq * y7 + c * d7))
        return lanes

    def values(out, t, pv, x, pq, y, d):  # noqa: ANN001, ANN202
        out[t] = pv * x + pq * y
    return values


def step_out(out, t, a, x, d):  # noqa: ANN001, ANN201
    """The "out" term alone: ``out[t] = a x - x_0 d``; values ``a x``."""
    raise NotImplementedError("compiled only (numba)")


@_spec(step_out)
def _step_out(out, t, a, x, d):  # noqa: ANN001, ANN202
    if _lanes(x):
        def lanes(out, t, a, x, d):  # noqa: ANN001, ANN202
            b = -x[0]
            x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
            d0, d1, d2, d3, d4, d5, d6, d7 = d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
            o = out[t]
            o[0], o[1], o[2], o[3] = a * x0 + b * d0, a * x1 + b * d1, a * x2 + b * d2, a * x3 + b * d3
            o[4], o[5], o[6], o[7] = a * x4 + b * d4, a * x5 + b * d5, a * x6 + b * d6, a * x7 + b * d7
        return lanes

    def values(out, t, a, x, d):  # noqa: ANN001, ANN202
        out[t] = a * x
    return values


def step_in(out, t, a, x, d):  # noqa: ANN001, ANN201
    """The "in" term added: ``out[t] += a x + x_0 d``; values ``+= a x``."""
    raise NotImplementedError("compiled only (numba)")


@_spec(step_in)
def _step_in(out, t, a, x, d):  # noqa: ANN001, ANN202
    if _lanes(x):
        def lanes(out, t, a, x, d):  # noqa: ANN001, ANN202
            b = x[0]
            x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
            d0, d1, d2, d3, d4, d5, d6, d7 = d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
            o = out[t]
            o0, o1, o2, o3, o4, o5, o6, o7 = o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]
            o[0], o[1], o[2], o[3] = (o0 + (a * x0 + b * d0), o1 + (a * x1 + b * d1),
                                      o2 + (a * x2 + b * d2), o3 + (a * x3 + b * d3))
            o[4], o[5], o[6], o[7] = (o4 + (a * x4 + b * d4), o5 + (a * x5 + b * d5),
                                      o6 + (a * x6 + b * d6), o7 + (a * x7 + b * d7))
        return lanes

    def values(out, t, a, x, d):  # noqa: ANN001, ANN202
        out[t] += a * x
    return values


def inner_sum(H, F, G, top, ns):  # noqa: ANN001, ANN201
    """``sum_{k < ns} F[k] G[min(k + 1, top)]`` returned (its value) and, with lanes, into
    ``H`` by the product rule ``G_0 F + F_0 G`` (value lane summed twice and halved:
    exact), summed in registers (a sum in memory waits on its own store every step)."""
    raise NotImplementedError("compiled only (numba)")


@_spec(inner_sum)
def _inner_sum(H, F, G, top, ns):  # noqa: ANN001, ANN202
    if F.ndim == 2:
        def lanes(H, F, G, top, ns):  # noqa: ANN001, ANN202
            a = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            for k in range(ns):
                x, y = F[k], G[min(k + 1, top)]
                u, v = y[0], x[0]
                a = (a[0] + (u * x[0] + v * y[0]), a[1] + (u * x[1] + v * y[1]),
                     a[2] + (u * x[2] + v * y[2]), a[3] + (u * x[3] + v * y[3]),
                     a[4] + (u * x[4] + v * y[4]), a[5] + (u * x[5] + v * y[5]),
                     a[6] + (u * x[6] + v * y[6]), a[7] + (u * x[7] + v * y[7]))
            H[0], H[1], H[2], H[3], H[4], H[5], H[6], H[7] = a
            H[0] *= 0.5
            return H[0]
        return lanes

    def values(H, F, G, top, ns):  # noqa: ANN001, ANN202
        a = 0.0
        for k in range(ns):
            a = a + F[k] * G[min(k + 1, top)]
        return a
    return values


def store(out, x):  # noqa: ANN001, ANN201
    """An output row (``LANES`` or fewer numbers) from ``x``: a row of lanes, or a number
    into lane 0 (the other lanes zero)."""
    raise NotImplementedError("compiled only (numba)")


@_spec(store)
def _store(out, x):  # noqa: ANN001, ANN202
    if _lanes(x):
        def lanes(out, x):  # noqa: ANN001, ANN202
            for r in range(LANES):
                out[r] = x[r]
        return lanes

    def values(out, x):  # noqa: ANN001, ANN202
        out[0] = x
        for r in range(1, out.shape[0]):
            out[r] = 0.0
    return values


def store_weight(out, q, H, h, d):  # noqa: ANN001, ANN201
    """An object's weight row from its probability ``q`` (tangents ``d``) and its inner
    sum (``H`` in lanes, value ``h``): ``0 + (q H + h d)``; values ``q h`` into lane 0."""
    raise NotImplementedError("compiled only (numba)")


@_spec(store_weight)
def _store_weight(out, q, H, h, d):  # noqa: ANN001, ANN202
    if _lanes(d):
        def lanes(out, q, H, h, d):  # noqa: ANN001, ANN202
            for r in range(LANES):
                out[r] = 0.0 + (q * H[r] + h * d[r])
        return lanes

    def values(out, q, H, h, d):  # noqa: ANN001, ANN202
        out[0] = q * h
        for r in range(1, out.shape[0]):
            out[r] = 0.0
    return values


def buffer(n, m, d):  # noqa: ANN001, ANN201
    """``(n, m, LANES)`` where ``d`` is an array (tangents), else ``(n, m)``; undefined."""
    raise NotImplementedError("compiled only (numba)")


@_spec(buffer)
def _buffer(n, m, d):  # noqa: ANN001, ANN202
    return ((lambda n, m, d: np.empty((n, m, LANES))) if _lanes(d)
            else (lambda n, m, d: np.empty((n, m))))


def rows(n, d):  # noqa: ANN001, ANN201
    """``(n, LANES)`` tangent rows where ``d`` is an array, else ``0.0``; undefined."""
    raise NotImplementedError("compiled only (numba)")


@_spec(rows)
def _rows(n, d):  # noqa: ANN001, ANN202
    return (lambda n, d: np.empty((n, LANES))) if _lanes(d) else (lambda n, d: 0.0)


def row(d, j):  # noqa: ANN001, ANN201
    """``d[j]`` (tangent lanes), or ``0.0`` (none)."""
    raise NotImplementedError("compiled only (numba)")


@_spec(row)
def _row(d, j):  # noqa: ANN001, ANN202
    return (lambda d, j: d[j]) if _lanes(d) else (lambda d, j: 0.0)


def init(G, k, f, df):  # noqa: ANN001, ANN201
    """``G[k] = (f[k], df[k, 1:])`` (value, tangents), or ``f[k]``."""
    raise NotImplementedError("compiled only (numba)")


@_spec(init)
def _init(G, k, f, df):  # noqa: ANN001, ANN202
    if _lanes(df):
        def lanes(G, k, f, df):  # noqa: ANN001, ANN202
            for r in range(LANES):
                G[k, r] = df[k, r]
            G[k, 0] = f[k]
        return lanes

    def values(G, k, f, df):  # noqa: ANN001, ANN202
        G[k] = f[k]
    return values


def start(F):  # noqa: ANN001, ANN201
    """``F[0] = delta_0`` (tangents zero)."""
    raise NotImplementedError("compiled only (numba)")


@_spec(start)
def _start(F):  # noqa: ANN001, ANN202
    if F.ndim == 2:
        def lanes(F):  # noqa: ANN001, ANN202
            for r in range(LANES):
                F[0, r] = 0.0
            F[0, 0] = 1.0
        return lanes

    def values(F):  # noqa: ANN001, ANN202
        F[0] = 1.0
    return values


@inline
def forward(Fa, Fb, j, top, q, d):
    """``F_{j+1}`` (``Fb``) from ``F_j`` (``Fa``) on states ``0 .. min(j + 1, top)``: the
    "out" term then the "in" term, a state's two summed in registers before one store."""
    last = min(j, top)
    step_out(Fb, 0, 1.0 - q, Fa[0], d)
    for k in range(1, last + 1):
        step_both(Fb, k, 1.0 - q, Fa[k], q, Fa[k - 1], d)
    if last < top:  # a state first reached: 0 + the "in" term, as the general walk adds
        Fb[last + 1] = 0.0
    step_in(Fb, min(last + 1, top), q, Fa[last], d)


@inline
def backward(G, Gn, j, top, q, d):
    """``G_j`` (``Gn``) from ``G_{j+1}`` (``G``) on states ``0 .. min(j, top)``."""
    for i in range(min(j, top) + 1):
        step_both(Gn, i, 1.0 - q, G[i], q, G[min(i + 1, top)], d)


# --- the objects' probabilities: the soft cuts' product, in the event loop ----------------

@inline
def cut_times(s, o, n, iw, greater, par, qv, qd):
    """Multiply the soft cut of probabilities ``s[o + i]`` into ``qv[i]`` and its tangent
    lanes ``qd[i]``, ``i < n`` (the product rule); ``iw``: ``1 / width`` (0: hard); its
    slope ``ds/dt = -+s (1 - s) / width`` (``-`` for ``>``, ``>=``) into lane ``1 + par``
    (``par``: the threshold's parameter, -1 if none)."""
    for i in range(n):
        sv = s[o + i]
        q0 = qv[i]
        for r in range(LANES):
            qd[i, r] *= sv
        if par >= 0:
            ds = sv * (1.0 - sv) * iw
            qd[i, 1 + par] += q0 * (-ds if greater else ds)
        qv[i] = q0 * sv


def objects(src, o, n, q, dq):  # noqa: ANN001, ANN201
    """The probabilities ``q[j]`` (tangent lanes ``dq[j]``) of objects ``o .. o + n - 1``
    from ``src``: the soft cuts ``(ss, iw, cut_g, cut_par)``, ``q = prod_c ss[c]`` (cuts
    in order; with lanes multiplied in cut by cut, :func:`cut_times`, from 1 and zero
    tangents; values object by object, the same floats as lane 0), or given ``(q,)``
    (values) / ``(q, dq, b0)`` (``dq``: ``(B, N)``, lanes ``b0 ..`` into lanes ``1 ..``)."""
    raise NotImplementedError("compiled only (numba)")


@_spec(objects)
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
    if len(src) == 4:
        def cut_values(src, o, n, q, dq):  # noqa: ANN001, ANN202
            ss = src[0]
            for j in range(n):
                q0 = 1.0
                for c in range(ss.shape[0]):
                    q0 *= ss[c, o + j]
                q[j] = q0
        return cut_values
    if _lanes(dq):
        def given(src, o, n, q, dq):  # noqa: ANN001, ANN202
            qs, ds, b0 = src
            nb = min(LANES - 1, ds.shape[0] - b0)
            for j in range(n):
                q[j] = qs[o + j]
                for r in range(LANES):
                    dq[j, r] = ds[b0 + r - 1, o + j] if 0 < r <= nb else 0.0
        return given

    def values(src, o, n, q, dq):  # noqa: ANN001, ANN202
        qs = src[0]
        for j in range(n):
            q[j] = qs[o + j]
    return values


@inline
def walk_events(src, coff, e0, e1, f, df, want_w, max_seq, pe, ow):
    """The walk of events ``e0 .. e1 - 1`` (objects ``coff[e] .. coff[e + 1] - 1``, at most
    ``max_seq >= 1``, their probabilities from ``src``: :func:`objects`); the pass table
    ``f`` (tangent lanes ``df``, or ``0.0``: values only) on the chain. Rows of lanes
    (or fewer numbers for values): ``pe[e] = P`` and, if ``want_w``, ``ow[j] = w_j``."""
    top = f.shape[0] - 1
    q = np.empty(max_seq)
    dq = rows(max_seq, df)
    F = buffer(max_seq + 1 if want_w else 1, top + 1, df)
    G = buffer(max_seq + 1 if want_w else 2, top + 1, df)
    H = np.empty(LANES)
    for e in range(e0, e1):
        o = coff[e]
        n = coff[e + 1] - o
        objects(src, o, n, q, dq)
        g = G[n] if want_w else G[0]
        for i in range(top + 1):
            init(g, i, f, df)
        if not want_w:
            Ga, Gb = G[0], G[1]
            for j in range(n - 1, -1, -1):
                backward(Ga, Gb, j, top, q[j], row(dq, j))
                Ga, Gb = Gb, Ga
            store(pe[e], Ga[0])
            continue
        start(F[0])
        for s in range(n):  # two independent chains, one loop
            forward(F[s], F[s + 1], s, top, q[s], row(dq, s))
            j = n - 1 - s
            backward(G[j + 1], G[j], j, top, q[j], row(dq, j))
        for j in range(n):
            h = inner_sum(H, F[j], G[j + 1], top, min(j, top) + 1)
            store_weight(ow[o + j], q[j], H, h, row(dq, j))
        store(pe[e], G[0, 0])


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
        iw[c] = 1.0 / cut_w[c] if cut_w[c] > 0.0 else 0.0
    for b in range(b0, b1):
        walk_events((ss, iw, cut_g, cut_par), coff, b * block, min(n_ev, (b + 1) * block), f,
                    df, want_w, max_seq, pe, ow)


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
                forward(F[j], F[j + 1], j, top, q[o + j], 0.0)
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
                    ow[o + j] = q[o + j] * inner_sum(G, F[j], G, top, last + 1)
                backward(G, Gn, j, top, q[o + j], 0.0)
                G, Gn = Gn, G
            pe[e] = G[0]
