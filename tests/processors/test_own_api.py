"""The public derivative-carrying state (issue 7) on synthetic data, no files.

``stats.derive`` / ``stats.Derived`` (merging in any grouping, empty and all-cut
chunks, pickling, bad input), ``stats.differentiable`` (``jax.grad``,
``jax.value_and_grad``, ``jax.hessian`` and ``jax.jit`` against central finite
differences of the full pass, one pass per gradient), ``analysis.soft`` against
exact enumeration, and ``analysis.testing`` catching broken derivatives.
"""

from __future__ import annotations

import itertools
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from analysis.soft import count_at_least, soft_cut
from analysis.testing import (
    assert_chunk_gradients,
    assert_chunk_invariance,
    assert_derived_close,
)
from tests.reference import configurations

THETA = {"x_min": 0.3, "y_max": 1.2}
# An empty piece in the middle; equal sizes otherwise, because every new array shape
# costs a compilation of each eager JAX operation.
SPLITS = (0, 50, 50, 100, 150, 200)


@pytest.fixture(scope="module")
def sample():
    rng = np.random.default_rng(7)
    x = rng.normal(1.0, 1.0, 200)
    y = 0.5 * x + rng.normal(0.0, 0.7, 200)
    return x, y


def chunk_fn(x, y):
    def fn(theta):
        w = soft_cut(x, ">", theta["x_min"], 0.4) * soft_cut(y, "<", theta["y_max"], 0.3)
        return {
            "x": stats.moments(x, weight=w),
            "xy": stats.comoments(x, y, weight=w),
            "n": jnp.sum(w),
            "counts": [jnp.sum(w * (x > 1.0)), jnp.sum(w * (x <= 1.0))],
        }

    return fn


def pieces(x, y, bounds=SPLITS, order=1):
    return [
        stats.derive(chunk_fn(x[a:b], y[a:b]), THETA, order=order)
        for a, b in itertools.pairwise(bounds)
    ]


def _pieces_at(x, y, theta, order):
    return [
        stats.derive(chunk_fn(x[a:b], y[a:b]), theta, order=order)
        for a, b in itertools.pairwise(SPLITS)
    ]


@pytest.mark.slow
def test_merged_pieces_equal_the_whole_in_any_grouping(sample) -> None:
    x, y = sample
    whole = stats.derive(chunk_fn(x, y), THETA, order=2)
    parts = pieces(x, y, order=2)
    left = sum(parts)
    right = parts[0] + (parts[1] + (parts[2] + (parts[3] + parts[4])))
    shuffled = parts[3] + parts[0] + parts[4] + parts[2] + parts[1]
    for merged in (left, right, shuffled):
        assert_derived_close(whole, merged, rtol=1e-10)
        g = lambda s: stats.kurtosis(s["x"]) + stats.corr(s["xy"])  # noqa: E731
        h_whole, h_merged = whole.hessian(g), merged.hessian(g)
        for a, b in itertools.product(THETA, THETA):
            assert h_merged[a][b] == pytest.approx(h_whole[a][b], rel=1e-9, abs=1e-12)


@pytest.mark.slow
def test_derive_gradients_match_finite_differences(sample) -> None:
    x, y = sample
    assert_chunk_gradients(chunk_fn(x[:50], y[:50]), THETA, rtol=1e-6)


def test_chunk_helpers_fail_on_wrong_derivatives(sample) -> None:
    x, y = sample

    def broken(theta):  # the y cut's threshold loses its gradient
        w = soft_cut(x, ">", theta["x_min"], 0.4) * soft_cut(
            y, "<", jax.lax.stop_gradient(theta["y_max"]), 0.3
        )
        return {"x": stats.moments(x, weight=w)}

    with pytest.raises(AssertionError, match=r"\['x'\]\.mean w\.r\.t\. 'y_max'"):
        assert_chunk_gradients(broken, THETA, check_grads=False)

    class Averaging:
        """Returns a mean as a plain sum: merging adds means, which is wrong."""

        def process(self, events):
            return {
                "d": stats.derive(lambda th: {"mean": stats.mean(events) * th["a"]}, {"a": 1.0})
            }

    with pytest.raises(AssertionError, match=r"2 pieces: \['d'\] \['mean'\] value"):
        assert_chunk_invariance(Averaging(), x, splits=(2,), empty=False)


