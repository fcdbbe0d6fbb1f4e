"""Any awkward structure: broadcast, options, any axis (the engine behind the statistics).

:func:`shadow`, :func:`group` and :func:`rebuild` let awkward itself decide
broadcasting, missing values and the grouping of any ``axis``, on the *positions*
of the elements; the numbers (numpy, JAX or tracers) are gathered by position and
reduced by the JAX kernels, and the results are put back into awkward's result
structure (see :mod:`analysis.stats._structure`).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.stats.layouts import _is_awkward, records_error
from analysis.stats.offsets import _check_real

# The structure is worked out by awkward itself on a *shadow*: the input's layout with
# its number buffer replaced by the positions 0..n-1 (numpy, whatever the backend).
# Broadcasting, option types and axis grouping then act on positions only, and the
# numbers (numpy, JAX, or JAX tracers inside ``jax.grad``) are gathered by those
# positions at the end. So the numbers never pass through awkward (they stay
# differentiable) while every structural rule is awkward's own.

_STRING = ("string", "bytestring", "char", "byte")


def _np_index(index: Any) -> Any:
    import awkward as ak

    return ak.index.Index(np.asarray(index.data))


def _shadow_layout(node: Any, name: str, leaves: list[Any]) -> Any:
    """The layout of ``node`` on the numpy backend with leaf values = positions."""
    import awkward as ak

    c = ak.contents
    if node.parameter("__array__") in _STRING:
        raise TypeError(f"{name}: expected numbers, found strings")
    if node.is_unknown:
        leaves.append(np.zeros(0))
        return c.NumpyArray(np.zeros(0, dtype=np.int64))
    if node.is_numpy:
        data = node.data
        _check_real(data.dtype, name)
        leaves.append(data)
        size = int(np.prod(data.shape))
        return c.NumpyArray(np.arange(size, dtype=np.int64).reshape(tuple(data.shape)))
    if node.is_record:
        raise records_error(node, name)
    if node.is_union:
        raise TypeError(f"{name}: expected numbers, found a union of types")
    inner = _shadow_layout(node.content, name, leaves)
    kind = type(node).__name__
    if kind == "ListOffsetArray":
        return c.ListOffsetArray(_np_index(node.offsets), inner)
    if kind == "ListArray":
        return c.ListArray(_np_index(node.starts), _np_index(node.stops), inner)
    if kind == "RegularArray":
        return c.RegularArray(inner, node.size, zeros_length=node.length)
    if kind == "IndexedArray":
        return c.IndexedArray(_np_index(node.index), inner)
    if kind == "IndexedOptionArray":
        return c.IndexedOptionArray(_np_index(node.index), inner)
    if kind == "ByteMaskedArray":
        return c.ByteMaskedArray(_np_index(node.mask), inner, node.valid_when)
    if kind == "BitMaskedArray":
        return c.BitMaskedArray(
            _np_index(node.mask), inner, node.valid_when, node.length, node.lsb_order
        )
    if kind == "UnmaskedArray":
        return c.UnmaskedArray(inner)
    raise TypeError(f"{name}: unsupported awkward layout {kind}")


class Shadow(NamedTuple):
    """Positions (an awkward Array, numpy backend) and the flat numbers they index."""

    positions: Any
    data: Any  # 1-D numpy or JAX array (any real dtype)
    awkward: bool  # the input was awkward (or a Python list), not a numpy/JAX array


def shadow(obj: Any, name: str) -> Shadow:
    """Split an awkward Array, Python list or numpy/JAX array into :class:`Shadow`."""
    import awkward as ak

    if isinstance(obj, jax.Array) or isinstance(obj, np.ndarray):
        if obj.ndim == 0:
            raise ValueError(f"{name}: expected an array, found a scalar")
        _check_real(obj.dtype, name)
        pos = np.arange(int(np.prod(obj.shape)), dtype=np.int64).reshape(obj.shape)
        return Shadow(ak.Array(ak.contents.NumpyArray(pos)), obj.reshape(-1), False)
    if not (_is_awkward(obj) or isinstance(obj, (list, tuple))):
        raise TypeError(
            f"{name}: expected an awkward Array, a list, a numpy/JAX array or a Jagged, "
            f"found {type(obj).__name__}"
        )
    try:
        layout = ak.to_layout(obj, allow_record=False)
    except TypeError as err:
        raise TypeError(f"{name}: {err}") from None
    backend = ak.backend(layout)
    if backend not in ("cpu", "jax"):
        raise TypeError(f"{name}: awkward backend {backend!r} is not supported (cpu or jax)")
    leaves: list[Any] = []
    pos = _shadow_layout(layout, name, leaves)
    (data,) = leaves
    if backend == "jax" and not isinstance(data, jax.Array):  # EmptyArray: no buffer
        data = jnp.asarray(data)
    # attrs carry awkward's named axes: the grouping resolves them like awkward
    attrs = obj.attrs if isinstance(obj, ak.Array) and obj.attrs else None
    return Shadow(ak.Array(pos, attrs=attrs), data.reshape(-1), True)


class Grouping(NamedTuple):
    """Where each element goes in a reduction, and the result's structure.

    ``indices``: for each of x, y, weight (None if absent or scalar) the position of every
    element in its flat numbers, -1 for missing (None) elements; ``ok``: not missing;
    ``segment_ids``: result slot of every element (None: one slot, ``axis=None``);
    ``template``: ``ak.count`` of the broadcast structure with the caller's ``axis``,
    ``keepdims`` and ``mask_identity`` (None where awkward's result is None), or a
    scalar for ``axis=None`` without ``keepdims``.
    """

    indices: list[np.ndarray | None]
    ok: np.ndarray
    segment_ids: np.ndarray | None
    num_segments: int
    template: Any


def _flat(a: Any) -> np.ndarray:
    import awkward as ak

    return np.asarray(ak.to_numpy(ak.flatten(a, axis=None)), dtype=np.int64)


def _rank_rows(columns: list[np.ndarray], n: int) -> tuple[np.ndarray, int]:
    """Rank of each row of ``columns`` among the distinct rows, in lexicographic order.

    Rows are packed into one int64 (mixed radix) when their ranges allow, which sorts
    ~20x faster than ``np.unique(axis=0)``.
    """
    if n == 0:
        return np.zeros(0, dtype=np.int32), 0
    sizes = [int(c.max()) + 1 for c in columns]
    if math.prod(sizes) < 2**62:
        packed = np.zeros(n, dtype=np.int64)
        for c, size in zip(columns, sizes, strict=True):
            packed = packed * size + c
        uniq, inverse = np.unique(packed, return_inverse=True)
    else:
        uniq, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int32), int(uniq.shape[0])


def group(
    positions: list[Any], axis: int | None, keepdims: bool, mask_identity: bool, func: str
) -> Grouping:
    """Broadcast the position arrays (x first) as awkward broadcasts ``x * weight`` and
    group the elements for a reduction along ``axis`` (awkward's rules: a missing
    value in any input masks the element; ``axis`` counts lists from the outside,
    negative from the inside; a non-innermost axis combines position by position)."""
    import awkward as ak

    present = [p for p in positions if p is not None]
    if len(present) > 1:
        try:
            present = list(ak.broadcast_arrays(*present))
        except ValueError as err:
            raise ValueError(
                f"{func}: cannot broadcast the inputs to one structure: {err}"
            ) from None
        # a None in any input masks the element in all (as x * weight does)
        union = present[0] * 0
        for p in present[1:]:
            union = union + p * 0
        present = [p + union for p in present]
    it = iter(present)
    masked = [None if p is None else next(it) for p in positions]
    base = masked[0]
    assert base is not None  # x is always present
    depth = base.layout.purelist_depth
    named = axis  # what ak.count gets: a named axis keeps awkward's named-axis result
    if isinstance(axis, str):
        names = base.named_axis
        if axis not in names:
            raise ValueError(f"{func}: axis: {axis!r} is not a named axis of x ({names})")
        axis = names[axis]
    if axis is not None:
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"{func}: axis: expected None or an integer, found {axis!r}")
        if not -depth <= axis < depth:
            raise ValueError(
                f"{func}: axis: expected None or an integer in [{-depth}, {depth - 1}] "
                f"for x of depth {depth}, found {axis}"
            )
        axis = int(axis)
    filled = ak.fill_none(base, -1, axis=-1)
    index = [None if p is None else _flat(ak.fill_none(p, -1, axis=-1)) for p in masked]
    ok = np.logical_and.reduce([i >= 0 for i in index if i is not None])
    n = ok.shape[0]
    template = ak.count(base, axis=named, keepdims=keepdims, mask_identity=mask_identity)
    posaxis = None if axis is None else (axis if axis >= 0 else depth + axis)
    if posaxis is None:
        seg, num = None, 1
    elif posaxis == depth - 1:
        if depth == 1:
            seg, num = None, 1
        else:
            # a missing innermost list is a None result: one slot, but with keepdims
            # a None list of results (no slot)
            num_lists = ak.num(filled, axis=-1)
            counts = _flat(num_lists if keepdims else ak.fill_none(num_lists, 0, axis=-1))
            num = counts.shape[0]
            seg = np.repeat(np.arange(num, dtype=np.int32), counts)
    else:
        # result slot = the element's list positions at every depth but posaxis, in
        # lexicographic (row-major) order; regular dimensions are made variable
        # first so that broadcasting a position is per list, not numpy-style
        ragged = ak.from_regular(filled, axis=None)
        keys = []
        for j in range(depth):
            if j != posaxis:
                local = ak.local_index(ragged, axis=j)
                keys.append(_flat(ak.broadcast_arrays(local, ragged)[0]))
        seg, num = _rank_rows(keys, n)
    # self-check against awkward's own count per slot: a grouping that disagrees
    # with awkward's structure must fail loudly, never give misplaced numbers
    if isinstance(template, ak.Array):
        expected = _flat(ak.fill_none(template, 0, axis=-1))
    else:
        expected = np.array([0 if template is None else int(template)])
    got = np.bincount(
        np.zeros(n, dtype=np.int64) if seg is None else seg, weights=ok, minlength=num
    )
    if expected.shape[0] != num or not np.array_equal(got, expected):
        raise NotImplementedError(
            f"{func}: this combination of structure and axis={axis} is not supported"
        )
    return Grouping(index, ok, seg, num, template)


@functools.cache
def jax_backend() -> bool:
    """awkward's JAX backend is usable (registered here if needed).

    It holds JAX numbers (tracers too) in awkward results. Deprecated upstream and
    possibly absent in later awkward versions: then results with JAX numbers are JAX
    arrays where the result is regular (see :func:`analysis.stats._structure._finish`).
    """
    import awkward as ak

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the backend's deprecation warning
            ak.jax.register_and_check()
            ak.to_backend(ak.contents.NumpyArray(np.zeros(1)), "jax", highlevel=False)
    except Exception:  # absent, or refuses: no awkward results with JAX numbers
        return False
    return True


def _leaf_replaced(layout: Any, leaf: Any) -> Any:
    """``layout`` (packed, one NumpyArray leaf) with that leaf replaced by ``leaf``."""
    if layout.is_numpy:
        return leaf
    return layout.copy(content=_leaf_replaced(layout.content, leaf))


def rebuild(values: Any, template: Any, *, backend: str, missing: bool) -> Any:
    """Put one value per slot into ``template``'s structure (an awkward layout).

    ``missing``: an option type whose None are those of ``template`` (else the
    values, NaN for empty slots, with no option type at this level). ``backend`` ``"jax"`` keeps JAX values (tracers too).
    """
    import awkward as ak

    c = ak.contents
    filled = ak.to_packed(ak.fill_none(template, 0, axis=-1))
    none = np.asarray(ak.to_numpy(ak.flatten(ak.is_none(template, axis=-1), axis=None)))
    skeleton = filled.layout
    if backend == "jax":
        skeleton = ak.to_backend(skeleton, "jax", highlevel=False)
    leaf = c.NumpyArray(values)
    if missing or none.any():
        index: np.ndarray | jax.Array = np.where(none, -1, np.arange(none.shape[0]))
        if backend == "jax":
            index = jnp.asarray(index)
        leaf = c.IndexedOptionArray(ak.index.Index64(index), leaf)
    return _leaf_replaced(skeleton, leaf)
