"""The fused power-sum primitive behind the centred moments (analysis.stats._powsum).

References: exact sums (``math.fsum``) for values and precision; the same sums written
with plain ``jnp.sum`` (JAX's own derivatives) for every transformation the statistics
meet: ``jacfwd``, ``jacrev``, ``hessian``, forward-over-forward, ``vmap`` (batched v, d
or both), ``linear_transpose``; central finite differences for the public API's
Jacobian through it. Sizes straddle the block length so that both the blocked part and
the tail are exercised.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from analysis.stats import _powsum
from analysis.stats._powsum import power_sums

ORDER = 4
SIZES = [0, 7, _powsum._BLOCK, 3 * _powsum._BLOCK + 5]


def reference(v: jax.Array, d: jax.Array, order: int = ORDER) -> jax.Array:
    return jnp.stack([jnp.sum(v * d**k, axis=-1) for k in range(order + 1)], axis=-1)


def data(n: int, seed: int = 0) -> tuple[jax.Array, jax.Array]:
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.random(n)), jnp.asarray(rng.normal(size=n))


def close(a: jax.Array, b: jax.Array, rtol: float = 1e-13) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    scale = max(float(np.max(np.abs(b), initial=0.0)), 1e-300)
    assert float(np.max(np.abs(a - b), initial=0.0)) <= rtol * scale


@pytest.mark.parametrize("n", SIZES)
def test_values_and_precision_against_exact_sums(n: int) -> None:
    v, d = data(n)
    got = np.asarray(jax.jit(power_sums, static_argnums=2)(v, d, ORDER))
    vn, dn = np.asarray(v), np.asarray(d)
    for k in range(ORDER + 1):
        exact = math.fsum(vn * dn**k)
        assert abs(got[k] - exact) <= 1e-15 * math.fsum(np.abs(vn * dn**k)) + 1e-300
    close(power_sums(v, d, ORDER), reference(v, d))  # eager (def_impl) too


def test_blocked_sums_keep_numpy_precision_on_many_elements() -> None:
    # 400k deviations of a shifted exponential: one accumulator loses ~1e-13 here
    rng = np.random.default_rng(3)
    x = 15.0 + rng.exponential(40.0, 400_000)
    w = rng.random(x.size)
    dev = x - np.sum(w * x) / np.sum(w)
    got = np.asarray(jax.jit(power_sums, static_argnums=2)(w, dev, ORDER))
    for k in (0, 2, 3, 4):
        exact = math.fsum(w * dev**k)
        assert abs(got[k] - exact) <= 1e-15 * abs(exact)


# n = _BLOCK (blocks, no tail) slow: its derivatives run the blocked part as 3 * _BLOCK + 5
# does (blocks and a tail, the same reference, default), and its values against the exact
# sums stay default (test_values_and_precision_against_exact_sums[256])
@pytest.mark.parametrize("n", [SIZES[1], pytest.param(SIZES[2], marks=pytest.mark.slow),
                               SIZES[3]])
def test_derivatives_equal_those_of_plain_sums(n: int) -> None:
    v, d = data(n, seed=1)
    f = lambda v, d: power_sums(v, d, ORDER)  # noqa: E731
    for argnums in (0, 1, (0, 1)):
        for transform in (jax.jacfwd, jax.jacrev):
            got = transform(f, argnums)(v, d)
            want = transform(reference, argnums)(v, d)
            jax.tree_util.tree_map(close, got, want)


def test_second_derivatives_equal_those_of_plain_sums() -> None:
    # reverse inside forward (jax.hessian) and forward over forward; n**3 work, so small
    v, d = data(9, seed=6)
    weights = jnp.arange(1.0, ORDER + 2)
    g = lambda v, d: jnp.sum(power_sums(v, d, ORDER) * weights)  # noqa: E731
    r = lambda v, d: jnp.sum(reference(v, d) * weights)  # noqa: E731
    for argnums in (0, 1, (0, 1)):
        jax.tree_util.tree_map(close, jax.hessian(g, argnums)(v, d), jax.hessian(r, argnums)(v, d))
        got = jax.jacfwd(jax.jacfwd(g, argnums), argnums)(v, d)
        jax.tree_util.tree_map(close, got, jax.jacfwd(jax.jacfwd(r, argnums), argnums)(v, d))


def test_batching_and_transpose() -> None:
    rng = np.random.default_rng(2)
    n = _powsum._BLOCK + 9
    v, d = data(n, seed=2)
    vs, ds = jnp.asarray(rng.random((3, n))), jnp.asarray(rng.normal(size=(3, n)))
    f = lambda v, d: power_sums(v, d, ORDER)  # noqa: E731
    close(jax.vmap(f)(vs, ds), jax.vmap(reference)(vs, ds))
    close(jax.vmap(f, (0, None))(vs, d), jax.vmap(reference, (0, None))(vs, d))
    close(jax.vmap(f, (None, 0))(v, ds), jax.vmap(reference, (None, 0))(v, ds))
    close(jax.vmap(f, (1, None))(vs.T, d), jax.vmap(reference, (1, None))(vs.T, d))
    nested = jax.vmap(jax.vmap(f, (0, None)), (None, 0))(vs, ds)
    close(nested, jax.vmap(jax.vmap(reference, (0, None)), (None, 0))(vs, ds))
    close(f(vs, ds), reference(vs, ds))  # d with v's shape: one d per row
    close(f(vs, d), reference(vs, d))
    ct = jnp.arange(1.0, ORDER + 2)
    (got,) = jax.linear_transpose(lambda v: f(v, d), v)(ct)
    (want,) = jax.linear_transpose(lambda v: reference(v, d), v)(ct)
    close(got, want)


def test_order_zero_and_empty_input() -> None:
    v, d = data(11, seed=4)
    close(power_sums(v, d, 0), reference(v, d, 0))
    close(jax.jacfwd(lambda d: power_sums(v, d, 0))(d), jnp.zeros((1, 11)))
    empty = jnp.zeros(0)
    close(power_sums(empty, empty, ORDER), jnp.zeros(ORDER + 1))
    assert jax.grad(lambda v: power_sums(v, empty, ORDER).sum())(empty).shape == (0,)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="power_sums: expected d of shape"):
        power_sums(jnp.ones(5), jnp.ones(4), 2)
    with pytest.raises(ValueError, match="power_sums: order: expected an integer >= 0"):
        power_sums(jnp.ones(5), jnp.ones(5), -1)


def test_public_api_jacobian_against_finite_differences() -> None:
    # Soft-cut weights through mean/var/skew/kurtosis of a Jagged, all elements and
    # per list, under jit(jacfwd) and jacrev; sizes cross the block length.
    rng = np.random.default_rng(5)
    counts = rng.poisson(3.0, 400)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    x = stats.Jagged(jnp.asarray(15.0 + rng.exponential(40.0, offsets[-1])), offsets)
    eta = jnp.asarray(rng.normal(0.0, 1.5, offsets[-1]))

    def f(theta: jax.Array, axis: int | None) -> jax.Array:
        w = jax.nn.sigmoid((x.values - theta[0]) / 5.0) * jax.nn.sigmoid(
            (theta[1] - jnp.abs(eta)) / 0.3
        )
        out = [fn(x, weight=w, axis=axis) for fn in (stats.mean, stats.var, stats.skew)]
        out.append(stats.kurtosis(x, weight=w, axis=axis))
        return jnp.nan_to_num(jnp.stack(out).reshape(-1))

    theta = jnp.asarray([30.0, 2.0])
    for axis in (None, 1):
        jf = jax.jit(jax.jacfwd(f), static_argnums=1)(theta, axis)
        close(jax.jacrev(f)(theta, axis), jf, rtol=1e-12)
        fd = np.empty_like(np.asarray(jf))
        for i, h in enumerate((1e-4, 1e-6)):
            step = jnp.zeros(2).at[i].set(h)
            fd[:, i] = (f(theta + step, axis) - f(theta - step, axis)) / (2 * h)
        close(jf, fd, rtol=1e-6)


def test_inputs_are_padded_to_buckets_only_outside_jit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Eager calls (also eager grad/jacfwd, whose tracers reach the kernels) pad to a
    # bucket size so that one compiled kernel serves many lengths; inside jit the
    # padding would only store copies of the weights and their tangents.
    from analysis.stats import _kernels

    sizes: list[tuple[int, int]] = []
    padded = _kernels._padded

    def spy(p: object) -> object:
        q = padded(p)  # type: ignore[arg-type]
        sizes.append((p.x.shape[0], q.x.shape[0]))  # type: ignore[attr-defined]
        return q

    monkeypatch.setattr(_kernels, "_padded", spy)
    w, x = data(1000, seed=7)  # positive weights
    var = lambda w: stats.var(x, weight=w)  # noqa: E731
    eager = [var(w), jax.grad(var)(w), jax.jacfwd(var)(w)]
    jitted = [jax.jit(var)(w), jax.jit(jax.grad(var))(w), jax.jit(jax.jacfwd(var))(w)]
    assert sizes == [(1000, 1024)] * 3 + [(1000, 1000)] * 3
    for a, b in zip(eager, jitted):
        close(a, b)
