"""The statistics of two variables (``covar``, ``corr``, ``linear_fit``) and the
mergeable states of all elements (``moments``, ``comoments``); awkward's signatures,
the conventions of :mod:`analysis.stats.api`, which exports them."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from analysis.stats import _core
from analysis.stats._inputs import _options
from analysis.stats._statefns import LinearFit
from analysis.stats.dispatch import _flat_prepared, _run2
from analysis.stats.pullback import pulled_entries

__all__ = ["LinearFit", "comoments", "corr", "covar", "linear_fit", "moments"]


def covar(
    x: Any,
    y: Any = None,
    weight: Any = None,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Weighted covariance ``sum w (x - mu_x)(y - mu_y) / sum w``, as ``ak.covar``.

    ``y`` broadcasts against ``x``. float64; NaN where the total weight is zero.

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, Jagged, or CoMoments
        The first variable: any input of :mod:`analysis.stats.api` (upcast to float64),
        or a :class:`CoMoments` state from :func:`comoments` (then ``y`` must be omitted
        and ``weight`` and ``axis`` must be None).
    y : awkward Array, list, numpy or JAX array, Jagged, or None
        The second variable, broadcast against ``x`` (required unless ``x`` is a state).
    weight : awkward Array, list, array, Jagged, float or None, optional
        Weights, broadcast against ``x`` as awkward broadcasts ``x * weight``; a Python
        number or 0-d array is accepted. None (default): unit weights.
    axis : int, str or None, optional
        The axis to reduce (negative from the innermost; awkward's named axes for awkward
        inputs). None (default) reduces over all elements to a scalar.
    keepdims : bool, optional
        Keyword-only. Keep the reduced dimension with length 1 (default False).
    mask_identity : bool, optional
        Keyword-only. None instead of NaN for empty groups of awkward inputs (JAX results
        stay NaN; default False).
    highlevel : bool, optional
        Keyword-only. False returns awkward's layout (or a scalar) instead of an Array
        (default True).
    behavior : Mapping or None, optional
        Keyword-only. awkward behavior of the result (default: taken from the inputs).
    attrs : Mapping or None, optional
        Keyword-only. awkward attrs of the result (default: taken from the inputs).

    Returns
    -------
    float64 scalar, awkward Array or JAX array
        The weighted covariance per group: a ``np.float64`` (or None) for ``axis=None`` on
        awkward inputs, else an awkward Array of float64 for awkward inputs; a float64 JAX
        array for numpy, JAX and :class:`Jagged` inputs and for states. Empty input (or an
        empty group) gives NaN with a zero gradient (None with ``mask_identity=True``).
    """
    opts = _options("covar", keepdims, mask_identity, highlevel, behavior, attrs)
    return _run2("covar", x, y, weight, axis, opts)


