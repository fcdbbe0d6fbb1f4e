"""Gradients of analysis.stats: finite differences, transformations, jit, NaN safety."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import uproot
from jax.test_util import check_grads

from analysis import stats
from analysis.stats import Jagged

COUNTS = np.array([3, 4, 3, 5, 3, 6])
OFFSETS = np.concatenate([[0], np.cumsum(COUNTS)])
N = int(OFFSETS[-1])


def _data(seed: int = 0) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.gamma(3.0, 10.0, N) + 15.0)
    y = jnp.asarray(0.3 * np.asarray(x) + rng.normal(0.0, 4.0, N))
    eta = jnp.asarray(rng.normal(0.0, 1.5, N))
    w = jnp.asarray(rng.uniform(0.2, 2.0, N))
    return x, y, eta, w


def all_stats(x: object, y: object, weight: object, axis: int | None) -> jax.Array:
    """Every statistic, stacked: one gradient check covers them all (any wrong formula
    or derivative makes the stacked vector disagree with finite differences)."""
    fit = stats.linear_fit(x, y, weight=weight, axis=axis)
    parts = [
        stats.mean(x, weight=weight, axis=axis),
        stats.var(x, weight=weight, axis=axis),
        stats.var(x, weight=weight, ddof=1, axis=axis),
        stats.std(x, weight=weight, axis=axis),
        stats.skew(x, weight=weight, axis=axis),
        stats.kurtosis(x, weight=weight, axis=axis),
        stats.moment(x, 3, weight=weight, axis=axis) * 1e-3,
        stats.central_moment(x, 3, weight=weight, axis=axis) * 1e-2,
        stats.covar(x, y, weight=weight, axis=axis),
        stats.corr(x, y, weight=weight, axis=axis),
        *fit,
    ]
    return jnp.concatenate([jnp.atleast_1d(p) for p in parts])


def _soft_weight(x: jax.Array, eta: jax.Array, theta: jax.Array) -> jax.Array:
    """Soft cuts pT > theta[0] (width 5) and |eta| < theta[1] (width 0.3)."""
    return jax.nn.sigmoid((x - theta[0]) / 5.0) * jax.nn.sigmoid((theta[1] - jnp.abs(eta)) / 0.3)


def compact_stats(x: object, y: object, weight: object, axis: int | None) -> jax.Array:
    """The highest-order state (kurtosis: W, M2, M4) and the full co-moment state
    (every field of the linear fit): the second-order checks' subset."""
    parts = [
        stats.kurtosis(x, weight=weight, axis=axis),
        *stats.linear_fit(x, y, weight=weight, axis=axis),
    ]
    return jnp.concatenate([jnp.atleast_1d(p) for p in parts])


# Each check differentiates with respect to the values, the per-element weights and
# the cut parameters at once (check_grads probes a random direction in all three, so
# a wrong derivative in any of them shows). Second-order checks of every statistic
# would cost ~30 s each (thousands of derivative ops): all statistics are checked at
# first order on both axes, the compact subset at second order per list (the
# superset of the whole-sample code path: segment sums and gathers on top).
@pytest.mark.parametrize(("axis", "order"),
                         [pytest.param(1, 1, marks=pytest.mark.slow), (None, 1), (1, 2)])
def test_gradients_match_finite_differences(axis: int | None, order: int) -> None:
    x, y, eta, w = _data()
    theta = jnp.array([25.0, 2.5])
    func = all_stats if order == 1 else compact_stats

    def f(values: jax.Array, weights: jax.Array, cuts: jax.Array) -> jax.Array:
        soft = weights * _soft_weight(values, eta, cuts)
        return func(Jagged(values, OFFSETS), y, soft, axis)

    assert np.all(np.isfinite(f(x, w, theta)))  # a well-conditioned point: all defined
    # Op by op: the primitives' compilations are shared by all checks, whereas a jit
    # of each derivative program would compile ~15 large programs per check.
    with jax.disable_jit():
        check_grads(f, (x, w, theta), order=order, modes=("fwd", "rev"), eps=1e-5)


