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

The functions live by concept: one variable in :mod:`analysis.stats.univariate`, two
variables and the states in :mod:`analysis.stats.bivariate`, the path each input takes
in :mod:`analysis.stats.dispatch`.
"""


from __future__ import annotations

from analysis.stats.bivariate import LinearFit, comoments, corr, covar, linear_fit, moments
from analysis.stats.univariate import (
    central_moment,
    kurtosis,
    mean,
    moment,
    skew,
    std,
    var,
)

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

