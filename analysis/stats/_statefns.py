"""Statistics from moment states: mean, var, std, skew, kurtosis, covar, corr, linear_fit.

Each takes a :class:`~analysis.stats._core.Moments` or ``CoMoments`` state (centred
sums, see :mod:`analysis.stats._core`) and the array namespace ``xp`` (JAX by default,
numpy for eager calls). Undefined values (no weight, constant data up to rounding)
are NaN with zero gradients (double ``where``), never a NaN gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from analysis.stats._core import Array, CoMoments, Moments, Namespace, safe_div, safe_sqrt

# safe_div and safe_sqrt are re-exported: a statistic is written with them (README "Extending")

__all__ = [
    "BIVARIATE",
    "UNIVARIATE",
    "LinearFit",
    "state_corr",
    "state_covar",
    "state_kurtosis",
    "state_linear_fit",
    "state_mean",
    "state_skew",
    "state_std",
    "safe_div",
    "safe_sqrt",
    "state_var",
]


# --- statistics from states -------------------------------------------------------
# Conventions follow awkward: population (ddof=0) normalisation by the sum of weights.


def state_mean(s: Moments, *, xp: Namespace = jnp) -> Array:
    return xp.where(s.sumw != 0, s.mean, np.nan)


def state_var(s: Moments, ddof: float | Array = 0, *, xp: Namespace = jnp) -> Array:
    """``M2 / (W - ddof)`` (awkward's ``ak.var`` convention with weights).

    NaN where ``W == 0``; for ``ddof != 0`` also where ``W <= ddof`` (fewer effective
    entries than ``ddof``: awkward returns noise or negative variances there).
    """
    defined = xp.where(ddof == 0, s.sumw != 0, s.sumw > ddof)
    return xp.where(defined, safe_div(s.m2, s.sumw - ddof, xp=xp), np.nan)


def state_std(s: Moments, ddof: float | Array = 0, *, xp: Namespace = jnp) -> Array:
    return safe_sqrt(state_var(s, ddof, xp=xp), xp=xp)


def _spread(m2: Array, sumw: Array, mean: Array, xp: Namespace = jnp) -> Array:
    """A centred sum of squares, or 0 where the data are constant up to rounding.

    scipy's rule (``scipy.stats.skew``): ``m2 / W <= (eps * mean)**2`` means every
    deviation is below the rounding of the mean, so ratios built on it (skewness,
    correlation, slope) would be noise, with overflowing gradients.
    """
    eps = np.finfo(np.float64).eps if xp is np else jnp.finfo(jnp.result_type(m2)).eps
    return xp.where(m2 > xp.abs(sumw) * (eps * mean) ** 2, m2, 0.0)


def _shape_ratio(s: Moments, num: Array, power: float, xp: Namespace = jnp) -> Array:
    """``num * W**(power - 1) / M2**power``: the standardised moment ``(num/W) / (M2/W)**power``.

    Undefined (NaN, zero gradient) where ``W == 0`` or the sample is constant up to
    rounding: scipy's rule ``m2 <= (eps * mean)**2`` (``m2 = M2 / W``), beyond which
    the ratio is rounding noise and its gradient would overflow.
    """
    ok = (s.sumw > 0) & (_spread(s.m2, s.sumw, s.mean, xp) > 0)
    w = xp.where(ok, s.sumw, 1.0)
    m2 = xp.where(ok, s.m2, 1.0)
    return xp.where(ok, num * w ** (power - 1.0) / m2**power, np.nan)


def state_skew(s: Moments, *, xp: Namespace = jnp) -> Array:
    """Fisher-Pearson skewness ``m3 / m2**1.5`` with ``mk = Mk / W`` (scipy's default, biased)."""
    return _shape_ratio(s, s.m3, 1.5, xp)


def state_kurtosis(s: Moments, *, xp: Namespace = jnp) -> Array:
    """Excess kurtosis ``m4 / m2**2 - 3`` (Fisher definition, scipy's default, biased)."""
    return _shape_ratio(s, s.m4, 2.0, xp) - 3.0


def state_covar(s: CoMoments, *, xp: Namespace = jnp) -> Array:
    return safe_div(s.cxy, s.sumw, xp=xp)


def state_corr(s: CoMoments, *, xp: Namespace = jnp) -> Array:
    """``Cxy / sqrt(Cxx Cyy)``; NaN where x or y is constant (up to rounding)."""
    cxx = _spread(s.cxx, s.sumw, s.mean_x, xp)
    cyy = _spread(s.cyy, s.sumw, s.mean_y, xp)
    return safe_div(s.cxy, safe_sqrt(cxx * cyy, xp=xp), xp=xp)


def state_linear_fit(s: CoMoments, *, xp: Namespace = jnp) -> dict[str, Array]:
    """Weighted least-squares line, as ``ak.linear_fit`` (weights enter linearly).

    With centred sums, awkward's ``delta = W * sum(w x^2) - (sum w x)^2 = W * Cxx``:
    ``slope = Cxy / Cxx``, ``intercept = mu_y - slope mu_x``,
    ``slope_error = sqrt(1 / Cxx)``, ``intercept_error = sqrt((Cxx + W mu_x^2) / (W Cxx))``.
    All NaN where ``W == 0`` or x is constant up to rounding (awkward: inf or noise).
    """
    cxx = _spread(s.cxx, s.sumw, s.mean_x, xp)
    defined = (s.sumw != 0) & (cxx != 0)
    slope = safe_div(s.cxy, cxx, xp=xp)
    # slope is NaN where undefined; multiplying it into the intercept would send
    # 0 * NaN = NaN back to mean_x even where the output is masked: use 0 there.
    intercept = xp.where(defined, s.mean_y - xp.where(defined, slope, 0.0) * s.mean_x, np.nan)
    slope_error = safe_sqrt(safe_div(1.0, cxx, xp=xp), xp=xp)
    intercept_error = safe_sqrt(
        safe_div(cxx + s.sumw * s.mean_x**2, s.sumw * cxx, xp=xp), xp=xp
    )
    return {
        "intercept": intercept,
        "slope": slope,
        "intercept_error": intercept_error,
        "slope_error": slope_error,
    }


UNIVARIATE: dict[str, Callable[..., Array]] = {
    "mean": state_mean,
    "var": state_var,
    "std": state_std,
    "skew": state_skew,
    "kurtosis": state_kurtosis,
}
# linear_fit gives a dict of its four fields, the others an Array
BIVARIATE: dict[str, Callable[..., Array | dict[str, Array]]] = {
    "covar": state_covar,
    "corr": state_corr,
    "linear_fit": state_linear_fit,
}


class LinearFit(NamedTuple):
    """Result of :func:`linear_fit`; fields as the record of ``ak.linear_fit``.

    A NamedTuple (so a JAX pytree: works with ``jacfwd``/``jacrev``/``vmap``) that
    also allows ``fit["slope"]`` like awkward's record.

    Every field is NaN where the fit is undefined (zero total weight, empty input, or
    all x equal).

    Parameters
    ----------
    intercept : jax.Array
        ``mu_y - slope mu_x`` (float64, scalar or one per group, as every field).
    slope : jax.Array
        ``Cxy / Cxx``.
    intercept_error : jax.Array
        ``sqrt((Cxx + W mu_x**2) / (W Cxx))``.
    slope_error : jax.Array
        ``sqrt(1 / Cxx)``.
    """

    intercept: Array
    slope: Array
    intercept_error: Array
    slope_error: Array

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            if key not in self._fields:
                raise KeyError(f"LinearFit has no field {key!r}; fields: {', '.join(self._fields)}")
            return getattr(self, key)
        return tuple.__getitem__(self, key)
