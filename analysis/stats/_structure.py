"""The awkward-structure engine behind :mod:`analysis.stats.api`.

For awkward Arrays and lists of any structure (and numpy/JAX arrays of any shape):
inputs are broadcast and grouped by awkward's rules on their element positions
(:mod:`analysis.stats._shadow`), the numbers are gathered as float64 for the
kernels, and the per-slot results are put back in awkward's result form
(:func:`_finish`). Typetracer inputs get awkward's own result types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np

from analysis._compat.jax import Tracer
from analysis.stats import _shadow
from analysis.stats._inputs import _is_scalar, _Options, _Prepared
from analysis.stats._statefns import LinearFit
from analysis.stats.layouts import _is_awkward

# awkward's functions as imported (kept even if ``ak.mean`` etc. are replaced by ours)
_AWKWARD = {
    name: getattr(ak.operations, name)
    for name in ("mean", "var", "std", "moment", "covar", "corr", "linear_fit")
}


# --- awkward structure (any axis, options, broadcasting) ----------------------------


class _Form(NamedTuple):
    """Where the per-slot results go (awkward inputs), or their numpy shape (arrays)."""

    scalar: bool  # one number (axis=None without keepdims)
    none: bool  # that number is None (mask_identity, nothing to reduce)
    attrs: Any  # attrs of the result structure (named axes) or None
    build: Callable[[Any, bool], Any]  # (one value per slot, missing) -> layout
    shape: tuple[int, ...] | None  # numpy result shape, for numpy/JAX array inputs
    regular: Callable[[bool], tuple[int, ...] | None]  # (missing) -> shape, None if lists/None


class _Structured(NamedTuple):
    prepared: _Prepared
    form: _Form
    backend: str  # "cpu" or "jax": where the numbers live
    awkward: bool  # some input was awkward (or a list): awkward results


def _gather(data: Any, index: np.ndarray, ok: np.ndarray, backend: str) -> Any:
    safe = np.where(ok, index, 0)
    if data.shape[0] == 0:  # nothing but missing values (e.g. ?unknown)
        return np.zeros(safe.shape[0])
    if backend == "jax":
        return jnp.where(ok, jnp.asarray(data)[safe].astype(jnp.float64), 0.0)
    return np.where(ok, np.asarray(data, dtype=np.float64)[safe], 0.0)


def _given(index: np.ndarray | None) -> np.ndarray:
    """The index of an input that is present (``group`` gives None only for absent ones)."""
    assert index is not None
    return index


def _template_form(template: Any, backend: str, awkward: bool) -> _Form:
    scalar = not isinstance(template, ak.Array)
    shape = None
    if not awkward:
        shape = () if scalar else ak.to_numpy(ak.fill_none(template, 0, axis=-1)).shape

    def build(values: Any, missing: bool) -> Any:
        return _shadow.rebuild(values, template, backend=backend, missing=missing)

    def regular(missing: bool) -> tuple[int, ...] | None:
        if scalar:
            return None if (missing and template is None) else ()
        if missing or not _is_regular(template.layout):
            return None
        return ak.to_numpy(template).shape

    attrs = None if scalar else template.attrs
    return _Form(scalar, template is None, attrs, build, shape, regular)


def _is_regular(layout: Any) -> bool:
    """No variable-length lists and no missing values down to the numbers."""
    while not layout.is_numpy:
        if not (layout.is_regular or type(layout).__name__ == "UnmaskedArray"):
            return False
        layout = layout.content
    return True


def _structure(
    x: Any, y: Any, weight: Any, axis: Any, keepdims: bool, mask_identity: bool, func: str
) -> _Structured:
    """Inputs broadcast and grouped by awkward's rules; numbers gathered as float64."""
    sx = _shadow.shadow(x, "x")
    sy = None if y is None else _shadow.shadow(y, "y")
    scalar_w = weight is not None and _is_scalar(weight)
    sw = None if weight is None or scalar_w else _shadow.shadow(weight, "weight")
    g = _shadow.group(
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
    xv = _gather(sx.data, _given(g.indices[0]), g.ok, backend)
    yv = None if sy is None else _gather(sy.data, _given(g.indices[1]), g.ok, backend)
    if sw is not None:
        w = _gather(sw.data, _given(g.indices[2]), g.ok, backend)
    else:
        scale = 1.0 if weight is None else weight
        w = (jnp if backend == "jax" else np).where(g.ok, scale, 0.0).astype(np.float64)
    seg = g.segment_ids
    p = _Prepared(xv, yv, w, seg, None if seg is None else g.num_segments)
    awkward = any(s.awkward for s in shadows)
    return _Structured(p, _template_form(g.template, backend, awkward), backend, awkward)


def _scalar_result(value: Any, backend: str) -> Any:
    return value.reshape(()) if backend == "jax" else np.float64(np.asarray(value).reshape(()))


def _layout_of_array(result: Any, func: str) -> Any:
    """``highlevel=False`` for numpy/JAX inputs: awkward's layout (regular dimensions)
    of the numpy-shaped result, or a scalar."""
    if isinstance(result, LinearFit):
        fields = list(LinearFit._fields)
        parts = [_layout_of_array(v, func) for v in result]
        if not isinstance(parts[0], ak.contents.Content):  # scalars: a record
            parts = [ak.contents.NumpyArray(np.asarray([v])) for v in parts]
            return ak.contents.RecordArray(parts, fields, parameters=_FIT)[0]
        return ak.contents.RecordArray(parts, fields, parameters=_FIT)
    if not isinstance(result, Tracer):
        result = np.asarray(result)
        if result.ndim == 0:
            return np.float64(result)
        return ak.from_numpy(result, regulararray=True, highlevel=False)
    if not _shadow.jax_backend():
        raise TypeError(
            f"{func}: highlevel=False under JAX tracing needs awkward's JAX backend "
            "(absent here); use highlevel=True for JAX arrays"
        )
    return ak.from_jax(result, regulararray=True, highlevel=False)


_FIT = {"__record__": "LinearFit"}


def _finish(stat: str, out: Any, st: _Structured, opts: _Options, inputs: tuple[Any, ...]) -> Any:
    """Results in awkward's form: awkward Arrays (or scalars) for awkward inputs,
    JAX arrays shaped like numpy's results for numpy/JAX inputs (awkward layouts with
    ``highlevel=False``)."""

    form = st.form
    shape = form.shape
    if st.awkward and st.backend == "jax" and not _shadow.jax_backend():
        # JAX numbers, awkward structure, no awkward JAX backend: JAX arrays where
        # the result is regular, else no way to hold them
        shape = form.regular(opts.mask_identity)
        if shape is None:
            raise TypeError(
                f"{stat}: this result (lists or missing values) holds JAX numbers, which "
                "needs awkward's JAX backend (absent here); use a stats.Jagged, or make "
                "the result regular (axis=None, or one value per list without mask_identity)"
            )
        st = st._replace(awkward=False)
    xp = jnp if st.backend == "jax" else np
    # jitted kernels return dicts with sorted keys: awkward's field order explicitly
    fields = list(LinearFit._fields) if isinstance(out, dict) else None
    # (jnp.reshape keeps a numpy array numpy: asarray first)
    parts: dict[str, Any] = {k: xp.asarray(out[k]).reshape(-1) for k in fields} if fields else {}
    flat: Any = None if fields else xp.asarray(out).reshape(-1)
    if not st.awkward:
        assert shape is not None
        result: Any
        if fields:
            result = LinearFit(**{k: jnp.asarray(v).reshape(shape) for k, v in parts.items()})
        else:
            result = jnp.asarray(flat).reshape(shape)
        return result if opts.highlevel else _layout_of_array(result, stat)
    missing = opts.mask_identity
    if form.scalar:
        if missing and form.none:
            return None
        if fields:
            record = ak.contents.RecordArray(
                [ak.contents.NumpyArray(v) for v in parts.values()], fields, parameters=_FIT
            )
            return _wrap(record, opts, inputs)[0] if opts.highlevel else record[0]
        return _scalar_result(flat, st.backend)
    if fields:
        layout = ak.contents.RecordArray(
            [form.build(v, missing) for v in parts.values()], fields, parameters=_FIT
        )
    else:
        layout = form.build(flat, missing)
    return _wrap(layout, opts, inputs, form.attrs) if opts.highlevel else layout


def _merged(mappings: list[Any]) -> Any:
    """awkward's rule for behavior/attrs taken from several inputs: the first wins."""
    present = [m for m in mappings if m]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return {k: v for m in present[::-1] for k, v in m.items()}


def _wrap(layout: Any, opts: _Options, inputs: tuple[Any, ...], attrs: Any = None) -> Any:
    """Highlevel result: the caller's ``behavior``/``attrs``, else those of the inputs
    (x first, as awkward merges them; ``attrs``: of the result structure, which holds
    awkward's named axes, else of the inputs)."""
    arrays = [a for a in inputs if isinstance(a, (ak.Array, ak.Record))]
    behavior = opts.behavior
    if behavior is None:
        behavior = _merged([a.behavior for a in arrays])
    if opts.attrs is not None:
        attrs = opts.attrs
    elif not attrs:
        attrs = _merged([a._attrs for a in arrays])
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
