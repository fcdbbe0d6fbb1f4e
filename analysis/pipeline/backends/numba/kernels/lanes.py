"""The lane arithmetic of the numba kernels (float64).

Every differentiated quantity is a vector of :data:`LANES` lanes: lane 0 the value, lanes
1..P its tangents (one per trainable parameter, padded with zeros), or two variants of 4
lanes side by side (:func:`lin_add2`). The product rule of ``a x`` with both in lanes is
``a_0 x + x_0 a``; every operation below is written out over the 8 lanes with every
load before the first store, so that LLVM's SLP vectorizer (on where the loops are
compiled: :func:`analysis.pipeline.backends.numba.kernels._jit.compiled`) packs it into a
few vector operations (a loop over the lanes that stores as it goes is left scalar: the
output might alias the inputs). The same operations in the same order as the loops
written with a lane loop: the same floats.
"""

from __future__ import annotations

from analysis.pipeline.backends.numba.kernels._jit import inline

__all__ = ["LANES", "axpy", "lin", "lin2", "lin_add", "lin_add2"]

# Lanes of every differentiated quantity: lane 0 the value, lanes 1..P the tangents
# (padded with zeros): loops of a constant trip count, which LLVM vectorises. Plans with
# more than LANES - 1 trainable parameters go to the JAX kernel.
LANES = 8


@inline
def lin(out, a, x, b, y):
    """``out[r] = a x[r] + b y[r]`` over the lanes."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    y0, y1, y2, y3, y4, y5, y6, y7 = y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]
    out[0], out[1], out[2], out[3] = a * x0 + b * y0, a * x1 + b * y1, a * x2 + b * y2, a * x3 + b * y3
    out[4], out[5], out[6], out[7] = a * x4 + b * y4, a * x5 + b * y5, a * x6 + b * y6, a * x7 + b * y7


@inline
def lin_add2(out, a, a_hi, x, b, b_hi, y):
    """``out[r] += a x[r] + b y[r]`` over lanes 0-3 and ``a_hi x[r] + b_hi y[r]`` over
    lanes 4-7 (two variants side by side, :func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk`); every
    load before the first store, so that LLVM packs each half into vector operations."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    y0, y1, y2, y3, y4, y5, y6, y7 = y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]
    o0, o1, o2, o3, o4, o5, o6, o7 = out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]
    out[0], out[1], out[2], out[3] = (o0 + (a * x0 + b * y0), o1 + (a * x1 + b * y1),
                                      o2 + (a * x2 + b * y2), o3 + (a * x3 + b * y3))
    out[4], out[5], out[6], out[7] = (o4 + (a_hi * x4 + b_hi * y4), o5 + (a_hi * x5 + b_hi * y5),
                                      o6 + (a_hi * x6 + b_hi * y6), o7 + (a_hi * x7 + b_hi * y7))


@inline
def lin_add(out, a, x, b, y):
    """``out[r] += a x[r] + b y[r]`` over the lanes (:func:`lin_add2` with one coefficient
    for both halves: the same operations in the same order)."""
    lin_add2(out, a, a, x, b, b, y)


@inline
def axpy(out, a, x):
    """``out[r] += a x[r]`` over the lanes."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    o0, o1, o2, o3, o4, o5, o6, o7 = out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]
    out[0], out[1], out[2], out[3] = o0 + a * x0, o1 + a * x1, o2 + a * x2, o3 + a * x3
    out[4], out[5], out[6], out[7] = o4 + a * x4, o5 + a * x5, o6 + a * x6, o7 + a * x7


@inline
def lin2(out, a, x, b, y, c, u, d, v):
    """``out[r] = (a x[r] + b y[r]) + (c u[r] + d v[r])`` over the lanes: :func:`lin` and
    then :func:`lin_add` (the same floats), in registers
    with one store."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    y0, y1, y2, y3, y4, y5, y6, y7 = y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]
    u0, u1, u2, u3, u4, u5, u6, u7 = u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7]
    v0, v1, v2, v3, v4, v5, v6, v7 = v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
    out[0], out[1], out[2], out[3] = (
        (a * x0 + b * y0) + (c * u0 + d * v0), (a * x1 + b * y1) + (c * u1 + d * v1),
        (a * x2 + b * y2) + (c * u2 + d * v2), (a * x3 + b * y3) + (c * u3 + d * v3))
    out[4], out[5], out[6], out[7] = (
        (a * x4 + b * y4) + (c * u4 + d * v4), (a * x5 + b * y5) + (c * u5 + d * v5),
        (a * x6 + b * y6) + (c * u6 + d * v6), (a * x7 + b * y7) + (c * u7 + d * v7))
