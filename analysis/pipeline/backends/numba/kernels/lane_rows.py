"""The walk's steps on rows of lane arrays (:mod:`analysis.pipeline.backends.numba.kernels.lanes`'
primitives given an array and a row index instead of the row): each specialised at
compile time on its arguments' types, four lanes (tangents ``d`` or a sum's accumulator
a tuple of 4 numbers: one variant of at most 3 tangents, the event sums' kernel) read
and written by element, every other form the primitive of ``lanes`` on the row.
"""

from __future__ import annotations

from analysis.pipeline.backends.numba.kernels._jit import specialise_on
from analysis.pipeline.backends.numba.kernels.lanes import _four, dot_add, mul_add, zero_at

__all__ = ["clear_at", "row_dot_add", "row_mul_add"]


def _mul_add_four(out, t, a, a_hi, X, k, h, d):
    b = X[k, 0]
    x0, x1, x2, x3 = X[k, 0], X[k, 1], X[k, 2], X[k, 3]
    o0, o1, o2, o3 = out[t, 0], out[t, 1], out[t, 2], out[t, 3]
    out[t, 0], out[t, 1], out[t, 2], out[t, 3] = (
        o0 + (a * x0 + b * d[0]), o1 + (a * x1 + b * d[1]), o2 + (a * x2 + b * d[2]),
        o3 + (a * x3 + b * d[3]))


def _mul_add_row(out, t, a, a_hi, X, k, h, d):
    mul_add(out, t, a, a_hi, X[k], h, d)


@specialise_on("d", (_four, _mul_add_four), _mul_add_row)
def row_mul_add(out, t, a, a_hi, X, k, h, d):
    """:func:`mul_add` of row ``k`` of ``X``, ``out[t] += a X[k] + X[k, 0] d``; four lanes
    (``d`` a tuple of 4) by element, ``out[t, 0:4]`` (the event sums' rows are 4 wide)."""


def _dot_add_four(acc, X, k, Y, t, h):
    a, b = Y[t, 0], X[k, 0]
    return (acc[0] + (a * X[k, 0] + b * Y[t, 0]), acc[1] + (a * X[k, 1] + b * Y[t, 1]),
            acc[2] + (a * X[k, 2] + b * Y[t, 2]), acc[3] + (a * X[k, 3] + b * Y[t, 3]))


@specialise_on("acc", (_four, _dot_add_four),
               lambda acc, X, k, Y, t, h: dot_add(acc, X[k], Y[t], h))
def row_dot_add(acc, X, k, Y, t, h):
    """:func:`dot_add` of rows ``X[k]`` and ``Y[t]``; four lanes (``acc`` a tuple of 4) by
    element, as :func:`row_mul_add` (``acc_r + (Y[t, 0] X[k, r] + X[k, 0] Y[t, r])``)."""


def _clear_four(out, t, d):
    out[t, 0] = out[t, 1] = out[t, 2] = out[t, 3] = 0.0


@specialise_on("d", (_four, _clear_four), lambda out, t, d: zero_at(out, t))
def clear_at(out, t, d):
    """``out[t] = 0`` in the lanes the tangents ``d`` give: four where ``d`` is a tuple of
    4, else :func:`zero_at`."""
