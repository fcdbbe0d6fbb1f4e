"""The statistics of one variable: ``mean``, ``var``, ``std``, ``moment``,
``central_moment``, ``skew``, ``kurtosis`` (awkward's signatures; the conventions are in
:mod:`analysis.stats.api`, which exports them)."""

from __future__ import annotations

from typing import Any

from analysis.stats._inputs import _check_ddof, _check_order, _options
from analysis.stats.dispatch import _compute, _run1

__all__ = ["central_moment", "kurtosis", "mean", "moment", "skew", "std", "var"]

# --- public functions --------------------------------------------------------------
# Keywords after ``axis`` are awkward's: ``keepdims`` keeps the reduced dimension
# (length 1); ``mask_identity=True`` gives None for empty groups (awkward inputs; NaN
# in JAX results); ``highlevel=False`` returns the layout; ``behavior`` and ``attrs``
# are attached to awkward results.


def mean(
    x: Any,
    weight: Any = None,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Weighted mean ``sum w x / sum w``, as ``ak.mean``.

    float64: a scalar for ``axis=None``, else one value per group; NaN where the total
    weight is zero (empty group), with zero gradient (None with ``mask_identity``).

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, Jagged, or Moments
        The data: any input of :mod:`analysis.stats.api` (values are upcast to float64),
        or a :class:`Moments` state from :func:`moments` (then ``weight`` and ``axis``
        must be None).
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
        The weighted mean per group: a ``np.float64`` (or None) for ``axis=None`` on awkward
        inputs, else an awkward Array of float64 for awkward inputs; a float64 JAX array for
        numpy, JAX and :class:`Jagged` inputs and for states. Empty input (or an empty
        group) gives NaN with a zero gradient (None with ``mask_identity=True``).
    """
    opts = _options("mean", keepdims, mask_identity, highlevel, behavior, attrs)
    return _run1("mean", x, weight, axis, opts)


def var(
    x: Any,
    weight: Any = None,
    ddof: float = 0,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Weighted variance ``sum w (x - mu)**2 / (sum w - ddof)``, as ``ak.var``.

    float64; NaN where ``sum w - ddof == 0`` (e.g. empty input, or one element with
    ``ddof=1``) or ``sum w <= ddof``, with zero gradient.

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, Jagged, or Moments
        The data: any input of :mod:`analysis.stats.api` (values are upcast to float64),
        or a :class:`Moments` state from :func:`moments` (then ``weight`` and ``axis``
        must be None).
    weight : awkward Array, list, array, Jagged, float or None, optional
        Weights, broadcast against ``x`` as awkward broadcasts ``x * weight``; a Python
        number or 0-d array is accepted. None (default): unit weights.
    ddof : float, optional
        Delta degrees of freedom: the divisor is ``sum w - ddof`` (default 0).
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
        The weighted variance per group: a ``np.float64`` (or None) for ``axis=None`` on
        awkward inputs, else an awkward Array of float64 for awkward inputs; a float64 JAX
        array for numpy, JAX and :class:`Jagged` inputs and for states. NaN (zero gradient)
        where ``sum w <= ddof``. Empty input (or an empty group) gives NaN with a zero
        gradient (None with ``mask_identity=True``).
    """
    opts = _options("var", keepdims, mask_identity, highlevel, behavior, attrs)
    return _run1("var", x, weight, axis, opts, ddof=_check_ddof(ddof, "var"))


def std(
    x: Any,
    weight: Any = None,
    ddof: float = 0,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Weighted standard deviation ``sqrt(var(x, weight, ddof))``, as ``ak.std``.

    float64; NaN where the variance is undefined; 0 (with a zero, not infinite,
    gradient) for constant data.

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, Jagged, or Moments
        The data: any input of :mod:`analysis.stats.api` (values are upcast to float64),
        or a :class:`Moments` state from :func:`moments` (then ``weight`` and ``axis``
        must be None).
    weight : awkward Array, list, array, Jagged, float or None, optional
        Weights, broadcast against ``x`` as awkward broadcasts ``x * weight``; a Python
        number or 0-d array is accepted. None (default): unit weights.
    ddof : float, optional
        Delta degrees of freedom: the divisor is ``sum w - ddof`` (default 0).
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
        The weighted standard deviation per group: a ``np.float64`` (or None) for
        ``axis=None`` on awkward inputs, else an awkward Array of float64 for awkward
        inputs; a float64 JAX array for numpy, JAX and :class:`Jagged` inputs and for
        states. NaN (zero gradient) where ``sum w <= ddof``. Empty input (or an empty group)
        gives NaN with a zero gradient (None with ``mask_identity=True``).
    """
    opts = _options("std", keepdims, mask_identity, highlevel, behavior, attrs)
    return _run1("std", x, weight, axis, opts, ddof=_check_ddof(ddof, "std"))


def moment(
    x: Any,
    n: int,
    weight: Any = None,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Raw moment ``sum w x**n / sum w`` about zero, as ``ak.moment``.

    ``n`` is an integer (negative orders give ``inf`` at ``x == 0``, as awkward).
    This is a raw power sum by definition: use :func:`central_moment` for moments
    about the mean. float64; NaN where the total weight is zero.

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, or Jagged
        The data: any input of :mod:`analysis.stats.api` (values are upcast to float64).
    n : int
        The order of the moment. Negative orders are allowed.
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
        The raw moment of order ``n`` per group: a ``np.float64`` (or None) for
        ``axis=None`` on awkward inputs, else an awkward Array of float64 for awkward
        inputs; a float64 JAX array for numpy, JAX and :class:`Jagged` inputs and for
        states. Empty input (or an empty group) gives NaN with a zero gradient (None with
        ``mask_identity=True``).
    """
    opts = _options("moment", keepdims, mask_identity, highlevel, behavior, attrs)
    return _compute("moment", x, None, weight, axis, opts, order=_check_order(n, "moment"))


def central_moment(
    x: Any,
    n: int,
    weight: Any = None,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Central moment ``sum w (x - mu)**n / sum w`` (``n >= 0``; n = 2 is ``var``).

    Corrected two-pass (binomial expansion about a constant centre). float64; NaN
    where the total weight is zero.

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, or Jagged
        The data: any input of :mod:`analysis.stats.api` (values are upcast to float64).
    n : int
        The order of the moment. ``n >= 0``.
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
        The central moment of order ``n`` per group: a ``np.float64`` (or None) for
        ``axis=None`` on awkward inputs, else an awkward Array of float64 for awkward
        inputs; a float64 JAX array for numpy, JAX and :class:`Jagged` inputs and for
        states. Empty input (or an empty group) gives NaN with a zero gradient (None with
        ``mask_identity=True``).
    """
    order = _check_order(n, "central_moment", minimum=0)
    opts = _options("central_moment", keepdims, mask_identity, highlevel, behavior, attrs)
    return _compute("central_moment", x, None, weight, axis, opts, order=order)


def skew(
    x: Any,
    weight: Any = None,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Skewness ``m3 / m2**1.5`` with ``mk = sum w (x - mu)**k / sum w``.

    Fisher-Pearson, biased: ``scipy.stats.skew(x, bias=True)`` for unit weights.
    float64; NaN where the total weight is zero or the data are constant
    (``m2 <= (eps * mean)**2``, scipy's rule).

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, Jagged, or Moments
        The data: any input of :mod:`analysis.stats.api` (values are upcast to float64),
        or a :class:`Moments` state from :func:`moments` (then ``weight`` and ``axis``
        must be None).
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
        The skewness per group: a ``np.float64`` (or None) for ``axis=None`` on awkward
        inputs, else an awkward Array of float64 for awkward inputs; a float64 JAX array for
        numpy, JAX and :class:`Jagged` inputs and for states. NaN (zero gradient) where the
        data are constant. Empty input (or an empty group) gives NaN with a zero gradient
        (None with ``mask_identity=True``).
    """
    opts = _options("skew", keepdims, mask_identity, highlevel, behavior, attrs)
    return _run1("skew", x, weight, axis, opts)


def kurtosis(
    x: Any,
    weight: Any = None,
    axis: int | None = None,
    *,
    keepdims: bool = False,
    mask_identity: bool = False,
    highlevel: bool = True,
    behavior: Any = None,
    attrs: Any = None,
) -> Any:
    """Excess kurtosis ``m4 / m2**2 - 3`` (Fisher, biased; scipy's default).

    float64; NaN where the total weight is zero or the data are constant.

    Parameters
    ----------
    x : awkward Array, list, numpy or JAX array, Jagged, or Moments
        The data: any input of :mod:`analysis.stats.api` (values are upcast to float64),
        or a :class:`Moments` state from :func:`moments` (then ``weight`` and ``axis``
        must be None).
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
        The excess kurtosis per group: a ``np.float64`` (or None) for ``axis=None`` on
        awkward inputs, else an awkward Array of float64 for awkward inputs; a float64 JAX
        array for numpy, JAX and :class:`Jagged` inputs and for states. NaN (zero gradient)
        where the data are constant. Empty input (or an empty group) gives NaN with a zero
        gradient (None with ``mask_identity=True``).
    """
    opts = _options("kurtosis", keepdims, mask_identity, highlevel, behavior, attrs)
    return _run1("kurtosis", x, weight, axis, opts)
