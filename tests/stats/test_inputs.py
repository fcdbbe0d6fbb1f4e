"""Input kinds, layouts, weight broadcasting and error messages of analysis.stats."""

from __future__ import annotations

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import vector

from analysis import stats
from analysis.stats import Jagged

LISTS = [[31.0, 45.5, 12.25], [], [80.0], [22.0, 27.5], [60.0, 15.0, 40.0, 33.0]]
COUNTS = np.array([len(v) for v in LISTS])
FLAT = np.concatenate([np.asarray(v) for v in LISTS])
OFFSETS = np.concatenate([[0], np.cumsum(COUNTS)])


def _reference(func, **kw):  # noqa: ANN001, ANN202
    return np.asarray(func(ak.Array(LISTS), **kw))


def test_layouts_give_the_same_values() -> None:
    base = ak.Array(LISTS)
    events = ak.Array(LISTS + [[1.0, 2.0]])  # one more event, masked away below
    vector.register_awkward()
    momenta = ak.zip(
        {"pt": base, "eta": base * 0.01, "phi": base * 0, "mass": base * 0 + 1},
        with_name="Momentum4D",
    )
    variants = {
        "ListOffsetArray": base,
        "ListArray (event mask)": events[np.arange(6) < 5],
        "IndexedArray": ak.Array(
            ak.contents.IndexedArray(ak.index.Index64(np.arange(5)), base.layout)
        ),
        "jagged mask": ak.Array([v + [-1.0] for v in LISTS])[
            ak.Array([v + [-1.0] for v in LISTS]) > 0
        ],
        "Momentum4D field": momenta.pt,
        "Momentum4D field, masked": momenta[np.ones(5, bool)].pt,
        "Jagged": Jagged(FLAT, OFFSETS),
        "from_awkward": stats.from_awkward(base),
        "float32": ak.values_astype(base, np.float32),
    }
    for func in (stats.mean, stats.std, stats.skew):
        ref = _reference(func, axis=1)
        for name, x in variants.items():
            got = np.asarray(func(x, axis=1))
            np.testing.assert_allclose(
                got, ref, rtol=1e-6 if name == "float32" else 1e-14, err_msg=name
            )
            np.testing.assert_allclose(func(x), func(base), rtol=1e-6, err_msg=name)
    regular = ak.to_regular(ak.Array([[1.0, 2.0], [3.0, 5.0]]))
    np.testing.assert_allclose(stats.var(regular, axis=1), [0.25, 1.0])


def test_flat_inputs() -> None:
    expected = float(np.mean(FLAT))
    for x in (FLAT, jnp.asarray(FLAT), ak.Array(FLAT), list(FLAT), FLAT.astype(np.float32)):
        np.testing.assert_allclose(stats.mean(x), expected, rtol=1e-7)
        np.testing.assert_allclose(stats.mean(x, axis=0), expected, rtol=1e-7)
        np.testing.assert_allclose(stats.mean(x, axis=-1), expected, rtol=1e-7)
    out = stats.var(FLAT.astype(np.float32))
    assert out.dtype == jnp.float64 and out.shape == ()


def test_weights_per_element_per_list_and_scalar() -> None:
    x = Jagged(FLAT, OFFSETS)
    per_list = np.array([1.0, 2.0, 0.5, 3.0, 0.25])
    broadcast = np.repeat(per_list, COUNTS)
    # a Jagged takes per-list weights explicitly (x.expand), awkward by structure
    np.testing.assert_allclose(
        stats.var(x, weight=x.expand(per_list), axis=1),
        stats.var(x, weight=broadcast, axis=1),
        rtol=1e-15,
    )
    np.testing.assert_allclose(
        stats.mean(x, weight=x.expand(per_list)), stats.mean(x, weight=broadcast)
    )
    np.testing.assert_allclose(
        stats.mean(ak.Array(LISTS), weight=per_list), stats.mean(x, weight=broadcast)
    )
    jagged_w = ak.unflatten(broadcast, COUNTS)
    np.testing.assert_allclose(stats.mean(x, weight=jagged_w), stats.mean(x, weight=broadcast))
    np.testing.assert_allclose(stats.mean(x, weight=2.5), stats.mean(x), rtol=1e-15)
    # awkward agrees on the per-list broadcast
    np.testing.assert_allclose(
        stats.mean(ak.Array(LISTS), weight=ak.Array(per_list), axis=1),
        ak.to_numpy(
            ak.fill_none(ak.mean(ak.Array(LISTS), weight=ak.Array(per_list), axis=1), np.nan)
        ),
    )


def test_empty_inputs() -> None:
    assert np.isnan(stats.mean(np.zeros(0)))
    empty_lists = Jagged(np.zeros(0), np.array([0]))
    assert stats.var(empty_lists, axis=1).shape == (0,)
    assert np.isnan(stats.var(empty_lists))
    all_empty = ak.Array([[], [], []])
    np.testing.assert_array_equal(np.isnan(stats.mean(all_empty, axis=1)), [True] * 3)
    fit = stats.linear_fit(all_empty, all_empty, axis=1)  # awkward's LinearFit records
    assert all(len(fit[f]) == 3 and np.all(np.isnan(ak.to_numpy(fit[f]))) for f in fit.fields)


