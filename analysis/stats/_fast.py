"""The common awkward case without awkward's structural machinery (speed only).

``events.Jet.pt``-like input: an awkward Array on the numpy backend that is flat
numbers or one level of variable-length lists of numbers (``ListOffsetArray``, or a
``ListArray`` as after ``events[mask]``), no missing values, no named axes; ``weight`` and ``y``
absent, a scalar, one per list, or with x's lists; ``axis`` None or the innermost.
There the grouping is the list offsets themselves, the numbers go to the numpy
namespace of :mod:`analysis.stats._core` by ``np.add.reduceat`` over those offsets,
and the result layouts (types as awkward's, for every ``keepdims`` and
``mask_identity``) are built directly. Anything else returns None and takes the
general path of :mod:`analysis.stats._structure`, which decides the same cases the
same way (the tests compare both with awkward).
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import awkward as ak
import numpy as np

from analysis.stats._core import Offsets
from analysis.stats._inputs import _Prepared
from analysis.stats._structure import _Form, _Structured

_NAMED_AXIS = "__named_axis__"  # awkward's attrs key for named axes: general path


class _Simple(NamedTuple):
    data: np.ndarray  # the numbers, in list order (any real dtype)
    offsets: np.ndarray | None  # int64 from 0; None for flat numbers


def _numbers(node: Any) -> np.ndarray | None:
    if not node.is_numpy or node.parameters or node.data.ndim != 1:
        return None
    data = node.data
    return data if isinstance(data, np.ndarray) and data.dtype.kind in "biuf" else None


def _simple(obj: Any) -> _Simple | None:
    """Flat numbers or one level of lists, numpy backend, nothing missing; else None."""
    if not isinstance(obj, ak.Array) or _NAMED_AXIS in obj.attrs:
        return None
    node = obj.layout
    data = _numbers(node)
    if data is not None:
        return _Simple(data, None)
    kind = type(node).__name__
    if kind not in ("ListOffsetArray", "ListArray") or node.parameters:
        return None
    data = _numbers(node.content)
    if data is None:
        return None
    if kind == "ListOffsetArray":
        offsets = node.offsets.data
    else:
        starts, stops = node.starts.data, node.stops.data
        if not isinstance(starts, np.ndarray):
            return None
        if not np.array_equal(starts[1:], stops[:-1]):  # e.g. events[mask]: gather
            starts = starts.astype(np.int64, copy=False)
            counts = stops - starts
            offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            positions = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1])
            return _Simple(data[positions], offsets)
        offsets = np.append(starts[:1] if starts.shape[0] else [0], stops)
    if not isinstance(offsets, np.ndarray):
        return None
    offsets = offsets.astype(np.int64, copy=False)
    lo, hi = int(offsets[0]), int(offsets[-1])
    if lo != 0 or hi != data.shape[0]:
        data, offsets = data[lo:hi], offsets - lo
    return _Simple(data, offsets)


def _per_element(obj: Any, x: _Simple, *, per_list: bool = True) -> np.ndarray | None:
    """``obj`` (y or weight) broadcast to x's elements as awkward broadcasts, or None
    (``per_list=False``: only with x's own structure)."""
    if isinstance(obj, np.ndarray) and obj.ndim == 1 and obj.dtype.kind in "biuf":
        s: _Simple | None = _Simple(obj, None)
    else:
        s = _simple(obj)
    if s is None:
        return None
    n = x.data.shape[0] if x.offsets is None else x.offsets.shape[0] - 1
    if s.offsets is None:  # one per element of flat x, one per list of jagged x
        if s.data.shape[0] != n or (x.offsets is not None and not per_list):
            return None
        data = s.data if x.offsets is None else np.repeat(s.data, np.diff(x.offsets))
        return np.asarray(data, dtype=np.float64)
    if x.offsets is None or not np.array_equal(s.offsets, x.offsets):
        return None
    return np.asarray(s.data, dtype=np.float64)


def structure(
    x: Any, y: Any, weight: Any, axis: Any, keepdims: bool, mask_identity: bool
) -> _Structured | None:
    """The prepared inputs and result form of the simple case, or None (general path)."""
    sx = _simple(x)
    if sx is None:
        return None
    jagged = sx.offsets is not None
    if axis is not None and not (
        isinstance(axis, (int, np.integer))
        and not isinstance(axis, bool)
        and int(axis) in ((1, -1) if jagged else (0, -1))
    ):
        return None
    n = sx.data.shape[0]
    yv = None
    if y is not None:
        yv = _per_element(y, sx, per_list=False)  # (awkward's reductions of y alone)
        if yv is None:
            return None
    w: np.ndarray | None
    if weight is None:
        w = None  # unit weights (the numpy kernels skip the products)
    elif isinstance(weight, numbers.Real) and not isinstance(weight, (bool, np.bool_)):
        w = np.full(n, float(weight))
    else:
        w = _per_element(weight, sx)
        if w is None:
            return None
    xv = np.asarray(sx.data, dtype=np.float64)
    if axis is None or not jagged:
        p = _Prepared(xv, yv, w, None, None, jagged)
        form = _all_form(n, 2 if jagged else 1, keepdims)
    else:
        assert sx.offsets is not None
        lists = sx.offsets.shape[0] - 1
        p = _Prepared(xv, yv, w, Offsets(sx.offsets), lists, True)
        form = _inner_form(np.diff(sx.offsets), keepdims)
    return _Structured(p, form, "cpu", True)


def _leaf(values: Any, none: np.ndarray | None) -> Any:
    leaf = ak.contents.NumpyArray(np.asarray(values))
    if none is None:
        return leaf
    index = np.where(none, -1, np.arange(none.shape[0]))
    return ak.contents.IndexedOptionArray(ak.index.Index64(index), leaf)


def _all_form(n: int, depth: int, keepdims: bool) -> _Form:
    """axis=None (or the only axis of flat x): one number, or ``1 * [1 *] [?]float64``."""

    def build(values: Any, missing: bool) -> Any:
        layout = _leaf(values, np.array([n == 0]) if missing else None)
        for _ in range(depth - 1):
            layout = ak.contents.RegularArray(layout, 1, zeros_length=1)
        return layout

    def regular(missing: bool) -> tuple[int, ...] | None:
        return None if missing else (1,) * depth if keepdims else ()

    return _Form(not keepdims, n == 0, None, build, None, regular)


def _inner_form(counts: np.ndarray, keepdims: bool) -> _Form:
    """One value per list: ``N * [1 *] [?]float64`` (None for empty lists)."""

    def build(values: Any, missing: bool) -> Any:
        layout = _leaf(values, counts == 0 if missing else None)
        if keepdims:
            layout = ak.contents.RegularArray(layout, 1, zeros_length=counts.shape[0])
        return layout

    def regular(missing: bool) -> tuple[int, ...] | None:
        if missing:
            return None
        return (counts.shape[0], 1) if keepdims else (counts.shape[0],)

    return _Form(False, False, None, build, None, regular)