def test_transformations_agree() -> None:
    """value_and_grad, jacfwd, jacrev and vmap give the same derivatives."""
    x, y, eta, _ = _data(1)
    pt = Jagged(x, OFFSETS)

    def f(theta: jax.Array) -> jax.Array:
        return stats.skew(pt, weight=_soft_weight(x, eta, theta), axis=1)

    theta = jnp.array([28.0, 1.2])
    jf, jr = jax.jit(jax.jacfwd(f))(theta), jax.jit(jax.jacrev(f))(theta)
    np.testing.assert_allclose(jf, jr, rtol=1e-10, atol=1e-14)
    total = lambda t: jnp.sum(f(t))  # noqa: E731
    value, grad = jax.jit(jax.value_and_grad(total))(theta)
    np.testing.assert_allclose(value, jnp.sum(f(theta)), rtol=1e-14)
    np.testing.assert_allclose(grad, jf.sum(axis=0), rtol=1e-10)
    thetas = jnp.array([[20.0, 1.0], [30.0, 2.0], [40.0, 0.5]])
    batched = jax.jit(jax.vmap(f))(thetas)
    np.testing.assert_allclose(batched, jnp.stack([f(t) for t in thetas]), rtol=1e-12)
    # vmap over the values of the lists too
    values = jnp.stack([x, x * 1.1, x + 3.0])
    per_batch = jax.vmap(lambda v: stats.var(Jagged(v, OFFSETS), axis=1))(values)
    np.testing.assert_allclose(per_batch[1], 1.21 * stats.var(pt, axis=1), rtol=1e-12)


# --- NaN safety ----------------------------------------------------------------------

# list 0: zero total weight; 1: empty; 2: one element; 3: constant; 4: ordinary
DEGENERATE_COUNTS = np.array([2, 0, 1, 3, 4])
DEGENERATE_OFFSETS = np.concatenate([[0], np.cumsum(DEGENERATE_COUNTS)])
DEGENERATE_X = jnp.array([1.0, 2.0, 7.0, 4.25, 4.25, 4.25, 1.0, 3.0, 2.0, 8.0])
DEGENERATE_W = jnp.array([0.0, 0.0, 0.6, 0.3, 1.7, 0.9, 1.0, 0.5, 2.0, 1.5])


def test_no_nan_gradients_for_undefined_values() -> None:
    x, w = DEGENERATE_X, DEGENERATE_W
    y = 2.0 * x + jnp.arange(x.shape[0]) % 3

    def loss(
        values: jax.Array,
        weights: jax.Array,
        cut: jax.Array,
        func: Callable[..., jax.Array] = all_stats,
    ) -> jax.Array:
        soft = weights * jax.nn.sigmoid((x - cut) / 2.0)
        per_list = func(Jagged(values, DEGENERATE_OFFSETS), y, soft, 1)
        # nansum: the usual way to drop undefined entries; it must not let NaN back in
        return jnp.nansum(per_list)

    cut = jnp.array(0.5)
    with jax.disable_jit():  # op by op: shares compiled primitives with other tests
        value, grads = jax.value_and_grad(loss, argnums=(0, 1, 2))(x, w, cut)
        assert np.isfinite(value)
        for g in grads:
            assert np.all(np.isfinite(g)), grads
        # second order too (w.r.t. the scalar cut: a cheap Hessian)
        hess = jax.grad(jax.grad(lambda t: loss(x, w, t, compact_stats)))(cut)
        assert np.isfinite(hess)


def test_degenerate_values() -> None:
    """Which entries are undefined, and the ones that are not (std of a constant is 0)."""
    pt = Jagged(DEGENERATE_X, DEGENERATE_OFFSETS)
    w = DEGENERATE_W
    mean = np.asarray(stats.mean(pt, weight=w, axis=1))
    np.testing.assert_array_equal(np.isnan(mean), [True, True, False, False, False])
    np.testing.assert_allclose(mean[2:4], [7.0, 4.25], rtol=1e-15)
    np.testing.assert_array_equal(np.asarray(stats.std(pt, weight=w, axis=1))[2:4], [0.0, 0.0])
    for f in (stats.skew, stats.kurtosis, stats.corr):
        args = (pt, pt) if f is stats.corr else (pt,)
        out = np.asarray(f(*args, weight=w, axis=1))
        np.testing.assert_array_equal(np.isnan(out), [True, True, True, True, False])