def test_linear_fit_record() -> None:
    fit = stats.linear_fit(FLAT, 2.0 * FLAT + 1.0)
    assert fit["slope"] == fit.slope == fit[1]
    np.testing.assert_allclose([fit.intercept, fit.slope], [1.0, 2.0], rtol=1e-12)
    with pytest.raises(KeyError, match="LinearFit has no field 'offset'"):
        fit["offset"]
    jac = jax.jacfwd(lambda v: stats.linear_fit(v, 2.0 * FLAT))(jnp.asarray(FLAT))
    assert jac.slope.shape == FLAT.shape


def test_jagged_container() -> None:
    j = Jagged(FLAT, OFFSETS)
    assert (j.num_lists, j.num_elements, len(j)) == (5, FLAT.size, 5)
    np.testing.assert_array_equal(j.counts, COUNTS)
    np.testing.assert_array_equal(j.segment_ids(), np.repeat(np.arange(5), COUNTS))
    assert ak.to_list(j.to_awkward()) == LISTS
    doubled = j.map(lambda v: 2 * v)
    np.testing.assert_allclose(stats.mean(doubled, axis=1), 2 * stats.mean(j, axis=1))
    leaves, treedef = jax.tree_util.tree_flatten(j)
    assert len(leaves) == 2
    assert isinstance(jax.tree_util.tree_unflatten(treedef, leaves), Jagged)
    assert "num_lists=5" in repr(j)
    grad = jax.grad(lambda v: stats.mean(j.with_values(v)))(j.values)
    np.testing.assert_allclose(grad, 1.0 / FLAT.size)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: stats.mean(FLAT, axis=1),
            ValueError,
            r"axis=1 needs lists .* x is flat \(10 elements\)",
        ),
        (
            lambda: jax.jit(lambda j: stats.mean(j, axis=0))(Jagged(FLAT, OFFSETS)),
            ValueError,
            "axis=0 of a Jagged .* needs concrete offsets",
        ),
        (lambda: stats.mean(FLAT, axis=-2), ValueError, r"axis=-2 needs lists, but x is flat \(10 elements\)"),
        (
            lambda: stats.mean(FLAT, axis=2),
            ValueError,
            r"axis: expected None or an integer in \[-1, 0\] for x of depth 1, found 2",
        ),
        (
            lambda: stats.mean(Jagged(FLAT, OFFSETS), weight=np.ones(7)),
            ValueError,
            r"weight: expected 10 values \(one per element\), found 7",
        ),
        (
            lambda: stats.mean(Jagged(FLAT, OFFSETS), weight=np.ones(5)),
            ValueError,
            r"found 5; for one weight per list \(5\) pass x.expand\(weight\)",
        ),
        (
            lambda: stats.mean(ak.Array(LISTS), weight=np.ones(7)),
            ValueError,
            "cannot broadcast the inputs",
        ),
        (
            lambda: stats.mean(FLAT, weight=np.ones(3)),
            ValueError,
            r"weight: expected 10 values \(one per element\), found 3",
        ),
        (lambda: stats.covar(FLAT, FLAT[:4]), ValueError, r"y: expected 10 elements .* found 4"),
        (
            lambda: stats.covar(ak.Array(LISTS), ak.Array(LISTS[::-1])),
            ValueError,
            "covar: cannot broadcast the inputs to one structure",
        ),
        (
            lambda: stats.mean(ak.zip({"a": ak.Array(LISTS)})),
            TypeError,
            r"found records with fields \(a\)",
        ),
        (lambda: stats.mean(np.ones(3, complex)), TypeError, "expected real numbers"),
        (lambda: stats.mean("abc"), TypeError, "found str"),
        (lambda: stats.moment(FLAT, 1.5), TypeError, "n: expected an integer order"),
        (lambda: stats.central_moment(FLAT, -1), ValueError, "n: expected an integer >= 0"),
        (lambda: stats.var(FLAT, ddof="1"), TypeError, "ddof: expected a number"),
        (lambda: Jagged(FLAT, OFFSETS[:-1]), ValueError, r"offsets\[-1\] == len\(values\)"),
        (lambda: Jagged(FLAT, OFFSETS[::-1]), ValueError, "offsets"),
        (lambda: Jagged(FLAT.reshape(1, -1), OFFSETS), ValueError, "expected a 1-D array"),
        (lambda: stats.from_awkward(ak.Array(FLAT)), ValueError, "found a flat array"),
        (lambda: stats.from_awkward(FLAT), TypeError, "expected an awkward Array"),
    ],
)
def test_errors_say_what_was_expected(call, error, match) -> None:  # noqa: ANN001
    with pytest.raises(error, match=match):
        call()
