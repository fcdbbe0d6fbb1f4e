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
  get awkward's own result types.
* **numpy and JAX arrays** (any shape; axes as numpy): float64 JAX arrays, shaped
  as numpy's results (NaN for empty groups); ``linear_fit`` gives a
  :class:`LinearFit` NamedTuple (a pytree).
* **Jagged** (:mod:`analysis.stats.jagged`): the ``jax.jit``/``jax.grad`` path for
  one level of lists, where an awkward Array cannot live. ``axis`` is None, 1 or -1;
  a flat ``weight`` or ``y`` is per element (aligned with ``x.values``; per-list
  weights via ``x.expand(w)``); results are JAX arrays (NaN, never None).

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

Eager calls run jit-compiled kernels on inputs padded (with zero weights) to a few
bucket sizes, so new data lengths rarely trigger a compilation; inside ``jax.jit``
the statistics are traced like any JAX code.
"""

from __future__ import annotations

import numbers
from functools import partial
from typing import Any, NamedTuple

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats import _core
from analysis.stats import jagged as _jag
from analysis.stats.jagged import (
    Jagged,
    _is_awkward,
    awkward_parts,
    concrete,
    segment_ids_from_offsets,
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

Array = jax.Array

# awkward's functions as imported (kept even if ``ak.mean`` etc. are replaced by ours)
_AWKWARD = {
    name: getattr(ak.operations, name)
    for name in ("mean", "var", "std", "moment", "covar", "corr", "linear_fit")
}


class LinearFit(NamedTuple):
    """Result of :func:`linear_fit`; fields as the record of ``ak.linear_fit``.

    A NamedTuple (so a JAX pytree: works with ``jacfwd``/``jacrev``/``vmap``) that
    also allows ``fit["slope"]`` like awkward's record.
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


# --- input normalisation -----------------------------------------------------------


class _Parts(NamedTuple):
    values: Any  # 1-D JAX array (any real dtype) or 0-d for a scalar weight
    offsets: Any  # None for flat data; numpy or JAX int array otherwise
    source: Any  # the Jagged it came from (to reuse its cached segment ids), else None


def _parts(obj: Any, name: str, *, allow_scalar: bool = False) -> _Parts:
    """Split any supported input into flat values and list offsets, checking types."""
    if isinstance(obj, Jagged):
        return _Parts(obj.values, obj.offsets, obj)
    if _is_awkward(obj):
        values, offsets = awkward_parts(obj, name)
        return _Parts(values, offsets, None)
    if isinstance(obj, jax.Array):
        arr = obj
    elif isinstance(obj, (np.ndarray, np.generic, numbers.Number, list, tuple)):
        arr = np.asarray(obj)
    else:
        raise TypeError(
            f"{name}: expected an awkward Array, a 1-D numpy/JAX array or a Jagged, "
            f"found {type(obj).__name__}"
        )
    if np.dtype(arr.dtype).kind not in "biuf":
        raise TypeError(f"{name}: expected real numbers, found dtype {arr.dtype}")
    if arr.ndim == 0 and allow_scalar:
        return _Parts(arr, None, None)
    if arr.ndim != 1:
        expected = "a scalar or a 1-D array" if allow_scalar else "a 1-D array"
        raise ValueError(
            f"{name}: expected {expected} (use an awkward Array or Jagged for lists), "
            f"found shape {tuple(arr.shape)}"
        )
    return _Parts(arr, None, None)


def _traced(*arrays: Any) -> bool:
    return any(isinstance(a, jax.core.Tracer) for a in arrays)


def _f64(a: Any) -> Any:
    """float64 copy: numpy for concrete data (cheap host-side padding), JAX for tracers."""
    if _traced(a):
        return a.astype(jnp.float64)
    return np.asarray(a, dtype=np.float64)


