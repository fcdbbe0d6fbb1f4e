"""The one-set walk's steps (:mod:`analysis.select.chainwalk`), each written once and
specialised at compile time on its arguments' types (``numba.extending.overload``).

A quantity with tangents is a row of lanes (lane 0 the value, lanes 1.. its tangents,
padded with zeros), the product rule ``(q x)' = q x' + x_0 q'``. The tangents ``d`` of
the step (``q'``) choose the variant: an array row gives :data:`LANES` lanes, a tuple of
:data:`QUAD` numbers four lanes (the own processors' kernel with at most 3 tangents: half
the work, per 50k events 19 -> 10 ms for one tangent), ``0.0`` values only (the same
floats as lane 0). The lane arithmetic is written once, on four lanes from ``r``
(:func:`_both4` ..), eight lanes its two halves: each half loads its lanes before its
stores, so LLVM's SLP vectorizer packs it (the callers compile with it on). The pass
table's tangent lanes ``df`` in a 1-tuple (``(array,)``) ask for four lanes.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba import types
from numba.extending import overload

__all__ = ["LANES", "QUAD", "buffer", "init", "inner_sum", "row", "rows", "start",
           "step_both", "step_in", "step_out", "store", "store_weight"]

#: Lanes of a quantity with tangents: the value and up to ``LANES - 1`` tangents.
LANES = 8
#: Lanes of the narrow variant: the value and up to ``QUAD - 1`` tangents.
QUAD = 4

_POLICY = {"cache": True, "nogil": True, "fastmath": False}
inline = nb.njit(inline="always", **_POLICY)


def _spec(stub):  # noqa: ANN001, ANN202
    return overload(stub, inline="always", jit_options=_POLICY)


def _lanes(t) -> bool:  # noqa: ANN001
    return isinstance(t, types.Array)


def _quad(t) -> bool:  # noqa: ANN001
    return isinstance(t, types.BaseTuple)


def _width(t) -> int:  # noqa: ANN001
    return LANES if _lanes(t) else QUAD


# --- four lanes from r: the arithmetic, written once ---------------------------------------

@inline
def _both4(o, r, pv, x, pq, y, d, b, c):  # noqa: ANN001, ANN202
    x0, x1, x2, x3 = x[r], x[r + 1], x[r + 2], x[r + 3]
    y0, y1, y2, y3 = y[r], y[r + 1], y[r + 2], y[r + 3]
    d0, d1, d2, d3 = d[r], d[r + 1], d[r + 2], d[r + 3]
    o[r], o[r + 1], o[r + 2], o[r + 3] = (
        (pv * x0 + b * d0) + (pq * y0 + c * d0), (pv * x1 + b * d1) + (pq * y1 + c * d1),
        (pv * x2 + b * d2) + (pq * y2 + c * d2), (pv * x3 + b * d3) + (pq * y3 + c * d3))


@inline
def _out4(o, r, a, x, d, b):  # noqa: ANN001, ANN202
    x0, x1, x2, x3 = x[r], x[r + 1], x[r + 2], x[r + 3]
    d0, d1, d2, d3 = d[r], d[r + 1], d[r + 2], d[r + 3]
    o[r], o[r + 1], o[r + 2], o[r + 3] = a * x0 + b * d0, a * x1 + b * d1, a * x2 + b * d2, a * x3 + b * d3


@inline
def _in4(o, r, a, x, d, b):  # noqa: ANN001, ANN202
    x0, x1, x2, x3 = x[r], x[r + 1], x[r + 2], x[r + 3]
    d0, d1, d2, d3 = d[r], d[r + 1], d[r + 2], d[r + 3]
    o0, o1, o2, o3 = o[r], o[r + 1], o[r + 2], o[r + 3]
    o[r], o[r + 1], o[r + 2], o[r + 3] = (o0 + (a * x0 + b * d0), o1 + (a * x1 + b * d1),
                                          o2 + (a * x2 + b * d2), o3 + (a * x3 + b * d3))


@inline
def _dot4(s, r, x, y, u, v):  # noqa: ANN001, ANN202
    return (s[0] + (u * x[r] + v * y[r]), s[1] + (u * x[r + 1] + v * y[r + 1]),
            s[2] + (u * x[r + 2] + v * y[r + 2]), s[3] + (u * x[r + 3] + v * y[r + 3]))


# --- the steps, specialised: rows of lanes (tangents) or numbers (values) -----------------

def step_both(out, t, pv, x, pq, y, d):  # noqa: ANN001, ANN201
    """``out[t] = (pv x - x_0 d) + (pq y + y_0 d)`` (object out with ``pv = 1 - q``, in
    with ``pq = q``, tangents ``d = q'``), one store; values ``pv x + pq y``."""
    raise NotImplementedError("compiled only (numba)")


@_spec(step_both)
def _step_both(out, t, pv, x, pq, y, d):  # noqa: ANN001, ANN202
    if _lanes(x):
        wide = _lanes(d)

        def lanes(out, t, pv, x, pq, y, d):  # noqa: ANN001, ANN202
            b, c = -x[0], y[0]
            o = out[t]
            _both4(o, 0, pv, x, pq, y, d, b, c)
            if wide:
                _both4(o, 4, pv, x, pq, y, d, b, c)
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
        wide = _lanes(d)

        def lanes(out, t, a, x, d):  # noqa: ANN001, ANN202
            b = -x[0]
            o = out[t]
            _out4(o, 0, a, x, d, b)
            if wide:
                _out4(o, 4, a, x, d, b)
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
        wide = _lanes(d)

        def lanes(out, t, a, x, d):  # noqa: ANN001, ANN202
            b = x[0]
            o = out[t]
            _in4(o, 0, a, x, d, b)
            if wide:
                _in4(o, 4, a, x, d, b)
        return lanes

    def values(out, t, a, x, d):  # noqa: ANN001, ANN202
        out[t] += a * x
    return values


def inner_sum(H, F, G, top, ns, d):  # noqa: ANN001, ANN201
    """``sum_{k < ns} F[k] G[min(k + 1, top)]`` returned (its value) and, with lanes (as
    many as the tangents ``d`` give), into ``H`` by the product rule ``G_0 F + F_0 G``
    (value lane summed twice and halved: exact), summed in registers (a sum in memory
    waits on its own store every step)."""
    raise NotImplementedError("compiled only (numba)")


@_spec(inner_sum)
def _inner_sum(H, F, G, top, ns, d):  # noqa: ANN001, ANN202
    if F.ndim == 2:
        wide = _lanes(d)

        def lanes(H, F, G, top, ns, d):  # noqa: ANN001, ANN202
            lo = hi = (0.0, 0.0, 0.0, 0.0)
            for k in range(ns):
                x, y = F[k], G[min(k + 1, top)]
                u, v = y[0], x[0]
                lo = _dot4(lo, 0, x, y, u, v)
                if wide:
                    hi = _dot4(hi, 4, x, y, u, v)
            H[0], H[1], H[2], H[3] = lo
            if wide:
                H[4], H[5], H[6], H[7] = hi
            H[0] *= 0.5
            return H[0]
        return lanes

    def values(H, F, G, top, ns, d):  # noqa: ANN001, ANN202
        a = 0.0
        for k in range(ns):
            a = a + F[k] * G[min(k + 1, top)]
        return a
    return values


def store(out, x):  # noqa: ANN001, ANN201
    """``out`` (as many or more numbers) from ``x``: its lanes, or ``(x, 0, ..)``."""
    raise NotImplementedError("compiled only (numba)")


@_spec(store)
def _store(out, x):  # noqa: ANN001, ANN202
    if _lanes(x):
        def lanes(out, x):  # noqa: ANN001, ANN202
            for r in range(x.shape[0]):
                out[r] = x[r]
        return lanes

    def values(out, x):  # noqa: ANN001, ANN202
        out[0] = x
        for r in range(1, out.shape[0]):
            out[r] = 0.0
    return values


def store_weight(out, q, H, h, d):  # noqa: ANN001, ANN201
    """A weight row ``0 + (q H + h d)`` (``q``, tangents ``d``; inner sum ``H``, value ``h``)."""
    raise NotImplementedError("compiled only (numba)")


@_spec(store_weight)
def _store_weight(out, q, H, h, d):  # noqa: ANN001, ANN202
    if _lanes(d) or _quad(d):
        width = _width(d)

        def lanes(out, q, H, h, d):  # noqa: ANN001, ANN202
            for r in range(width):
                out[r] = 0.0 + (q * H[r] + h * d[r])
        return lanes

    def values(out, q, H, h, d):  # noqa: ANN001, ANN202
        out[0] = q * h
        for r in range(1, out.shape[0]):
            out[r] = 0.0
    return values


def lanes_of(d):  # noqa: ANN001, ANN201
    """The array of lanes ``d`` (tangent lanes, or ``(array,)``: four of them)."""
    raise NotImplementedError("compiled only (numba)")


@_spec(lanes_of)
def _lanes_of(d):  # noqa: ANN001, ANN202
    return (lambda d: d[0]) if _quad(d) else (lambda d: d)


def buffer(n, m, d):  # noqa: ANN001, ANN201
    """``(n, m, lanes)`` where ``d`` holds tangent lanes (``df``), else ``(n, m)``; undefined."""
    raise NotImplementedError("compiled only (numba)")


@_spec(buffer)
def _buffer(n, m, d):  # noqa: ANN001, ANN202
    if _lanes(d) or _quad(d):
        width = _width(d)
        return lambda n, m, d: np.empty((n, m, width))
    return lambda n, m, d: np.empty((n, m))


def rows(n, d):  # noqa: ANN001, ANN201
    """``(n, lanes)`` tangent rows where ``d`` holds lanes (in a 1-tuple: four, and the
    rows too), else ``0.0``; undefined."""
    raise NotImplementedError("compiled only (numba)")


@_spec(rows)
def _rows(n, d):  # noqa: ANN001, ANN202
    if _quad(d):
        return lambda n, d: (np.empty((n, QUAD)),)
    return (lambda n, d: np.empty((n, LANES))) if _lanes(d) else (lambda n, d: 0.0)


def row(d, j):  # noqa: ANN001, ANN201
    """``d[j]`` (tangent lanes; four: a tuple), or ``0.0`` (none)."""
    raise NotImplementedError("compiled only (numba)")


@_spec(row)
def _row(d, j):  # noqa: ANN001, ANN202
    if _quad(d):
        def quad(d, j):  # noqa: ANN001, ANN202
            a = d[0]
            return (a[j, 0], a[j, 1], a[j, 2], a[j, 3])
        return quad
    return (lambda d, j: d[j]) if _lanes(d) else (lambda d, j: 0.0)


def init(G, k, f, df):  # noqa: ANN001, ANN201
    """``G[k] = (f[k], df[k, 1:])`` (value, tangents), or ``f[k]``."""
    raise NotImplementedError("compiled only (numba)")


@_spec(init)
def _init(G, k, f, df):  # noqa: ANN001, ANN202
    if _lanes(df) or _quad(df):
        width = _width(df)

        def lanes(G, k, f, df):  # noqa: ANN001, ANN202
            a = lanes_of(df)
            for r in range(width):
                G[k, r] = a[k, r]
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
            for r in range(F.shape[1]):
                F[0, r] = 0.0
            F[0, 0] = 1.0
        return lanes

    def values(F):  # noqa: ANN001, ANN202
        F[0] = 1.0
    return values
