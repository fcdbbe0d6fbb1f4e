"""The pipeline kernel in numba: states and their Jacobian from unpadded columns.

:func:`evaluate_columns` returns the same ``(value, jac)`` pytrees as
:func:`analysis.pipeline.kernel.evaluate_chunk` (``selected_sumw``, ``selected_sumw2`` and per
observable :class:`~analysis.stats.Moments` / :class:`~analysis.stats.CoMoments`;
Jacobian leaves with a trailing axis over the plan's trainable parameters) for the
single-collection plan form (``plan.sets is None``) and ``order <= 1``, directly from
a chunk's :class:`~analysis.pipeline.layout.ChunkColumns` (flat object values and counts: no
padding of events, objects or the count recursion). The JAX kernel stays the
reference (and computes Hessians, the object-set form, grids and histogram entries).

Derivatives are analytic, in float64, in one pass over the objects for the selection
and two per observable (the centre of the moments first, as the JAX kernel does):

- object pass ``p_j = prod_c s_c(v_j)``, ``s = sigmoid(z / width)`` with
  ``z = v - t`` (``>``) or ``t - v`` (``<``), ``ds/dt = -+ s (1 - s) / width``; width 0
  is the hard step (``z >= 0`` if inclusive, else ``z > 0``) with zero derivative;
- soft count ``A = sum_k c[k] P(K = k)`` (``c``: :func:`analysis.select.pbinom.tail_weights`,
  with ``dc/dn`` from JAX once per chunk), its derivative ``dA/dp_j`` by the forward
  prefix distributions and a backward adjoint recursion over the event's own objects
  (:func:`analysis.select.pbinom.count_expectation_gradient`'s maths), plus ``sum_k dc[k] q[k]``;
- event cuts on branches, soft sums and soft counts; the event selection is the
  product of all factors (product rule, no division);
- moments about a constant centre ``c = sum w x / W`` (no gradient), ``d = x - c``:
  ``S_k = sum w d^k`` and ``dS_k = sum (dw d^k + k w d^(k-1) dx)``, then the corrected
  two-pass formulas of :func:`analysis.stats._core.moments` and their derivatives.

The special cases follow :mod:`analysis.stats._core`: a centre that is not finite
gives NaN centred sums with zero derivatives; a centred sum of squares that comes out
negative by rounding only is 0 (zero derivative); ``W = 0`` gives a zero ``dmean``.
Empty chunks (and chunks whose events all fail) give the zeros the JAX kernel gives.

Events are processed in blocks of :data:`BLOCK` (a fixed size), and each block's
partial sums are added in block order, so the result does not depend on the number of
threads (``DIFFCOFFEA_KERNEL_THREADS``, default numba's thread count, i.e. the cores:
contiguous block ranges on a thread pool, the kernels release the GIL). Compiled once
per machine with ``cache=True`` (workers and later runs load the machine code from
``__pycache__``); serial ``njit`` on each thread, because ``parallel=True`` took a
minute to compile.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numba
import numpy as np

from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Expr, Plan
from analysis.select import pbinom
from analysis.stats._core import CoMoments, Moments

__all__ = ["BLOCK", "evaluate_columns", "supports"]

# Events per block: partial sums per block, added in block order (deterministic).
BLOCK = 4096

_FIELD, _BRANCH, _SUM, _COUNT = 0, 1, 2, 3
_KINDS = {"field": _FIELD, "branch": _BRANCH, "sum": _SUM, "count": _COUNT}
# Accumulators of one observable in the second pass (value and one per parameter):
# W, sum w d, sum w d^2, sum w d^3, sum w d^4, sum w e, sum w e^2, sum w d e
# with d = x - cx and e = y - cy.
_NACC = 8


def supports(plan: Plan, order: int) -> bool:
    """True when :func:`evaluate_columns` computes ``plan`` at ``order``."""
    return plan.sets is None and order <= 1


# --- numba kernels ---------------------------------------------------------------------


@numba.njit(cache=True)
def _soft(v, t, width, greater, inclusive):
    """``(s, ds/dt)`` of :func:`analysis.select.objects.soft_pass` (``ds/dv = -ds/dt``)."""
    z = v - t if greater else t - v
    if width > 0.0:
        # z / width as in the JAX kernel (a reciprocal multiply measured no faster)
        s = 1.0 / (1.0 + math.exp(-(z / width)))
        ds = s * (1.0 - s) / width
        return s, (-ds if greater else ds)
    if inclusive:
        return (1.0 if z >= 0.0 else 0.0), 0.0
    return (1.0 if z > 0.0 else 0.0), 0.0


@numba.njit(cache=True)
def _event_expr(kind, absolute, e, o0, o1, p, dp, f, dout):
    """Value of an event-level expression of event ``e`` (objects ``o0:o1``): the branch
    ``f[e]``, the soft sum ``sum_j p_j f_j`` or the soft count ``sum_j p_j``; its
    derivative with respect to each trainable parameter goes to ``dout``. (Arrays are
    passed one by one: a call with the field tuples costs more than the sum.)"""
    n_par = dout.shape[0]
    for k in range(n_par):
        dout[k] = 0.0
    if kind == _BRANCH:
        v = f[e]
    elif kind == _SUM:
        v = 0.0
        for j in range(o0, o1):
            v += p[j] * f[j]
            for k in range(n_par):
                dout[k] += dp[j, k] * f[j]
    else:  # count
        v = 0.0
        for j in range(o0, o1):
            v += p[j]
            for k in range(n_par):
                dout[k] += dp[j, k]
    if absolute and v < 0.0:
        v = -v
        for k in range(n_par):
            dout[k] = -dout[k]
    return v


@numba.njit(cache=True, nogil=True)
def _selection(
    weight, offsets, ofields, efields,
    cut_src, cut_abs, cut_greater, cut_incl, cut_t, cut_w, cut_par,
    cw, dcw, count_par, count_less,
    ev_kind, ev_src, ev_abs, ev_greater, ev_incl, ev_t, ev_w, ev_par,
    n_par, max_count, block, p, dp, ew, dew, sums, b0, b1,
):
    """Soft selection of the events of blocks ``b0:b1``: fills per object ``p``, ``dp``
    (``(objects, P)``), per event ``ew`` (weight x selection), ``dew``; per block ``sum
    ew``, ``sum ew^2`` and their derivatives (``sums``: ``(blocks, 2, 1 + P)``, zeros)."""
    n_ev = weight.shape[0]
    n_cuts = cut_src.shape[0]
    n_cc = cw.shape[0]
    cap = cw.shape[1] - 1
    n_ec = ev_kind.shape[0]
    n_fac = n_cc + n_ec
    for b in range(b0, b1):
        s = np.empty((max_count + 1, n_cuts))
        ds = np.empty((max_count + 1, n_cuts))
        fwd = np.empty((max_count + 1, cap + 1))
        adj = np.empty((n_cc, cap + 1))
        q = np.empty(cap + 1)
        fac = np.empty(n_fac)
        dfac = np.zeros((n_fac, n_par))
        dv = np.empty(n_par)
        acc = sums[b]
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            o0, o1 = offsets[e], offsets[e + 1]
            # object cuts: p = prod s_c, dp/dt_c = ds_c prod_{c' != c} s_c' (cut by cut,
            # so that each cut's column is taken out of the tuple once per event)
            n_loc = o1 - o0
            for c in range(n_cuts):
                f = ofields[cut_src[c]]
                for i in range(n_loc):
                    v = f[o0 + i]
                    if cut_abs[c]:
                        v = abs(v)
                    s[i, c], ds[i, c] = _soft(v, cut_t[c], cut_w[c], cut_greater[c], cut_incl[c])
            for i in range(n_loc):
                j = o0 + i
                pj = 1.0
                for c in range(n_cuts):
                    pj *= s[i, c]
                p[j] = pj
                for r in range(n_par):
                    dp[j, r] = 0.0
                for c in range(n_cuts):
                    if cut_par[c] >= 0 and ds[i, c] != 0.0:
                        g = ds[i, c]
                        for c2 in range(n_cuts):
                            if c2 != c:
                                g *= s[i, c2]
                        dp[j, cut_par[c]] += g
            # count cuts: forward prefix distributions, then the adjoint per cut
            if n_cc > 0:
                for k in range(cap + 1):
                    fwd[0, k] = 0.0
                fwd[0, 0] = 1.0
                for i in range(o1 - o0):
                    pj = p[o0 + i]
                    fwd[i + 1, 0] = fwd[i, 0] * (1.0 - pj)
                    for k in range(1, cap):
                        fwd[i + 1, k] = fwd[i, k] * (1.0 - pj) + fwd[i, k - 1] * pj
                    fwd[i + 1, cap] = fwd[i, cap] + fwd[i, cap - 1] * pj
                for k in range(cap + 1):
                    q[k] = fwd[n_loc, k]
                for m in range(n_cc):
                    a_val = 0.0
                    for k in range(cap + 1):
                        a_val += cw[m, k] * q[k]
                        adj[m, k] = cw[m, k]
                    for r in range(n_par):
                        dfac[m, r] = 0.0
                    if count_par[m] >= 0:  # the weights' own derivative, sum_k dc[k] q[k]
                        g = 0.0
                        for k in range(cap + 1):
                            g += dcw[m, k] * q[k]
                        dfac[m, count_par[m]] = g
                    for i in range(n_loc - 1 if n_par > 0 else -1, -1, -1):
                        j = o0 + i
                        pj = p[j]
                        h = 0.0
                        for k in range(cap):
                            h += fwd[i, k] * (adj[m, k + 1] - adj[m, k])
                        for k in range(cap):
                            adj[m, k] = adj[m, k] * (1.0 - pj) + adj[m, k + 1] * pj
                        if h != 0.0:
                            for r in range(n_par):
                                dfac[m, r] += h * dp[j, r]
                    if count_less[m]:
                        fac[m] = 1.0 - a_val
                        for r in range(n_par):
                            dfac[m, r] = -dfac[m, r]
                    else:
                        fac[m] = a_val
            # event cuts
            for c in range(n_ec):
                f = efields[ev_src[c]] if ev_kind[c] == _BRANCH else ofields[ev_src[c]]
                v = _event_expr(ev_kind[c], ev_abs[c], e, o0, o1, p, dp, f, dv)
                sv, dsv = _soft(v, ev_t[c], ev_w[c], ev_greater[c], ev_incl[c])
                fac[n_cc + c] = sv
                for r in range(n_par):
                    dfac[n_cc + c, r] = -dsv * dv[r]
                if ev_par[c] >= 0:
                    dfac[n_cc + c, ev_par[c]] += dsv
            sel = 1.0
            for i in range(n_fac):
                sel *= fac[i]
            w = weight[e]
            ew[e] = w * sel
            for r in range(n_par):
                dew[e, r] = 0.0
            for i in range(n_fac):
                rest = w
                for i2 in range(n_fac):
                    if i2 != i:
                        rest *= fac[i2]
                for r in range(n_par):
                    dew[e, r] += rest * dfac[i, r]
            acc[0, 0] += ew[e]
            acc[1, 0] += ew[e] * ew[e]
            for r in range(n_par):
                acc[0, 1 + r] += dew[e, r]
                acc[1, 1 + r] += 2.0 * ew[e] * dew[e, r]


@numba.njit(cache=True, nogil=True)
def _zero_row(a, i, n):
    """Whether ``a[i, :n]`` is all zeros (an entry without weight nor derivative)."""
    for r in range(n):
        if a[i, r] != 0.0:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _observables(
    offsets, ofields, efields, p, dp, ew, dew,
    obj_level, x_kind, x_src, x_abs, has_y, y_kind, y_src, y_abs, high,
    cx, cy, second, n_par, block, out, b0, b1,
):
    """Per block and observable: first pass (``second`` False) ``W, sum w x, sum w y``
    in ``[..., 0:3, 0]``; second pass the :data:`_NACC` sums about the centres
    ``cx``, ``cy`` with their derivatives (``(blocks, observables, _NACC, 1 + P)``);
    ``high``: whether ``d^3``, ``d^4`` are needed (statistics of one variable). Fills
    blocks ``b0:b1`` of ``out`` (zeros).

    An entry's weight is ``ew[e] * p_j`` (per object) or ``ew[e]`` (per event), so each
    event's sums are ``ew[e] T`` with ``T = sum_j p_j t_j`` (``t_j``: the powers of the
    deviations) and their derivatives ``dew[e] T + ew[e] U``, ``U = sum_j dp_j t_j``
    (per object) or ``U = dt`` (per event: the derivatives of sums and counts)."""
    n_ev = ew.shape[0]
    n_obs = obj_level.shape[0]
    for b in range(b0, b1):
        dx = np.zeros(n_par)
        dy = np.zeros(n_par)
        t = np.empty(_NACC)
        u = np.empty((_NACC, n_par))
        for o in range(n_obs):
            acc = out[b, o]
            for r in range(n_par):  # object fields have no derivative (never written)
                dx[r] = 0.0
                dy[r] = 0.0
            fx = efields[x_src[o]] if x_kind[o] == _BRANCH else ofields[x_src[o]]
            fy = efields[y_src[o]] if y_kind[o] == _BRANCH else ofields[y_src[o]]
            for e in range(b * block, min(n_ev, (b + 1) * block)):
                o0, o1 = offsets[e], offsets[e + 1]
                wev = ew[e]
                if not second:
                    if obj_level[o]:
                        for j in range(o0, o1):
                            x = abs(fx[j]) if x_abs[o] else fx[j]
                            y = 0.0
                            if has_y[o]:
                                y = abs(fy[j]) if y_abs[o] else fy[j]
                            w = wev * p[j]
                            acc[0, 0] += w
                            acc[1, 0] += w * x
                            acc[2, 0] += w * y
                    else:
                        x = _event_expr(x_kind[o], x_abs[o], e, o0, o1, p, dp, fx, dx)
                        y = 0.0
                        if has_y[o]:
                            y = _event_expr(y_kind[o], y_abs[o], e, o0, o1, p, dp, fy, dy)
                        acc[0, 0] += wev
                        acc[1, 0] += wev * x
                        acc[2, 0] += wev * y
                    continue
                if wev == 0.0 and _zero_row(dew, e, n_par):
                    continue  # a weight of exactly 0 never changes a result (no 0 x inf)
                for k in range(_NACC):
                    t[k] = 0.0
                    for r in range(n_par):
                        u[k, r] = 0.0
                if obj_level[o]:
                    for j in range(o0, o1):
                        if p[j] == 0.0 and _zero_row(dp, j, n_par):
                            continue  # (as for events: its powers may overflow)
                        x = fx[j]
                        if x_abs[o]:
                            x = abs(x)
                        d = x - cx[o]
                        pj = p[j]
                        d2 = d * d
                        t[0] += pj
                        t[1] += pj * d
                        t[2] += pj * d2
                        if high[o]:
                            t[3] += pj * d2 * d
                            t[4] += pj * d2 * d2
                        if has_y[o]:
                            y = fy[j]
                            if y_abs[o]:
                                y = abs(y)
                            ey = y - cy[o]
                            t[5] += pj * ey
                            t[6] += pj * ey * ey
                            t[7] += pj * d * ey
                        for r in range(n_par):
                            g = dp[j, r]
                            if g != 0.0:
                                u[0, r] += g
                                u[1, r] += g * d
                                u[2, r] += g * d2
                                if high[o]:
                                    u[3, r] += g * d2 * d
                                    u[4, r] += g * d2 * d2
                                if has_y[o]:
                                    u[5, r] += g * ey
                                    u[6, r] += g * ey * ey
                                    u[7, r] += g * d * ey
                else:
                    x = _event_expr(x_kind[o], x_abs[o], e, o0, o1, p, dp, fx, dx)
                    d = x - cx[o]
                    d2 = d * d
                    t[0] = 1.0
                    t[1] = d
                    t[2] = d2
                    t[3] = d2 * d
                    t[4] = d2 * d2
                    ey = 0.0
                    if has_y[o]:
                        y = _event_expr(y_kind[o], y_abs[o], e, o0, o1, p, dp, fy, dy)
                        ey = y - cy[o]
                        t[5] = ey
                        t[6] = ey * ey
                        t[7] = d * ey
                    for r in range(n_par):
                        gx, gy = dx[r], dy[r]
                        u[1, r] = gx
                        u[2, r] = 2.0 * d * gx
                        u[3, r] = 3.0 * d2 * gx
                        u[4, r] = 4.0 * d2 * d * gx
                        u[5, r] = gy
                        u[6, r] = 2.0 * ey * gy
                        u[7, r] = gx * ey + d * gy
                for k in range(_NACC):
                    acc[k, 0] += wev * t[k]
                    for r in range(n_par):
                        acc[k, 1 + r] += dew[e, r] * t[k] + wev * u[k, r]


# --- host side -------------------------------------------------------------------------


def _threads(threads: int | None = None) -> int:
    """Threads the kernels run on: ``threads`` if given, else ``DIFFCOFFEA_KERNEL_THREADS``,
    else numba's thread count (the machine's cores, or ``NUMBA_NUM_THREADS``: 1 in the
    workers of the evaluator's dask cluster). Blocks are split into contiguous ranges,
    one per thread, and their partial sums are added in block order: results do not
    depend on the number of threads. The driver asks for one thread per chunk where
    coffea's futures or dask workers already share the cores."""
    if threads is not None:
        return max(1, int(threads))
    env = os.environ.get("DIFFCOFFEA_KERNEL_THREADS")
    return max(1, int(env)) if env else max(1, int(numba.config.NUMBA_NUM_THREADS))


