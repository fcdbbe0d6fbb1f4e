"""The lane arithmetic of :mod:`analysis.pipeline.backends.numba.kernels.lanes` for a kernel's buffers and outputs:
each helper specialised at compile time on whether the kernel's tangent argument
(``pd_all``, ``df``) is an array (tangents asked for) or a number (``0.0``: values
only), so one kernel's source gives both variants (the same floats as lane 0).
"""

from __future__ import annotations

import numpy as np
from numba import types

from analysis.pipeline.backends.numba.kernels._jit import specialise
from analysis.pipeline.backends.numba.kernels.lanes import LANES, _lanes, lin_add

__all__ = [
    "keep_sum", "lane_buffer", "lane_buffer4", "no_tangent", "set_value", "set_vec",
    "store_row", "table_init", "tangent_row", "tangent_rows", "tangents", "vec_mul_add",
    "weight_row",
]


# --- the same for a kernel's buffers and outputs: tangents, or none (a number) -----------


def _has(t) -> bool:
    """Whether the numba type ``t`` of a kernel's tangent argument (``pd_all``, ``df``) is
    an array (tangents asked for), else a number (``0.0``: values only)."""
    return isinstance(t, types.Array)


def lane_buffer(n, m, d):
    """A float64 buffer ``(n, m, LANES)`` where ``d`` (a tangent argument) is an array, else
    ``(n, m)``; contents undefined."""
    raise NotImplementedError("compiled only (numba)")


@specialise(lane_buffer)
def _lane_buffer(n, m, d):
    if _has(d):
        def lanes(n, m, d):
            return np.empty((n, m, LANES))
        return lanes

    def values(n, m, d):
        return np.empty((n, m))
    return values


def lane_buffer4(n, m, s, d):
    """:func:`lane_buffer` of ``(n, m, s[, LANES])``."""
    raise NotImplementedError("compiled only (numba)")


@specialise(lane_buffer4)
def _lane_buffer4(n, m, s, d):
    if _has(d):
        def lanes(n, m, s, d):
            return np.empty((n, m, s, LANES))
        return lanes

    def values(n, m, s, d):
        return np.empty((n, m, s))
    return values


def tangents(d, g, p):
    """``d[g, p]`` (the tangents of object ``g``'s pattern ``p``), or ``0.0`` (none)."""
    raise NotImplementedError("compiled only (numba)")


@specialise(tangents)
def _tangents(d, g, p):
    if _has(d):
        def lanes(d, g, p):
            return d[g, p]
        return lanes

    def values(d, g, p):
        return 0.0
    return values


def tangent_rows(n, d):
    """A float64 buffer ``(n, LANES)`` of tangent rows where ``d`` (a tangent argument) is
    an array, else ``0.0`` (none: values only); contents undefined."""
    raise NotImplementedError("compiled only (numba)")


@specialise(tangent_rows)
def _tangent_rows(n, d):
    if _has(d):
        def lanes(n, d):
            return np.empty((n, LANES))
        return lanes

    def values(n, d):
        return 0.0
    return values


def tangent_row(d, j):
    """``d[j]`` (row ``j`` of :func:`tangent_rows`), or ``0.0`` (none)."""
    raise NotImplementedError("compiled only (numba)")


@specialise(tangent_row)
def _tangent_row(d, j):
    if _has(d):
        def lanes(d, j):
            return d[j]
        return lanes

    def values(d, j):
        return 0.0
    return values


def weight_row(row, q, inner, h, d):
    """An output row from an object's probability ``q`` (tangents ``d``) and its inner
    sum (:func:`analysis.pipeline.backends.numba.kernels.walk.weight`: ``inner`` with
    tangents, its value ``h``): ``row = 0 + (q inner + h d)`` (:func:`lin_add` into a
    cleared row); values (``d`` a number): ``row[0] = q h``, the other lanes zero."""
    raise NotImplementedError("compiled only (numba)")


@specialise(weight_row)
def _weight_row(row, q, inner, h, d):
    if _has(d):
        def lanes(row, q, inner, h, d):
            for r in range(LANES):
                row[r] = 0.0
            lin_add(row, q, inner, h, d)
        return lanes

    def values(row, q, inner, h, d):
        row[0] = q * h
        for r in range(1, row.shape[0]):
            row[r] = 0.0
    return values


def no_tangent(d, g, p):
    """Whether ``d[g, p]`` is zero in every tangent lane (true where there are none)."""
    raise NotImplementedError("compiled only (numba)")


@specialise(no_tangent)
def _no_tangent(d, g, p):
    if _has(d):
        def lanes(d, g, p):
            for r in range(1, LANES):
                if d[g, p, r] != 0.0:
                    return False
            return True
        return lanes

    def values(d, g, p):
        return True
    return values


def table_init(G, k, f, df):
    """``G[k] = (f[k], df[k, 1:])`` (value lane ``f``, tangent lanes ``df``), or ``f[k]``."""
    raise NotImplementedError("compiled only (numba)")


@specialise(table_init)
def _table_init(G, k, f, df):
    if _has(df):
        def lanes(G, k, f, df):
            for r in range(LANES):
                G[k, r] = df[k, r]
            G[k, 0] = f[k]
        return lanes

    def values(G, k, f, df):
        G[k] = f[k]
    return values


def set_vec(out, t, x):
    """``out[t] = x`` (every lane)."""
    raise NotImplementedError("compiled only (numba)")


@specialise(set_vec)
def _set_vec(out, t, x):
    if _lanes(x):
        def lanes(out, t, x):
            for r in range(LANES):
                out[t, r] = x[r]
        return lanes

    def values(out, t, x):
        out[t] = x
    return values


def set_value(out, t, v):
    """The value lane of ``out[t]`` set to the number ``v`` (the tangents kept)."""
    raise NotImplementedError("compiled only (numba)")


@specialise(set_value)
def _set_value(out, t, v):
    if out.ndim == 2:
        def lanes(out, t, v):
            out[t, 0] = v
        return lanes

    def values(out, t, v):
        out[t] = v
    return values


def keep_sum(H, p, v):
    """``H[p] = v`` for values only (with tangents :func:`dot_end` wrote ``H[p]``)."""
    raise NotImplementedError("compiled only (numba)")


@specialise(keep_sum)
def _keep_sum(H, p, v):
    if H.ndim == 2:
        def lanes(H, p, v):
            pass
        return lanes

    def values(H, p, v):
        H[p] = v
    return values


def vec_mul_add(acc, a, x, d):
    """``acc + a x + x_0 d`` (lanes: into ``acc``, returned), or ``acc + a x``."""
    raise NotImplementedError("compiled only (numba)")


@specialise(vec_mul_add)
def _vec_mul_add(acc, a, x, d):
    if _lanes(x):
        def lanes(acc, a, x, d):
            x0 = x[0]
            for r in range(LANES):
                acc[r] += a * x[r] + x0 * d[r]
            return acc
        return lanes

    def values(acc, a, x, d):
        return acc + a * x
    return values


def store_row(out, x):
    """An output row ``out`` (``(LANES,)`` or fewer lanes) from the lane vector ``x``; a
    number into lane 0, the other lanes zero."""
    raise NotImplementedError("compiled only (numba)")


@specialise(store_row)
def _store_row(out, x):
    if _lanes(x):
        def lanes(out, x):
            for r in range(LANES):
                out[r] = x[r]
        return lanes

    def values(out, x):
        out[0] = x
        for r in range(1, out.shape[0]):
            out[r] = 0.0
    return values