def corr(
    x: Any,
    y: Any = None,
    weight: Any = None,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Weighted correlation ``Cxy / sqrt(Cxx Cyy)`` (centred sums), as ``ak.corr``.

    float64; NaN where the total weight is zero or x or y is constant.

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, Jagged, or CoMoments
        The first variable: any input of :mod:`analysis.stats.api` (upcast to float64),
        or a :class:`CoMoments` state from :func:`comoments` (then ``y`` must be omitted
        and ``weight`` and ``axis`` must be None).
    y : awkward Array, list, numpy or JAX array, Jagged, or None
        The second variable, broadcast against ``x`` (required unless ``x`` is a state).
    weight : awkward Array, list, array, Jagged, float or None, optional
        Weights, broadcast against ``x`` as awkward broadcasts ``x * weight``; a Python
        number or 0-d array is accepted. None (default): unit weights.
    axis : int, str or None, optional
        The axis to reduce (negative from the innermost; awkward's named axes for awkward
        inputs). None (default) reduces over all elements to a scalar.
    keepdims : bool, optional
        Keyword-only. Keep the reduced dimension with length 1 (default False).
    mask_identity : bool, optional
        Keyword-only. None instead of NaN for empty groups of awkward inputs (JAX results
        stay NaN; default False).
    highlevel : bool, optional
        Keyword-only. False returns awkward's layout (or a scalar) instead of an Array
        (default True).
    behavior : Mapping or None, optional
        Keyword-only. awkward behavior of the result (default: taken from the inputs).
    attrs : Mapping or None, optional
        Keyword-only. awkward attrs of the result (default: taken from the inputs).

    Returns
    -------
    float64 scalar, awkward Array or JAX array
        The weighted correlation per group: a ``np.float64`` (or None) for ``axis=None`` on
        awkward inputs, else an awkward Array of float64 for awkward inputs; a float64 JAX
        array for numpy, JAX and :class:`Jagged` inputs and for states. NaN (zero gradient)
        where x or y is constant. Empty input (or an empty group) gives NaN with a zero
        gradient (None with ``mask_identity=True``).
    """
    opts = _options("corr", keepdims, mask_identity, highlevel, behavior, attrs)
    return _run2("corr", x, y, weight, axis, opts)


def linear_fit(
    x: Any,
    y: Any = None,
    weight: Any = None,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Weighted least-squares line ``y = intercept + slope x``, as ``ak.linear_fit``.

    With centred sums ``Cxx``, ``Cxy``: ``slope = Cxy / Cxx``,
    ``intercept = mu_y - slope mu_x``, ``slope_error = sqrt(1 / Cxx)``,
    ``intercept_error = sqrt((Cxx + W mu_x**2) / (W Cxx))`` (awkward's formulas; the
    weights enter linearly, they are not ``1 / sigma**2`` unless you make them so).
    Awkward inputs give awkward's ``LinearFit`` records (an ``ak.Record`` for
    ``axis=None``); numpy/JAX/:class:`Jagged` inputs and states a :class:`LinearFit`
    of float64 JAX arrays (a pytree). Where the fit is undefined (zero total weight,
    or all x equal, e.g. one point) every field is NaN; awkward gives ``inf`` for
    some of them there.

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, Jagged, or CoMoments
        The first variable: any input of :mod:`analysis.stats.api` (upcast to float64),
        or a :class:`CoMoments` state from :func:`comoments` (then ``y`` must be omitted
        and ``weight`` and ``axis`` must be None).
    y : awkward Array, list, numpy or JAX array, Jagged, or None
        The second variable, broadcast against ``x`` (required unless ``x`` is a state).
    weight : awkward Array, list, array, Jagged, float or None, optional
        Weights, broadcast against ``x`` as awkward broadcasts ``x * weight``; a Python
        number or 0-d array is accepted. None (default): unit weights.
    axis : int, str or None, optional
        The axis to reduce (negative from the innermost; awkward's named axes for awkward
        inputs). None (default) reduces over all elements to a scalar.
    keepdims : bool, optional
        Keyword-only. Keep the reduced dimension with length 1 (default False).
    mask_identity : bool, optional
        Keyword-only. None instead of NaN for empty groups of awkward inputs (JAX results
        stay NaN; default False).
    highlevel : bool, optional
        Keyword-only. False returns awkward's layout (or a scalar) instead of an Array
        (default True).
    behavior : Mapping or None, optional
        Keyword-only. awkward behavior of the result (default: taken from the inputs).
    attrs : Mapping or None, optional
        Keyword-only. awkward attrs of the result (default: taken from the inputs).

    Returns
    -------
    LinearFit, awkward Array or ak.Record
        Fields ``intercept``, ``slope``, ``intercept_error``, ``slope_error`` (float64):
        a :class:`LinearFit` of JAX arrays for numpy, JAX and :class:`Jagged` inputs and
        for states; awkward's ``LinearFit`` records for awkward inputs (an ``ak.Record``
        for ``axis=None``). Empty input (or an empty group) gives NaN in every field.
    """
    opts = _options("linear_fit", keepdims, mask_identity, highlevel, behavior, attrs)
    return _run2("linear_fit", x, y, weight, axis, opts)


def moments(x: Any, weight: Any = None) -> _core.Moments:
    """Mergeable state of ``x`` over all elements: ``Moments(W, center, dmean, M2, M3, M4)``.

    ``W = sum w``, ``mu = center + dmean`` the weighted mean, ``Mk = sum w (x - mu)**k``
    (corrected two-pass). Accepts every input the other functions accept (awkward,
    numpy/JAX arrays, :class:`Jagged`; weights broadcast as awkward broadcasts, missing
    values skipped); float64 scalars. ``mean``, ``var``, ``std``, ``skew``
    and ``kurtosis`` accept the state in place of data; :func:`analysis.stats.merge`
    merges two states exactly. Empty input gives ``W = 0`` (a neutral element).

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, or Jagged
        The data (values upcast to float64; missing values are skipped).
    weight : awkward Array, list, array, Jagged, float or None, optional
        Weights, broadcast against ``x`` as awkward broadcasts (default: unit weights).

    Returns
    -------
    Moments
        float64 JAX scalars ``(sumw, center, dmean, m2, m3, m4)`` over all elements;
        ``W = 0`` (a neutral element of :func:`merge`) for empty input.
    """
    p = _flat_prepared(x, None, weight, "moments")
    w, xs = pulled_entries(jnp.asarray(p.w), jnp.asarray(p.x))
    return _core.moments(xs, w)


def comoments(x: Any, y: Any, weight: Any = None) -> _core.CoMoments:
    """Mergeable co-moment state of ``x`` and ``y`` over all elements (see :func:`moments`).

    ``CoMoments(W, cx, dmx, cy, dmy, Cxx, Cyy, Cxy)`` with ``Cxy = sum w (x - mu_x)(y - mu_y)``;
    ``covar``, ``corr`` and ``linear_fit`` accept it in place of ``x, y``.

    The formulas: ``W = sum w``, ``mu_x = cx + dmx``, ``Cxx = sum w (x - mu_x)**2``,
    ``Cyy = sum w (y - mu_y)**2`` (corrected two-pass).

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, or Jagged
        The first variable (upcast to float64; missing values are skipped).
    y : awkward Array, list, numpy or JAX array, or Jagged
        The second variable, broadcast against ``x``.
    weight : awkward Array, list, array, Jagged, float or None, optional
        Weights, broadcast against ``x`` as awkward broadcasts (default: unit weights).

    Returns
    -------
    CoMoments
        float64 JAX scalars over all elements; ``W = 0`` (a neutral element of
        :func:`merge`) for empty input.
    """
    p = _flat_prepared(x, y, weight, "comoments")
    w, xs, ys = pulled_entries(jnp.asarray(p.w), jnp.asarray(p.x), jnp.asarray(p.y))
    return _core.comoments(xs, ys, w)