_POOL: dict[int, ThreadPoolExecutor] = {}  # by process id: a forked worker makes its own
_LOCAL = threading.local()


def _run_blocks(kernel, args: tuple, n_blocks: int, threads: int | None = None) -> None:
    """``kernel(*args, b0, b1)`` over all blocks, in contiguous ranges on the pool."""
    threads = min(_threads(threads), n_blocks)
    if threads <= 1:
        kernel(*args, 0, n_blocks)
        return
    pid = os.getpid()
    if pid not in _POOL:
        _POOL.clear()
        _POOL[pid] = ThreadPoolExecutor(thread_name_prefix="fastkernel")
    edges = np.linspace(0, n_blocks, threads + 1).astype(int)
    futures = [
        _POOL[pid].submit(kernel, *args, int(a), int(b))
        for a, b in zip(edges[:-1], edges[1:], strict=True)
    ]
    for f in futures:
        f.result()


def _work(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A per-thread scratch array, reused across chunks (a fresh one per chunk cost page
    faults and zeroing of tens of MB); every entry is written before it is read."""
    size = int(np.prod(shape))
    buf = getattr(_LOCAL, name, None)
    if buf is None or buf.size < size:
        buf = np.empty(size)
        setattr(_LOCAL, name, buf)
    return buf[:size].reshape(shape)


@partial(jax.jit, static_argnames=("cap",))
def _tail_weights(n, width, cap: int):
    """``c`` (``(m, cap + 1)``) of each count cut and ``dc/dn`` (same shape)."""

    def one(n1, w1):
        f = partial(pbinom.tail_weights, width=w1, cap=cap)
        return f(n1), jax.jacfwd(f)(n1)

    return jax.vmap(one)(n, width)


def _par_index(trainable: tuple[int, ...], param: int | None) -> int:
    return trainable.index(param) if param is not None and param in trainable else -1


def _threshold(theta: np.ndarray, param: int | None, value: float | None) -> float:
    return float(theta[param]) if param is not None else float(value)


def _safe_div(num, den):
    return num / den if den != 0 else 0.0


def _moments_state(tot: np.ndarray, center: float, finite: bool):
    """``(Moments, jac Moments)`` from the summed accumulators ``tot`` (``(_NACC, 1 + P)``)
    about ``center`` (as :func:`analysis.stats._core.moments`)."""
    w, dw = tot[0, 0], tot[0, 1:]
    s1, s2, s3, s4 = tot[1, 0], tot[2, 0], tot[3, 0], tot[4, 0]
    ds1, ds2, ds3, ds4 = tot[1, 1:], tot[2, 1:], tot[3, 1:], tot[4, 1:]
    r = _safe_div(s1, w)
    dr = (ds1 - r * dw) / w if w != 0 else np.zeros_like(dw)
    r2 = r * r
    m2 = s2 - w * r2
    dm2 = ds2 - dw * r2 - 2.0 * w * r * dr
    if m2 < 0 and -m2 <= 1e-8 * abs(w * r2):
        m2, dm2 = 0.0, np.zeros_like(dw)
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
    value = Moments(*(np.array(v, dtype=np.float64) for v in (w, center, r, m2, m3, m4)))
    jac = Moments(dw.copy(), zero, dr, dm2, dm3, dm4)
    return value, jac


def _comoments_state(tot: np.ndarray, cx: float, cy: float, fx: bool, fy: bool):
    """``(CoMoments, jac CoMoments)`` from the summed accumulators (as
    :func:`analysis.stats._core.comoments`)."""
    w, dw = tot[0, 0], tot[0, 1:]
    zero = np.zeros_like(dw)
    rx = _safe_div(tot[1, 0], w)
    ry = _safe_div(tot[5, 0], w)
    drx = (tot[1, 1:] - rx * dw) / w if w != 0 else zero
    dry = (tot[5, 1:] - ry * dw) / w if w != 0 else zero

    def square(s, ds, r, dr):
        m = s - w * (r * r)
        dm = ds - dw * (r * r) - 2.0 * w * r * dr
        if m < 0 and -m <= 1e-8 * abs(w * (r * r)):
            return 0.0, zero
        return m, dm

    cxx, dcxx = square(tot[2, 0], tot[2, 1:], rx, drx)
    cyy, dcyy = square(tot[6, 0], tot[6, 1:], ry, dry)
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


def _encode(expr: Expr, ofield: dict[str, int], efield: dict[str, int]) -> tuple[int, int, bool]:
    kind = _KINDS[expr.kind]
    if kind in (_FIELD, _SUM):
        src = ofield[expr.key]
    elif kind == _BRANCH:
        src = efield[expr.key]
    else:
        src = 0
    return kind, src, bool(expr.absolute)


# Columns reach numba as a tuple of arrays (no copy); its length is part of the compiled
# signature, so it is padded to a multiple of this with a dummy array: one compilation
# serves every plan with up to 7 fields (a cold compilation takes several seconds).
_TUPLE_STEP = 8


def _field_tuple(arrays: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    # Index 0 is the dummy (numba cannot index an empty tuple); fields start at 1.
    dummy = np.zeros(1)
    fields = [dummy] + [np.ascontiguousarray(a, dtype=np.float64) for a in arrays]
    return tuple(fields + [dummy] * (-len(fields) % _TUPLE_STEP))


def evaluate_columns(
    cols: ChunkColumns,
    plan: Plan,
    theta: Any,
    widths: Any,
    *,
    order: int = 1,
    threads: int | None = None,
) -> tuple[dict, dict | None]:
    """``(value, jac)`` of one chunk, as :func:`analysis.pipeline.kernel.evaluate_chunk` returns
    them (numpy float64; ``jac`` None for ``order=0``); ``plan`` must satisfy
    :func:`supports`. ``threads``: see :func:`_threads` (the result does not depend on it)."""
    if not supports(plan, order):
        raise ValueError("fastkernel: needs plan.sets None and order <= 1")
    theta = np.asarray(theta, dtype=np.float64).reshape(-1)
    widths = np.asarray(widths, dtype=np.float64).reshape(plan.n_widths)
    # order 0: no derivatives at all (no parameter is differentiated in the kernels)
    trainable = plan.trainable if order >= 1 else ()
    n_par = len(trainable)
    n_ev = int(cols.n_events)
    weight = np.ascontiguousarray(cols.weight, dtype=np.float64)
    counts = (
        np.asarray(cols.counts, dtype=np.int64) if cols.counts is not None
        else np.zeros(n_ev, np.int64)
    )
    offsets = np.zeros(n_ev + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    max_count = int(counts.max(initial=0))
    onames = list(cols.objects)
    enames = list(cols.events)
    ofield = {k: i + 1 for i, k in enumerate(onames)}
    efield = {k: i + 1 for i, k in enumerate(enames)}
    ofields = _field_tuple([cols.objects[k] for k in onames])
    efields = _field_tuple([cols.events[k] for k in enames])

    cuts = plan.object_cuts
    cut_src = np.array([ofield[c.field] for c in cuts], np.int64)
    cut_abs = np.array([c.absolute for c in cuts], np.bool_)
    cut_greater = np.array([c.greater for c in cuts], np.bool_)
    cut_incl = np.array([c.inclusive for c in cuts], np.bool_)
    cut_t = np.array([_threshold(theta, c.param, c.value) for c in cuts], np.float64)
    cut_w = np.array([widths[c.width_index] for c in cuts], np.float64)
    cut_par = np.array([_par_index(trainable, c.param) for c in cuts], np.int64)

    cap = plan.count_cap
    ccuts = plan.count_cuts
    cw = np.zeros((len(ccuts), cap + 1))
    dcw = np.zeros((len(ccuts), cap + 1))  # dc/dn, for the cut's own parameter
    count_par = np.array([_par_index(trainable, c.param) for c in ccuts], np.int64)
    if ccuts:
        n = np.array([
            _threshold(theta, c.param, c.value) + (1.0 if c.op in (">", "<=") else 0.0)
            for c in ccuts
        ])
        cw_j, slope = _tail_weights(
            jnp.asarray(n), jnp.asarray(np.array([widths[c.width_index] for c in ccuts])), cap
        )
        cw = np.array(cw_j, dtype=np.float64)
        dcw = np.where((count_par >= 0)[:, None], np.asarray(slope, dtype=np.float64), 0.0)
    count_less = np.array([c.op in ("<", "<=") for c in ccuts], np.bool_)
    # Above the last step of every weight row (and of its derivative) the rows are
    # constant: the states from there on merge into one absorbing top bin, P(K >= top),
    # and the recursion runs over top + 1 states instead of cap + 1 (4 instead of 9 for
    # the demo's ">= 2"). Same sum, exactly: sum_{k >= top} c[k] q[k] = c[top] P(K >= top).
    if ccuts:
        steps = np.flatnonzero(
            (np.diff(cw, axis=1) != 0).any(axis=0) | (np.diff(dcw, axis=1) != 0).any(axis=0)
        )
        top = int(steps[-1]) + 1 if steps.size else 1
        cw, dcw = cw[:, : top + 1].copy(), dcw[:, : top + 1].copy()

    ecuts = plan.event_cuts
    enc = [_encode(c.expr, ofield, efield) for c in ecuts]
    ev_kind = np.array([k for k, _, _ in enc], np.int64)
    ev_src = np.array([s for _, s, _ in enc], np.int64)
    ev_abs = np.array([a for _, _, a in enc], np.bool_)
    ev_greater = np.array([c.greater for c in ecuts], np.bool_)
    ev_incl = np.array([c.inclusive for c in ecuts], np.bool_)
    ev_t = np.array([_threshold(theta, c.param, c.value) for c in ecuts], np.float64)
    ev_w = np.array([widths[c.width_index] for c in ecuts], np.float64)
    ev_par = np.array([_par_index(trainable, c.param) for c in ecuts], np.int64)

    n_obj = int(offsets[-1])
    n_blocks = -(-n_ev // BLOCK)
    p, dp = _work("p", (n_obj,)), _work("dp", (n_obj, n_par))
    ew, dew = _work("ew", (n_ev,)), _work("dew", (n_ev, n_par))
    sums = np.zeros((n_blocks, 2, 1 + n_par))
    _run_blocks(_selection, (
        weight, offsets, ofields, efields,
        cut_src, cut_abs, cut_greater, cut_incl, cut_t, cut_w, cut_par,
        cw, dcw, count_par, count_less,
        ev_kind, ev_src, ev_abs, ev_greater, ev_incl, ev_t, ev_w, ev_par,
        n_par, max_count, BLOCK, p, dp, ew, dew, sums,
    ), n_blocks, threads)
    tot = sums.sum(axis=0)
    value: dict[str, Any] = {
        "selected_sumw": np.array(tot[0, 0], dtype=np.float64),
        "selected_sumw2": np.array(tot[1, 0], dtype=np.float64),
        "observables": {},
    }
    jac: dict[str, Any] = {
        "selected_sumw": tot[0, 1:].copy(),
        "selected_sumw2": tot[1, 1:].copy(),
        "observables": {},
    }
    obs = plan.observables
    if obs:
        xs = [_encode(o.x, ofield, efield) for o in obs]
        ys = [_encode(o.y, ofield, efield) if o.y is not None else (0, 0, False) for o in obs]
        args = (
            np.array([o.x.level == "object" for o in obs], np.bool_),
            np.array([k for k, _, _ in xs], np.int64),
            np.array([s for _, s, _ in xs], np.int64),
            np.array([a for _, _, a in xs], np.bool_),
            np.array([o.y is not None for o in obs], np.bool_),
            np.array([k for k, _, _ in ys], np.int64),
            np.array([s for _, s, _ in ys], np.int64),
            np.array([a for _, _, a in ys], np.bool_),
            np.array([bool(o.univariate) for o in obs], np.bool_),
        )
        zeros = np.zeros(len(obs))
        out = np.zeros((n_blocks, len(obs), _NACC, 1 + n_par))
        _run_blocks(_observables, (offsets, ofields, efields, p, dp, ew, dew, *args,
                                   zeros, zeros, False, n_par, BLOCK, out), n_blocks, threads)
        first = out.sum(axis=0)
        w_tot = first[:, 0, 0]
        cx = np.array([_safe_div(first[i, 1, 0], w_tot[i]) for i in range(len(obs))])
        cy = np.array([_safe_div(first[i, 2, 0], w_tot[i]) for i in range(len(obs))])
        fx, fy = np.isfinite(cx), np.isfinite(cy)
        out = np.zeros((n_blocks, len(obs), _NACC, 1 + n_par))
        _run_blocks(_observables, (offsets, ofields, efields, p, dp, ew, dew, *args,
                                   np.where(fx, cx, 0.0), np.where(fy, cy, 0.0), True, n_par,
                                   BLOCK, out), n_blocks, threads)
        second = out.sum(axis=0)
        for i, o in enumerate(obs):
            tot_o = second[i]
            if not fx[i]:  # deviations from an infinite mean are set to 0
                tot_o[1:5] = 0.0
                tot_o[7] = 0.0
            if not fy[i]:
                tot_o[5:8] = 0.0
            ventry: dict[str, Any] = {}
            jentry: dict[str, Any] = {}
            if o.univariate:
                ventry["moments"], jentry["moments"] = _moments_state(tot_o, cx[i], fx[i])
            if o.bivariate:
                ventry["comoments"], jentry["comoments"] = _comoments_state(
                    tot_o, cx[i], cy[i], fx[i], fy[i]
                )
            value["observables"][o.name] = ventry
            jac["observables"][o.name] = jentry
    return value, (jac if order >= 1 else None)
