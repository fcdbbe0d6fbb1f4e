"""Input checks and normalisation behind :mod:`analysis.stats.api`.

Any supported input (awkward Array, Python list, numpy/JAX array, :class:`Jagged`,
a scalar weight) becomes flat float64 values and per-element weights
(:class:`_Prepared`), with one-line errors naming the argument. Also the checks of
the keyword options, and :func:`_flat_path`, which decides whether an input takes the
flat/:class:`Jagged` path (also what ``jax.jit`` code uses) or the awkward-structure
path of :mod:`analysis.stats._structure`.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis._compat.jax import Tracer
from analysis.stats.jagged import Jagged
from analysis.stats.layouts import _is_awkward, awkward_parts
from analysis.stats.offsets import concrete, lists_mismatch, segment_ids_from_offsets

Array = jax.Array
# numpy for concrete data (cheap host-side padding), JAX for tracers
Vector = Array | np.ndarray


class _Parts(NamedTuple):
    values: Any  # 1-D JAX array (any real dtype) or 0-d for a scalar weight
    offsets: Any  # None for flat data; numpy or JAX int array otherwise
    source: Any  # the Jagged it came from (to reuse its cached segment ids), else None


def unmasked(*objs: Any) -> tuple[Any, ...]:
    """Each numpy masked array of ``objs`` as awkward reads it: its data where nothing is
    masked, else an awkward Array with None at the masked entries (which every statistic
    skips, as awkward's own do); other objects as they are. ``np.asarray`` alone would
    drop the mask and count the masked values."""
    out = []
    for obj in objs:
        if isinstance(obj, np.ma.MaskedArray):
            if not np.ma.getmaskarray(obj).any():
                obj = np.asarray(obj.data)
            else:
                import awkward as ak

                obj = ak.from_numpy(obj)
        out.append(obj)
    return tuple(out)


def _parts(obj: Any, name: str, *, allow_scalar: bool = False) -> _Parts:
    """Split any supported input into flat values and list offsets, checking types."""
    if isinstance(obj, np.ma.MaskedArray) and np.ma.getmaskarray(obj).any():
        # reached beside a Jagged (the entry points read others with unmasked())
        raise TypeError(
            f"{name}: a numpy masked array with masked entries beside a Jagged; pass an "
            "awkward Array (missing values are skipped) or the array's compressed() values"
        )
    if isinstance(obj, Jagged):
        return _Parts(obj.values, obj.offsets, obj)
    if _is_awkward(obj):
        values, offsets = awkward_parts(obj, name)
        return _Parts(values, offsets, None)
    arr: Vector
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
    return any(isinstance(a, Tracer) for a in arrays)


def _f64(a: Any) -> Any:
    """float64: numpy for concrete data (cheap host-side padding), JAX for tracers.

    A concrete float64 JAX array is kept as it is: inside ``jax.jit`` it is the
    caller's constant, which a numpy copy would duplicate in the compiled program.
    """
    if _traced(a):
        return a.astype(jnp.float64)
    if isinstance(a, jax.Array) and a.dtype == jnp.float64:
        return a
    return np.asarray(a, dtype=np.float64)


def _check_same_lists(a: _Parts, b: _Parts, name: str) -> None:
    """``b`` (named ``name``) must have the lists of ``a`` (``x``)."""
    why = lists_mismatch(a.offsets, b.offsets)
    if why is None and a.values.shape[0] != b.values.shape[0]:  # traced offsets
        why = f"{b.values.shape[0]} elements where {a.values.shape[0]} are expected"
    if why is not None:
        raise ValueError(f"{name}: {why} (the lists of x)")


class _Prepared(NamedTuple):
    x: Vector  # float64 values
    y: Vector | None
    w: Vector | None  # float64 weights, one per element; None: unit (numpy kernels only)
    segment_ids: Any  # set for per-list results: Vector, or _core.Offsets (numpy)
    num_segments: int | None
    jagged: bool = False  # x had lists (axis=None with keepdims gives shape (1, 1))
    across: bool = False  # one slot per position in the lists (a Jagged at axis=0)


def _prepare(x: Any, y: Any, weight: Any, axis: Any, func: str) -> _Prepared:
    """Validate and normalise inputs: float64 flat values and per-element weights."""
    if axis is not None and (
        isinstance(axis, bool)
        or not isinstance(axis, (int, np.integer))
        or axis not in (0, 1, -1, -2)
    ):
        raise ValueError(f"{func}: axis: expected None, 0, 1, -1 or -2, found {axis!r}")
    px = _parts(x, "x")
    n = px.values.shape[0]
    jagged = px.offsets is not None
    if not jagged and axis == 1:
        raise ValueError(
            f"{func}: axis=1 needs lists (an awkward Array of lists or a Jagged), but x is "
            f"flat ({n} elements); use axis=None"
        )
    if not jagged and axis == -2:
        raise ValueError(f"{func}: axis=-2 needs lists, but x is flat ({n} elements)")
    across = jagged and axis in (0, -2)
    if across and concrete(px.offsets) is None:
        raise ValueError(
            f"{func}: axis={axis} of a Jagged (position by position) needs concrete offsets "
            "(the number of results is the longest list's length), not traced ones as for a "
            "Jagged passed to jax.jit; close over the Jagged, or use axis=None or axis=1"
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
        w: Vector = np.ones(n, dtype=np.float64)
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
    xv = _f64(px.values)
    if jagged and concrete(px.offsets) is None:
        # Traced offsets (a Jagged passed to jit; stats.derive's compiled path pads the
        # values): elements beyond offsets[-1] are padding, weight 0 and value 0.
        real = jnp.arange(n) < px.offsets[-1]
        xv, w = jnp.where(real, xv, 0.0), jnp.where(real, w, 0.0)
        yv = None if yv is None else jnp.where(real, yv, 0.0)
    if per_list:
        return _Prepared(xv, yv, w, segment_ids(), num_lists, True)
    if across:  # result slot = the element's position in its list (leading, second, ...)
        off = np.asarray(concrete(px.offsets), dtype=np.int64)
        counts = np.diff(off)
        position = np.arange(n) - np.repeat(off[:-1], counts)
        longest = int(counts.max()) if counts.shape[0] else 0
        return _Prepared(_f64(px.values), yv, w, position.astype(np.int32), longest, True, True)
    return _Prepared(xv, yv, w, None, None, jagged)


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
    """The original flat/:class:`Jagged` path (also what ``jax.jit`` code uses).

    Any :class:`Jagged` argument takes it: awkward arguments beside it are read as one
    level of lists (:func:`~analysis.stats.layouts.awkward_parts`) and must have its lists
    (one line naming the first list that differs otherwise)."""
    if any(isinstance(a, Jagged) for a in (x, y, weight)):
        return True
    if not (_is_array(x) and x.ndim == 1):
        return False
    if y is not None and not (_is_array(y) and y.ndim == 1):
        return False
    if weight is not None and not (_is_scalar(weight) or (_is_array(weight) and weight.ndim == 1)):
        return False
    return axis is None or (not isinstance(axis, bool) and axis in (0, 1, -1, -2))
