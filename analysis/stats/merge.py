"""Exact merging of moment states across chunks, with their derivatives.

A chunk returns centred sums ``(W, mu, M2, M3, M4)`` (and co-moments) together with
their Jacobian (and optionally Hessian) with respect to the selection parameters.
Merging two chunks is a rational function of both states (Pebay 2008, Chan et al.
1979), so the merged derivatives follow from the chain rule. :class:`Dual` carries
``value``, ``grad`` and ``hess`` through that arithmetic in float64 numpy, so the
merge formula is written once and gives values, gradients and Hessians that are
exact up to rounding, whatever the chunking or merge order.

Shapes: ``value`` has any shape ``S``; ``grad`` is ``S + (P,)`` and ``hess`` is
``S + (P, P)`` for ``P`` parameters (``hess`` may be ``None``: first order only).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _outer(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a[..., :, None] * b[..., None, :]


class Dual:
    """A value with its gradient (and Hessian) w.r.t. P parameters; float64 numpy.

    Supports ``+ - * /`` with other Duals and plain numbers, and integer powers:
    exactly what the merge formulas need.
    """

    __slots__ = ("value", "grad", "hess")
    # Make ``ndarray + Dual`` call Dual.__radd__ instead of building an object array.
    __array_ufunc__ = None

    def __init__(self, value: Any, grad: Any, hess: Any = None) -> None:
        self.value = np.array(value, dtype=np.float64)
        self.grad = np.array(grad, dtype=np.float64)
        self.hess = None if hess is None else np.array(hess, dtype=np.float64)
        if self.grad.shape[:-1] != self.value.shape:
            raise ValueError(
                f"Dual: grad shape {self.grad.shape} does not extend value shape {self.value.shape}"
            )

    @classmethod
    def constant(cls, value: Any, like: Dual) -> Dual:
        value = np.asarray(value, dtype=np.float64)
        p = like.grad.shape[-1]
        grad = np.zeros(value.shape + (p,))
        hess = None if like.hess is None else np.zeros(value.shape + (p, p))
        return cls(value, grad, hess)

    def _lift(self, other: Any) -> Dual:
        return other if isinstance(other, Dual) else Dual.constant(other, self)

    def __add__(self, other: Any) -> Dual:
        o = self._lift(other)
        hess = None if self.hess is None or o.hess is None else self.hess + o.hess
        return Dual(self.value + o.value, self.grad + o.grad, hess)

    __radd__ = __add__

    def __neg__(self) -> Dual:
        return Dual(-self.value, -self.grad, None if self.hess is None else -self.hess)

    def __sub__(self, other: Any) -> Dual:
        return self + (-self._lift(other))

    def __rsub__(self, other: Any) -> Dual:
        return self._lift(other) - self

    def __mul__(self, other: Any) -> Dual:
        if not isinstance(other, Dual):
            c = np.asarray(other, dtype=np.float64)
            return Dual(
                self.value * c,
                self.grad * c[..., None],
                None if self.hess is None else self.hess * c[..., None, None],
            )
        a, b = self, other
        va, vb = a.value[..., None], b.value[..., None]
        grad = va * b.grad + vb * a.grad
        hess = None
        if a.hess is not None and b.hess is not None:
            hess = (
                va[..., None] * b.hess
                + vb[..., None] * a.hess
                + _outer(a.grad, b.grad)
                + _outer(b.grad, a.grad)
            )
        return Dual(a.value * b.value, grad, hess)

    __rmul__ = __mul__

    def reciprocal(self) -> Dual:
        """``1 / self``; where the value is 0 the result is 0 with zero derivatives
        (used only for ``1 / W`` of an empty merge, whose terms all vanish)."""
        ok = self.value != 0
        inv = np.where(ok, 1.0 / np.where(ok, self.value, 1.0), 0.0)
        grad = -self.grad * (inv * inv)[..., None]
        hess = None
        if self.hess is not None:
            hess = (
                -self.hess * (inv * inv)[..., None, None]
                + 2 * _outer(self.grad, self.grad) * (inv**3)[..., None, None]
            )
        return Dual(inv, grad, hess)

    def __truediv__(self, other: Any) -> Dual:
        if not isinstance(other, Dual):
            return self * (1.0 / np.asarray(other, dtype=np.float64))
        return self * other.reciprocal()

    def __pow__(self, n: int) -> Dual:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"Dual supports positive integer powers, got {n!r}")
        out = self
        for _ in range(n - 1):
            out = out * self
        return out

    def __repr__(self) -> str:
        return f"Dual(value={self.value!r}, grad={self.grad!r})"


def select(cond: Any, a: Any, b: Any) -> Any:
    """Elementwise ``a if cond else b`` for numbers, numpy arrays and :class:`Dual`."""
    if isinstance(a, Dual) or isinstance(b, Dual):
        like = a if isinstance(a, Dual) else b
        a = like._lift(a)
        b = like._lift(b)
        c = np.asarray(cond)
        hess = None
        if a.hess is not None and b.hess is not None:
            hess = np.where(c[..., None, None], a.hess, b.hess)
        return Dual(np.where(c, a.value, b.value), np.where(c[..., None], a.grad, b.grad), hess)
    return np.where(cond, a, b)


def _value(a: Any) -> np.ndarray:
    return a.value if isinstance(a, Dual) else np.asarray(a, dtype=np.float64)


def _merge_mean(na: Any, ca: Any, da: Any, nb: Any, cb: Any, db: Any, inv_n: Any):
    """Merged mean as ``(center, dmean)`` plus ``delta = mu_b - mu_a``.

    ``cb - ca`` is a difference of constants (exact when they are close) and the
    small ``db - da`` carries the derivatives, so ``delta`` keeps its digits. The
    merged centre is that of the heavier side, so ``dmean`` stays small.
    """
    delta = (np.asarray(cb) - np.asarray(ca)) + (db - da)
    keep_a = np.abs(_value(na)) >= np.abs(_value(nb))
    center = np.where(keep_a, ca, cb)
    dmean = select(keep_a, da + delta * nb * inv_n, db - delta * na * inv_n)
    return center, dmean, delta


def merge_moments(a: tuple, b: tuple) -> tuple:
    """Merge two ``(W, center, dmean, M2, M3, M4)`` states (Pebay's pairwise formulas).

    Works on floats, numpy arrays and :class:`Dual` (``center`` is always a plain
    constant); an empty side (W = 0) leaves the other unchanged.
    """
    na, ca, da, m2a, m3a, m4a = a
    nb, cb, db, m2b, m3b, m4b = b
    n = na + nb
    inv_n = _reciprocal(n)
    center, dmean, delta = _merge_mean(na, ca, da, nb, cb, db, inv_n)
    nanb = na * nb
    m2 = m2a + m2b + delta * delta * nanb * inv_n
    m3 = (
        m3a
        + m3b
        + delta**3 * nanb * (na - nb) * inv_n * inv_n
        + 3.0 * delta * (na * m2b - nb * m2a) * inv_n
    )
    m4 = (
        m4a
        + m4b
        + delta**4 * nanb * (na * na - nanb + nb * nb) * inv_n**3
        + 6.0 * delta * delta * (na * na * m2b + nb * nb * m2a) * inv_n * inv_n
        + 4.0 * delta * (na * m3b - nb * m3a) * inv_n
    )
    return (n, center, dmean, m2, m3, m4)


def merge_comoments(a: tuple, b: tuple) -> tuple:
    """Merge two ``(W, cx, dmx, cy, dmy, Cxx, Cyy, Cxy)`` states."""
    na, cxa, dxa, cya, dya, cxxa, cyya, cxya = a
    nb, cxb, dxb, cyb, dyb, cxxb, cyyb, cxyb = b
    n = na + nb
    inv_n = _reciprocal(n)
    cx, dmx, deltax = _merge_mean(na, cxa, dxa, nb, cxb, dxb, inv_n)
    cy, dmy, deltay = _merge_mean(na, cya, dya, nb, cyb, dyb, inv_n)
    f = na * nb * inv_n
    return (
        n,
        cx,
        dmx,
        cy,
        dmy,
        cxxa + cxxb + deltax * deltax * f,
        cyya + cyyb + deltay * deltay * f,
        cxya + cxyb + deltax * deltay * f,
    )


def _reciprocal(n: Any) -> Any:
    if isinstance(n, Dual):
        return n.reciprocal()
    n = np.asarray(n, dtype=np.float64)
    ok = n != 0
    return np.where(ok, 1.0 / np.where(ok, n, 1.0), 0.0)
