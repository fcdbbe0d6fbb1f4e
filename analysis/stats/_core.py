"""The kernels behind :mod:`analysis.stats`: moment states and what follows from them.

Pure array maths, written once for JAX (traced, differentiable; the default) and
numpy (eager calls on concrete data): every function takes the namespace ``xp``.
Everything here works on flat arrays. Jagged structure enters only as integer
``segment_ids`` (which list each element belongs to) and a static ``num_segments``;
both are constants, never differentiated, so ``mean = sum / count`` holds with the
count treated as data, not as a function of the values.

States are *centred sums* (not normalised): for weights ``w`` and values ``x``

    W  = sum w
    mu = sum w x / W
    Mk = sum w (x - mu)**k          (k = 2, 3, 4)

computed in two passes (mean first, then centred powers), so that central moments
never come from raw power sums (which lose all precision for x = 1e6 + N(0, 1)).
Over all elements each pass is one fused loop computing every power at once
(:mod:`analysis.stats._powsum`), also for the tangents under ``jax.jacfwd``.
The same states merge exactly across chunks (:mod:`analysis.stats.merge`).

Division is "safe": where a denominator is zero the value is NaN (or 0 for the
internal mean), and the gradient is zero rather than NaN (double ``where``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats._powsum import power_sums

Array = jax.Array


class Moments(NamedTuple):
    """Centred weighted sums of one variable (scalars, or one entry per list).

    The mean is split as ``center + dmean``: ``center`` is a float64 constant (no
    gradient) close to the mean and ``dmean`` a small differentiable correction, so
    that merging chunks of values like ``1e6 + N(0, 1)`` does not lose the digits
    that a single rounded float64 mean would (a half-ulp error in the mean shifts
    ``M3`` by ``3 * err * M2``: 1e-8 relative on that example).

    With weights ``w`` and the mean ``mu = center + dmean``: ``sumw = W = sum w``,
    ``m2 = M2 = sum w (x - mu)**2``, ``m3 = sum w (x - mu)**3``, ``m4 = sum w (x - mu)**4``
    (corrected two-pass; made by :func:`~analysis.stats.moments`, merged by
    :func:`~analysis.stats.merge`). ``W = 0`` is the empty state, a neutral element of the
    merge (its mean is NaN in the statistics).

    Parameters
    ----------
    sumw : jax.Array
        Total weight ``W`` (float64; scalar or one entry per list, as every field).
    center : jax.Array
        A constant close to the mean (no gradient).
    dmean : jax.Array
        The mean minus ``center`` (differentiable).
    m2, m3, m4 : jax.Array
        Centred sums ``sum w (x - mu)**k`` for ``k = 2, 3, 4``.
    """

    sumw: Array
    center: Array
    dmean: Array
    m2: Array
    m3: Array
    m4: Array

    @property
    def mean(self) -> Array:
        """The weighted mean ``center + dmean``."""
        return self.center + self.dmean


class CoMoments(NamedTuple):
    """Centred weighted co-moment sums of two variables (means split as in :class:`Moments`).

    With weights ``w`` and means ``mu_x = center_x + dmean_x``, ``mu_y = center_y +
    dmean_y``: ``sumw = W = sum w``, ``cxx = sum w (x - mu_x)**2``, ``cyy = sum w (y -
    mu_y)**2``, ``cxy = sum w (x - mu_x)(y - mu_y)`` (corrected two-pass; made by
    :func:`~analysis.stats.comoments`, merged by :func:`~analysis.stats.merge`). ``W = 0``
    is the empty state, a neutral element of the merge.

    Parameters
    ----------
    sumw : jax.Array
        Total weight ``W`` (float64; scalar or one entry per list, as every field).
    center_x, center_y : jax.Array
        Constants close to the means of x and y (no gradient).
    dmean_x, dmean_y : jax.Array
        The means minus their centres (differentiable).
    cxx, cyy, cxy : jax.Array
        Centred sums of squares and cross products.
    """

    sumw: Array
    center_x: Array
    dmean_x: Array
    center_y: Array
    dmean_y: Array
    cxx: Array
    cyy: Array
    cxy: Array

    @property
    def mean_x(self) -> Array:
        """The weighted mean of x, ``center_x + dmean_x``."""
        return self.center_x + self.dmean_x

    @property
    def mean_y(self) -> Array:
        """The weighted mean of y, ``center_y + dmean_y``."""
        return self.center_y + self.dmean_y


# --- array namespace --------------------------------------------------------------
# Every function below takes ``xp``: ``jnp`` (the default: traced, differentiable,
# jit-compiled) or ``np`` for eager calls on concrete numpy data, where one maths
# serves both and numpy saves JAX's dispatch and host-device copies (no gradient
# exists there to lose). With ``np`` the segments are numpy ``segment_ids`` (any
# order, ``np.bincount``) or :class:`Offsets` (contiguous lists, ``np.add.reduceat``),
# and ``w=None`` means unit weights (no multiplications by ones).
Namespace = Any
Data = Any  # a jax.Array (xp=jnp) or a numpy array (xp=np)


class Offsets:
    """Contiguous segments for the numpy namespace: segment ``i`` holds the elements
    ``offsets[i]:offsets[i + 1]`` (list order, as awkward stores one level of lists)."""

    __slots__ = ("all_nonempty", "counts", "nonempty", "starts")

    def __init__(self, offsets: np.ndarray) -> None:
        self.counts = np.diff(offsets)
        self.nonempty = self.counts > 0
        self.all_nonempty = bool(self.nonempty.all())
        self.starts = offsets[:-1] if self.all_nonempty else offsets[:-1][self.nonempty]

    def sum(self, a: np.ndarray) -> np.ndarray:
        # reduceat over the starts of non-empty lists only: each sum then runs to
        # the next non-empty start (empty lists in between hold nothing) and the
        # last one to the end; empty lists are 0
        if self.all_nonempty and self.starts.shape[0]:
            return np.add.reduceat(a, self.starts)
        out = np.zeros(self.counts.shape[0], dtype=np.result_type(a, np.float64))
        if self.starts.shape[0]:
            out[self.nonempty] = np.add.reduceat(a, self.starts)
        return out

    def expand(self, a: np.ndarray) -> np.ndarray:
        return np.repeat(a, self.counts)


def _stop(a: Any, xp: Namespace) -> Any:
    return a if xp is np else jax.lax.stop_gradient(a)


def safe_div(
    num: Array | float, den: Array, fill: float = float("nan"), *, xp: Namespace = jnp
) -> Array:
    """``num / den`` where ``den != 0``, else ``fill``; the gradient is finite (0) there."""
    ok = den != 0
    return xp.where(ok, num / xp.where(ok, den, 1.0), fill)


def safe_sqrt(v: Array, *, xp: Namespace = jnp) -> Array:
    """``sqrt(v)`` for ``v > 0``, 0 at ``v == 0`` (gradient 0, not inf), NaN where v is NaN/negative."""
    pos = v > 0
    return xp.where(pos, xp.sqrt(xp.where(pos, v, 1.0)), xp.where(v == 0, 0.0, np.nan))


def _reduce(a: Data, segment_ids: Any, num_segments: int | None, xp: Namespace = jnp) -> Data:
    if segment_ids is None:
        return xp.sum(a)
    if isinstance(segment_ids, Offsets):
        return segment_ids.sum(a)
    if xp is np:
        return np.bincount(segment_ids, weights=a, minlength=num_segments or 0)[:num_segments]
    return jax.ops.segment_sum(a, segment_ids, num_segments=num_segments)


def _drop_rounding_residue(m2: Array, subtracted: Array, xp: Namespace = jnp) -> Array:
    """Set to 0 a centred sum of squares ``S2 - W r^2`` that came out (slightly) negative.

    With non-negative weights it is >= 0 (Cauchy-Schwarz); a negative value tiny
    compared with the subtracted ``W r^2`` is the cancellation residue of
    (numerically) constant data, e.g. a single element whose weighted mean did not
    round-trip, and would make ``std`` NaN. Larger negative values (negative
    weights) are left alone.
    """
    residue = (m2 < 0) & (-m2 <= 1e-8 * xp.abs(subtracted))
    return xp.where(residue, 0.0, m2)


def _undefined_if_infinite(m: Array, center: Array, xp: Namespace = jnp) -> Array:
    """NaN where the mean is inf or NaN: deviations from an infinite mean are undefined
    (numpy and awkward give NaN for the variance of ``[1, inf]``)."""
    return xp.where(xp.isfinite(center), m, np.nan)


def _expand(a: Data, segment_ids: Any) -> Data:
    if segment_ids is None:
        return a
    if isinstance(segment_ids, Offsets):
        return segment_ids.expand(a)
    return a[segment_ids]


def _power_sums(
    w: Array,
    d: Array,
    order: int,
    segment_ids: Any,
    num_segments: int | None,
    xp: Namespace = jnp,
) -> list[Array]:
    """``[sum w d**k for k = 0..order]`` (scalars, or one entry per segment).

    Over all elements (JAX) this is one fused pass
    (:func:`analysis.stats._powsum.power_sums`, which also keeps the Jacobian under
    ``jax.jacfwd`` to one pass); per segment, and with numpy, one sum per power.
    """
    if segment_ids is None and xp is not np:
        s = power_sums(w, d, order)
        return [s[k] for k in range(order + 1)]
    if w is None:  # numpy, unit weights: the counts, and no products with ones
        out = [_count(d, segment_ids, num_segments)]
        p = d
        for k in range(order):
            p = p if k == 0 else p * d
            out.append(_reduce(p, segment_ids, num_segments, xp))
        return out
    out = [_reduce(w, segment_ids, num_segments, xp)]
    p = w
    for _ in range(order):
        p = p * d
        out.append(_reduce(p, segment_ids, num_segments, xp))
    return out


def _count(d: np.ndarray, segment_ids: Any, num_segments: int | None) -> Any:
    """Number of elements (as float64) per segment, or in all: the sum of unit weights."""
    if segment_ids is None:
        return np.float64(d.shape[0])
    if isinstance(segment_ids, Offsets):
        return segment_ids.counts.astype(np.float64)
    return np.bincount(segment_ids, minlength=num_segments or 0)[:num_segments].astype(np.float64)


def _centre(
    x: Array, w: Array, segment_ids: Any, num_segments: int | None, xp: Namespace = jnp
) -> tuple[Array, Array]:
    """First pass: a constant centre ``c`` (the rounded weighted mean, no gradient, 0
    where the total weight is 0) and the deviations ``d = x - c`` (exact for x near c).
    The second pass's ``r = sum w d / W`` then gives the exact mean ``c + r``
    (corrected two-pass)."""
    # The centre has no gradient: its pass needs no tangents (stop_gradient on the
    # inputs, not only the output, so that jacfwd does not compute them at all).
    sumw, swx = _power_sums(_stop(w, xp), _stop(x, xp), 1, segment_ids, num_segments, xp)
    center = safe_div(swx, sumw, 0.0, xp=xp)
    # An infinite or NaN element makes the plain mean inf or NaN (as in numpy and
    # awkward): keep that as the centre and no correction (x - inf would be NaN).
    # The deviations are set to 0 there (double where: no NaN gradient elsewhere).
    finite = xp.isfinite(center)
    # A finite element of weight exactly 0 never changes a result: its powers could
    # overflow (0 x inf = NaN), so its deviation is 0 (inf/NaN elements keep numpy's NaN).
    zero = (w == 0) & xp.isfinite(x)
    if xp is np and bool(np.all(finite)) and not bool(np.any(zero)):
        # eager: skip the masking when nothing is infinite and no weight is 0
        return center, x - _expand(center, segment_ids)
    d = x - _expand(xp.where(finite, center, 0.0), segment_ids)
    d = xp.where(_expand(finite, segment_ids), d, 0.0)
    d = xp.where(zero, 0.0, d)
    return center, d


def moments(
    x: Data,
    w: Data,
    segment_ids: Any = None,
    num_segments: int | None = None,
    *,
    order: int = 4,
    xp: Namespace = jnp,
) -> Moments:
    """Centred sums ``(W, center, dmean, M2, M3, M4)`` of ``x`` with weights ``w``.

    ``Mk = sum w (x - mu)**k`` about the exact mean ``mu = center + dmean``, from
    the corrected two-pass algorithm: with ``d = x - center`` and ``Sk = sum w d**k``,
    ``M2 = S2 - W r^2``, ``M3 = S3 - 3 r S2 + 2 W r^3``,
    ``M4 = S4 - 4 r S3 + 6 r^2 S2 - 3 W r^4`` where ``r = S1 / W`` is tiny.
    With ``segment_ids=None`` everything is reduced to scalars; otherwise there is
    one entry per segment (``num_segments`` a Python int). Empty segments give zeros.
    ``order`` < 4 computes the sums only up to that order (the higher ``Mk`` NaN).
    """
    center, d = _centre(x, w, segment_ids, num_segments, xp)
    return moments_from_sums(_power_sums(w, d, max(order, 1), segment_ids, num_segments, xp),
                             center, order=order, xp=xp)


def moments_from_sums(s: Any, center: Any, *, order: int = 4, xp: Namespace = jnp) -> Moments:
    """:class:`Moments` from the power sums ``s[k] = sum w d**k`` (``k = 0..max(order,
    1)``, ``d = x - center``) of :func:`moments`' second pass, by its formulas; the
    moments above ``order`` NaN, and all of them where ``center`` is not finite. Also
    :func:`moments_from_expectations`' and the numba kernel's last step (its Jacobian by
    ``jax.jvp`` of this: :mod:`analysis.pipeline.backends.numba._fastmoments`)."""
    sumw, s1 = s[0], s[1]
    r = safe_div(s1, sumw, 0.0, xp=xp)
    r2 = r * r
    nan = xp.full_like(sumw, np.nan)
    m2 = m3 = m4 = nan
    if order >= 2:
        m2 = _drop_rounding_residue(s[2] - sumw * r2, sumw * r2, xp)
        m2 = _undefined_if_infinite(m2, center, xp)
    if order >= 3:
        m3 = _undefined_if_infinite(s[3] - 3.0 * r * s[2] + 2.0 * sumw * r2 * r, center, xp)
    if order >= 4:
        m4 = s[4] - 4.0 * r * s[3] + 6.0 * r2 * s[2] - 3.0 * sumw * r2 * r2
        m4 = _undefined_if_infinite(m4, center, xp)
    return Moments(sumw, center, r, m2, m3, m4)


def shift_powers(b: Array, d: Array, *, xp: Namespace = jnp) -> list[Array]:
    """``sum_i C(r, i) b_i d^(r - i)``, r = 0..R: power sums about ``c`` from those
    about ``c + d`` (``b``: ``(..., R + 1)``; ``d`` broadcast against ``b[..., 0]``).
    Also the numba kernel's event sums
    (:func:`analysis.pipeline.backends.numba._fastmoments.sum_moments_state`)."""
    out: list[Array] = []
    for r in range(b.shape[-1]):
        term = xp.zeros_like(b[..., 0])
        for i in range(r + 1):
            term = term + math.comb(r, i) * b[..., i] * d ** (r - i)
        out.append(term)
    return out


def moments_from_expectations(a: Array, w: Array) -> Moments:
    """:class:`Moments` of entries with random values: ``a[e, r] = E[X_e^r 1_e]``
    (``r = 0..R``, ``1 <= R <= 4``; ``1_e`` an entry's indicator, so ``a[e, 0]`` is its
    probability) and constant weights ``w[e]``: the exact expectation of the state of
    the realised entries, ``W = sum w a_0``, ``Mk = sum w E[(X - mu)^k 1]``.

    Precision: each entry is first centred on its own conditional mean ``a_1 / a_0``
    (no gradient), then on the global centre, so that no raw power sum of large values
    is cancelled (a hard-cut entry, ``a_r = x^r``, is then exact). The moments above
    ``R`` (``M3``/``M4`` for ``R = 2``, ``M4`` for ``R = 3``) are NaN (constant: zero
    gradient). Empty input: zeros, as :func:`moments`.
    """
    a = jnp.asarray(a)
    own = jax.lax.stop_gradient(safe_div(a[:, 1], a[:, 0], 0.0))
    # powers about each entry's own centre
    b = jnp.stack(shift_powers(a, -own), axis=-1)
    sumw = jnp.sum(w * b[:, 0])
    center = jax.lax.stop_gradient(safe_div(jnp.sum(w * a[:, 1]), sumw, 0.0))
    s = [jnp.sum(w * t) for t in shift_powers(b, own - center)]
    return moments_from_sums(s, center, order=a.shape[-1] - 1)


def comoments(
    x: Data,
    y: Data,
    w: Data,
    segment_ids: Any = None,
    num_segments: int | None = None,
    *,
    xp: Namespace = jnp,
) -> CoMoments:
    """Centred co-moment sums ``(W, cx, dmx, cy, dmy, Cxx, Cyy, Cxy)`` (corrected two-pass)."""
    cx, dx = _centre(x, w, segment_ids, num_segments, xp)
    cy, dy = _centre(y, w, segment_ids, num_segments, xp)
    sumw, sx, sxx = _power_sums(w, dx, 2, segment_ids, num_segments, xp)
    _, sy, syy = _power_sums(w, dy, 2, segment_ids, num_segments, xp)
    sxy = _power_sums(dy if w is None else w * dy, dx, 1, segment_ids, num_segments, xp)[1]
    return comoments_from_sums((sumw, sx, sxx, sy, syy, sxy), cx, cy, xp=xp)


def comoments_from_sums(s: Any, cx: Any, cy: Any, *, xp: Namespace = jnp) -> CoMoments:
    """:class:`CoMoments` from :func:`comoments`' second-pass sums ``s = (W, sum w dx,
    sum w dx**2, sum w dy, sum w dy**2, sum w dx dy)`` about the constant centres ``cx``,
    ``cy`` (``dx = x - cx``), by its formulas (NaN where a centre is not finite); also the
    numba kernel's last step, as :func:`moments_from_sums`."""
    sumw, sx, sxx, sy, syy, sxy = s
    rx = safe_div(sx, sumw, 0.0, xp=xp)
    ry = safe_div(sy, sumw, 0.0, xp=xp)

    def centred(sq: Array, r: Array, c: Array) -> Array:
        return _undefined_if_infinite(_drop_rounding_residue(sq - sumw * r * r, sumw * r * r, xp), c, xp)

    cxy = _undefined_if_infinite(_undefined_if_infinite(sxy - sumw * rx * ry, cx, xp), cy, xp)
    return CoMoments(sumw, cx, rx, cy, ry, centred(sxx, rx, cx), centred(syy, ry, cy), cxy)


