"""JAX transforms over the awkward drop-in, with and without awkward's JAX backend, and
the examples of issue 20 as regressions.

* ``jax.jvp`` / ``jax.vjp`` / ``jax.grad`` / ``jax.jit`` of the statistics of an awkward
  Array on the JAX backend, every axis: values and derivatives against ``jax.numpy``
  (regular data, the pattern of awkward's issue) and finite differences (jagged, deep,
  options).
* Without awkward's JAX backend (deprecated upstream): ``ak.to_jax``-style JAX arrays
  and :class:`stats.Jagged` at every axis under ``jit``/``grad``, against finite
  differences; awkward inputs with JAX numbers give JAX arrays where the result is
  regular and a one-line error where it cannot be held.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from analysis.stats import _shadow
from tests.test_awkward_dropin import assert_like_awkward

H = 1e-6


def _on_jax(x: Any) -> ak.Array:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ak.jax.register_and_check()
        return ak.to_backend(ak.Array(x), "jax")


def _fd_directional(f: Callable[[np.ndarray], float], v: np.ndarray, d: np.ndarray) -> float:
    return (f(v + H * d) - f(v - H * d)) / (2 * H)


# --- awkward's JAX backend ------------------------------------------------------------

GRID = [[1.0, 2.0, 3.0], [4.0, 5.5, 6.0], [7.0, 8.0, 9.5]]


@pytest.mark.parametrize("name", ["mean", "std", "var"])
@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_jvp_and_vjp_of_a_jax_backed_array_match_jax_numpy(name: str, axis: Any) -> None:
    x = _on_jax(GRID)
    ref = jnp.asarray(GRID)
    tangent = jnp.asarray(np.random.default_rng(0).normal(size=(3, 3)))

    def ours(a: Any) -> Any:
        return getattr(stats, name)(a, axis=axis)

    def theirs(a: jax.Array) -> jax.Array:
        return getattr(jnp, name)(a, axis=axis)

    value, jvp = jax.jvp(ours, (x,), (_on_jax(np.asarray(tangent).tolist()),))
    value_ref, jvp_ref = jax.jvp(theirs, (ref,), (tangent,))
    np.testing.assert_allclose(ak.to_list(value), np.asarray(value_ref).tolist(), rtol=1e-12)
    np.testing.assert_allclose(ak.to_list(jvp), np.asarray(jvp_ref).tolist(), rtol=1e-10, atol=1e-14)
    value, vjp = jax.vjp(ours, x)
    _, vjp_ref = jax.vjp(theirs, ref)
    (back,) = vjp(value)
    (back_ref,) = vjp_ref(value_ref)
    np.testing.assert_allclose(ak.to_list(back), np.asarray(back_ref).tolist(), rtol=1e-10, atol=1e-14)


def test_grad_of_the_mean_of_a_jax_backed_array() -> None:
    """``jax.value_and_grad(stats.mean)`` straight on an awkward Array (empty list inside)."""
    x = _on_jax([[1.0, 2.0, 3.0], [], [4.0, 5.0]])
    value, grad = jax.value_and_grad(stats.mean)(x)
    assert float(value) == 3.0
    assert ak.to_list(grad) == [[0.2, 0.2, 0.2], [], [0.2, 0.2]]


def _directions(x: ak.Array, count: int) -> Iterator[ak.Array]:
    rng = np.random.default_rng(3)
    for _ in range(count):

        def leaf(layout: Any, **_: Any) -> Any:
            if layout.is_numpy:
                return ak.contents.NumpyArray(rng.normal(size=layout.length))
            return None

        yield ak.transform(leaf, x)


DEEP = {
    "jagged": [[1.0, 2.5, 3.0], [], [4.0, 5.0], [6.0]],
    "three levels": [[[1.0, 2.0], [3.0]], [], [[4.0, 5.0, 7.5]], [[6.0], [], [0.5, 2.0]]],
    "options": [[1.0, None, 3.0], [], None, [4.0, 5.5, -2.0]],
}


@pytest.mark.parametrize("data", list(DEEP))
@pytest.mark.parametrize("name", ["mean", "var", "std", "skew"])
def test_grad_at_every_axis_matches_finite_differences(data: str, name: str) -> None:
    x = ak.Array(DEEP[data])
    depth = x.layout.purelist_depth
    for axis in [None, *range(-depth, depth)]:

        def total(a: Any, axis: Any = axis) -> Any:
            out = getattr(stats, name)(a, axis=axis)
            if isinstance(out, ak.Array):
                out = ak.to_jax(ak.fill_none(ak.flatten(out, axis=None), 0.0))
            return jnp.nansum(jnp.asarray(out))

        grad = ak.to_backend(jax.grad(total)(_on_jax(DEEP[data])), "cpu")
        for d in _directions(x, 2):
            fd = (float(total(x + H * d)) - float(total(x - H * d))) / (2 * H)
            got = float(ak.sum(grad * d, axis=None))
            assert got == pytest.approx(fd, rel=1e-5, abs=1e-7), (data, name, axis)


def test_jit_takes_flat_and_regular_jax_backed_arrays() -> None:
    """jit can take an awkward Array whose structure has no index buffers (awkward
    itself rebuilds jagged ones from traced offsets and fails, before any statistic)."""
    flat = _on_jax([1.0, 2.0, 4.5])
    regular = ak.to_regular(_on_jax(GRID), axis=1)
    assert float(jax.jit(stats.std)(flat)) == pytest.approx(float(np.std([1.0, 2.0, 4.5])))
    for axis in (None, 0, 1):
        got = jax.jit(lambda a, axis=axis: stats.var(a, axis=axis))(regular)
        want = np.var(np.asarray(GRID), axis=axis)
        np.testing.assert_allclose(np.asarray(ak.to_list(got)), want, rtol=1e-12)


# --- without awkward's JAX backend ----------------------------------------------------


@pytest.fixture
def no_jax_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As if awkward's JAX backend were removed (the rest of awkward still there)."""
    monkeypatch.setattr(_shadow, "jax_backend", lambda: False)
    yield