def _check_same_lists(a: _Parts, b: _Parts, name: str) -> None:
    """``b`` (named ``name``) must have the lists of ``a`` (``x``)."""
    na, nb = a.offsets.shape[0] - 1, b.offsets.shape[0] - 1
    if na != nb:
        raise ValueError(f"{name}: expected {na} lists (as x), found {nb}")
    if a.values.shape[0] != b.values.shape[0]:
        raise ValueError(
            f"{name}: expected {a.values.shape[0]} elements (as x), found {b.values.shape[0]}"
        )
    if a.offsets is b.offsets:
        return
    oa, ob = concrete(a.offsets), concrete(b.offsets)
    if oa is not None and ob is not None and not np.array_equal(oa, ob):
        i = int(np.flatnonzero(np.diff(oa) != np.diff(ob))[0])
        raise ValueError(
            f"{name}: expected the list lengths of x; list {i} has {int(oa[i + 1] - oa[i])} "
            f"elements in x and {int(ob[i + 1] - ob[i])} in {name}"
        )


class _Prepared(NamedTuple):
    x: Array  # float64 values
    y: Array | None
    w: Array  # float64 weights, one per element
    segment_ids: Array | None  # set for per-list results
    num_segments: int | None
    jagged: bool = False  # x had lists (axis=None with keepdims gives shape (1, 1))


def _prepare(x: Any, y: Any, weight: Any, axis: Any, func: str) -> _Prepared:
    """Validate and normalise inputs: float64 flat values and per-element weights."""
    if axis is not None and (
        isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or axis not in (0, 1, -1)
    ):
        raise ValueError(f"{func}: axis: expected None, 0, 1 or -1, found {axis!r}")
    px = _parts(x, "x")
    n = px.values.shape[0]
    jagged = px.offsets is not None
    if not jagged and axis == 1:
        raise ValueError(
            f"{func}: axis=1 needs lists (an awkward Array of lists or a Jagged), but x is "
            f"flat ({n} elements); use axis=None"
        )
    if jagged and axis == 0:
        raise ValueError(
            f"{func}: axis=0 (across lists, position by position) is not supported for a "
            "Jagged; pass an awkward Array (e.g. x.to_awkward()), or use axis=None or axis=1"
        )
    per_list = jagged and axis in (1, -1)
    num_lists = px.offsets.shape[0] - 1 if jagged else None

    seg_cache: list[Any] = []

    def segment_ids() -> Any:
        if not seg_cache:
            if px.source is not None:
                seg_cache.append(px.source.segment_ids())
            else:
                seg_cache.append(segment_ids_from_offsets(px.offsets, n))
        return seg_cache[0]

    yv = None
    if y is not None:
        py = _parts(y, "y")
        if py.offsets is not None:
            if not jagged:
                raise ValueError(f"{func}: y has lists but x is flat; expected the same structure")
            _check_same_lists(px, py, "y")
        elif py.values.shape[0] != n:
            raise ValueError(f"{func}: y: expected {n} elements (as x), found {py.values.shape[0]}")
        yv = _f64(py.values)

    if weight is None:
        w = np.ones(n, dtype=np.float64)
    else:
        pw = _parts(weight, "weight", allow_scalar=True)
        if pw.values.ndim == 0:
            full = jnp.full if _traced(pw.values) else np.full
            w = full(n, pw.values, dtype=np.float64)
        elif pw.offsets is not None:
            if not jagged:
                raise ValueError(
                    f"{func}: weight has lists but x is flat; expected {n} weights (one per element)"
                )
            _check_same_lists(px, pw, "weight")
            w = _f64(pw.values)
        else:
            # A flat weight is per element (aligned with the flat values), never
            # guessed from its length: with as many lists as elements that guess
            # would silently take per-list weights per element.
            m = pw.values.shape[0]
            if m != n:
                hint = ""
                if jagged:
                    hint = (
                        f"; for one weight per list ({num_lists}) pass x.expand(weight) "
                        "or use awkward Arrays, which broadcast per list"
                    )
                raise ValueError(
                    f"{func}: weight: expected {n} values (one per element), found {m}{hint}"
                )
            w = _f64(pw.values)
    if per_list:
        return _Prepared(_f64(px.values), yv, w, segment_ids(), num_lists, True)
    return _Prepared(_f64(px.values), yv, w, None, None, jagged)


def _check_order(n: Any, func: str, *, minimum: int | None = None) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{func}: n: expected an integer order, found {n!r}")
    if minimum is not None and n < minimum:
        raise ValueError(f"{func}: n: expected an integer >= {minimum}, found {n}")
    return int(n)


