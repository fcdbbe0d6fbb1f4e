"""Moments and co-moments with their Jacobians from summed power sums (float64).

The host side of :mod:`analysis.pipeline.backends.numba.fastkernel`: the sums the numba
loops return (value in column 0, one column per trainable parameter after it) go through
the one definition of the formulas, :func:`analysis.stats._core.moments_from_sums` and
:func:`~analysis.stats._core.comoments_from_sums`, with their forward-mode derivatives by
``jax.jvp`` (one compiled program per process and shape:
:func:`analysis.stats._programs.program_call`; a few small arrays once per observable and
chunk).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats._core import (
    CoMoments,
    Moments,
    comoments_from_sums,
    moments_from_sums,
    shift_powers,
)
from analysis.stats._programs import program_call

__all__ = ["comoments_state", "moments_state", "safe_div", "sum_moments_state"]


def safe_div(num, den):
    return num / den if den != 0 else 0.0


def _jvp(tot, consts, *, kind: str, order: int):
    """``(F, 1 + P)``: the ``kind`` state's fields at ``tot[:, 0]`` (column 0) and their
    derivatives along each column of ``tot[:, 1:]``; ``consts``: the centres (no
    gradient). One array out: one transfer, not one per field."""

    def state(s):
        if kind == "moments":
            return jnp.stack(moments_from_sums(s, consts[0], order=order))
        return jnp.stack(comoments_from_sums(tuple(s[i] for i in (0, 1, 2, 5, 6, 7)), *consts))

    value, jac = jax.vmap(lambda t: jax.jvp(state, (tot[:, 0],), (t,)), in_axes=1,
                          out_axes=(None, -1))(tot[:, 1:])
    return jnp.concatenate([value[:, None], jac], axis=1)


def _state(kind: str, tot: np.ndarray, consts: tuple, order: int = 4) -> tuple[Any, Any]:
    """``(state, jac state)`` as numpy float64 (the centres' tangents zero)."""
    out = np.asarray(program_call("numba_" + kind, _jvp, np.ascontiguousarray(tot),
                                  np.array(consts, np.float64), kind=kind, order=order))
    cls = Moments if kind == "moments" else CoMoments
    return cls(*(np.array(v) for v in out[:, 0])), cls(*out[:, 1:])


def moments_state(tot: np.ndarray, center: float, order: int = 4):
    """``(Moments, jac Moments)`` from summed power sums ``tot`` (``(>= 5, 1 + P)``: W,
    S1..S4 about ``center``), as :func:`analysis.stats._core.moments` (NaN where
    ``center`` is not finite; above ``order`` NaN with zero derivative)."""
    return _state("moments", tot[:5], (center,), order)


def comoments_state(tot: np.ndarray, cx: float, cy: float):
    """``(CoMoments, jac CoMoments)`` from the summed accumulators (as
    :func:`analysis.stats._core.comoments`; ``tot`` rows: W, then x's S1, S2 about
    ``cx`` in rows 1, 2 and y's in rows 5, 6, the cross sum in row 7)."""
    return _state("comoments", tot, (cx, cy))


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
    return moments_state(tot, center, order)