@pytest.mark.parametrize("axis", [None, 0, 1, -1, -2])
def test_to_jax_style_arrays_under_jit_and_grad(no_jax_backend: None, axis: Any) -> None:
    a = np.asarray(GRID) ** 1.5
    w = np.random.default_rng(1).uniform(0.5, 2.0, (3, 3))

    def f(v: jax.Array) -> jax.Array:
        return jnp.sum(stats.std(v, weight=jnp.asarray(w), axis=axis) ** 2)

    def ref(v: np.ndarray) -> float:
        mu = np.sum(w * v, axis=axis, keepdims=True) / np.sum(w, axis=axis, keepdims=True)
        return float(np.sum(np.sum(w * (v - mu) ** 2, axis=axis) / np.sum(w, axis=axis)))

    assert float(jax.jit(f)(jnp.asarray(a))) == pytest.approx(ref(a), rel=1e-12)
    g = np.asarray(jax.jit(jax.grad(f))(jnp.asarray(a)))
    for d in np.random.default_rng(2).normal(size=(2, 3, 3)):
        assert float(np.sum(g * d)) == pytest.approx(_fd_directional(ref, a, d), rel=1e-6)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, -2])
def test_jagged_under_jit_and_grad_at_every_axis(no_jax_backend: None, axis: Any) -> None:
    x = ak.Array(DEEP["jagged"])
    jagged = stats.from_awkward(x)

    def f(v: jax.Array) -> jax.Array:
        return jnp.nansum(stats.var(jagged.with_values(v), weight=jnp.exp(v / 4), axis=axis))

    def ref(v: np.ndarray) -> float:
        xv = ak.unflatten(v, ak.num(x))
        out = ak.var(xv, weight=np.exp(xv / 4), axis=axis)
        return float(np.nansum(ak.to_numpy(ak.fill_none(out, np.nan)))) if axis is not None else float(out)

    v = np.asarray(jagged.values)
    assert float(jax.jit(f)(jagged.values)) == pytest.approx(ref(v), rel=1e-12)
    g = np.asarray(jax.jit(jax.grad(f))(jagged.values))
    assert np.all(np.isfinite(g))
    for d in np.random.default_rng(4).normal(size=(2, v.shape[0])):
        assert float(np.sum(g * d)) == pytest.approx(_fd_directional(ref, v, d), rel=1e-6)