def _check_ddof(ddof: Any, func: str) -> float:
    if isinstance(ddof, bool) or not isinstance(ddof, (int, float, np.integer, np.floating)):
        raise TypeError(f"{func}: ddof: expected a number, found {ddof!r}")
    return float(ddof)


# --- padding to size buckets, and the jitted kernels ------------------------------
# Eager calls with data of a new length would otherwise compile every primitive
# anew (~0.4 s per call). Padding to a few bucket sizes (elements of weight 0, which
# add exact zeros to every sum, in an extra dummy list) lets one compiled kernel
# serve all lengths in a bucket; under an outer jit it costs at most 1/8 extra work.


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
    size = _bucket(p.x.shape[0])
    # x, y padded with 1 (not 0): x**n stays finite for negative orders n.
    x = _pad(p.x, size, 1.0)
    y = None if p.y is None else _pad(p.y, size, 1.0)
    w = _pad(p.w, size, 0.0)
    if p.segment_ids is None:
        return _Padded(x, y, w, None, None, None)
    num_lists = p.num_segments
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
        "mean": _core.state_mean(s),
        "var": _core.state_var(s, ddof),
        "std": _core.state_std(s, ddof),
        "skew": _core.state_skew(s),
        "kurtosis": _core.state_kurtosis(s),
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
    if central:
        sumw, total = _core.central_moment_sum(x, w, order, segment_ids, num_segments)
    else:
        sumw = _core._reduce(w, segment_ids, num_segments)
        total = _core._reduce(w * x**order, segment_ids, num_segments)
    return _core.safe_div(total, sumw)


@partial(jax.jit, static_argnames=("num_segments",))
def _bivariate(
    x: Array, y: Array, w: Array, segment_ids: Array | None, *, num_segments: int | None
) -> dict[str, Any]:
    s = _core.comoments(x, y, w, segment_ids, num_segments)
    return {name: func(s) for name, func in _core.BIVARIATE.items()}


class _Options(NamedTuple):
    keepdims: bool
    mask_identity: bool
    highlevel: bool
    behavior: Any
    attrs: Any


def _options(
    func: str, keepdims: Any, mask_identity: Any, highlevel: Any, behavior: Any, attrs: Any
) -> _Options:
    flags = (("keepdims", keepdims), ("mask_identity", mask_identity), ("highlevel", highlevel))
    for name, value in flags:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{func}: {name}: expected True or False, found {value!r}")
    return _Options(bool(keepdims), bool(mask_identity), bool(highlevel), behavior, attrs)


def _is_array(obj: Any) -> bool:
    return isinstance(obj, (jax.Array, np.ndarray))


def _is_scalar(obj: Any) -> bool:
    return (
        isinstance(obj, (numbers.Real, np.generic)) and not isinstance(obj, (bool, np.bool_))
    ) or (_is_array(obj) and obj.ndim == 0)


def _flat_path(x: Any, y: Any, weight: Any, axis: Any) -> bool:
    """The original flat/:class:`Jagged` path (also what ``jax.jit`` code uses)."""
    if isinstance(x, Jagged):
        return True
    if not (_is_array(x) and x.ndim == 1):
        return False
    if y is not None and not (_is_array(y) and y.ndim == 1):
        return False
    if weight is not None and not (_is_scalar(weight) or (_is_array(weight) and weight.ndim == 1)):
        return False
    return axis is None or (not isinstance(axis, bool) and axis in (0, 1, -1))


# --- kernels on prepared flat inputs -----------------------------------------------


def _kernel(stat: str, p: _Prepared, ddof: float, order: Any) -> Any:
    """The statistic per segment (or a scalar) from prepared float64 inputs."""
    q = _padded(p)
    if stat in _core.UNIVARIATE:
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
        return a[..., None] if p.segment_ids is not None else a.reshape(1)

    return jax.tree_util.tree_map(expand, out)


# --- awkward structure (any axis, options, broadcasting) ----------------------------

class _Structured(NamedTuple):
    prepared: _Prepared
    grouping: _jag.Grouping
    backend: str  # "cpu" or "jax": where the numbers live
    awkward: bool  # some input was awkward (or a list): awkward results


