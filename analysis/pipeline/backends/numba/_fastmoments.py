"""Moments and co-moments with their Jacobians from summed power sums (numpy, float64).

The host side of :mod:`analysis.pipeline.backends.numba.fastkernel`: the corrected two-pass formulas of
:mod:`analysis.stats._core` (:func:`~analysis.stats._core.moments`,
:func:`~analysis.stats._core.comoments`) and
:func:`~analysis.stats._core.moments_from_expectations` written once more with their
forward-mode derivatives, on the sums the numba loops return (value in column 0, one
column per trainable parameter after it). The tests of the numba kernel check them
against the JAX kernel, which uses the definitions themselves.
"""

from __future__ import annotations

import numpy as np

from analysis.stats._core import CoMoments, Moments, shift_powers

__all__ = ["comoments_state", "moments_state", "safe_div", "sum_moments_state"]


def safe_div(num, den):
    return num / den if den != 0 else 0.0


def _mean(s, ds, w, dw):
    """``(s / w, its tangents)`` from a sum ``s`` and the weight ``w`` (0 for ``w = 0``)."""
    r = safe_div(s, w)
    return r, ((ds - r * dw) / w if w != 0 else np.zeros_like(dw))


def _square(s, ds, w, dw, r, dr):
    """``(s - w r^2, its tangents)``: a sum of squares about the mean ``r`` from the one
    about the centre; 0 (zero tangents) where rounding leaves it slightly negative."""
    m = s - w * (r * r)
    if m < 0 and -m <= 1e-8 * abs(w * (r * r)):
        return 0.0, np.zeros_like(dw)
    return m, ds - dw * (r * r) - 2.0 * w * r * dr


def moments_state(tot: np.ndarray, center: float, finite: bool, order: int = 4):
    """``(Moments, jac Moments)`` from summed power sums ``tot`` (``(>= 5, 1 + P)``: W,
    S1..S4 about ``center``), as :func:`analysis.stats._core.moments`; the moments above
    ``order`` are NaN with zero derivative, as in
    :func:`~analysis.stats._core.moments_from_expectations`."""
    w, dw = tot[0, 0], tot[0, 1:]
    s2, s3, s4 = tot[2, 0], tot[3, 0], tot[4, 0]
    ds2, ds3, ds4 = tot[2, 1:], tot[3, 1:], tot[4, 1:]
    r, dr = _mean(tot[1, 0], tot[1, 1:], w, dw)
    r2 = r * r
    m2, dm2 = _square(s2, ds2, w, dw, r, dr)
    m3 = s3 - 3.0 * r * s2 + 2.0 * w * r2 * r
    dm3 = ds3 - 3.0 * (dr * s2 + r * ds2) + 2.0 * (dw * r2 * r + 3.0 * w * r2 * dr)
    m4 = s4 - 4.0 * r * s3 + 6.0 * r2 * s2 - 3.0 * w * r2 * r2
    dm4 = (
        ds4 - 4.0 * (dr * s3 + r * ds3) + 6.0 * (2.0 * r * dr * s2 + r2 * ds2)
        - 3.0 * (dw * r2 * r2 + 4.0 * w * r2 * r * dr)
    )
    zero = np.zeros_like(dw)
    if not finite:
        m2 = m3 = m4 = np.nan
        dm2 = dm3 = dm4 = zero
    if order < 3:  # the moments above the order asked for: NaN, zero derivative
        m3, dm3 = np.nan, zero
    if order < 4:
        m4, dm4 = np.nan, zero
    value = Moments(*(np.array(v, dtype=np.float64) for v in (w, center, r, m2, m3, m4)))
    jac = Moments(dw.copy(), zero, dr, dm2, dm3, dm4)
    return value, jac


def comoments_state(tot: np.ndarray, cx: float, cy: float, fx: bool, fy: bool):
    """``(CoMoments, jac CoMoments)`` from the summed accumulators (as
    :func:`analysis.stats._core.comoments`; ``tot`` rows: W, then x's S1, S2 about
    ``cx`` in rows 1, 2 and y's in rows 5, 6, the cross sum in row 7)."""
    w, dw = tot[0, 0], tot[0, 1:]
    zero = np.zeros_like(dw)
    (rx, drx), (ry, dry) = (_mean(tot[i, 0], tot[i, 1:], w, dw) for i in (1, 5))
    cxx, dcxx = _square(tot[2, 0], tot[2, 1:], w, dw, rx, drx)
    cyy, dcyy = _square(tot[6, 0], tot[6, 1:], w, dw, ry, dry)
    cxy = tot[7, 0] - w * rx * ry
    dcxy = tot[7, 1:] - dw * rx * ry - w * (drx * ry + rx * dry)
    if not fx:
        cxx, dcxx = np.nan, zero
    if not fy:
        cyy, dcyy = np.nan, zero
    if not (fx and fy):
        cxy, dcxy = np.nan, zero
    value = CoMoments(*(np.array(v, dtype=np.float64) for v in (w, cx, rx, cy, ry, cxx, cyy, cxy)))
    jac = CoMoments(dw.copy(), zero, drx, zero, dry, dcxx, dcyy, dcxy)
    return value, jac


def _shift(b: np.ndarray, d: np.ndarray) -> np.ndarray:
    """:func:`analysis.stats._core.shift_powers` along axis 1 of ``b`` (``(E, R + 1, ...)``),
    ``d`` per event."""
    moved = np.moveaxis(b, 1, -1)
    d = d.reshape((-1,) + (1,) * (moved.ndim - 2))
    return np.stack(shift_powers(moved, d, xp=np), axis=1)


def sum_moments_state(a: np.ndarray, ev: np.ndarray, order: int):
    """:func:`analysis.stats._core.moments_from_expectations` with its Jacobian: ``a``
    ``(E, R + 1, 1 + P)`` = ``E[X^r 1]`` and tangents, ``ev`` ``(E, 1 + P)`` weights."""
    a0 = a[:, 0, 0]
    own = np.where(a0 != 0, a[:, 1, 0] / np.where(a0 != 0, a0, 1.0), 0.0)
    b = _shift(a, -own)
    w, dw = ev[:, 0], ev[:, 1:]
    sumw = float(np.sum(w * b[:, 0, 0]))
    center = safe_div(float(np.sum(w * a[:, 1, 0])), sumw)
    s = _shift(b, own - center)  # (E, R + 1, 1 + P)
    tot = np.zeros((5, a.shape[2]))
    n = s.shape[1]
    tot[:n, 0] = np.einsum("e,er->r", w, s[:, :, 0])
    tot[:n, 1:] = np.einsum("ep,er->rp", dw, s[:, :, 0]) + np.einsum("e,erp->rp", w, s[:, :, 1:])
    return moments_state(tot, center, True, order)