def test_jagged_across_lists_needs_concrete_offsets() -> None:
    jagged = stats.from_awkward(ak.Array(DEEP["jagged"]))
    assert_like_awkward(
        ak.Array(np.asarray(stats.mean(jagged, axis=0))), ak.mean(ak.Array(DEEP["jagged"]), axis=0)
    )
    with pytest.raises(ValueError, match=r"^mean: axis=0 of a Jagged .* concrete offsets"):
        jax.jit(lambda j: stats.mean(j, axis=0))(jagged)


def test_awkward_input_with_jax_numbers_without_the_backend(no_jax_backend: None) -> None:
    """cpu awkward data, JAX weights (a soft cut's output): JAX arrays where the result
    is regular, gradients as finite differences; a one-line error where it is not."""
    x = ak.Array([[1.0, 2.0, 3.5], [], [4.0, 5.0], [6.0, 0.5]])
    w = np.array([1.0, 2.0, 0.5, 3.0])

    def f(c: jax.Array, axis: Any) -> jax.Array:
        weight = jax.nn.sigmoid(jnp.asarray(w) * c - 1.0)  # one per list
        out = stats.mean(x, weight=weight, axis=axis)
        assert isinstance(out, jax.Array)
        return jnp.nansum(out * jnp.arange(1.0, 1.0 + jnp.size(out)).reshape(jnp.shape(out)))

    for axis in (None, 0, 1, -2):  # at 1 the gradient is 0 (one weight per list)
        g = float(jax.grad(f)(jnp.float64(0.7), axis))
        fd = (float(f(jnp.float64(0.7 + H), axis)) - float(f(jnp.float64(0.7 - H), axis))) / (2 * H)
        assert g == pytest.approx(fd, rel=1e-6, abs=1e-9)
    with pytest.raises(TypeError, match=r"^mean: this result .* awkward's JAX backend"):
        jax.grad(lambda c: jnp.nansum(ak.to_jax(stats.mean(x, weight=jnp.asarray(w) * c, axis=1, mask_identity=True))))(0.5)


# --- the examples of the issue --------------------------------------------------------


def test_examples_of_issue_20() -> None:
    jagged = ak.Array([[1.0, 2.0, 3.0], [], [4.0, 5.0]])
    three = ak.Array([[[1.0, 2.0], [3.0]], [], [[4.0, 5.0, 7.0], []], [[6.0]]])
    opt = ak.Array([[1.0, None, 3.0], [], None, [4.0]])
    cases: list[tuple[str, Callable[[Any], Any], Any]] = [
        ("var deep axis 0", lambda m: m.var(three, axis=0), 400),
        ("var deep axis 1", lambda m: m.var(three, axis=1), 400),
        ("var deep axis -2", lambda m: m.var(three, axis=-2), 400),
        ("empty sublist masked", lambda m: m.mean(three, axis=-1, mask_identity=True), 20),
        ("var keepdims mask", lambda m: m.var(jagged, axis=1, keepdims=True, mask_identity=True), 400),
        ("row-wise weighted", lambda m: m.mean(jagged, weight=jagged, axis=1, mask_identity=True), 20),
        ("opt axis None keepdims", lambda m: m.mean(opt, axis=None, keepdims=True), 20),
        ("opt keepdims mask", lambda m: m.mean(opt, axis=None, keepdims=True, mask_identity=True), 20),
        ("opt axis 0 keepdims", lambda m: m.std(opt, axis=0, keepdims=True, mask_identity=True), 20),
        ("flat keepdims mask", lambda m: m.mean(ak.Array([1.0, 2.0]), keepdims=True, mask_identity=True), 20),
        ("empty mask", lambda m: m.mean(ak.Array([[], []]), axis=None, keepdims=True, mask_identity=True), 20),
    ]
    for label, call, scale in cases:
        ours, ref = call(stats), call(ak)
        assert str(ak.type(ours)) == str(ak.type(ref)), label
        assert_like_awkward(ours, ref, scale)
    assert str(ak.type(stats.mean(opt, axis=None, keepdims=True, mask_identity=True))) == "1 * 1 * ?float64"
    attrs = {"source": "x"}
    assert stats.mean([[1.0, 2.0], [3.0]], axis=-1, attrs=attrs).attrs == attrs
    assert stats.moment(ak.Array([[1.0, 2.0]], attrs=attrs), 3, axis=-1).attrs == attrs
    for name in ("mean", "var", "std"):
        out = getattr(stats, name)([[1, 2, 3, 4], [5], [10]], axis=1, highlevel=False)
        assert isinstance(out, ak.contents.Content)
