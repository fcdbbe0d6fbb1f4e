"""Differentiable weighted statistics with awkward's API (``ak.mean``, ``ak.var``, ...).

Every function takes the data positionally and options by keyword, with awkward's
signatures: ``f(x, [y | n,] weight=None, [ddof=0,] axis=None, *, keepdims=False,
mask_identity=False, highlevel=True, behavior=None, attrs=None)``. ``skew``,
``kurtosis`` and ``central_moment`` (not in awkward) take the same keywords.

Three kinds of input, three kinds of result:

* **awkward Arrays and Python lists** (numpy or JAX backend; any depth, option
  types, regular dimensions): awkward's semantics and awkward's results. ``weight``
  and ``y`` broadcast against ``x`` as awkward broadcasts ``x * weight`` (decided by
  structure: a flat array with one weight per event is per list, whatever the
  counts); a None in x, y or weight masks that element; ``axis`` is any valid axis
  (negative from the innermost; a non-innermost axis combines position by
  position: leading jet, second jet, ...); empty groups give NaN, or None with
  ``mask_identity=True``; ``keepdims`` keeps a length-1 dimension. The result is an
  awkward Array of float64 (``LinearFit`` records for ``linear_fit``), or a scalar
  for ``axis=None`` (``np.float64``, None, or an ``ak.Record``). On awkward's JAX
  backend the numbers stay JAX (tracers under ``jax.grad``): the structure is worked
  out by awkward on the element *positions*, the numbers are only gathered, so
  gradients flow to the input and from the awkward result (``ak.to_jax``).
  ``axis`` may be one of awkward's named axes; typetracer inputs (dask-awkward)
  get awkward's own result types. ``behavior`` and ``attrs`` come from the
  keywords, else from the inputs (x first), as awkward takes them. Without awkward's
  JAX backend (deprecated upstream), JAX numbers with awkward structure give JAX
  arrays where the result is regular, else a one-line TypeError.
* **numpy and JAX arrays** (any shape; axes as numpy): float64 JAX arrays, shaped
  as numpy's results (NaN for empty groups); ``linear_fit`` gives a
  :class:`LinearFit` NamedTuple (a pytree). ``highlevel=False`` gives awkward's
  layouts (and scalars), as for awkward inputs.
* **Jagged** (:mod:`analysis.stats.jagged`): the ``jax.jit``/``jax.grad`` path for
  one level of lists, where an awkward Array cannot live. ``axis`` is None, 1/-1
  (per list) or 0/-2 (position by position; needs concrete offsets, i.e. not a
  Jagged passed as a ``jit`` argument); a flat ``weight`` or ``y`` is per element
  (aligned with ``x.values``; per-list weights via ``x.expand(w)``); results are
  JAX arrays (NaN, never None).

A scalar ``weight`` (a Python number or a 0-d array) is accepted with any input
(awkward refuses it). Everything is computed in float64 (float32 NanoAOD is upcast
before any product). Undefined results are NaN with a zero (finite) gradient, never
``inf`` or rounding noise: zero total weight; ``var``/``std`` with ``ddof > 0`` where
``W <= ddof``; ``skew``, ``kurtosis``, ``corr`` and every field of ``linear_fit``
where the data are constant up to rounding (scipy's rule ``m2 <= (eps * mean)**2``).
Infinities and NaN propagate as in numpy (``mean([1, inf]) = inf``, ``var = nan``).
Elsewhere the values are awkward's to ~1e-12 relative; the deliberate differences
are listed in the project README (statistics section).
XLA on CPU flushes subnormal numbers (< 2.2e-308) to zero.

Precision: central moments use the corrected two-pass algorithm of
:mod:`analysis.stats._core` (never raw power sums); ``moment`` is a raw moment by
definition. Gradients are exact derivatives of the computed values.

Concrete numpy data (awkward's numpy backend, numpy arrays) is computed eagerly by the
same maths on numpy (:mod:`analysis.stats._core` takes the namespace): nothing there
to differentiate, and no JAX dispatch. Flat or one-level awkward lists skip awkward's
structural work (:mod:`analysis.stats._fast`). JAX data runs jit-compiled kernels on
inputs padded (with zero weights) to a few bucket sizes, so new data lengths rarely
trigger a compilation; inside ``jax.jit`` the statistics are traced like any JAX code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from analysis.stats import _core, _fast, _statefns
from analysis.stats._inputs import (
    _check_ddof,
    _check_order,
    _flat_path,
    _Options,
    _options,
    _prepare,
    _Prepared,
    unmasked,
)
from analysis.stats._kernels import _kernel, _with_keepdims
from analysis.stats._statefns import LinearFit
from analysis.stats._structure import _awkward_types, _finish, _structure, _typetracer

__all__ = [
    "LinearFit",
    "central_moment",
    "comoments",
    "moments",
    "corr",
    "covar",
    "kurtosis",
    "linear_fit",
    "mean",
    "moment",
    "skew",
    "std",
    "var",
]


def _compute(
    stat: str,
    x: Any,
    y: Any,
    weight: Any,
    axis: Any,
    opts: _Options,
    *,
    ddof: float = 0.0,
    order: Any = None,
) -> Any:
    x, y, weight = unmasked(x, y, weight)
    if _flat_path(x, y, weight, axis):
        p = _prepare(x, y, weight, axis, stat)
        # JAX arrays for array inputs, whichever namespace computed them
        out = jax.tree_util.tree_map(jnp.asarray, _kernel(stat, p, ddof, order))
        out = LinearFit(**out) if stat == "linear_fit" else out
        return _with_keepdims(out, p, opts.keepdims)
    if _typetracer(x, y, weight):
        return _awkward_types(stat, x, y, weight, axis, opts, ddof, order)
    st = _fast.structure(x, y, weight, axis, opts.keepdims, opts.mask_identity)
    if st is None:
        st = _structure(x, y, weight, axis, opts.keepdims, opts.mask_identity, stat)
    return _finish(stat, _kernel(stat, st.prepared, ddof, order), st, opts, (x, y, weight))


def _state_only(stat: str, weight: Any, axis: Any) -> None:
    if weight is not None or axis is not None:
        raise TypeError(f"{stat}: x is a state (already reduced); weight and axis must be None")


@functools.cache
def _state_program(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A statistic of a state as one compiled program (per statistic function). Called
    eagerly (a loss of merged states under jax.grad), each jnp operation of it would
    compile, or load from the persistent cache, a program of its own once per process,
    ~7 ms each; jitted, its known part and its transpose are two programs."""
    return jax.jit(fn)


