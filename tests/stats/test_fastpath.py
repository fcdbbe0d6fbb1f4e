"""The awkward drop-in on its fast path (issue 20), and the keywords that shape results.

Flat numbers and one level of lists on awkward's numpy backend (``events.Jet.pt``)
skip awkward's structural machinery (:mod:`analysis.stats._fast`): property tests
against real awkward on every layout that path takes (``ListOffsetArray`` from 0 or
not, ``ListArray`` contiguous or as after ``events[mask]``, int/bool/float32 numbers,
empty lists), every kind of
weight and ``y``, every axis it takes, ``keepdims`` and ``mask_identity``: numbers to
1e-12 and ``ak.type``. Also ``highlevel=False`` (layouts and scalars as awkward's) and
``behavior``/``attrs`` taken as awkward takes them, for all seven functions.
"""

from __future__ import annotations

from typing import Any

import awkward as ak
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from analysis import stats
from analysis.stats import _fast
from tests.test_awkward_dropin import SCALE, _ak, assert_like_awkward

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
value = st.integers(-160, 160).map(lambda k: k / 8)  # dyadic: awkward's sums are exact
weight = st.integers(0, 12).map(lambda k: k / 4)


def _layout(draw: st.DrawFn, lists: list[list[float]], dtype: str) -> ak.Array:
    """The lists in one of the layouts the fast path takes."""
    counts = np.array([len(v) for v in lists], dtype=np.int64)
    flat = np.array([e for v in lists for e in v], dtype=np.float64)
    data = flat.astype(dtype) if dtype != "bool" else flat > 0
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    kind = draw(st.sampled_from(["offsets", "shifted", "listarray", "masked"]))
    content = ak.contents.NumpyArray(data)
    if kind == "offsets":
        layout: Any = ak.contents.ListOffsetArray(ak.index.Index64(offsets), content)
    elif kind == "shifted":  # offsets not from 0: a slice of a larger array
        pad = np.zeros(2, dtype=data.dtype)
        content = ak.contents.NumpyArray(np.concatenate([pad, data, pad]))
        layout = ak.contents.ListOffsetArray(ak.index.Index64(offsets + 2), content)
    elif kind == "listarray":  # contiguous starts/stops
        layout = ak.contents.ListArray(
            ak.index.Index64(offsets[:-1]), ak.index.Index64(offsets[1:]), content
        )
    else:  # events[mask]-like: lists out of order, gaps between them
        stride = int(counts.max()) + 1 if len(lists) else 1
        order = np.arange(len(lists))[::-1]
        starts = order * stride
        big = np.zeros(stride * max(len(lists), 1), dtype=data.dtype)
        for i, j in enumerate(order):
            big[j * stride : j * stride + counts[i]] = data[offsets[i] : offsets[i + 1]]
        layout = ak.contents.ListArray(
            ak.index.Index64(starts),
            ak.index.Index64(starts + counts),
            ak.contents.NumpyArray(big),
        )
    return ak.Array(layout)


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 6))
    lists = [draw(st.lists(value, max_size=4)) for _ in range(n)]
    dtype = draw(st.sampled_from(["float64", "float64", "float32", "int64", "bool"]))
    flat = draw(st.booleans())
    if flat:
        x = ak.Array(np.array([e for v in lists for e in v], dtype=np.float64).astype(dtype))
        axis = draw(st.sampled_from([None, 0, -1]))
        per = len(x)
    else:
        x = _layout(draw, lists, dtype)
        axis = draw(st.sampled_from([None, 1, -1]))
        per = n
    kind = draw(st.sampled_from(["none", "per_list", "per_list_ak", "element", "scalar"]))
    w: Any = None
    if kind in ("per_list", "per_list_ak"):
        w = np.array([draw(weight) for _ in range(per)])
        w = ak.Array(w) if kind == "per_list_ak" else w
    elif kind == "element":
        w = ak.values_astype(x, np.float64) * 0 + 0.25 * draw(st.integers(1, 8))
    elif kind == "scalar":
        w = draw(weight)
    y = x if draw(st.booleans()) else ak.values_astype(x, np.float64) * 0.5 + 1.25
    return {
        "x": x,
        "y": y,
        "weight": w,
        "axis": axis,
        "keepdims": draw(st.booleans()),
        "mask_identity": draw(st.booleans()),
    }


def _ref_weight(w: Any, x: ak.Array) -> Any:
    """awkward refuses a scalar weight: the same weight for every element."""
    if isinstance(w, float):
        return ak.ones_like(x, dtype=np.float64) * w
    return w