def test_empty_and_all_cut_chunks_are_neutral(sample) -> None:
    x, y = sample
    part = stats.derive(chunk_fn(x[:50], y[:50]), THETA, order=2)
    for empty_x in (x[:0], x[:50] - 100.0):  # no entries; every entry cut (hard)

        def fn(theta, ex=empty_x):
            w = soft_cut(ex, ">", theta["x_min"], 0.0) * soft_cut(ex, "<", theta["y_max"], 0.0)
            return {
                "x": stats.moments(ex, weight=w),
                "xy": stats.comoments(ex, ex, weight=w),
                "n": jnp.sum(w),
                "counts": [jnp.sum(w), jnp.sum(w)],
            }

        empty = stats.derive(fn, THETA, order=2)
        mean, grad = empty.value_and_grad(lambda s: stats.mean(s["x"]))
        assert np.isnan(mean) and all(v == 0.0 for v in grad.values())
        _, hgrad = empty.value_and_grad(lambda s: stats.skew(s["x"]))
        assert all(v == 0.0 for v in hgrad.values())
        for merged in (part + empty, empty + part):
            for got, want in zip(merged.taylor(), part.taylor(), strict=True):
                for a, b in zip(
                    jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True
                ):
                    np.testing.assert_array_equal(a, b)


def test_derived_pickles_and_sums_from_zero(sample) -> None:
    x, y = sample
    d = stats.derive(chunk_fn(x, y), THETA, order=2)
    back = pickle.loads(pickle.dumps(d))
    assert back.names == d.names and back.order == 2
    assert_derived_close(d, back, rtol=0.0)
    assert (0 + d) is d and sum([d]) is d


def test_bad_input_is_one_clear_error(sample) -> None:
    x, y = sample
    d = stats.derive(chunk_fn(x, y), THETA)
    other = stats.derive(
        lambda th: chunk_fn(x, y)({"x_min": th["x_min"], "y_max": th["y_cut"]}),
        {"x_min": 0.3, "y_cut": 1.2},
    )
    with pytest.raises(
        ValueError, match=r"parameter names differ: \['x_min', 'y_max'\] vs \['x_min', 'y_cut'\]"
    ):
        d + other
    fewer = stats.derive(lambda th: {"x": chunk_fn(x, y)(th)["x"]}, THETA)
    with pytest.raises(
        ValueError, match=r"state structures differ only in the first: \[\"\['counts'\]"
    ):
        d + fewer
    with pytest.raises(ValueError, match="derivative orders differ: 1 vs 2"):
        d + stats.derive(chunk_fn(x, y), THETA, order=2)
    swapped = stats.derive(lambda th: {**chunk_fn(x, y)(th), "n": stats.moments(x)}, THETA)
    with pytest.raises(
        ValueError, match=r"at \['n'\]: Array vs Moments|at \['n'\]: ndarray vs Moments"
    ):
        d + swapped
    with pytest.raises(TypeError, match=r"fn\(theta\)\['label'\] is a str"):
        stats.derive(lambda th: {"label": "jets", "n": th["a"]}, {"a": 1.0})
    with pytest.raises(TypeError, match=r"fn\(theta\)\['w'\] is a Jagged"):
        j = stats.Jagged(np.ones(3), np.array([0, 1, 3]))
        stats.derive(lambda th: {"w": j}, {"a": 1.0})
    with pytest.raises(ValueError, match=r"theta\['y_max'\] = nan: expected a finite number"):
        stats.derive(chunk_fn(x, y), {"x_min": 0.3, "y_max": float("nan")})
    with pytest.raises(ValueError, match="shape"):
        stats.merge({"a": jnp.zeros(2)}, {"a": jnp.zeros(3)})