def _run1(stat: str, x: Any, weight: Any, axis: Any, opts: _Options, ddof: float = 0.0) -> Any:
    if isinstance(x, _core.Moments):
        _state_only(stat, weight, axis)
        program = _state_program(_statefns.UNIVARIATE[stat])
        if stat in ("var", "std"):
            return program(x, ddof)
        return program(x)
    return _compute(stat, x, None, weight, axis, opts, ddof=ddof)


def _run2(stat: str, x: Any, y: Any, weight: Any, axis: Any, opts: _Options) -> Any:
    if isinstance(x, _core.CoMoments):
        if y is not None:
            raise TypeError(f"{stat}: x is a CoMoments state; pass no y")
        _state_only(stat, weight, axis)
        out = _state_program(_statefns.BIVARIATE[stat])(x)
        return LinearFit(**out) if isinstance(out, dict) else out  # dict: linear_fit
    if y is None:
        raise TypeError(f"{stat}: expected y (data with the structure of x) or a CoMoments state")
    return _compute(stat, x, y, weight, axis, opts)


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


def _flat_prepared(x: Any, y: Any, weight: Any, func: str) -> _Prepared:
    """float64 values and weights of all elements (missing ones with zero weight)."""
    x, y, weight = unmasked(x, y, weight)
    if _flat_path(x, y, weight, None):
        return _prepare(x, y, weight, None, func)
    return _structure(x, y, weight, None, False, False, func).prepared


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
    return _core.moments(jnp.asarray(p.x), jnp.asarray(p.w))


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
    return _core.comoments(jnp.asarray(p.x), jnp.asarray(p.y), jnp.asarray(p.w))
