"""stats.sum against numpy's and awkward's sums, finite differences, and derive's padding.

References: ``ak.sum(x * weight, axis)`` (awkward inputs, Jagged inputs as awkward
lists), ``np.sum(x * weight, axis)`` (arrays), central finite differences for the
gradient, and the eager evaluation of a chunk function for derive's compiled program
(where the Jagged is padded beyond ``offsets[-1]``).
"""

from __future__ import annotations

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from analysis.soft import soft_cut
from analysis.stats import _compiled
from analysis.stats._closure import closure_inputs, size_bucket
from analysis.stats.derive import _checked_states
from analysis.stats.taylor import value_and_derivatives
from tests.conftest import central_difference


def _lists(seed: int, n: int = 40):  # noqa: ANN202
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, n)
    counts[:3] = 0  # empty lists sum to 0
    pt = ak.unflatten(15 + rng.exponential(30, counts.sum()), counts)
    w = ak.unflatten(rng.uniform(0, 1, counts.sum()), counts)
    return pt, w, rng.uniform(0.5, 2.0, n)


@pytest.mark.parametrize("axis", [None, 1, -1, 0, -2])
def test_jagged_equals_awkward(axis) -> None:  # noqa: ANN001
    pt, w, per_event = _lists(1)
    x = stats.from_awkward(pt)
    for weight, ref_weight in ((None, 1.0), (stats.from_awkward(w), w), (w, w), (2.5, 2.5),
                               (per_event, per_event)):
        got = np.asarray(stats.sum(x, weight=weight, axis=axis))
        want = ak.sum(pt * ref_weight, axis=axis)
        want = np.asarray(want) if axis is not None else np.float64(want)
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
        assert got.dtype == np.float64


def test_awkward_arrays_and_mixed() -> None:
    pt, w, _ = _lists(2)
    pt32 = ak.values_astype(pt, np.float32)
    got = stats.sum(pt32, weight=w, axis=1)  # awkward: ak.sum with x upcast to float64
    want = ak.sum(ak.values_astype(pt32, np.float64) * w, axis=1)
    assert ak.all(got == want) and str(ak.type(got).content) == "float64"
    assert stats.sum(pt.tolist()) == pytest.approx(float(ak.sum(pt)), rel=1e-15)
    # awkward x with a Jagged weight of the same lists: the Jagged path
    mixed = stats.sum(pt, weight=stats.from_awkward(w), axis=1)
    np.testing.assert_allclose(np.asarray(mixed), np.asarray(ak.sum(pt * w, axis=1)),
                               rtol=1e-14)
    other = stats.from_awkward(_lists(3)[1])
    with pytest.raises(ValueError, match="the same lists needed"):
        stats.sum(pt, weight=other, axis=1)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_arrays_equal_numpy(axis) -> None:  # noqa: ANN001
    rng = np.random.default_rng(4)
    x, w = rng.normal(size=(5, 7)), rng.uniform(size=(5, 7))
    for xx, ww in ((x, w), (jnp.asarray(x), jnp.asarray(w)), (x, None), (x, 3.0)):
        got = stats.sum(xx, weight=ww, axis=axis)
        assert isinstance(got, jax.Array) and got.dtype == jnp.float64
        want = np.sum(x if ww is None else x * np.asarray(ww), axis=axis)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-14)


def test_gradient_equals_finite_differences() -> None:
    pt, _, _ = _lists(5)
    x = stats.from_awkward(pt)

    def f(c):  # noqa: ANN001, ANN202
        ht = stats.sum(x, weight=soft_cut(x, ">", c, 5.0), axis=1)
        return jnp.sum(ht**2) + stats.sum(x, weight=soft_cut(x, "<", c, 3.0))

    grad = jax.grad(lambda t: f(t[0]))(jnp.asarray([30.0]))
    fd = central_difference(lambda t: np.asarray(f(t[0])), np.array([30.0]), 1e-4, points=5)
    np.testing.assert_allclose(np.asarray(grad), fd, rtol=1e-8)


def test_padding_counts_for_nothing_in_the_compiled_derive() -> None:
    """In derive's compiled program the Jagged is padded (weight of a soft cut at the
    padding's zeros is not 0): the per-list and total sums equal the eager ones."""
    pt, _, per_event = _lists(6, n=45)
    x = stats.from_awkward(pt)
    assert size_bucket(x.num_elements) > x.num_elements

    def fn(theta):  # noqa: ANN001, ANN202
        p = soft_cut(x, "<", theta["c"], 5.0)  # 1 at the padding's zeros
        shifted = x + 10.0  # 10 at the padding
        ht = stats.sum(shifted, weight=p, axis=1)
        return {"ht": stats.moments(ht, weight=per_event), "total": stats.sum(shifted, weight=p)}

    assert closure_inputs(fn) is not None
    built = _compiled.BUILT["programs"]
    d = stats.derive(fn, {"c": 40.0})
    assert _compiled.BUILT["programs"] == built + 1  # compiled
    value, jac, _ = value_and_derivatives(
        lambda t: _checked_states(fn({"c": t[0]}), "t"), jnp.asarray([40.0]), order=1)
    for a, b in zip(jax.tree_util.tree_leaves((d.value, d.jac)),
                    jax.tree_util.tree_leaves((value, jac)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-9)


def test_errors() -> None:
    x = stats.from_awkward(_lists(7)[0])
    with pytest.raises(ValueError, match="axis"):
        stats.sum(x, axis=2)
    with pytest.raises(TypeError, match="weight"):
        stats.sum(x, weight="w")
    with pytest.raises(TypeError, match="Jagged weight"):
        stats.sum(np.ones(3), weight=x)
    with pytest.raises(ValueError, match="concrete offsets"):
        jax.jit(lambda j: stats.sum(j, axis=0))(x)