@pytest.mark.slow
def test_differentiable_grad_matches_finite_differences_of_the_full_pass(sample) -> None:
    x, y = sample
    passes = []

    def run(theta):
        passes.append(dict(theta))
        return sum(_pieces_at(x, y, theta, 2))

    f = stats.differentiable(run)

    def loss(theta):
        s = f(theta)
        return (stats.mean(s["x"]) - 1.5) ** 2 + stats.linear_fit(s["xy"]).slope + 0.01 * s["n"]

    def plain(theta):  # the same loss from values only (no custom derivatives)
        s = sum(_pieces_at(x, y, theta, 0)).value
        return float(
            (stats.mean(s["x"]) - 1.5) ** 2 + stats.linear_fit(s["xy"]).slope + 0.01 * s["n"]
        )

    value, grad = jax.value_and_grad(loss)(THETA)
    assert len(passes) == 1
    assert float(value) == pytest.approx(plain(THETA), rel=1e-12)
    for k in THETA:
        h = 1e-5
        fd = (plain({**THETA, k: THETA[k] + h}) - plain({**THETA, k: THETA[k] - h})) / (2 * h)
        assert float(grad[k]) == pytest.approx(fd, rel=1e-6, abs=1e-9), k
    hess = jax.hessian(loss)(THETA)
    assert len(passes) == 1  # value, Jacobian and Hessian at one point: one pass
    for a, b in itertools.product(THETA, THETA):
        h = 1e-4
        gp = jax.grad(loss)({**THETA, b: THETA[b] + h})[a]
        gm = jax.grad(loss)({**THETA, b: THETA[b] - h})[a]
        assert float(hess[a][b]) == pytest.approx(float(gp - gm) / (2 * h), rel=1e-5, abs=1e-7)
    jitted = jax.jit(jax.grad(loss))(THETA)
    for k in THETA:
        assert float(jitted[k]) == pytest.approx(float(grad[k]), rel=1e-12)


def test_differentiable_errors() -> None:
    f = stats.differentiable(lambda th: stats.derive(lambda t: {"s": t["a"] ** 2}, th))
    with pytest.raises(ValueError, match="call f\\(theta\\) once outside jax.jit first"):
        jax.jit(lambda th: f(th)["s"])({"a": 1.0})
    assert float(jax.grad(lambda th: f(th)["s"])({"a": 3.0})["a"]) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="second derivatives need run"):
        jax.hessian(lambda th: f(th)["s"])({"a": 3.0})
    g = stats.differentiable(lambda th: stats.derive(lambda t: {"s": t["b"]}, {"b": 1.0}))
    with pytest.raises(
        ValueError, match=r"derivatives w.r.t. \['b'\]; expected the keys of theta \['a'\]"
    ):
        g({"a": 1.0})
    with pytest.raises(ValueError, match=r"theta\['a'\] = inf"):
        f({"a": float("inf")})


def test_soft_count_matches_enumeration() -> None:
    rng = np.random.default_rng(3)
    counts = np.array([0, 1, 3, 4, 2])
    offsets = np.concatenate([[0], np.cumsum(counts)])
    p = rng.uniform(0, 1, offsets[-1])
    for n in (0, 1, 2, 3):
        got = np.asarray(count_at_least(stats.Jagged(p, offsets), n))
        for e, (a, b) in enumerate(itertools.pairwise(offsets)):
            conf, prob = configurations(p[a:b])  # the oracle of tests/reference
            want = prob[conf.sum(axis=1) >= n].sum()
            assert got[e] == pytest.approx(want, abs=1e-14), (n, e)
    with pytest.raises(ValueError, match="op: expected one of"):
        soft_cut(p, "=>", 1.0, 0.1)
    with pytest.raises(ValueError, match="width: expected a finite number >= 0"):
        soft_cut(p, ">", 1.0, -1.0)