def _gather(data: Any, index: np.ndarray, ok: np.ndarray, backend: str) -> Any:
    safe = np.where(ok, index, 0)
    if data.shape[0] == 0:  # nothing but missing values (e.g. ?unknown)
        return np.zeros(safe.shape[0])
    if backend == "jax":
        return jnp.where(ok, jnp.asarray(data)[safe].astype(jnp.float64), 0.0)
    return np.where(ok, np.asarray(data, dtype=np.float64)[safe], 0.0)


def _structure(
    x: Any, y: Any, weight: Any, axis: Any, keepdims: bool, mask_identity: bool, func: str
) -> _Structured:
    """Inputs broadcast and grouped by awkward's rules; numbers gathered as float64."""
    sx = _jag.shadow(x, "x")
    sy = None if y is None else _jag.shadow(y, "y")
    scalar_w = weight is not None and _is_scalar(weight)
    sw = None if weight is None or scalar_w else _jag.shadow(weight, "weight")
    g = _jag.group(
        [sx.positions, None if sy is None else sy.positions, None if sw is None else sw.positions],
        axis,
        keepdims,
        mask_identity,
        func,
    )
    shadows = [s for s in (sx, sy, sw) if s is not None]
    traced = any(isinstance(s.data, jax.Array) for s in shadows) or (
        scalar_w and isinstance(weight, jax.Array)
    )
    backend = "jax" if traced else "cpu"
    xv = _gather(sx.data, g.index[0], g.ok, backend)
    yv = None if sy is None else _gather(sy.data, g.index[1], g.ok, backend)
    if sw is not None:
        w = _gather(sw.data, g.index[2], g.ok, backend)
    else:
        scale = 1.0 if weight is None else weight
        w = (jnp if backend == "jax" else np).where(g.ok, scale, 0.0).astype(np.float64)
    seg = g.segment_ids
    p = _Prepared(xv, yv, w, seg, None if seg is None else g.num_segments)
    return _Structured(p, g, backend, any(s.awkward for s in shadows))


def _scalar_result(value: Any, backend: str) -> Any:
    return value.reshape(()) if backend == "jax" else np.float64(np.asarray(value).reshape(()))


def _finish(stat: str, out: Any, st: _Structured, opts: _Options, x: Any) -> Any:
    """Results in awkward's form: awkward Arrays (or scalars) for awkward inputs,
    JAX arrays shaped like numpy's results for numpy/JAX inputs."""

    g = st.grouping
    # jitted kernels return dicts with sorted keys: awkward's field order explicitly
    fields = list(LinearFit._fields) if isinstance(out, dict) else None
    parts: dict[str, Any] = {k: jnp.reshape(out[k], (-1,)) for k in fields} if fields else {}
    flat = None if fields else jnp.reshape(out, (-1,))
    if st.backend == "cpu":
        parts = {k: np.asarray(v) for k, v in parts.items()}
        flat = None if flat is None else np.asarray(flat)
    template = g.template
    is_scalar = not isinstance(template, ak.Array)
    if not st.awkward:
        shape = () if is_scalar else ak.to_numpy(ak.fill_none(template, 0, axis=-1)).shape
        if fields:
            return LinearFit(**{k: jnp.asarray(v).reshape(shape) for k, v in parts.items()})
        return jnp.asarray(flat).reshape(shape)
    missing = opts.mask_identity
    if is_scalar:
        if missing and template is None:
            return None
        if fields:
            record = ak.contents.RecordArray(
                [ak.contents.NumpyArray(v) for v in parts.values()],
                fields,
                parameters={"__record__": "LinearFit"},
            )
            return _wrap(record, opts, x)[0] if opts.highlevel else record[0]
        return _scalar_result(flat, st.backend)
    if fields:
        layout = ak.contents.RecordArray(
            [_jag.rebuild(v, template, backend=st.backend, missing=missing) for v in parts.values()],
            fields,
            parameters={"__record__": "LinearFit"},
        )
    else:
        layout = _jag.rebuild(flat, template, backend=st.backend, missing=missing)
    return _wrap(layout, opts, x, template.attrs) if opts.highlevel else layout