def central_moment_sum(
    x: Data,
    w: Data,
    n: int,
    segment_ids: Any = None,
    num_segments: int | None = None,
    *,
    xp: Namespace = jnp,
) -> tuple[Array, Array]:
    """Return ``(W, sum w (x - mu)**n)`` for any integer order ``n >= 0``.

    Expands ``(d - r)**n`` binomially around the constant centre (see :func:`moments`).
    """
    center, d = _centre(x, w, segment_ids, num_segments, xp)
    s = _power_sums(w, d, max(n, 1), segment_ids, num_segments, xp)
    sumw = s[0]
    r = safe_div(s[1], sumw, 0.0, xp=xp)
    # zeros + t is t exactly (as 0.0 + t), and keeps total an Array for any n >= 0
    total = xp.zeros_like(sumw)
    for k in range(n + 1):
        total = total + math.comb(n, k) * s[k] * (-r) ** (n - k)
    return sumw, total if n == 0 else _undefined_if_infinite(total, center, xp)


def raw_moment(
    x: Data,
    w: Data,
    n: int,
    segment_ids: Any = None,
    num_segments: int | None = None,
    *,
    xp: Namespace = jnp,
) -> Array:
    """``sum w x**n / sum w`` (a raw power sum by definition; NaN where ``W == 0``)."""
    if w is None:  # numpy, unit weights
        sumw, wxn = _count(x, segment_ids, num_segments), x**n
    else:
        sumw, wxn = _reduce(w, segment_ids, num_segments, xp), w * x**n
    return safe_div(_reduce(wxn, segment_ids, num_segments, xp), sumw, xp=xp)