@SETTINGS
@given(cases())
def test_fast_path_like_awkward(case: dict[str, Any]) -> None:
    x, y, w = case["x"], case["y"], case["weight"]
    kw = {k: case[k] for k in ("axis", "keepdims", "mask_identity")}
    assert _fast.structure(x, y, w, kw["axis"], kw["keepdims"], kw["mask_identity"]) is not None
    ref_w = _ref_weight(w, x)
    for name in ("mean", "var", "std"):
        ours = getattr(stats, name)(x, weight=w, **kw)
        assert_like_awkward(ours, _ak(getattr(ak, name), x, weight=ref_w, **kw), SCALE[name])
    for n in (0, 1, 3):
        ours = stats.moment(x, n, weight=w, **kw)
        assert_like_awkward(ours, _ak(ak.moment, x, n, weight=ref_w, **kw), SCALE["moment"])
    for name in ("covar", "corr", "linear_fit"):
        ours = getattr(stats, name)(x, y, weight=w, **kw)
        assert_like_awkward(ours, _ak(getattr(ak, name), x, y, weight=ref_w, **kw), 8000)
    low = stats.std(x, weight=w, highlevel=False, **kw)
    ref = _ak(ak.std, x, weight=ref_w, highlevel=False, **kw)
    assert type(low) is type(ref)
    if isinstance(ref, ak.contents.Content):
        assert str(low.form.type) == str(ref.form.type)


def test_fast_path_declines_what_it_does_not_take() -> None:
    """Options, deeper lists, other axes, named axes, lists of a different structure:
    the general path (and still awkward's results)."""
    jag = ak.Array([[1.0, 2.0], [], [3.0]])
    declined = [
        (ak.Array([[1.0, None], [], [3.0]]), None, None, 1),
        (ak.Array([[[1.0]], [[2.0, 3.0]]]), None, None, -1),
        (jag, None, None, 0),
        (ak.with_named_axis(jag, ("events", "jets")), None, None, 1),
        (jag, ak.Array([[1.0], [2.0], [3.0]]), None, 1),
        (jag, np.array([1.0, 2.0, 3.0]), None, 1),  # y per list: awkward refuses
        (jag, None, ak.Array([[1.0, 2.0], [], [None]]), 1),
        (ak.to_regular(ak.Array([[1.0, 2.0], [3.0, 4.0]]), axis=1), None, None, 1),
        ([[1.0, 2.0], [3.0]], None, None, 1),
    ]
    for x, y, w, axis in declined:
        assert _fast.structure(x, y, w, axis, False, False) is None
    ak_x = ak.Array([[1.0, None], [], [3.0]])
    assert_like_awkward(stats.mean(ak_x, axis=1), ak.mean(ak_x, axis=1), 20)


# --- highlevel=False, behavior, attrs ------------------------------------------------

ONE = ("mean", "var", "std", "moment")
TWO = ("covar", "corr", "linear_fit")


def _call(module: Any, name: str, x: Any, **kw: Any) -> Any:
    func = getattr(module, name)
    if name == "moment":
        return func(x, 2, **kw)
    if name in TWO:
        return func(x, x, **kw)
    return func(x, **kw)


@pytest.mark.parametrize("name", ONE + TWO)
@pytest.mark.parametrize(
    "x",
    [
        [[1, 2, 3, 4], [5], [10]],
        ak.Array([[1.0, 2.0], [], [4.0]]),
        ak.Array([[1.0, None], None, [4.0, 5.0]]),
        np.arange(12.0).reshape(3, 4),
    ],
    ids=["list", "jagged", "options", "numpy"],
)
@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_highlevel_false_gives_awkward_layouts(
    name: str, x: Any, axis: Any, keepdims: bool
) -> None:
    kw = {"axis": axis, "keepdims": keepdims, "highlevel": False}
    ours = _call(stats, name, x, **kw)
    ref = _call(ak, name, x, **kw)
    assert type(ours) is type(ref), (type(ours), type(ref))
    if isinstance(ref, ak.contents.Content):
        assert str(ours.form.type) == str(ref.form.type)
        assert_like_awkward(ak.Array(ours), ak.Array(ref), 8000)
    elif isinstance(ref, ak.record.Record):
        assert ours.fields == ref.fields
    else:
        assert float(ours) == pytest.approx(float(ref), rel=1e-12)


@pytest.mark.parametrize("name", ONE + TWO)
def test_behavior_and_attrs_as_awkward(name: str) -> None:
    b1, b2 = {"foo": "bar"}, {"baz": "bargh!"}
    a1, a2 = {"source": "x"}, {"source": "call"}
    lists = [[1.0, 2.0, 3.0, 4.0], [5.0], [10.0]]
    for x in (ak.Array(lists, behavior=b1, attrs=a1), lists):
        for kw in ({}, {"behavior": b2}, {"attrs": a2}, {"behavior": b2, "attrs": a2}):
            ours = _call(stats, name, x, axis=-1, **kw)
            ref = _call(ak, name, x, axis=-1, **kw)
            assert ours.behavior == ref.behavior and ours.attrs == ref.attrs, (x, kw)
    if name in TWO:  # from y when x is a plain list (awkward merges every input's)
        y = ak.Array([[4.0, 4.0, 0.0, 2.0], [1.0], [10.0]], behavior=b1, attrs=a1)
        ours = getattr(stats, name)(lists, y, axis=-1)
        ref = getattr(ak, name)(lists, y, axis=-1)
        assert ours.behavior == ref.behavior == b1 and ours.attrs == ref.attrs == a1