@pytest.mark.parametrize(
    "func",
    [
        stats.mean,
        stats.var,
        stats.std,
        stats.skew,
        stats.kurtosis,
        lambda x, weight: stats.linear_fit(x, x, weight=weight).slope,
    ],
)
def test_no_nan_gradient_at_zero_total_weight(func: Callable[..., jax.Array]) -> None:
    x = jnp.array([1.0, 2.0, 4.0])
    assert np.isnan(func(x, weight=jnp.zeros(3)))
    with jax.disable_jit():  # op by op: shares compiled primitives with other tests
        grad_x = jax.grad(lambda v: func(v, weight=jnp.zeros(3)))(x)
        grad_w = jax.grad(lambda ww: func(x, weight=ww))(jnp.zeros(3))
    np.testing.assert_array_equal(grad_x, 0.0)
    assert np.all(np.isfinite(grad_w))


# --- jit ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ttbar_pt(shared_data: Path) -> ak.Array:
    events = uproot.open(shared_data / "nanoAOD_2015_CMS_Open_Data_ttbar.root")["Events"]
    return events["Jet_pt"].array()


def _central_difference(f: Callable[[float], jax.Array], c: float, h: float) -> np.ndarray:
    return (np.asarray(f(c + h)) - np.asarray(f(c - h))) / (2.0 * h)


def test_jit_compiles_once_flat(ttbar_pt: ak.Array) -> None:
    pt = jnp.asarray(ak.to_numpy(ak.flatten(ttbar_pt)), dtype=jnp.float64)
    traces = 0

    def f(c: jax.Array) -> jax.Array:
        nonlocal traces
        traces += 1  # runs only while tracing
        return stats.mean(pt, weight=jax.nn.sigmoid((pt - c) / 5.0))

    fj = jax.jit(f)
    cs = [20.0, 25.0, 31.5, 40.0]
    got = [float(fj(jnp.float64(c))) for c in cs]
    assert traces == 1 and fj._cache_size() == 1
    eager = [float(f(jnp.float64(c))) for c in cs]  # (these count too, from here on)
    np.testing.assert_allclose(got, eager, rtol=1e-13)
    grad = jax.jit(jax.grad(f))
    for c in cs:
        fd = _central_difference(lambda t: fj(jnp.float64(t)), c, 1e-4)
        np.testing.assert_allclose(grad(jnp.float64(c)), fd, rtol=1e-6)


def test_jit_compiles_once_jagged(ttbar_pt: ak.Array) -> None:
    pt = stats.from_awkward(ttbar_pt)
    traces = 0

    def f(c: jax.Array) -> jax.Array:
        nonlocal traces
        traces += 1
        return stats.mean(pt, weight=jax.nn.sigmoid((pt.values - c) / 5.0), axis=1)

    fj = jax.jit(f)
    outs = [fj(jnp.float64(c)) for c in (20.0, 30.0, 45.0)]
    assert traces == 1 and fj._cache_size() == 1
    for c, out in zip((20.0, 30.0, 45.0), outs, strict=True):
        np.testing.assert_allclose(out, f(jnp.float64(c)), rtol=1e-13)
    assert out.shape == (len(ttbar_pt),)
    # empty events are NaN; the Jacobian is finite everywhere and matches differences
    assert np.all(np.isnan(np.asarray(out)[ak.to_numpy(ak.num(ttbar_pt)) == 0]))
    jac = jax.jit(jax.jacfwd(f))(jnp.float64(30.0))
    assert np.all(np.isfinite(jac))
    fd = _central_difference(lambda t: fj(jnp.float64(t)), 30.0, 1e-4)
    defined = np.isfinite(fd)
    np.testing.assert_allclose(np.asarray(jac)[defined], fd[defined], rtol=1e-5, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(jac)[~defined], 0.0)


def test_jit_with_jagged_argument_retraces_only_on_shape(ttbar_pt: ak.Array) -> None:
    """A Jagged passed to jit has traced offsets: same shapes, new lists, no retrace."""
    a = stats.from_awkward(ttbar_pt)
    # same number of lists and elements, different list boundaries
    b = Jagged(a.values[::-1], np.concatenate([[0], np.cumsum(np.asarray(a.counts)[::-1])]))
    traces = 0

    def f(jag: Jagged, c: jax.Array) -> jax.Array:
        nonlocal traces
        traces += 1
        return stats.var(jag, weight=jax.nn.sigmoid((jag.values - c) / 5.0), axis=1)

    fj = jax.jit(f)
    for jag in (a, b):
        np.testing.assert_allclose(fj(jag, 25.0), f(jag, 25.0), rtol=1e-12)
    assert traces == 3  # two eager calls, one trace for jit
