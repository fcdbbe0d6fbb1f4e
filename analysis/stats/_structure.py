"""The awkward-structure engine behind :mod:`analysis.stats.api`.

For awkward Arrays and lists of any structure (and numpy/JAX arrays of any shape):
inputs are broadcast and grouped by awkward's rules on their element positions
(:mod:`analysis.stats._shadow`), the numbers are gathered as float64 for the
kernels, and the per-slot results are put back in awkward's result form
(:func:`_finish`). Typetracer inputs get awkward's own result types.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats import _shadow
from analysis.stats._core import LinearFit
from analysis.stats._inputs import _is_scalar, _Options, _Prepared
from analysis.stats.jagged import _is_awkward

# awkward's functions as imported (kept even if ``ak.mean`` etc. are replaced by ours)
_AWKWARD = {
    name: getattr(ak.operations, name)
    for name in ("mean", "var", "std", "moment", "covar", "corr", "linear_fit")
}


# --- awkward structure (any axis, options, broadcasting) ----------------------------


class _Structured(NamedTuple):
    prepared: _Prepared
    grouping: _shadow.Grouping
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
    flat: jax.Array | np.ndarray | None = None if fields else jnp.reshape(out, (-1,))
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
            [
                _shadow.rebuild(v, template, backend=st.backend, missing=missing)
                for v in parts.values()
            ],
            fields,
            parameters={"__record__": "LinearFit"},
        )
    else:
        layout = _shadow.rebuild(flat, template, backend=st.backend, missing=missing)
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