def _wrap(layout: Any, opts: _Options, x: Any, attrs: Any = None) -> Any:
    """Highlevel result: the caller's ``behavior``/``attrs``, else those of ``x``
    (``attrs``: of the result structure, which holds awkward's named axes)."""

    behavior = opts.behavior if opts.behavior is not None else getattr(x, "behavior", None)
    if opts.attrs is not None:
        attrs = opts.attrs
    elif attrs is None and isinstance(x, ak.Array):
        attrs = x.attrs
    return ak.Array(layout, behavior=behavior, attrs=dict(attrs) if attrs else None)


def _typetracer(*objs: Any) -> bool:

    return any(_is_awkward(o) and ak.backend(o) == "typetracer" for o in objs)


def _awkward_types(
    stat: str, x: Any, y: Any, weight: Any, axis: Any, opts: _Options, ddof: float, order: Any
) -> Any:
    """Typetracer inputs (dask-awkward's graph building) carry types, no numbers:
    awkward's own function gives the result type (ours: that of ``ak.var``)."""
    func = _AWKWARD.get(stat) or _AWKWARD["var"]
    kw = dict(opts._asdict())
    if stat in ("covar", "corr", "linear_fit"):
        return func(x, y, weight, axis, **kw)
    if stat == "moment":
        return func(x, order, weight, axis, **kw)
    if stat in ("var", "std"):
        return func(x, weight, ddof, axis, **kw)
    if func is _AWKWARD["var"]:
        return func(x, weight, 0, axis, **kw)
    return func(x, weight, axis, **kw)


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
    if _flat_path(x, y, weight, axis):
        p = _prepare(x, y, weight, axis, stat)
        out = _kernel(stat, p, ddof, order)
        out = LinearFit(**out) if stat == "linear_fit" else out
        return _with_keepdims(out, p, opts.keepdims)
    if _typetracer(x, y, weight):
        return _awkward_types(stat, x, y, weight, axis, opts, ddof, order)
    st = _structure(x, y, weight, axis, opts.keepdims, opts.mask_identity, stat)
    return _finish(stat, _kernel(stat, st.prepared, ddof, order), st, opts, x)


def _state_only(stat: str, weight: Any, axis: Any) -> None:
    if weight is not None or axis is not None:
        raise TypeError(f"{stat}: x is a state (already reduced); weight and axis must be None")


def _run1(stat: str, x: Any, weight: Any, axis: Any, opts: _Options, ddof: float = 0.0) -> Any:
    if isinstance(x, _core.Moments):
        _state_only(stat, weight, axis)
        if stat in ("var", "std"):
            return _core.UNIVARIATE[stat](x, ddof)
        return _core.UNIVARIATE[stat](x)
    return _compute(stat, x, None, weight, axis, opts, ddof=ddof)


def _run2(stat: str, x: Any, y: Any, weight: Any, axis: Any, opts: _Options) -> Any:
    if isinstance(x, _core.CoMoments):
        if y is not None:
            raise TypeError(f"{stat}: x is a CoMoments state; pass no y")
        _state_only(stat, weight, axis)
        out = _core.BIVARIATE[stat](x)
        return LinearFit(**out) if stat == "linear_fit" else out
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
    """
    opts = _options("linear_fit", keepdims, mask_identity, highlevel, behavior, attrs)
    return _run2("linear_fit", x, y, weight, axis, opts)


def _flat_prepared(x: Any, y: Any, weight: Any, func: str) -> _Prepared:
    """float64 values and weights of all elements (missing ones with zero weight)."""
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
    """
    p = _flat_prepared(x, None, weight, "moments")
    return _core.moments(jnp.asarray(p.x), jnp.asarray(p.w))


def comoments(x: Any, y: Any, weight: Any = None) -> _core.CoMoments:
    """Mergeable co-moment state of ``x`` and ``y`` over all elements (see :func:`moments`).

    ``CoMoments(W, cx, dmx, cy, dmy, Cxx, Cyy, Cxy)`` with ``Cxy = sum w (x - mu_x)(y - mu_y)``;
    ``covar``, ``corr`` and ``linear_fit`` accept it in place of ``x, y``.
    """
    p = _flat_prepared(x, y, weight, "comoments")
    return _core.comoments(jnp.asarray(p.x), jnp.asarray(p.y), jnp.asarray(p.w))
