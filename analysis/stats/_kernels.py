"""The kernels behind :mod:`analysis.stats.api`: numpy for concrete data, else jit-compiled
JAX on inputs padded to bucket sizes.

The kernels take prepared float64 inputs (:class:`analysis.stats._inputs._Prepared`)
and return the statistic per segment (or a scalar); the maths is that of
:mod:`analysis.stats._core` in both (its ``xp`` namespace). Concrete numpy inputs have
nothing to differentiate: numpy computes only the statistic asked for, with no JAX
dispatch, device copies or padding. Anything JAX (tracers, JAX arrays, Jagged values)
goes to the JAX kernels.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis._compat.jax import staged
from analysis.stats import _core, _statefns
from analysis.stats._inputs import _Prepared, _traced

Array = jax.Array


# --- padding to size buckets, and the jitted kernels ------------------------------
# Eager calls with data of a new length would otherwise compile every primitive
# anew (~0.4 s per call). Padding to a few bucket sizes (elements of weight 0, which
# add exact zeros to every sum, in an extra dummy list) lets one compiled kernel
# serve all lengths in a bucket (also for eager jax.grad/jacfwd/vmap, whose tracers
# reach the kernel). Under an outer jit the kernel is inlined into the caller's
# compiled computation, so padding there would only add work (a stored copy of the
# weights and of every tangent, the largest cost in the jit(jacfwd) profile): inputs
# traced for compilation are not padded.


def _bucket(n: int) -> int:
    """Smallest bucket >= n: powers of two up to 1024, then 8 steps per octave."""
    if n <= 1024:
        return max(16, 1 << max(n - 1, 0).bit_length())
    step = 1 << (n.bit_length() - 4)
    return -(-n // step) * step


def _pad(a: Any, size: int, fill: float) -> Any:
    extra = size - a.shape[0]
    if extra == 0:
        return a
    if _traced(a):
        return jnp.concatenate([a, jnp.full(extra, fill, dtype=a.dtype)])
    a = np.asarray(a)
    return np.concatenate([a, np.full(extra, fill, dtype=a.dtype)])


class _Padded(NamedTuple):
    x: Any
    y: Any
    w: Any
    segment_ids: Any
    num_segments: int | None
    num_lists: int | None


def _padded(p: _Prepared) -> _Padded:
    if _traced(p.x, p.y, p.w, p.segment_ids) and staged():
        return _Padded(p.x, p.y, p.w, p.segment_ids, p.num_segments, None)
    size = _bucket(p.x.shape[0])
    # x, y padded with 1 (not 0): x**n stays finite for negative orders n.
    x = _pad(p.x, size, 1.0)
    y = None if p.y is None else _pad(p.y, size, 1.0)
    w = _pad(p.w, size, 0.0)
    if p.segment_ids is None:
        return _Padded(x, y, w, None, None, None)
    num_lists = p.num_segments
    assert num_lists is not None  # set together with segment_ids
    seg = _pad(p.segment_ids, size, num_lists)  # padding goes to a dummy last list
    return _Padded(x, y, w, seg, _bucket(num_lists + 1), num_lists)


def _unpad(out: Any, q: _Padded) -> Any:
    if q.num_lists is None:
        return out
    return jax.tree_util.tree_map(lambda a: a[: q.num_lists], out)


# One compiled kernel per bucket computes every statistic of its family (the state
# is shared; XLA drops unused outputs under an outer jit), rather than one kernel per
# statistic: fewer compilations for eager use with new data sizes.


@partial(jax.jit, static_argnames=("num_segments",))
def _univariate(
    x: Array, w: Array, segment_ids: Array | None, ddof: Array, *, num_segments: int | None
) -> dict[str, Array]:
    s = _core.moments(x, w, segment_ids, num_segments)
    return {
        "mean": _statefns.state_mean(s),
        "var": _statefns.state_var(s, ddof),
        "std": _statefns.state_std(s, ddof),
        "skew": _statefns.state_skew(s),
        "kurtosis": _statefns.state_kurtosis(s),
    }


@partial(jax.jit, static_argnames=("num_segments", "order", "central"))
def _moment(
    x: Array,
    w: Array,
    segment_ids: Array | None,
    *,
    num_segments: int | None,
    order: int,
    central: bool,
) -> Array:
    if not central:
        return _core.raw_moment(x, w, order, segment_ids, num_segments)
    sumw, total = _core.central_moment_sum(x, w, order, segment_ids, num_segments)
    return _core.safe_div(total, sumw)


@partial(jax.jit, static_argnames=("num_segments",))
def _bivariate(
    x: Array, y: Array, w: Array, segment_ids: Array | None, *, num_segments: int | None
) -> dict[str, Any]:
    s = _core.comoments(x, y, w, segment_ids, num_segments)
    return {name: func(s) for name, func in _statefns.BIVARIATE.items()}


# --- kernels on prepared flat inputs -----------------------------------------------


# moments needed per statistic (numpy computes only those)
_ORDER = {"mean": 1, "var": 2, "std": 2, "skew": 4, "kurtosis": 4}


def _eager(p: _Prepared) -> bool:
    """All inputs are concrete numpy arrays: the numpy namespace (no JAX dispatch, no
    copies to the device; nothing to differentiate)."""
    return not any(isinstance(a, jax.Array) for a in (p.x, p.y, p.w, p.segment_ids))


def _numpy_kernel(stat: str, p: _Prepared, ddof: float, order: Any) -> Any:
    """The statistic with the numpy namespace of :mod:`analysis.stats._core` (same maths)."""
    seg, num, xp = p.segment_ids, p.num_segments, np
    with np.errstate(all="ignore"):  # 0/0, x**-n at 0: NaN/inf by the rules, no warnings
        if stat in _statefns.UNIVARIATE:
            s = _core.moments(p.x, p.w, seg, num, order=_ORDER[stat], xp=xp)
            if stat in ("var", "std"):
                return _statefns.UNIVARIATE[stat](s, ddof, xp=xp)
            return _statefns.UNIVARIATE[stat](s, xp=xp)
        if stat == "moment":
            return _core.raw_moment(p.x, p.w, order, seg, num, xp=xp)
        if stat == "central_moment":
            sumw, total = _core.central_moment_sum(p.x, p.w, order, seg, num, xp=xp)
            return _core.safe_div(total, sumw, xp=xp)
        return _statefns.BIVARIATE[stat](_core.comoments(p.x, p.y, p.w, seg, num, xp=xp), xp=xp)


def _kernel(stat: str, p: _Prepared, ddof: float, order: Any) -> Any:
    """The statistic per segment (or a scalar) from prepared float64 inputs."""
    if _eager(p):
        return _numpy_kernel(stat, p, ddof, order)
    q = _padded(p)
    if stat in _statefns.UNIVARIATE:
        out = _univariate(q.x, q.w, q.segment_ids, np.float64(ddof), num_segments=q.num_segments)
        return _unpad(out[stat], q)
    if stat in ("moment", "central_moment"):
        out = _moment(
            q.x,
            q.w,
            q.segment_ids,
            num_segments=q.num_segments,
            order=order,
            central=stat == "central_moment",
        )
        return _unpad(out, q)
    out = _bivariate(q.x, q.y, q.w, q.segment_ids, num_segments=q.num_segments)
    return _unpad(out[stat], q)


def _with_keepdims(out: Any, p: _Prepared, keepdims: bool) -> Any:
    if not keepdims:
        return out
    shape = (1, 1) if p.segment_ids is None and p.jagged else None

    def expand(a: Any) -> Any:
        if shape is not None:
            return a.reshape(shape)
        if p.across:  # as awkward's 1 * var: one row of positions
            return a[None, ...]
        return a[..., None] if p.segment_ids is not None else a.reshape(1)

    return jax.tree_util.tree_map(expand, out)
