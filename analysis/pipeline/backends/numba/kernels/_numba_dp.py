"""The element-wise loops of :mod:`analysis.pipeline.backends.numba.fastkernel` (numba, float64).

The soft cut's probabilities of an array (:func:`soft_values`, :func:`soft_array`) and
an observable's power sums from the walk's weights (:func:`centre_sums`,
:func:`accumulate`); lanes: value, then tangents
(:mod:`analysis.select.lanes.arith`). The walk that gives the weights:
:func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk` and the one-set walk
:func:`analysis.select.chainwalk.cut_walk`. Events are processed in blocks; per-block
partial sums are added in block order.
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.arith import LANES, axpy, lin
from analysis.select.lanes.policy import (
    compiled,
    elementwise,
    host_args,
    njit,
    vectorised,
    writes,
)

__all__ = [
    "LANES", "accumulate", "centre_sums", "compiled", "soft_array", "soft_values", "vectorised",
]


def soft_values(v: np.ndarray, t: float, width: float, greater: bool, inclusive: bool,
                absolute: bool, out: np.ndarray | None = None) -> np.ndarray:
    """The soft cut's probabilities ``s`` (numpy, float64), as
    :func:`analysis.select.objects.soft_pass`: ``z = v - t`` (``>``, ``>=``) or ``t - v``
    (``<``, ``<=``), of ``|v|`` for a cut on ``abs``; ``s = 1 / (1 + exp(-z / width))``
    with numpy's vectorised ``exp`` (several times faster than the scalar ``exp`` of a
    compiled loop; within an ulp of it), ``s = [z > 0]`` (``[z >= 0]`` if ``inclusive``)
    for ``width = 0``; NaN gives NaN (0 at ``width = 0``). Into ``out`` if given (numpy
    and the loops release the GIL: slices may be filled on threads). The element-wise
    steps around ``exp`` run as two compiled loops (:func:`soft_argument`,
    :func:`soft_finish`: the same operations per element as numpy's ``abs``,
    ``subtract``, ``divide`` and ``add``, ``divide``, so the same floats, in two passes
    over memory instead of up to six). The loops take the slope from ``s``
    (:func:`analysis.select.lanes.cuts.soft_slope`)."""
    v = np.asarray(v, dtype=np.float64)
    out = np.empty_like(v) if out is None else out
    hard = not width > 0.0  # NaN fails the step, as in soft_pass
    soft_argument(*host_args(soft_argument, (v, float(t), float(width), greater, inclusive,
                                            absolute, hard, out)))
    if hard:
        return out
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    soft_finish(out)
    return out


@elementwise
def soft_argument(v, t, width, greater, inclusive, absolute, hard, out):
    """``out = -z / width`` of :func:`soft_values` (``z = x - t`` or ``t - x``, ``x = v``
    or ``|v|``), or, for a hard cut, the step ``[z > 0]`` (``[z >= 0]`` if
    ``inclusive``; NaN fails), as 1.0 / 0.0. LLVM unswitches the loop on the cases and
    vectorises each (as fast as a loop written per case: 0.80 ms per 1.2M values;
    ``width > 0`` here: no division by zero)."""
    n = v.shape[0]
    if hard:
        for i in range(n):
            x = abs(v[i]) if absolute else v[i]
            z = x - t if greater else t - x
            out[i] = 1.0 if (z >= 0.0 if inclusive else z > 0.0) else 0.0
        return
    w = -width
    for i in range(n):
        x = abs(v[i]) if absolute else v[i]
        out[i] = (x - t if greater else t - x) / w




writes(soft_argument, "out")
@elementwise
def soft_finish(e):
    """``e = 1 / (1 + e)`` in place (``e = exp(-z / width) >= 0`` or NaN:
    :func:`soft_values`; no division by zero)."""
    for i in range(e.shape[0]):
        e[i] = 1.0 / (e[i] + 1.0)


def soft_array(v: np.ndarray, t: float, width: float, greater: bool, inclusive: bool,
               absolute: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(s, ds/dt)`` of the soft cut over an array (numpy: :func:`soft_values`, and the
    slope of :func:`analysis.select.lanes.cuts.soft_slope`)."""
    s = soft_values(v, t, width, greater, inclusive, absolute)
    iw = 1.0 / width if width > 0.0 else 0.0
    ds = s * (1.0 - s) * iw
    return s, (-ds if greater else ds)


@njit
def accumulate(eoff, x, y, has_y, wo, ev, cx, cy, block, out, b0, b1):
    """Blocks ``b0:b1`` of one observable's power sums about ``(cx, cy)``: entries
    ``eoff[e]:eoff[e + 1]`` of event ``e`` with values ``x`` (``y``) and weight
    ``ev[e] wo[j]`` (lanes: value, tangents). ``out[b]``: ``(8, LANES)`` = W, sum w d,
    d^2, d^3, d^4, sum w e, e^2, d e (``d = x - cx``, ``e = y - cy``)."""
    n_ev = ev.shape[0]
    t = np.empty(8)
    dw = np.empty(LANES)
    for b in range(b0, b1):
        acc = out[b]
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            we = ev[e, 0]
            if we == 0.0:
                nonzero = False
                for r in range(LANES):
                    if ev[e, r] != 0.0:
                        nonzero = True
                if not nonzero:
                    continue
            for j in range(eoff[e], eoff[e + 1]):
                lin(dw, wo[j, 0], ev[e], we, wo[j])
                dw[0] *= 0.5  # lane 0 is w = we wj, counted twice (exact)
                nil = True  # an entry of weight exactly 0 (and no tangent) adds nothing:
                for r in range(LANES):  # skip it (its powers may overflow: 0 x inf)
                    if dw[r] != 0.0:
                        nil = False
                if nil:
                    continue
                d = x[j] - cx
                d2 = d * d
                t[0] = 1.0
                t[1] = d
                t[2] = d2
                t[3] = d2 * d
                t[4] = d2 * d2
                if has_y:
                    g = y[j] - cy
                    t[5] = g
                    t[6] = g * g
                    t[7] = d * g
                for k in range(8 if has_y else 5):
                    axpy(acc[k], t[k], dw)




writes(accumulate, "out")
@njit
def centre_sums(eoff, x, y, wo, ev, block, out, b0, b1):
    """Blocks ``b0:b1``: ``out[b] = (W, sum w x, sum w y)`` of one observable's entries
    (values only: the centre has no gradient)."""
    n_ev = ev.shape[0]
    for b in range(b0, b1):
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            we = ev[e, 0]
            if we == 0.0:
                continue
            for j in range(eoff[e], eoff[e + 1]):
                w = we * wo[j, 0]
                out[b, 0] += w
                out[b, 1] += w * x[j]
                out[b, 2] += w * y[j]


writes(centre_sums, "out")
