"""Jagged as an array: elementwise operators, broadcasting, map, where, and statistics of
awkward and Jagged inputs mixed. References: awkward's own arithmetic on the same lists,
finite differences for gradients."""

from __future__ import annotations

import operator

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from analysis.soft import soft_cut
from analysis.stats import Jagged
from tests.conftest import central_difference

PT = ak.Array([[31.0, 45.5, 12.25], [], [80.0], [22.0, 27.5], [60.0, 15.0, 40.0, 33.0]])
ETA = ak.Array([[0.5, -2.6, 1.0], [], [2.3], [-0.1, 2.45], [1.2, -0.7, 2.7, 0.0]])
PER_EVENT = np.array([1.5, 2.0, -0.5, 3.0, 0.25])

BINARY = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
          operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]


def _same(got: Jagged, ref: ak.Array) -> None:
    assert isinstance(got, Jagged)
    np.testing.assert_array_equal(np.asarray(got.counts), ak.num(ref))
    np.testing.assert_allclose(np.asarray(got.values, dtype=np.float64),
                               ak.to_numpy(ak.flatten(ref)).astype(np.float64), rtol=1e-15)


@pytest.mark.parametrize("op", BINARY, ids=lambda o: o.__name__)
def test_operators_match_awkward(op) -> None:  # noqa: ANN001
    pt, eta = stats.from_awkward(PT), stats.from_awkward(ETA)
    # Jagged with Jagged, awkward lists, scalars, per-event arrays (numpy, JAX, awkward)
    _same(op(pt, eta), op(PT, ETA))
    _same(op(pt, ETA), op(PT, ETA))
    _same(op(pt, 1.5), op(PT, 1.5))
    _same(op(2.0, pt), op(2.0, PT))
    _same(op(pt, jnp.asarray(1.5)), op(PT, 1.5))
    _same(op(pt, PER_EVENT), op(PT, PER_EVENT))
    _same(op(pt, jnp.asarray(PER_EVENT)), op(PT, PER_EVENT))
    _same(op(pt, ak.Array(PER_EVENT)), op(PT, ak.Array(PER_EVENT)))
    # reflected: the other operand on the left (numpy, JAX and awkward defer to Jagged)
    _same(op(PER_EVENT, eta), op(PER_EVENT, ETA))
    _same(op(jnp.asarray(PER_EVENT), eta), op(PER_EVENT, ETA))
    _same(op(PT, eta), op(PT, ETA))


def test_unary_map_where_match_awkward() -> None:
    pt, eta = stats.from_awkward(PT), stats.from_awkward(ETA)
    _same(-eta, -ETA)
    _same(abs(eta), abs(ETA))
    _same(eta.map(jnp.sinh), np.sinh(ETA))
    _same(pt.map(jnp.arctan2, eta), np.arctan2(PT, ETA))
    _same(pt.map(jnp.add, PER_EVENT), PT + PER_EVENT)
    _same(stats.where(abs(eta) < 2.4, pt, 0.0), ak.where(abs(ETA) < 2.4, PT, 0.0))
    _same(stats.where(ETA > 0, pt, PER_EVENT), ak.where(ETA > 0, PT, PER_EVENT))
    empty = Jagged(np.zeros(0), np.zeros(1, dtype=np.int64))
    assert (empty * 2 + empty).num_lists == 0
    assert stats.where(empty > 0, empty, 1.0).num_elements == 0


def test_mismatches_are_one_line() -> None:
    pt = stats.from_awkward(PT)
    other = ak.Array([[1.0, 2.0, 3.0], [], [4.0], [5.0], [6.0, 7.0, 8.0, 9.0, 10.0]])
    for bad, needle in [
        (lambda: pt * stats.from_awkward(other), "list 3 has 1 elements where 2 are expected"),
        (lambda: pt + other, "list 3 has 1 elements where 2 are expected"),
        (lambda: pt * np.ones(4), "expected 5 values, found 4"),
        (lambda: pt * np.ones((5, 2)), "found shape (5, 2)"),
        (lambda: stats.mean(other, weight=pt), "weight: list 3 has 2 elements where 1"),
        (lambda: stats.where(pt > 1, "a", 0.0), "where: x: expected"),
    ]:
        with pytest.raises((ValueError, TypeError)) as err:
            bad()
        assert needle in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(TypeError):
        pt + "a"  # noqa: B018


def test_issue_examples() -> None:
    """The two lines of the issue that raised before: a product of soft cuts, and an
    awkward x with a Jagged weight; values against awkward's own arithmetic."""
    a, b, c = 30.0, 2.4, 25.0
    w = soft_cut(PT, ">", a, 5.0) * soft_cut(abs(ETA), "<", b, 0.1)
    ref_w = (1 / (1 + np.exp(-(PT - a) / 5.0))) * (1 / (1 + np.exp(-(b - abs(ETA)) / 0.1)))
    _same(w, ref_w)
    got = stats.mean(PT, weight=soft_cut(PT, ">", c, 5.0))
    ref_c = 1 / (1 + np.exp(-(PT - c) / 5.0))
    ref = ak.sum(PT * ref_c) / ak.sum(ref_c)
    np.testing.assert_allclose(got, ref, rtol=1e-14)
    got = stats.mean(PT, weight=w, axis=1)
    np.testing.assert_allclose(got, ak.sum(PT * ref_w, axis=1) / ak.sum(ref_w, axis=1),
                               rtol=1e-14)
    np.testing.assert_allclose(stats.var(PT, weight=w), ak.var(PT, weight=ref_w), rtol=1e-13)


def test_gradients_through_arithmetic() -> None:
    """d/d(a, b, c) of a weighted mean whose weight is built with operators, per-event
    broadcasting and where, against central differences."""
    pt, eta = stats.from_awkward(PT), stats.from_awkward(ETA)
    scale = jnp.asarray(PER_EVENT) ** 2

    def f(theta):  # noqa: ANN001, ANN202
        a, b, c = theta[0], theta[1], theta[2]
        w = soft_cut(pt, ">", a, 5.0) * soft_cut(abs(eta), "<", b, 0.3)
        w = stats.where(eta > 0, w, w * 0.5) / (1.0 + scale)
        x = (pt - c) ** 2 / 100.0 + 2.0 ** (-eta)
        return stats.mean(x, weight=w)

    theta = np.array([30.0, 2.4, 20.0])
    grad = np.asarray(jax.grad(f)(jnp.asarray(theta)))
    fd = central_difference(lambda t: f(jnp.asarray(t)), theta, 1e-4, points=5)
    np.testing.assert_allclose(grad, fd, rtol=1e-8)
    assert np.all(grad != 0)


def test_under_jit_with_traced_lists() -> None:
    pt, eta = stats.from_awkward(PT), stats.from_awkward(ETA)

    @jax.jit
    def f(x: Jagged, y: Jagged, per_event):  # noqa: ANN001, ANN202
        return stats.mean(x * y + per_event, weight=abs(y))

    ref = ak.sum((PT * ETA + PER_EVENT) * abs(ETA)) / ak.sum(abs(ETA))
    np.testing.assert_allclose(f(pt, eta, PER_EVENT), ref, rtol=1e-14)
