"""The lane arithmetic of :mod:`analysis.select.lanes.arith` for a kernel's buffers and
outputs: each helper specialised at compile time on whether the kernel's tangent
argument (``pd_all``, ``df``) is an array (tangents asked for) or a number (``0.0``:
values only), so one kernel's source gives both variants (the same floats as lane 0).
The one-set walk (:mod:`analysis.select.chainwalk`) asks for four lanes
(:data:`~analysis.select.lanes.arith.QUAD`) by giving its tangent lanes in a 1-tuple
(``(array,)``: :func:`_boxed`); its objects' tangents are then rows of 4 read as tuples
(:func:`row`).
"""

from __future__ import annotations

import numpy as np
from numba import types

from analysis.select.lanes.arith import LANES, QUAD, _lanes
from analysis.select.lanes.policy import specialise_on

__all__ = [
    "keep_sum", "lane_buffer", "lane_buffer4", "lanes_of", "no_tangent", "row", "rows",
    "set_value", "set_vec", "start", "store_row", "store_weight", "table_init", "tangents",
    "vec_mul_add",
]


def _has(t) -> bool:
    """Whether the numba type ``t`` of a kernel's tangent argument (``pd_all``, ``df``) is
    an array (tangents asked for), else a number (``0.0``: values only)."""
    return isinstance(t, types.Array)


def _boxed(t) -> bool:
    """Whether the numba type ``t`` of a tangent argument is an array in a 1-tuple: four
    lanes (module docstring)."""
    return isinstance(t, types.BaseTuple)


def _rows(t) -> bool:
    """Whether the numba type ``t`` of an output is an array of lane rows (``ndim`` 2)."""
    return t.ndim == 2


@specialise_on("d", (_has, lambda n, m, d: np.empty((n, m, LANES))),
               (_boxed, lambda n, m, d: np.empty((n, m, QUAD))),
               lambda n, m, d: np.empty((n, m)))
def lane_buffer(n, m, d):
    """A float64 buffer ``(n, m, LANES)`` where ``d`` (a tangent argument) is an array
    (``(n, m, QUAD)``: an array in a 1-tuple), else ``(n, m)``; contents undefined."""


@specialise_on("d", (_has, lambda n, m, s, d: np.empty((n, m, s, LANES))),
               lambda n, m, s, d: np.empty((n, m, s)))
def lane_buffer4(n, m, s, d):
    """:func:`lane_buffer` of ``(n, m, s[, LANES])``."""


@specialise_on("d", (_has, lambda d, g, p: d[g, p]), lambda d, g, p: 0.0)
def tangents(d, g, p):
    """``d[g, p]`` (the tangents of object ``g``'s pattern ``p``), or ``0.0`` (none)."""


def _no_tangent(d, g, p):
    for r in range(1, LANES):
        if d[g, p, r] != 0.0:
            return False
    return True


@specialise_on("d", (_has, _no_tangent), lambda d, g, p: True)
def no_tangent(d, g, p):
    """Whether ``d[g, p]`` is zero in every tangent lane (true where there are none)."""


def _table_row(G, k, f, df):
    for r in range(LANES):
        G[k, r] = df[k, r]
    G[k, 0] = f[k]


def _table_four(G, k, f, df):
    a = df[0]
    for r in range(QUAD):
        G[k, r] = a[k, r]
    G[k, 0] = f[k]


def _table_value(G, k, f, df):
    G[k] = f[k]


@specialise_on("df", (_has, _table_row), (_boxed, _table_four), _table_value)
def table_init(G, k, f, df):
    """``G[k] = (f[k], df[k, 1:])`` (value lane ``f``, tangent lanes ``df``; four of them
    in a 1-tuple), or ``f[k]``."""


def _set_row(out, t, x):
    for r in range(LANES):
        out[t, r] = x[r]


def _set_number(out, t, x):
    out[t] = x


@specialise_on("x", (_lanes, _set_row), _set_number)
def set_vec(out, t, x):
    """``out[t] = x`` (every lane)."""


def _set_value(out, t, v):
    out[t, 0] = v


def _set_only(out, t, v):
    out[t] = v


@specialise_on("out", (_rows, _set_value), _set_only)
def set_value(out, t, v):
    """The value lane of ``out[t]`` set to the number ``v`` (the tangents kept)."""


def _keep(H, p, v):
    pass


def _keep_value(H, p, v):
    H[p] = v


@specialise_on("H", (_rows, _keep), _keep_value)
def keep_sum(H, p, v):
    """``H[p] = v`` for values only (with tangents :func:`dot_end` wrote ``H[p]``)."""


def _vec_mul_add(acc, a, x, d):
    x0 = x[0]
    for r in range(LANES):
        acc[r] += a * x[r] + x0 * d[r]
    return acc


@specialise_on("x", (_lanes, _vec_mul_add), lambda acc, a, x, d: acc + a * x)
def vec_mul_add(acc, a, x, d):
    """``acc + a x + x_0 d`` (lanes: into ``acc``, returned), or ``acc + a x``."""


def _store_row(out, x):
    for r in range(x.shape[0]):
        out[r] = x[r]


def _store_value(out, x):
    out[0] = x
    for r in range(1, out.shape[0]):
        out[r] = 0.0


@specialise_on("x", (_lanes, _store_row), _store_value)
def store_row(out, x):
    """An output row ``out`` (as many lanes or more) from the lane vector ``x``; a number
    into lane 0, the other lanes zero."""


# --- the one-set walk's tangents: the objects' rows, the weights -------------------------

def _store_weight(out, q, H, h, d):
    for r in range(LANES):
        out[r] = 0.0 + (q * H[r] + h * d[r])


def _store_weight_four(out, q, H, h, d):
    for r in range(QUAD):
        out[r] = 0.0 + (q * H[r] + h * d[r])


def _store_weight_value(out, q, H, h, d):
    out[0] = q * h
    for r in range(1, out.shape[0]):
        out[r] = 0.0


@specialise_on("d", (_has, _store_weight),
               (lambda t: isinstance(t, types.BaseTuple), _store_weight_four),
               _store_weight_value)
def store_weight(out, q, H, h, d):
    """A weight row ``0 + (q H + h d)`` (``q``, tangents ``d``: lanes, or 4 numbers; inner
    sum ``H``: lanes, or a tuple of 4; its value ``h``), or ``(q h, 0, ..)``."""


@specialise_on("d", (_boxed, lambda d: d[0]), lambda d: d)
def lanes_of(d):
    """The array of lanes ``d`` (tangent lanes, or ``(array,)``: four of them)."""


@specialise_on("d", (_has, lambda n, d: np.empty((n, LANES))),
               (_boxed, lambda n, d: (np.empty((n, QUAD)),)), lambda n, d: 0.0)
def rows(n, d):
    """``(n, lanes)`` tangent rows where ``d`` holds lanes (in a 1-tuple: four, and the
    rows too), else ``0.0``; undefined."""


def _row_four(d, j):
    a = d[0]
    return (a[j, 0], a[j, 1], a[j, 2], a[j, 3])


@specialise_on("d", (_has, lambda d, j: d[j]), (_boxed, _row_four), lambda d, j: 0.0)
def row(d, j):
    """``d[j]`` (tangent lanes; four: a tuple of 4 numbers), or ``0.0`` (none)."""


def _start_row(F):
    for r in range(F.shape[1]):
        F[0, r] = 0.0
    F[0, 0] = 1.0


def _start_value(F):
    F[0] = 1.0


@specialise_on("F", (_rows, _start_row), _start_value)
def start(F):
    """``F[0] = delta_0`` (tangents zero)."""
